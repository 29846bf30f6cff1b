"""The PopTorch recipe (examples/train_poptorch.py, snn_ipu.poptorch_training and
``snn-ipu train --backend ipu``) against the stand-in PopTorch 3.4 of
tests/poptorch_standin.py: the calls are PopTorch's, the layers' ops run on the
stand-in's device (the dense reference), and what a real IPU computes is not checked
here (docs/ipu.md)."""

import itertools
import runpy
import subprocess
import sys

import numpy as np
import pytest
import torch
from poptorch_standin import ROOT, install

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SpikeOverflowError, ipu_overflow
from snn_ipu.checkpoint import load_checkpoint
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
    traced = [c for c in poptorch.custom_op_calls if c["phase"] == "trace"]
    assert [c["name"] for c in traced] == ["SnnSpikingLayer", "SnnSpikingLayer",
                                           "SnnReadoutLayer"] * 2  # train, eval
    # the input goes in as lists as wide as the data's busiest step, not as 100 inputs
    busiest = int(max((d.spikes != 0).sum(-1).max() for d in (ns["dense_train"],
                                                              ns["dense_test"])))
    assert traced[0]["inputs"][0].shape[-1] == ns["train_set"].capacity == busiest < 100
    # compiled ahead of time, both models, with the executable cache and async loaders
    assert ns["training_model"].isCompiled() and ns["inference_model"].isCompiled()
    assert ns["train_opts"].executable_cache == ns["args"].cache
    assert ns["train_loader"]._mode == poptorch.DataLoaderMode.Async


def test_the_example_scores_the_whole_test_set_and_resumes(monkeypatch, tmp_path, capsys):
    _, ns, checkpoint, _ = run_example(monkeypatch, tmp_path, "--epochs", "1")
    test_set, net = ns["test_set"], ns["net"]
    # 6 test samples per the 3 x 10 split do not fill a combined batch of 8: all are scored
    assert len(test_set) % ns["test_loader"].combinedBatchSize != 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("epoch 1")][0]
    assert f"({len(test_set)} samples)" in line
    reported = float(line.split("test acc ")[1].split()[0])
    # the host weights on the emulator, over every test sample (independent of PopTorch)
    for layer in net:
        layer.backend = "emulator"
    with torch.no_grad():
        x = ns["dense_test"].spikes.transpose(0, 1)
        predicted = net(x).amax(0).argmax(-1)
    assert reported == pytest.approx(float((predicted == ns["dense_test"].labels).float().mean()))
    saved = torch.load(checkpoint)
    steps = saved["optimizer"]["ipu_state"][0]["step"]
    monkeypatch.undo()
    _, ns2, checkpoint2, initial = run_example(monkeypatch, tmp_path, "--epochs", "2",
                                               "--resume", str(checkpoint))
    for name, value in saved["model"].items():  # started from the checkpoint's weights
        assert torch.equal(initial[name], value), name
    again = torch.load(checkpoint2)
    assert again["epoch"] == 2
    # the optimizer went on from the saved state: Adam's step count carries over
    assert float(again["optimizer"]["ipu_state"][0]["step"]) == 2 * float(steps)


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


def built_nets(monkeypatch):
    """The networks snn-ipu train builds, with their initial weights."""
    from snn_ipu import training

    nets = []
    build = training.build_model

    def build_model(*args, **kwargs):
        net = build(*args, **kwargs)
        nets.append((net, {k: v.clone() for k, v in net.state_dict().items()}))
        return net

    monkeypatch.setattr(training, "build_model", build_model)
    return nets


def test_cli_spike_readout_trains_every_layer(monkeypatch, capsys):
    """--readout spikes: ce_count_loss on the output list's spike_counts(), which on the
    IPU come from an op (tests/test_popart_autodiff.py has PopART's side of it)."""
    poptorch = install(monkeypatch)
    nets = built_nets(monkeypatch)
    assert cli_main(["train", "--data", "randman", "--backend", "ipu", "--readout", "spikes",
                     "--epochs", "1", "--hidden", "16", "--steps", "8", "--randman-classes",
                     "3", "--randman-inputs", "12", "--randman-samples-per-class", "20",
                     "--batch-size", "8", "--grad-window", "0.5", "--progress", "off"]) == 0
    net, initial = nets[0]
    for name, value in net.state_dict().items():
        if name.endswith("weight"):
            assert not torch.equal(value, initial[name]), f"{name} did not change"
    ops = {c["name"] for c in poptorch.custom_op_calls if c["phase"] == "trace"}
    assert ops == {"SnnSpikingLayer", "SnnReadoutLayer"}  # the count's dense view: an op


