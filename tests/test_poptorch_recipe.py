"""The PopTorch recipe (examples/train_poptorch.py, snn_ipu.poptorch_training and
``snn-ipu train --backend ipu``) against the stand-in PopTorch 3.4 of
tests/poptorch_standin.py: the calls are PopTorch's, the layers' ops run on the
stand-in's device (the dense reference), and what a real IPU computes is not checked
here (docs/ipu.md)."""

import runpy
import subprocess
import sys

import pytest
import torch
from poptorch_standin import ROOT, install

from snn_ipu import LIFLayer, ReadoutLayer, ipu_overflow
from snn_ipu.cli import main as cli_main
from snn_ipu.data import make_randman, split
from snn_ipu.losses import ce_membrane_loss
from snn_ipu.poptorch_training import PopTorchConfig, WithLoss, train

SMALL = ["--epochs", "2", "--hidden", "24", "--max-spikes", "20", "--steps", "8",
         "--samples-per-class", "10", "--batch-size", "4", "--device-iterations", "2"]


def run_example(monkeypatch, tmp_path, *extra):
    poptorch = install(monkeypatch)
    initial = {}
    wrap = poptorch.trainingModel

    def training_model(model, *args, **kwargs):  # the weights the loop starts from
        initial.update({k: v.clone() for k, v in model.net.state_dict().items()})
        return wrap(model, *args, **kwargs)

    monkeypatch.setattr(poptorch, "trainingModel", training_model)
    checkpoint = tmp_path / "ckpt.pt"
    monkeypatch.setattr(sys, "argv", ["train_poptorch.py", *SMALL, "--checkpoint",
                                      str(checkpoint), *extra])
    namespace = runpy.run_path(str(ROOT / "examples" / "train_poptorch.py"), run_name="__main__")
    return poptorch, namespace, checkpoint, initial


def test_the_example_trains_and_checkpoints(monkeypatch, tmp_path, capsys):
    poptorch, ns, checkpoint, initial = run_example(monkeypatch, tmp_path, "--accumulate", "2",
                                                    "--ipus", "2")
    net = ns["net"]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")]
    assert len(lines) == 2 and "test acc" in lines[-1]
    saved = torch.load(checkpoint)
    assert saved["epoch"] == 2
    # the host weights are the device's after copyWeightsToHost, and the checkpoint's
    device = ns["training_model"]._device_model.net
    for name, value in net.state_dict().items():
        assert torch.equal(value, saved["model"][name]), name
        assert torch.equal(value, device.state_dict()[name]), name
    # every layer learned, the first one too (on an IPU that takes PopART's rule of
    # tests/test_op_signatures.py; here the stand-in's autograd runs the reference)
    for i in range(3):
        assert not torch.equal(net.state_dict()[f"{i}.weight"], initial[f"{i}.weight"]), i
    assert all(layer.stats.get("backend") == "ipu" for layer in net[:2])
    assert all(layer.stats["capacity"] == 20 for layer in net[:2])
    assert poptorch.device_logs == []  # every tensor made on the weights' device
    names = [c["name"] for c in poptorch.custom_op_calls if c["phase"] == "trace"]
    assert names == ["SnnSpikingLayer", "SnnSpikingLayer", "SnnReadoutLayer"] * 2  # train, eval


def small_task():
    spikes, labels = make_randman(num_classes=3, num_inputs=20, num_steps=10,
                                  num_samples_per_class=40, seed=1)
    return split(spikes, labels, test_fraction=0.25)


def small_net(max_spikes=12, overflow="error"):
    torch.manual_seed(3)
    net = torch.nn.Sequential(
        LIFLayer(20, 16, grad_window=0.5, max_spikes=max_spikes, overflow=overflow),
        ReadoutLayer(16, 3))
    with torch.no_grad():
        net[0].weight.normal_(0, 1.2)
        net[1].weight.normal_(0, 0.5)
    return net


def loss_fn(out, y):
    return ce_membrane_loss(out, y, time_reduction="max")


def test_train_learns_every_layer(monkeypatch, tmp_path):
    install(monkeypatch)
    train_set, test_set = small_task()
    net = small_net()
    before = [p.detach().clone() for p in net.parameters()]
    first = train(net, train_set, test_set, loss_fn, epochs=1, batch_size=6, lr=2e-2,
                  config=PopTorchConfig(device_iterations=2, gradient_accumulation=2),
                  log=lambda _: None)
    monkeypatch.undo()
    install(monkeypatch)
    last = train(net, train_set, test_set, loss_fn, epochs=3, batch_size=6, lr=2e-2,
                 config=PopTorchConfig(device_iterations=2, gradient_accumulation=2),
                 checkpoint=tmp_path / "c.pt", log=lambda _: None)
    assert last["loss"] < first["loss"]
    assert last["train_acc"] > 1 / 3 + 0.15
    for name, (p, p0) in zip([n for n, _ in net.named_parameters()],
                             zip(net.parameters(), before)):
        if name.endswith("weight"):
            assert not torch.equal(p.detach(), p0), f"{name} did not change"
    assert torch.load(tmp_path / "c.pt")["epoch"] == 3


