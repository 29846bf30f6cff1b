"""``snn-ipu bench --device cuda``: without a CUDA device (or without Triton) it stops
before any work with a message that says what is missing; its table reads the results
it writes."""

import pytest
import torch

from snn_ipu.bench import command, gpu


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_bench_without_cuda_says_so(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        command.main(["--device", "cuda", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--device cuda: torch.cuda.is_available() is False" in err
    assert not any(tmp_path.iterdir())  # nothing ran


def test_gpu_options_need_cuda_and_a_cuda_device(capsys):
    with pytest.raises(SystemExit):
        command.parse_args(["--gpu-backends", "triton_sparse"])
    assert "--gpu-backends needs --device cuda" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        command.parse_args(["--device", "mps"])
    assert "runs on a CUDA device, got 'mps'" in capsys.readouterr().err


def test_missing_triton_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    from snn_ipu.backends import triton as triton_backend

    monkeypatch.setattr(triton_backend, "available", lambda: False)
    assert "pip install 'snn-ipu[gpu]'" in gpu.check_device("cuda")


def test_table_and_plot_of_a_result(tmp_path):
    result = {"config": "S", "sizes": [700, 256, 256, 20], "T": 100, "B": 64, "device": "H100",
              "activities": {"0.01": {
                  "triton_sparse": {"median_s": 0.002, "peak_bytes": 50 * 2**20},
                  "spikingjelly": {"median_s": 0.010, "peak_bytes": 400 * 2**20},
                  "snntorch": {"error": "RuntimeError: boom"}}}}
    text = gpu.table(result)
    assert "5.00x" in text and "error" in text and "400" in text
    assert gpu.plot(result, tmp_path / "p.png") is None and (tmp_path / "p.png").exists()


@pytest.mark.parametrize("name", ["triton_exact", "spikingjelly", "torch_loop", "snntorch"])
def test_networks_build_on_a_device_and_step(monkeypatch, name):
    """The GPU benchmark's networks, built and moved as on a GPU (here to the CPU; the
    triton ones through the interpreter), take a training step on the same problem."""
    if name == "spikingjelly":
        pytest.importorskip("spikingjelly")
    if name == "snntorch":
        pytest.importorskip("snntorch")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from snn_ipu.bench.workload import make_problem

    problem = make_problem(dict(sizes=(12, 9, 9, 3), T=2, B=2), 0.3, 0)
    net = gpu._build(problem, name, torch.device("cpu"), 1e-3, "default")
    before = [p.detach().clone() for p in net.params]
    loss = net.step()
    assert loss == loss and len(net.activity()) == 3
    assert any(not torch.equal(a, p) for a, p in zip(before, net.params))