def test_cli_feeds_shd_as_lists_of_the_data_width(monkeypatch, tmp_path, capsys):
    """The SHD network (700-256-256-20, T=100) on SHD-like files: the traced training
    step's first op takes a list of at most twice the data's busiest bin, not 700."""
    import h5py
    import numpy as np
    from shd_files import write_heidelberg

    labels = list(range(0, 20, 3))  # 7 samples: one step of 4 (a fixed batch), 3 left
    write_heidelberg(tmp_path / "shd_train.h5", labels, seed=0)
    write_heidelberg(tmp_path / "shd_test.h5", labels[:4], seed=1)
    busiest = 0  # distinct channels in any 14 ms bin, from the files themselves
    for part in ("train", "test"):
        with h5py.File(tmp_path / f"shd_{part}.h5") as f:
            for times, units in zip(f["spikes/times"], f["spikes/units"]):
                bins = np.floor(times.astype(np.float64) / (1.4 / 100)).astype(int)
                inside = bins < 100
                pairs = set(zip(bins[inside].tolist(), units[inside].tolist()))
                per_bin = np.bincount([b for b, _ in pairs], minlength=100)
                busiest = max(busiest, int(per_bin.max()))
    poptorch = install(monkeypatch)
    dense_inputs = []  # the input is never made dense on the host (SHD train: 2.1 GiB)
    to_dense = SparseSpikes.to_dense

    def watched(self):
        if self.num_neurons == 700:
            dense_inputs.append(self.dense_shape)
        return to_dense(self)

    monkeypatch.setattr(SparseSpikes, "to_dense", watched)
    assert cli_main(["train", "--data", "shd", "--data-dir", str(tmp_path), "--backend", "ipu",
                     "--hidden", "256", "256", "--steps", "100", "--epochs", "1",
                     "--batch-size", "4", "--progress", "off"]) == 0
    first = [c for c in poptorch.custom_op_calls if c["phase"] == "trace"][0]
    assert first["name"] == "SnnSpikingLayer"
    assert first["inputs"][3].shape == (256, 700)  # the first layer's weight
    T, B, K = first["inputs"][0].shape
    assert (T, B) == (100, 4) and K <= 2 * busiest < 700
    assert f"input lists: capacity {K} of 700" in capsys.readouterr().out
    assert dense_inputs == []


def test_cli_resumes_an_ipu_run_from_its_checkpoint(monkeypatch, capsys, tmp_path):
    poptorch = install(monkeypatch)
    save = tmp_path / "ipu.pt"
    assert cli_main(["train", "--data", "randman", "--backend", "ipu", "--epochs", "1",
                     "--hidden", "16", "--steps", "8", "--randman-classes", "3",
                     "--randman-inputs", "12", "--randman-samples-per-class", "20",
                     "--batch-size", "8", "--grad-window", "0.5", "--progress", "off",
                     "--save", str(save)]) == 0
    first = load_checkpoint(save)
    assert first["epoch"] == 1 and first["config"]["backend"] == "ipu"
    uploaded = []  # the host weights PopTorch takes when the training model is made
    real = poptorch.trainingModel

    def training_model(model, *args, **kwargs):
        uploaded.append({k: v.clone() for k, v in model.net.state_dict().items()})
        return real(model, *args, **kwargs)

    monkeypatch.setattr(poptorch, "trainingModel", training_model)
    capsys.readouterr()
    resume = ["train", "--resume", str(save), "--save", str(save), "--epochs", "2"]
    assert cli_main(resume) == 0
    out = capsys.readouterr().out
    assert "epoch   2  " in out and "epoch   1  " not in out
    for name, value in first["model"].items():
        assert torch.equal(uploaded[0][name], value), name
    assert load_checkpoint(save)["epoch"] == 2
    assert cli_main(resume) == 2  # nothing left to train
    assert "already trained 2 epochs" in capsys.readouterr().err
    assert cli_main(resume[:-2] + ["--epochs", "3", "--log", str(tmp_path / "m.jsonl")]) == 2
    assert "--log: not with --backend ipu" in capsys.readouterr().err


