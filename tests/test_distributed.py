"""``torchrun --nproc_per_node 2 -m snn_ipu train``: two processes with half batches
give the update of one process with whole batches."""

import os
import subprocess
import sys

import pytest
import torch

from snn_ipu.checkpoint import load_checkpoint

# 24 training samples in batches of 7: 7, 7, 7, 3, split 4 + 3 and 2 + 1 between the two
# processes, so the shares are unequal and the loss weighting is exercised
ARGS = ["train", "--data", "randman", "--randman-inputs", "20", "--randman-classes", "3",
        "--randman-samples-per-class", "10", "--steps", "12", "--batch-size", "7",
        "--hidden", "16", "--epochs", "1", "--progress", "off", "--reg-lower", "0.05", "1.0",
        "--reg-l1", "1e-3", "--augment-jitter", "1", "--augment-drop", "0.1"]


def run(argv, processes):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    if processes == 1:
        command = [sys.executable, "-m", "snn_ipu", *argv]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node", str(processes), "-m", "snn_ipu", *argv]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_two_processes_with_half_batches_make_the_full_batch_update(tmp_path):
    one = run(ARGS + ["--save", str(tmp_path / "one.pt")], 1)
    two = run(ARGS + ["--save", str(tmp_path / "two.pt")], 2)
    assert "backend=auto), 2 processes" in two and "backend=auto)\n" in one
    assert two.count("final test accuracy") == 1  # the first process reports
    a, b = load_checkpoint(tmp_path / "one.pt"), load_checkpoint(tmp_path / "two.pt")
    assert b["world_size"] == 2
    for key in a["model"]:
        torch.testing.assert_close(b["model"][key], a["model"][key], rtol=1e-5, atol=1e-6,
                                   msg=key)
    # Adam's running means hold the raw gradients (scaled by 1 - beta): equal sizes too,
    # which the weights alone would not show (Adam's steps ignore the gradient's scale)
    for state_a, state_b in zip(a["optimizer"]["state"].values(),
                                b["optimizer"]["state"].values()):
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(state_b[key], state_a[key], rtol=1e-4, atol=1e-9)
        assert float(state_a["exp_avg"].abs().max()) > 0
    ma, mb = a["metrics"][0], b["metrics"][0]
    assert mb["loss"] == pytest.approx(ma["loss"], rel=1e-5)
    assert mb["test_acc"] == ma["test_acc"] and mb["train_acc"] == ma["train_acc"]
    assert mb["layers"]["hidden1"]["activity"] == pytest.approx(
        ma["layers"]["hidden1"]["activity"], rel=1e-6)
    # eval under torchrun: the one-process report, printed once
    report = run(["eval", str(tmp_path / "one.pt")], 1)
    assert run(["eval", str(tmp_path / "one.pt")], 2) == report and report.count("accuracy") == 1


CLOSES = """
import os
import torch.distributed as dist
from snn_ipu.training import TrainConfig, train
threads = lambda: len(os.listdir("/proc/self/task"))
before = threads()
train(TrainConfig(data="randman", randman_inputs=20, randman_classes=3,
                  randman_samples_per_class=10, num_steps=12, batch_size=7, hidden=[16],
                  epochs=1), progress=False)
with open(os.path.join(os.environ["OUT"], "rank" + os.environ["RANK"]), "w") as f:
    f.write(f"{before} {threads()} {dist.is_initialized()}")
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_training_ends_its_process_group_and_its_threads(tmp_path):
    """train() ends the process group it started, and gloo's threads with it: left to
    the interpreter's exit, a thread still releasing a collective's tensors took the
    process down in std::terminate (SIGABRT) in ~1 torchrun in 20. The threads outlived
    destroy_process_group where torch._dynamo was first imported after the group
    started (by the optimizer), which kept references to the group."""
    script = tmp_path / "closes.py"
    script.write_text(CLOSES)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(tmp_path)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
         "2", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):
        before, after, initialized = (tmp_path / f"rank{rank}").read_text().split()
        assert initialized == "False"
        assert int(after) <= int(before), f"rank {rank}: {before} threads before, {after} after"
