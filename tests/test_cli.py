"""``python -m snn_ipu``: a tiny seeded training run and the bench hand-off."""

import re

import pytest

from snn_ipu import cli

TINY = ["train", "--backend", "reference", "--epochs", "2", "--hidden", "16", "--inputs", "20",
        "--classes", "3", "--samples-per-class", "10", "--steps", "12", "--batch-size", "8"]


def run(capsys, argv):
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def without_timings(text):
    return re.sub(r"\(\d+\.\d+s\)", "", text)


def test_train_prints_epochs_and_is_deterministic(capsys):
    first = run(capsys, TINY)
    lines = [line for line in first.splitlines() if line.startswith("epoch")]
    assert len(lines) == 2
    for line in lines:
        assert re.search(r"loss \d+\.\d+ +train acc [01]\.\d+ +test acc [01]\.\d+", line)
        assert "hidden1=" in line and "hidden2=" in line
    assert "final test accuracy" in first
    assert without_timings(run(capsys, TINY)) == without_timings(first)


def test_train_spiking_output(capsys):
    out = run(capsys, TINY + ["--output", "spikes", "--epochs", "1"])
    assert "output=" in out


def test_bench_forwards_arguments(monkeypatch):
    import snn_ipu.bench

    seen = []
    monkeypatch.setattr(snn_ipu.bench, "main", lambda argv: seen.append(argv) or 3)
    assert cli.main(["bench", "--quick", "-x"]) == 3
    assert seen == [["--quick", "-x"]]


def test_unknown_command():
    with pytest.raises(SystemExit):
        cli.main(["fly"])


@pytest.mark.parametrize("flag, value", [
    ("--epochs", "0"), ("--batch-size", "0"), ("--hidden", "-3"), ("--classes", "1"),
    ("--samples-per-class", "2"), ("--lr", "-1"), ("--lr", "nan"), ("--alpha", "inf"),
    ("--grad-window", "-0.1"), ("--steps", "0"),
])
def test_bad_train_flags_are_named_by_argparse(capsys, flag, value):
    argv = [a for a in TINY]
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_spiking_output_layer_keeps_exact_gradients():
    model = cli.build_model(20, 16, 3, output="spikes", grad_window=0.1, backend="reference")
    assert [layer.grad_window for layer in model] == [0.1, 0.1, None]