IPU_RUN = ["train", "--data", "randman", "--backend", "ipu", "--epochs", "1", "--hidden", "16",
           "--steps", "8", "--randman-classes", "3", "--randman-inputs", "12",
           "--randman-samples-per-class", "20", "--batch-size", "8", "--grad-window", "0.5",
           "--progress", "off"]


def test_cli_ipu_run_is_seeded_and_records_what_it_trains(monkeypatch, capsys, tmp_path):
    """--seed gives the IPU run the CPU run's initial weights (two runs, the same ones);
    its checkpoint records the constant rate and no augmentation that PopTorch's loop
    trains with, not the CPU loop's defaults."""
    install(monkeypatch)
    nets = built_nets(monkeypatch)
    for name in ("a.pt", "b.pt"):
        torch.manual_seed(len(name) * 7 + ord(name[0]))  # whatever the global RNG holds
        assert cli_main(IPU_RUN + ["--seed", "5", "--save", str(tmp_path / name)]) == 0
    assert "constant learning rate without augmentation" in capsys.readouterr().err
    (_, first), (_, second) = nets
    for key in first:
        assert torch.equal(first[key], second[key]), key
    config = load_checkpoint(tmp_path / "a.pt")["config"]
    assert config["lr_schedule"] == "constant"
    assert (config["augment_jitter"], config["augment_drop"]) == (0, 0.0)


@pytest.mark.parametrize("extra, message", [
    (["--lr-schedule", "cosine"], "lr_schedule='cosine'"),
    (["--reg-l1", "0.01"], "reg_l1"),
    (["--reg-lower", "0.01", "1.0"], "reg_lower"),
    (["--augment-drop", "0.2"], "augmentation"),
])
def test_cli_ipu_refuses_what_poptorchs_loop_does_not_train(monkeypatch, capsys, extra,
                                                             message):
    install(monkeypatch)
    assert cli_main(IPU_RUN + extra) == 2
    err = capsys.readouterr().err
    assert "PopTorch's loop trains at a constant learning rate" in err and message in err


def test_cli_ipu_refuses_to_resume_a_cpu_run_it_would_train_otherwise(monkeypatch, capsys,
                                                                      tmp_path):
    """A CPU run's checkpoint (cosine schedule) resumed with --backend ipu: refused, not
    continued at the rate the finished schedule left (0)."""
    save = tmp_path / "cpu.pt"
    cpu_run = [a for a in IPU_RUN if a not in ("--backend", "ipu")]
    assert cli_main(cpu_run + ["--save", str(save)]) == 0
    install(monkeypatch)
    capsys.readouterr()
    assert cli_main(["train", "--resume", str(save), "--epochs", "2", "--backend", "ipu"]) == 2
    assert "lr_schedule='cosine'" in capsys.readouterr().err
    assert load_checkpoint(save)["epoch"] == 1


def test_ipu_accuracy_takes_the_cpu_loops_time_reduction(monkeypatch):
    """The IPU loop's predicted class is the CPU loop's (losses.accuracy with the
    readout's time reduction: per_step -> mean over time), not the max over time."""
    from snn_ipu import poptorch_training
    from snn_ipu.losses import accuracy
    from snn_ipu.training import TrainConfig

    captured = {}
    monkeypatch.setattr(poptorch_training, "train", lambda *a, **kw: captured.update(kw))
    monkeypatch.setattr(poptorch_training, "_poptorch", lambda: None)
    monkeypatch.setattr(poptorch_training, "size_lists", lambda net, x: {})
    from snn_ipu.data.tasks import load_task

    for reduction in ("per_step", "max", "last"):
        config = TrainConfig(data="randman", randman_classes=3, randman_inputs=12,
                             randman_samples_per_class=20, num_steps=8, hidden=[16],
                             backend="ipu", lr_schedule="constant", time_reduction=reduction)
        poptorch_training.train_config(config, load_task(config), log=lambda _: None)
        # membranes whose max-over-time and mean-over-time winners differ
        membrane = torch.zeros(4, 2, 3)
        membrane[0, :, 0] = 5.0  # class 0: one high step
        membrane[1:, :, 1] = 2.0  # class 1: high on average and last
        labels = torch.tensor([1, 0])
        over_time = "mean" if reduction == "per_step" else reduction
        predicted = captured["predict"](membrane)
        assert float((predicted == labels).float().mean()) == accuracy(
            membrane, labels, time_reduction=over_time), reduction