def test_overflow_error_stops_the_loop_after_the_step(monkeypatch):
    install(monkeypatch)
    train_set, test_set = small_task()
    with pytest.raises(ipu_overflow.SpikeOverflowError, match="on the IPU; the step"):
        train(small_net(max_spikes=1), train_set, test_set, loss_fn, epochs=1, batch_size=6,
              lr=1e-2, log=lambda _: None)
    net = small_net(max_spikes=1, overflow="drop")
    with pytest.warns(RuntimeWarning, match="max_spikes=1 exceeded"):
        train(net, train_set, test_set, loss_fn, epochs=1, batch_size=6, lr=1e-2,
              log=lambda _: None)
    assert net[0].stats["total_spikes_dropped"] > 0 and net[0].stats["needed_capacity"] > 1


@pytest.mark.filterwarnings("ignore:.*the host learns of it only through")
def test_poptorch_refuses_what_poptorch_refuses(monkeypatch):
    poptorch = install(monkeypatch)
    with pytest.raises(TypeError):
        poptorch.custom_op([torch.zeros(1)], "X", "d", 1, example_output=[torch.zeros(1)])
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    with pytest.raises(poptorch.Error, match="gradientAccumulation"):
        poptorch.inferenceModel(torch.nn.Linear(1, 1), options=opts)
    net = small_net()
    model = WithLoss(net, loss_fn)
    training = poptorch.trainingModel(model, optimizer=poptorch.optim.Adam(model.parameters()))
    with pytest.raises(poptorch.Error, match="already been wrapped"):
        poptorch.trainingModel(model)
    with pytest.raises(poptorch.Error, match="not been compiled"):
        training.copyWeightsToHost()
    with pytest.raises(poptorch.Error, match="must return a loss"):
        poptorch.trainingModel(torch.nn.Sequential(small_net())).compile(torch.zeros(2, 10, 20))
    with pytest.raises(ValueError, match="AMSGrad"):
        poptorch.optim.Adam(model.parameters(), amsgrad=True)
    with pytest.raises(TypeError):
        poptorch.optim.Adam(model.parameters(), learning_rate=1e-3)


def test_cli_without_poptorch_says_so_in_one_line():
    code = ("import sys; sys.modules['poptorch'] = None; from snn_ipu.cli import main; "
            "sys.exit(main(['train', '--backend', 'ipu', '--quick', '--epochs', '1']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "PopTorch" in lines[0] and "Traceback" not in result.stderr


def test_cli_trains_through_poptorch(monkeypatch, capsys):
    poptorch = install(monkeypatch)
    assert cli_main(["train", "--data", "randman", "--backend", "ipu", "--epochs", "1",
                     "--hidden", "16", "--steps", "8", "--randman-classes", "3",
                     "--randman-inputs", "12", "--randman-samples-per-class", "20",
                     "--batch-size", "8", "--grad-window", "0.5", "--progress", "off"]) == 0
    out = capsys.readouterr().out
    assert "PopTorch:" in out and "epoch   1" in out
    assert {c["name"] for c in poptorch.custom_op_calls} == {"SnnSpikingLayer",
                                                              "SnnReadoutLayer"}


def test_a_half_model_trains(monkeypatch):
    """model.half(): half weights, bias and parameters go into the ops as they are
    (the ops widen them; their gradients come back half)."""
    poptorch = install(monkeypatch)
    train_set, _ = small_task()
    net = small_net().half()
    model = WithLoss(net, loss_fn)
    before = net[0].weight.detach().clone()
    training = poptorch.trainingModel(
        model, options=poptorch.Options().deviceIterations(2),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5))
    x = train_set.spikes[:12]
    _, loss, counts = training(x, train_set.labels[:12])
    ipu_overflow.record(net, counts)
    training.copyWeightsToHost()
    assert net[0].weight.dtype == torch.float16 and torch.isfinite(loss).all()
    assert not torch.equal(net[0].weight.detach(), before)
    spiking = [c for c in poptorch.custom_op_calls if c["name"] == "SnnSpikingLayer"]
    assert spiking[0]["inputs"][3].dtype == torch.float16  # weight
    assert spiking[0]["inputs"][4].dtype == torch.float16  # bias
