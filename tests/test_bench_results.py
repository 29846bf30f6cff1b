"""The published benchmark numbers are what the committed results JSON files say: the
README's performance table and benchmarks/results/summary.md are the table rebuilt from
benchmarks/results/bench_*.json, and the README's words on the ratios say what they are."""

import re
import statistics
from pathlib import Path

import pytest

from snn_ipu.bench import summary
from snn_ipu.bench.configs import DENSE_BASELINES

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CONFIGS = ("S", "L", "S-trained", "L-trained", "digits-trained")
ACTIVITIES = (0.01, 0.02, 0.1, 0.3)


@pytest.fixture(scope="module")
def results():
    paths = [RESULTS / f"bench_{name}.json" for name in CONFIGS]
    if not all(p.is_file() for p in paths):
        pytest.skip("no committed results")
    return summary.load(paths)


def _table_lines(text: str):
    return [line for line in text.splitlines()
            if re.match(r"\| (S|L|S-trained|L-trained|digits-trained): ", line)]


def test_readme_and_summary_tables_are_the_results(results):
    table = _table_lines(summary.markdown_table(results, ACTIVITIES))
    assert len(table) == 11
    assert _table_lines((RESULTS / "summary.md").read_text()) == table
    assert _table_lines((ROOT / "README.md").read_text()) == table


def test_speedups_are_paired_medians_against_the_fastest_dense_peer(results):
    """Recomputed from the step times alone: the fastest dense backend by median, then
    the median over rounds of its step over ours (ratio of medians where its timing is
    reused from another row)."""
    for result in results:
        for row in summary.table_rows(result, ACTIVITIES):
            res = row["results"]
            medians = {b: statistics.median(res[b]["times_s"]) for b in DENSE_BASELINES
                       if res.get(b, {}).get("times_s")}
            best = min(medians, key=medians.get)
            assert summary.fastest_dense(row) == best
            for ours in ("emulator_sparse", "emulator_exact"):
                mine, theirs = res[ours]["times_s"], res[best]["times_s"]
                if res[best].get("timed", True):
                    n = min(len(mine), len(theirs))
                    expected = statistics.median(b / a for a, b in zip(mine[:n], theirs[:n]))
                else:
                    expected = medians[best] / statistics.median(mine)
                assert row["speedup"][f"{ours}_vs_{best}"] == pytest.approx(expected,
                                                                           rel=1e-12)


def test_readme_says_which_ratios_are_not_paired(results):
    """Against a reused dense timing (`*`) a ratio is one of medians timed apart, not a
    median of paired ratios: the README said every ratio was paired."""
    readme = (ROOT / "README.md").read_text()
    table = _table_lines(readme)
    assert any("*" in line for line in table)
    start = readme.index(table[-1])
    note = " ".join(readme[start:start + 600].split())
    assert "ratios of medians" in note or "ratio of the medians" in note, note


def _quantile(ordered, p):
    """The inclusive quantile (linear between the order statistics), by hand."""
    h = (len(ordered) - 1) * p
    lo = int(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


def test_quartiles_of_few_rounds_stay_within_them():
    """A slow peer cut to two rounds by --max-seconds: the exclusive quartiles of ratios
    5.0 and 42.9 were -4.5 and 52.3, outside anything measured."""
    row = {"speedup_paired": {"ours_vs_peer": True},
           "results": {"ours": {"times_s": [0.2, 0.21]}, "peer": {"times_s": [1.0, 9.0]}}}
    low, high = summary.ratio_quartiles(row, "ours", "peer")
    assert 5.0 <= low <= high <= 9.0 / 0.21
    assert (low, high) == pytest.approx((_quantile([5.0, 9.0 / 0.21], 0.25),
                                         _quantile([5.0, 9.0 / 0.21], 0.75)))


def test_paired_speedups_show_the_quartiles_of_their_rounds(results):
    """Each paired ratio of the table carries the first and third quartiles of the
    per-round ratios it is the median of, recomputed here from the step times; a ratio
    against a reused timing carries none."""
    for result in results:
        for row in summary.table_rows(result, ACTIVITIES):
            res = row["results"]
            best = summary.fastest_dense(row)
            for ours in ("emulator_sparse", "emulator_exact"):
                quartiles = summary.ratio_quartiles(row, ours, best)
                if not res[best].get("timed", True):
                    assert quartiles is None
                    continue
                ratios = sorted(b / a for a, b in zip(res[ours]["times_s"],
                                                      res[best]["times_s"]))
                assert quartiles == pytest.approx(
                    (_quantile(ratios, 0.25), _quantile(ratios, 0.75)), rel=1e-12)
                assert quartiles[0] <= row["speedup"][f"{ours}_vs_{best}"] <= quartiles[1]
    table = _table_lines(summary.markdown_table(results, ACTIVITIES))
    assert sum("[" in line for line in table) == sum("*" not in line for line in table)