class _Modes(torch.nn.Module):
    """Passes its input on and records the mode (train/eval) of every call."""

    def __init__(self):
        super().__init__()
        self.modes = []

    def forward(self, x):
        self.modes.append(self.training)
        return x


def test_evaluation_compiles_in_eval_mode_and_training_in_train_mode(monkeypatch):
    """A model's mode is fixed when PopTorch compiles (traces) it, and its inferenceModel
    does not switch it: the training model is traced in train mode and the inference
    model in eval mode (dropout off), and the net is left in eval mode after testing."""
    install(monkeypatch)
    train_set, test_set = small_task()
    modes = _Modes()
    net = torch.nn.Sequential(modes, *small_net())
    train(net, train_set, test_set, loss_fn, epochs=1, batch_size=6, lr=1e-2,
          log=lambda _: None)
    assert modes.modes == [True, False]  # the two traces: training, then inference


def test_a_frozen_layer_after_a_trainable_one_traces_its_window(monkeypatch):
    """While PopTorch traces, an op's outputs do not require grad: the next layer's
    call must still be recorded (its window listed), or a frozen layer behind a trainable
    one would compile with grad_window 0 and the first layer's dL/dW would be cut."""
    poptorch = install(monkeypatch)
    train_set, test_set = small_task()
    torch.manual_seed(3)
    net = torch.nn.Sequential(LIFLayer(20, 16, grad_window=0.5, max_spikes=12),
                              LIFLayer(16, 16, grad_window=0.3, max_spikes=12),
                              ReadoutLayer(16, 3))
    for p in net[1].parameters():
        p.requires_grad_(False)
    train(net, train_set, test_set, loss_fn, epochs=1, batch_size=6, lr=1e-2,
          log=lambda _: None)
    traced = [c["attributes"]["grad_window"] for c in poptorch.custom_op_calls
              if c["phase"] == "trace" and c["name"] == "SnnSpikingLayer"]
    assert traced[:2] == pytest.approx([0.5, 0.3])


def test_spike_dropout_refuses_an_ipu_ops_list():
    """Its ids and counts come from the op's through integer ops, which PopART does not
    differentiate: every layer before it would be left untrained without a word."""
    from snn_ipu import SpikeDropout

    layer = LIFLayer(20, 16, backend="ipu_graph", max_spikes=16)
    x = torch.zeros(4, 2, 20)
    x[:, :, :5] = 1.0
    out = layer(x)
    with pytest.raises(ValueError, match="SpikeDropout: this list was made by an IPU op"):
        SpikeDropout(0.3)(out)
    SpikeDropout(0.3)(x)  # on the data: fine


def test_a_per_sample_loss_is_refused_not_summed(monkeypatch):
    """A loss_fn returning one loss per sample ([B], reduction="none") went into
    poptorch.identity_loss(reduction="none"), whose gradient is that of the sum: the IPU
    trained at B times the learning rate of the mean (the CPU's backward() refuses a
    [B] loss), without a word."""
    install(monkeypatch)
    train_set, test_set = small_task()

    def per_sample(out, y):
        return ce_membrane_loss(out, y, time_reduction="max", reduction="none")

    with pytest.raises(ValueError, match=r"loss_fn must return one number .* got \(6,\)"):
        train(small_net(), train_set, test_set, per_sample, epochs=1, batch_size=6, lr=1e-2,
              log=lambda _: None)


