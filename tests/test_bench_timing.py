"""The interleaved timing of training steps (snn_ipu.bench.timing) with stand-in
networks: which entries get an untimed warm step, and that the results say so."""

import time

from snn_ipu.bench import timing


class _Net:
    """A stand-in training network whose step takes ``seconds`` and counts its calls."""

    counts_in_step = True

    def __init__(self, seconds: float) -> None:
        self.seconds, self.steps = seconds, 0

    def step(self) -> None:
        self.steps += 1
        time.sleep(self.seconds)

    def activity(self):
        return [0.01, 0.02, 0.03]

    def entries_per_step(self):
        return None


def test_steps_under_the_limit_are_timed_warm_and_say_so(monkeypatch):
    # (a limit far from both steps' times: a loaded machine can stall a step)
    nets = {"fast": _Net(0.0), "slow": _Net(0.3)}
    monkeypatch.setattr(timing, "WARM_BELOW_S", 0.15)
    monkeypatch.setattr(timing, "build", lambda problem, backend, lr, adam: nets[backend])
    entries = [timing.Entry(key, key, None, 4) for key in nets]
    out = timing.time_interleaved({}, entries, lr=0.0, adam="fused", max_seconds=60)
    assert out["fast"]["warm_step"] is True and out["slow"]["warm_step"] is False
    assert out["fast"]["repeats"] == out["slow"]["repeats"] == 4
    # the warm-up step, then per round an untimed and a timed one (warm) or a timed one
    assert nets["fast"].steps == 1 + 2 * 4
    assert nets["slow"].steps == 1 + 4
    assert all(t >= 0.3 for t in out["slow"]["times_s"])