def test_inputs_of_the_wrong_form_are_named(monkeypatch):
    """Dense samples given to WithLoss(num_inputs=...) failed with an IndexError in
    transpose; spike lists given without num_inputs were read as dense spikes of K
    features, their counts as the labels and the labels dropped (an error only where K
    differed from in_features); a third input was dropped without a word."""
    from snn_ipu.data import SpikeLists, collate_dense

    install(monkeypatch)
    train_set, test_set = small_task()
    with pytest.raises(ValueError, match=r"num_inputs=20\) takes spike lists.*got 2 inputs "
                                         r"\(float32 \[6, 10, 20\], int64 \[6\]\)"):
        train(small_net(), train_set, test_set, loss_fn, epochs=1, batch_size=6, lr=1e-2,
              num_inputs=20, log=lambda _: None)
    lists = SpikeLists(train_set, collate_dense, datasets=(test_set,))
    test_lists = SpikeLists(test_set, collate_dense, capacity=lists.capacity)
    with pytest.raises(ValueError, match=r"got 3 inputs .* need WithLoss\(\.\.\., num_inputs"):
        train(small_net(), lists, test_lists, loss_fn, epochs=1, batch_size=6, lr=1e-2,
              log=lambda _: None)
    model = WithLoss(small_net(), loss_fn)
    with pytest.raises(ValueError, match="got 3 inputs"):  # a second label was dropped
        model(torch.zeros(2, 10, 20), torch.zeros(2, dtype=torch.long),
              torch.zeros(2, dtype=torch.long))


def test_cli_refuses_to_resume_a_cpu_runs_optimizer_on_the_ipu(monkeypatch, capsys, tmp_path):
    """A CPU run that PopTorch's loop could continue (a constant rate, no augmentation),
    resumed with --backend ipu: PopTorch's Adam loads only an IPU optimizer's state, and
    the run died in optimizer.load_state_dict with a traceback ("Only IPU optimizer states
    can be loaded onto the IPU"). Refused in one line naming the checkpoint."""
    save = tmp_path / "cpu.pt"
    cpu_run = [a for a in IPU_RUN if a not in ("--backend", "ipu")] + [
        "--lr-schedule", "constant", "--augment-jitter", "0", "--augment-drop", "0"]
    assert cli_main(cpu_run + ["--save", str(save)]) == 0
    install(monkeypatch)
    capsys.readouterr()
    assert cli_main(["train", "--resume", str(save), "--epochs", "2", "--backend", "ipu"]) == 2
    err = capsys.readouterr().err
    assert f"{save}: its optimizer state is not a PopTorch optimizer's" in err
    assert len(err.strip().splitlines()) == 1
    assert load_checkpoint(save)["epoch"] == 1


def test_cli_refuses_to_resume_an_ipu_runs_checkpoint_on_the_cpu(monkeypatch, capsys, tmp_path):
    """An IPU run resumed with --backend emulator: PopTorch's loop writes no scheduler,
    metrics or random state, and the refusal said only that they were missing. It now
    names the cause in one line, and nothing is written."""
    save = tmp_path / "ipu.pt"
    install(monkeypatch)
    assert cli_main(IPU_RUN + ["--save", str(save)]) == 0
    before = save.read_bytes()
    capsys.readouterr()
    code = cli_main(["train", "--resume", str(save), "--epochs", "2", "--backend", "emulator"])
    err = capsys.readouterr().err
    assert code == 2 and f"{save}: its optimizer state is a PopTorch optimizer's" in err
    assert "--backend ipu" in err and len(err.strip().splitlines()) == 1
    assert save.read_bytes() == before


@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_a_layer_on_another_backend_is_refused_inside_a_poptorch_model(monkeypatch, backend):
    """backend='reference' traced by PopTorch compiled the reference's dense torch ops in
    place of the layer's op: no overflow counts reached the host, and by PopART's rules
    (tests/popart_autodiff.py) the hidden layer's weights got no gradient (all four
    parameters with a spiking output, whose loss reads the list's integer ids). The
    stand-in trained it, its device running Python. The emulator failed on the traced
    tensors ("runs on the CPU; got a tensor on meta"). Both are refused by name."""
    install(monkeypatch)
    train_set, test_set = small_task()
    net = small_net(overflow="drop")
    for layer in net:
        layer.backend = backend
    with pytest.raises(ValueError, match=rf"LIFLayer\(20->16\): backend='{backend}' inside a "
                                         "model PopTorch runs on the IPU"):
        train(net, train_set, test_set, loss_fn, epochs=1, batch_size=6, lr=1e-2,
              log=lambda _: None)
    net(train_set.spikes[:2].transpose(0, 1))  # outside the model they run as before


def test_the_example_reports_the_epochs_training_lists(monkeypatch, tmp_path, capsys):
    """The example printed layer.stats, which hold the last call's row: a test
    micro-batch's (eval mode, spikes alone): 'hidden activity 0.065, 0.079, lists need up
    to 6 entries' where the epoch's training lists needed up to 15 of 20 entries at an
    activity of 0.107 and 0.143. It prints the epoch's, checked here against what the
    device's ops themselves reported needing (their ``needed`` outputs)."""
    poptorch = install(monkeypatch)
    needed = []
    device = poptorch.devices["SnnSpikingLayer"]

    def recording(inputs, attributes):
        out = device(inputs, attributes)
        needed.append((out[4], inputs[3].shape[0]))  # the op's [T, B, 2] needed; N
        return out

    poptorch.devices["SnnSpikingLayer"] = recording
    monkeypatch.setattr(sys, "argv", ["train_poptorch.py", *SMALL, "--epochs", "1",
                                      "--checkpoint", str(tmp_path / "c.pt")])
    ns = runpy.run_path(str(ROOT / "examples" / "train_poptorch.py"), run_name="__main__")
    training = needed[:len(ns["train_loader"]) * 2 * 2]  # calls x micro-batches x layers
    expected = []
    for layer in range(2):
        calls = training[layer::2]
        spikes = sum(float(n[..., 0].sum()) for n, _ in calls)
        expected.append((spikes / sum(n[..., 0].numel() * width for n, width in calls),
                         max(int(n[..., 1].max()) for n, _ in calls)))
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("epoch 1")][0]
    activity = [float(a) for a in line.split("hidden activity ")[1].split(", lists")[0]
                .split(", ")]
    assert activity == pytest.approx([a for a, _ in expected], abs=5e-4)
    assert f"lists need up to {max(n for _, n in expected)} entries" in line


def test_resuming_at_another_rate_is_refused_not_ignored(monkeypatch, tmp_path):
    """train(lr=..., resume=...) loaded the checkpoint's optimizer state, whose
    param_groups (and ipu_param) hold the rate it trained at: lr=1e-2 after a run at
    2e-2 trained on at 2e-2 without a word (the device's optimizer took the loaded
    rate). Refused, naming both rates; the checkpoint's own rate resumes."""
    install(monkeypatch)
    train_set, test_set = small_task()
    net = small_net(overflow="drop")
    ckpt = tmp_path / "c.pt"
    quiet = dict(batch_size=6, config=PopTorchConfig(device_iterations=2),
                 log=lambda _: None)
    train(net, train_set, test_set, loss_fn, epochs=1, lr=2e-2, checkpoint=ckpt, **quiet)
    with pytest.raises(ValueError, match=r"trained at lr=0.02; lr=0.01 would be ignored"):
        train(net, train_set, test_set, loss_fn, epochs=2, lr=1e-2, resume=ckpt, **quiet)
    monkeypatch.undo()
    install(monkeypatch)
    train(net, train_set, test_set, loss_fn, epochs=2, lr=2e-2, resume=ckpt, **quiet)


def test_padding_of_unsigned_labels_is_not_scored():
    """Padded labels its padding -1 and evaluate() skips labels below 0, but
    full_like(uint8 label, -1) is 255: the 4 padding samples of 20 (padded to 24) were
    scored as wrong, a perfect model's accuracy 20/24 = 0.833. Unsigned labels become
    int64, so the padding is -1."""
    from snn_ipu.poptorch_training import Padded, evaluate

    labels = torch.arange(20) % 3 + 1
    # each sample carries its label, which the stand-in model below predicts
    data = [(torch.full((4, 5), float(y)), np.uint8(y)) for y in labels.tolist()]
    loader = torch.utils.data.DataLoader(Padded(data, 8), batch_size=8)

    def perfect(x):
        return x[:, 0, 0].to(torch.int32), torch.zeros(0, len(ipu_overflow.ROW),
                                                       dtype=torch.int32)

    assert len(loader.dataset) == 24
    assert evaluate(perfect, loader, torch.nn.Sequential()) == 1.0
    *_, padding = loader.dataset[23]
    assert int(padding) == -1


def test_padded_is_a_sequence_of_its_length():
    """Padded's padding did not end: an index past it gave more padding, so iterating
    the dataset (Python's protocol stops at IndexError) never ended, and index -1 gave
    the last real sample, not the last padding."""
    from snn_ipu.poptorch_training import Padded

    data = [(torch.full((2,), float(i)), i) for i in range(5)]
    padded = Padded(data, 4)
    # (islice: on the old form the iteration would not end)
    labels = [int(y) for _, y in itertools.islice(iter(padded), 20)]
    assert labels == [0, 1, 2, 3, 4, -1, -1, -1]
    assert int(padded[-1][1]) == -1 and int(padded[-4][1]) == 4
    assert float(padded[-8][0][0]) == 0.0 and int(padded[-8][1]) == 0
    for i in (8, -9):
        with pytest.raises(IndexError, match="out of range for 8 samples"):
            padded[i]


def test_evaluate_refuses_predictions_of_fewer_micro_batches():
    """An inference model compiled with OutputMode.Final returns the last micro-batch's
    predictions only: with a micro-batch of 1, evaluate() compared that one prediction
    with all 4 labels by broadcasting (labels 0, 1, 2, 2, the last predicted right:
    accuracy 0.5 where it is 1.0 for the one it saw, unknown for the rest). Refused,
    naming OutputMode.All."""
    from snn_ipu.poptorch_training import evaluate

    loader = [(torch.zeros(4, 3, 2), torch.tensor([0, 1, 2, 2]))]

    def final_only(x):  # 4 micro-batches of 1; the last one's prediction, 2
        return torch.tensor([2], dtype=torch.int32), torch.zeros(0, len(ipu_overflow.ROW),
                                                                 dtype=torch.int32)

    with pytest.raises(ValueError, match=r"returned 1 predictions for a combined batch of 4 "
                                         r"samples.*OutputMode.All"):
        evaluate(final_only, loader, torch.nn.Sequential())


def _overflow_row(spikes, dropped=0, batch_size=2):
    """The row of one call of layer 0 (max_spikes=2 of 4 neurons) on a micro-batch of
    ``batch_size`` over 5 steps, written out by hand; ``dropped``: spikes past its
    capacity at the first step and sample."""
    row = dict.fromkeys(ipu_overflow.ROW, 0)
    row.update(num_steps=5, batch_size=batch_size, capacity=2, spikes=spikes,
               needed_capacity=2, first_overflow=-1)
    if dropped:
        row.update(needed_capacity=2 + dropped, spikes_dropped=dropped, first_overflow=0,
                   first_spikes=2 + dropped, first_needed=2 + dropped)
    return [row[name] for name in ipu_overflow.ROW]


def _padded_batch():
    """One combined batch of 4 micro-batches of 2: samples 0-4 real, 5-7 padding, so
    micro-batches 0-2 hold a real sample and 3 only padding."""
    from snn_ipu.poptorch_training import Padded

    loader = torch.utils.data.DataLoader(Padded([(torch.zeros(5, 4), 0)] * 5, 8), batch_size=8)
    assert [int(loader.dataset[i][1]) for i in range(8)] == [0] * 5 + [-1] * 3
    return loader


def _stand_in(rows_of_micro_batches):
    """An inference model that predicts 0 and returns these overflow rows, micro-batch
    after micro-batch, as OutputMode.All does."""
    counts = torch.tensor([row for rows in rows_of_micro_batches for row in rows],
                          dtype=torch.int32)

    def model(x):
        return torch.zeros(len(x), dtype=torch.int32), counts

    return model


def _recorded_spikes(monkeypatch, layer):
    """The spikes of every call record() hands ``layer``, in order."""
    spikes, keep = [], layer._keep
    monkeypatch.setattr(layer, "_keep", lambda call: (spikes.append(call.total_spikes),
                                                      keep(call)))
    return spikes


def test_evaluate_groups_the_rows_of_a_layer_called_twice_by_micro_batch(monkeypatch):
    """A weight-tied layer called twice in a forward returns 2 rows per micro-batch.
    evaluate() took 1 row per spiking layer for a micro-batch: it kept the first 5 rows
    (one per real sample), dropping micro-batch 2's second call as padding. The rows of
    the padding's micro-batch, which overflow here, are left out, and every call of the
    real ones is recorded."""
    from snn_ipu.poptorch_training import evaluate

    shared = LIFLayer(4, 4, max_spikes=2, overflow="error")
    spikes = _recorded_spikes(monkeypatch, shared)
    model = _stand_in([[_overflow_row(1), _overflow_row(2)],
                       [_overflow_row(11), _overflow_row(12)],
                       [_overflow_row(21), _overflow_row(22)],
                       [_overflow_row(3, dropped=1), _overflow_row(3, dropped=2)]])
    assert evaluate(model, _padded_batch(), torch.nn.Sequential(shared)) == 1.0
    assert spikes == [1, 2, 11, 12, 21, 22]
    assert shared.stats["spikes"] == 22 and shared.stats["total_spikes_dropped"] == 0


def test_evaluate_raises_for_an_overflow_in_a_real_micro_batchs_second_call(monkeypatch):
    """The converse: the second call of micro-batch 2 (one real sample, one padding)
    overflows. evaluate() left that row out (the 6th, past the 5 real samples), so a
    layer with overflow="error" went on without a word."""
    from snn_ipu.poptorch_training import evaluate

    shared = LIFLayer(4, 4, max_spikes=2, overflow="error")
    spikes = _recorded_spikes(monkeypatch, shared)
    model = _stand_in([[_overflow_row(1), _overflow_row(2)],
                       [_overflow_row(11), _overflow_row(12)],
                       [_overflow_row(21), _overflow_row(22, dropped=1)],
                       [_overflow_row(3), _overflow_row(4)]])
    with pytest.raises(SpikeOverflowError, match="on the IPU"):
        evaluate(model, _padded_batch(), torch.nn.Sequential(shared))
    assert spikes == [1, 2, 11, 12, 21, 22]
    assert shared.stats["spikes_dropped"] == 1


def test_evaluate_groups_the_rows_of_a_net_that_calls_one_of_its_layers(monkeypatch):
    """A net of two spiking layers whose forward calls only the first returns 1 row per
    micro-batch: evaluate() grouped the rows 2 by 2, micro-batches 2 and 3 together, so
    the padding's overflow was recorded and raised. Only the real micro-batches' rows
    are recorded, and an overflow in one of them still raises."""
    from snn_ipu.poptorch_training import evaluate

    used, spare = (LIFLayer(4, 4, max_spikes=2, overflow="error") for _ in range(2))
    net = torch.nn.Sequential(used, spare)
    spikes = _recorded_spikes(monkeypatch, used)
    model = _stand_in([[_overflow_row(1)], [_overflow_row(11)], [_overflow_row(21)],
                       [_overflow_row(3, dropped=1)]])
    assert evaluate(model, _padded_batch(), net) == 1.0
    assert spikes == [1, 11, 21]
    assert used.stats["total_spikes_dropped"] == 0 and spare.stats == {}
    model = _stand_in([[_overflow_row(1)], [_overflow_row(11)],
                       [_overflow_row(21, dropped=2)], [_overflow_row(3)]])
    with pytest.raises(SpikeOverflowError):
        evaluate(model, _padded_batch(), net)
    assert spikes[3:] == [1, 11, 21] and used.stats["total_spikes_dropped"] == 2


@pytest.mark.parametrize("rows, message", [
    ([[_overflow_row(1)]] * 3 + [[_overflow_row(1), _overflow_row(2)]],
     r"5 overflow rows for 4 micro-batches of 2 samples"),
    ([[_overflow_row(1, batch_size=3)]] * 4,
     r"overflow rows of batch_size 3 for a combined batch of 8"),
    ([[_overflow_row(1), _overflow_row(2, batch_size=4)]] * 4,
     r"overflow rows of batch_size 2, 4 for a combined batch of 8"),
], ids=["rows", "size", "sizes"])
def test_evaluate_refuses_rows_that_are_not_whole_micro_batches(rows, message):
    """Rows that do not divide into the combined batch's micro-batches (5 rows for 4;
    micro-batches of 3 samples in 8; calls of 2 and of 4 samples) cannot be told apart
    by micro-batch: evaluate() grouped them anyway (or failed in a reshape)."""
    from snn_ipu.poptorch_training import evaluate

    net = torch.nn.Sequential(LIFLayer(4, 4, max_spikes=2, overflow="error"))
    with pytest.raises(ValueError, match=rf"^evaluate\(\): {message}.*OutputMode\.All"):
        evaluate(_stand_in(rows), _padded_batch(), net)
