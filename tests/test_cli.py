"""``snn-ipu``: train (randman, digits, an SHD file in the official layout), checkpoints,
bitwise resume, a save that dies mid-write, eval, plot, plan, --help."""

import json
import math
import re

import pytest
import torch
from conftest import adam_step_rates
from shd_files import write_heidelberg

from snn_ipu import checkpoint as checkpoint_module
from snn_ipu import cli, training
from snn_ipu.checkpoint import load_checkpoint

TINY = ["train", "--data", "randman", "--randman-inputs", "20", "--randman-classes", "3",
        "--randman-samples-per-class", "10", "--steps", "12", "--batch-size", "8",
        "--hidden", "16", "16", "--progress", "off"]


def run(capsys, argv, code=0):
    assert cli.main(argv) == code
    return capsys.readouterr()


def without_timings(text):
    return re.sub(r"\(\d+\.\d+s\)", "", text)


def test_train_prints_epochs_and_is_deterministic(capsys):
    first = run(capsys, TINY + ["--epochs", "2"]).out
    lines = [line for line in first.splitlines() if line.startswith("epoch")]
    assert len(lines) == 2
    for line in lines:
        assert re.search(r"loss \d+\.\d+ +train acc [01]\.\d+ +test acc [01]\.\d+", line)
        assert "hidden1 act" in line and "hidden2 act" in line and "list<=" in line
    assert "final test accuracy" in first
    assert without_timings(run(capsys, TINY + ["--epochs", "2"]).out) == without_timings(first)


def test_spiking_readout_and_capacity_report(capsys):
    out = run(capsys, TINY + ["--epochs", "1", "--readout", "spikes", "--max-spikes", "16",
                              "--grad-window", "0.2"]).out
    assert "output act" in out and "list " in out and "/16" in out


def test_checkpoint_and_metrics_log(tmp_path, capsys):
    save = tmp_path / "run" / "model.pt"
    out = run(capsys, TINY + ["--epochs", "2", "--save", str(save)]).out
    state = load_checkpoint(save)
    assert state["epoch"] == 2 and len(state["metrics"]) == 2
    assert state["config"]["hidden"] == [16, 16] and state["config"]["data"] == "randman"
    assert set(state["rng"]) == {"torch", "numpy", "python"}
    log = save.with_name("model.metrics.jsonl")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["event"] for r in records] == ["start", "epoch", "epoch"]
    assert records[0]["checkpoint"] == str(save) and records[0]["config"]["epochs"] == 2
    assert records[2]["test_acc"] == state["metrics"][1]["test_acc"]
    assert set(records[1]["layers"]) == {"hidden1", "hidden2"}
    assert f"checkpoint: {save}" in out
    assert sorted(p.name for p in save.parent.iterdir()) == ["model.metrics.jsonl", "model.pt"]


def _stop_after(monkeypatch, epoch):
    """The next run dies right after writing the checkpoint of ``epoch``."""
    real = training.save_checkpoint

    def save_then_die(path, payload):
        real(path, payload)
        if payload["epoch"] == epoch:
            raise KeyboardInterrupt

    monkeypatch.setattr(training, "save_checkpoint", save_then_die)


@pytest.mark.parametrize("extra", [[], ["--recurrent", "--neuron", "synaptic", "--backend",
                                        "reference", "--lr-schedule", "constant",
                                        "--augment-jitter", "1", "--augment-drop", "0.2"]])
def test_resume_is_bitwise_equal_to_an_uninterrupted_run(tmp_path, capsys, monkeypatch, extra):
    whole, part = tmp_path / "whole.pt", tmp_path / "part.pt"
    argv = TINY + extra + ["--epochs", "3"]
    run(capsys, argv + ["--save", str(whole)])
    _stop_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        cli.main(argv + ["--save", str(part)])
    monkeypatch.undo()
    capsys.readouterr()
    assert load_checkpoint(part)["epoch"] == 2
    out = run(capsys, ["train", "--resume", str(part), "--save", str(part), "--progress",
                       "off"]).out
    assert "resumed from" in out and "epoch   3/3" in out and "epoch   2/3" not in out
    a, b = load_checkpoint(whole), load_checkpoint(part)
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        for key in sa:
            assert torch.equal(sa[key], sb[key])
    strip = [{k: v for k, v in m.items() if k != "seconds"} for m in a["metrics"]]
    assert strip == [{k: v for k, v in m.items() if k != "seconds"} for m in b["metrics"]]
    log = [json.loads(x) for x in (tmp_path / "part.metrics.jsonl").read_text().splitlines()]
    assert [r.get("epoch") for r in log] == [None, 1, 2, 3]


def test_a_resume_to_more_epochs_takes_the_stretched_cosine_from_its_first_step(
        tmp_path, capsys, monkeypatch):
    """--epochs 2 (a finished cosine run: lr 0 after its last step), resumed to 4: every
    resumed step's learning rate is the 4-epoch cosine's, by hand (24 training samples
    in batches of 8: 3 steps per epoch, 12 in all; steps 6 to 11 are resumed)."""
    path = tmp_path / "model.pt"
    run(capsys, TINY + ["--epochs", "2", "--save", str(path)])
    used = adam_step_rates(monkeypatch)
    run(capsys, ["train", "--resume", str(path), "--epochs", "4", "--progress", "off"])
    by_hand = [3e-3 * 0.5 * (1 + math.cos(math.pi * s / 12)) for s in range(6, 12)]
    assert used == pytest.approx(by_hand, rel=1e-12, abs=1e-18)


class _Clock:
    """time.perf_counter for training: one second per reading."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


def test_a_resumed_runs_seconds_continue_the_runs_clock(tmp_path, capsys, monkeypatch):
    """Each epoch's seconds, on a clock of one second per reading: epoch e at e seconds
    in the uninterrupted run, and so in a run stopped after epoch 2 and resumed (not
    counting again from 0 at the resume)."""
    monkeypatch.setattr(training, "time", _Clock())
    run(capsys, TINY + ["--epochs", "3", "--save", str(tmp_path / "whole.pt")])
    part = tmp_path / "part.pt"
    monkeypatch.setattr(training, "time", _Clock())
    _stop_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        cli.main(TINY + ["--epochs", "3", "--save", str(part)])
    monkeypatch.setattr(training, "save_checkpoint", checkpoint_module.save_checkpoint)
    monkeypatch.setattr(training, "time", _Clock())
    run(capsys, ["train", "--resume", str(part), "--progress", "off"])
    for name in ("whole", "part"):
        log = (tmp_path / f"{name}.metrics.jsonl").read_text().splitlines()
        seconds = [json.loads(line)["seconds"] for line in log[1:]]
        assert seconds == [1.0, 2.0, 3.0], name


def test_a_save_that_dies_mid_write_leaves_the_last_checkpoint(tmp_path, capsys, monkeypatch):
    path = tmp_path / "model.pt"
    real_save = torch.save

    def dying_save(obj, f, *args, **kwargs):
        if obj["epoch"] == 2:
            f.write(b"\x80\x02half a checkpoint")
            raise OSError("killed mid-write")
        real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module.torch, "save", dying_save)
    err = run(capsys, TINY + ["--epochs", "3", "--save", str(path)], 2).err
    assert err.strip() == "snn-ipu train: error: killed mid-write"  # one line, no traceback
    monkeypatch.undo()
    state = load_checkpoint(path)
    assert state["epoch"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.metrics.jsonl", "model.pt"]
    # and it resumes
    out = run(capsys, ["train", "--resume", str(path), "--progress", "off"]).out
    assert "epoch   3/3" in out


def test_resume_refuses_to_change_the_run(tmp_path, capsys):
    path = tmp_path / "model.pt"
    run(capsys, TINY + ["--epochs", "1", "--save", str(path)])
    err = run(capsys, ["train", "--resume", str(path), "--lr", "0.1", "--hidden", "8"], 2).err
    assert "--hidden, --lr cannot change" in err
    # named as the command line spells it: --steps (it said --num-steps)
    err = run(capsys, ["train", "--resume", str(path), "--steps", "20", "--epochs", "2"], 2).err
    assert "--steps cannot change" in err and "--num-steps" not in err
    out = run(capsys, ["train", "--resume", str(path), "--epochs", "2", "--progress",
                       "off"]).out
    assert "epoch   2/2" in out


def test_resume_without_save_writes_where_the_run_was(tmp_path, capsys):
    """`train --resume m.pt --epochs 3`: the resumed epochs are saved to m.pt (and its
    log), not trained and thrown away."""
    path = tmp_path / "model.pt"
    run(capsys, TINY + ["--epochs", "1", "--save", str(path)])
    run(capsys, ["train", "--resume", str(path), "--epochs", "2", "--progress", "off"])
    assert load_checkpoint(path)["epoch"] == 2
    log = [json.loads(x) for x in (tmp_path / "model.metrics.jsonl").read_text().splitlines()]
    assert [r.get("epoch") for r in log] == [None, 1, 2]


def test_a_new_run_does_not_replace_another_runs_files(tmp_path, capsys):
    """A new run (no --resume) refuses a --save or --log that exists, before any work
    (the file unchanged), unless --overwrite; the log of m.pt is not taken over by a
    run saving m.ckpt either."""
    path = tmp_path / "model.pt"
    run(capsys, TINY + ["--epochs", "1", "--save", str(path)])
    before = path.read_bytes()
    err = run(capsys, TINY + ["--epochs", "2", "--save", str(path)], 2).err
    assert f"--save {path} exists" in err and "--resume" in err and "--overwrite" in err
    assert path.read_bytes() == before
    other = tmp_path / "model.ckpt"  # its default log is model.metrics.jsonl too
    err = run(capsys, TINY + ["--epochs", "2", "--save", str(other)], 2).err
    assert "--log" in err and "model.metrics.jsonl exists" in err and not other.exists()
    run(capsys, TINY + ["--epochs", "2", "--save", str(path), "--overwrite"])
    assert load_checkpoint(path)["epoch"] == 2


@pytest.mark.parametrize("extra, message", [
    (["--dt", "0.01"], "--dt (only for event data"),
    (["--data-dir", "/nonexistent"], "--data-dir (only for event data"),
    (["--tonic-pool", "2", "2"], "--tonic-pool (only for --data tonic:NAME)"),
    (["--alpha", "0.5"], "--alpha (only for --neuron synaptic)"),
    (["--readout", "spikes", "--time-reduction", "max"],
     "--time-reduction (only for --readout membrane)"),
])
def test_options_the_run_does_not_read_are_refused(capsys, extra, message):
    err = run(capsys, TINY + ["--epochs", "1"] + extra, 2).err
    assert message in err and len(err.strip().splitlines()) == 1


def test_randman_options_with_other_data_and_quick_with_resume_are_refused(tmp_path, capsys):
    err = run(capsys, ["train", "--data", "digits", "--randman-classes", "3"], 2).err
    assert "--randman-classes (only for --data randman)" in err
    path = tmp_path / "model.pt"
    run(capsys, TINY + ["--epochs", "1", "--save", str(path)])
    err = run(capsys, ["train", "--resume", str(path), "--epochs", "3", "--quick"], 2).err
    assert "--quick" in err and load_checkpoint(path)["epoch"] == 1


def test_shd_file_in_the_official_layout_trains(tmp_path, capsys):
    labels = [c for c in range(20) for _ in range(4)]
    write_heidelberg(tmp_path / "shd_train.h5", labels, seed=0)
    write_heidelberg(tmp_path / "shd_test.h5", labels[::2], seed=1)
    save = tmp_path / "shd.pt"
    out = run(capsys, ["train", "--data", "shd", "--data-dir", str(tmp_path), "--epochs", "4",
                       "--hidden", "64", "--steps", "20", "--batch-size", "16", "--lr", "1e-2",
                       "--progress", "off", "--save", str(save)]).out
    assert "SHD from" in out and "num_steps=20, duration=1.4" in out
    assert "80 train / 40 test samples" in out
    accuracy = float(re.search(r"final test accuracy (\d\.\d+)", out).group(1))
    assert accuracy > 0.3  # chance is 0.05
    evaluated = run(capsys, ["eval", str(save)]).out
    assert f"accuracy {accuracy:.4f}" in evaluated and "hidden1 act" in evaluated


def test_shd_without_its_folder_is_a_one_line_error(tmp_path, capsys):
    err = run(capsys, ["train", "--data", "shd", "--progress", "off"], 2).err
    assert "needs --data-dir" in err
    err = run(capsys, ["train", "--data", "shd", "--data-dir", str(tmp_path)], 2).err
    assert "no " in err and "shd_train.h5" in err and "Traceback" not in err


def test_digits_quick_run_learns(capsys):
    out = run(capsys, ["train", "--quick", "--hidden", "32", "--progress", "off"]).out
    assert "digits" in out and "network: 128-32-10" in out
    assert float(re.search(r"final test accuracy (\d\.\d+)", out).group(1)) > 0.3


def test_eval_matches_the_recorded_test_accuracy(tmp_path, capsys):
    path = tmp_path / "model.pt"
    run(capsys, TINY + ["--epochs", "2", "--save", str(path)])
    recorded = load_checkpoint(path)["metrics"][-1]
    out = run(capsys, ["eval", str(path), "--backend", "reference"]).out
    assert f"accuracy {recorded['test_acc']:.4f}" in out and "(epoch 2)" in out
    out = run(capsys, ["eval", str(path), "--split", "train"]).out
    assert "randman train" in out


def test_eval_and_plot_refuse_a_data_dir_that_the_run_does_not_read(tmp_path, capsys):
    """--data-dir is read by event data only (shd, ssc, tonic:NAME), as train says; eval
    and plot of a randman run ignored it without a word. Refused as train refuses it,
    before any work: one line, exit status 2, no PNG written."""
    path = tmp_path / "model.pt"
    run(capsys, TINY + ["--epochs", "1", "--save", str(path)])
    elsewhere = str(tmp_path / "data")
    for argv in (["eval", str(path)], ["plot", str(path), "--out", str(tmp_path / "png")],
                 ["plot", str(tmp_path / "model.metrics.jsonl"),
                  "--out", str(tmp_path / "png")]):
        captured = run(capsys, argv + ["--data-dir", elsewhere], 2)
        err = captured.err
        assert f"snn-ipu {argv[0]}: error: " in err and len(err.strip().splitlines()) == 1
        assert "--data-dir (only for event data (shd, ssc, tonic:NAME))" in err
        assert "--data randman" in err and captured.out == ""
    assert not (tmp_path / "png").exists()
    # event data reads it: a run whose SHD files moved is evaluated and plotted from there
    labels = [c for c in range(20) for _ in range(2)]
    first, moved = tmp_path / "first", tmp_path / "moved"
    first.mkdir()
    write_heidelberg(first / "shd_train.h5", labels, seed=0)
    write_heidelberg(first / "shd_test.h5", labels[::2], seed=1)
    shd = tmp_path / "shd.pt"
    run(capsys, ["train", "--data", "shd", "--data-dir", str(first), "--epochs", "1",
                 "--hidden", "16", "--steps", "10", "--batch-size", "8", "--progress", "off",
                 "--save", str(shd)])
    first.rename(moved)
    assert "accuracy" in run(capsys, ["eval", str(shd), "--data-dir", str(moved)]).out
    out = run(capsys, ["plot", str(shd), "--data-dir", str(moved),
                       "--out", str(tmp_path / "png")]).out
    assert "shd_raster.png" in out


def test_plot_writes_curves_activity_and_rasters(tmp_path, capsys):
    path = tmp_path / "model.pt"
    run(capsys, TINY + ["--epochs", "2", "--save", str(path)])
    out = run(capsys, ["plot", str(path), "--out", str(tmp_path / "png")]).out
    names = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert names == ["model_activity.png", "model_curves.png", "model_raster.png"]
    assert all((tmp_path / "png" / n).stat().st_size > 1000 for n in names)
    out = run(capsys, ["plot", str(tmp_path / "model.metrics.jsonl")]).out
    assert out.count(".png") == 3


def test_plots_of_runs_whose_names_hold_dots_do_not_replace_each_other(tmp_path, capsys):
    """NAME is the checkpoint's name without its suffix (lr0.01.pt -> lr0.01), also from
    its log (lr0.01.metrics.jsonl): two runs plotted into one folder keep six PNGs."""
    for name in ("lr0.003", "lr0.01"):
        lr = name[len("lr"):]
        run(capsys, TINY + ["--epochs", "1", "--lr", lr, "--save", str(tmp_path / f"{name}.pt")])
    out = tmp_path / "png"
    run(capsys, ["plot", str(tmp_path / "lr0.003.pt"), "--out", str(out)])
    run(capsys, ["plot", str(tmp_path / "lr0.01.metrics.jsonl"), "--out", str(out)])
    assert sorted(p.name for p in out.iterdir()) == [
        f"{name}_{kind}.png" for name in ("lr0.003", "lr0.01")
        for kind in ("activity", "curves", "raster")]


def _pixels_of(png, rgb):
    """How many pixels of ``png`` have the colour ``rgb`` (0-255), within antialiasing."""
    import matplotlib.image

    image = matplotlib.image.imread(png)[..., :3]
    return int((abs(image - torch.tensor(rgb).numpy() / 255).max(-1) < 0.1).sum())


def test_plot_of_a_one_epoch_run_draws_its_epoch(tmp_path, capsys):
    """A run of one epoch has one point per curve: drawn as a line alone it left empty
    axes under the legend. Counted in the PNGs against the same log with NaN numbers
    (nothing to draw, the same legend): the epoch adds pixels of the curves' colours."""
    blue, orange = (31, 119, 180), (255, 127, 14)  # matplotlib's first two colours
    counts = {}
    for name, v in (("one", 1.0), ("blank", math.nan)):
        log = tmp_path / f"{name}.metrics.jsonl"
        epoch = {"event": "epoch", "epoch": 1, "loss": 2.0 * v, "train_acc": 0.5 * v,
                 "test_loss": 1.0 * v, "test_acc": 0.25 * v,
                 "layers": {"hidden1": {"activity": 0.1 * v}}}
        log.write_text(json.dumps({"event": "start", "config": {}, "checkpoint": None})
                       + "\n" + json.dumps(epoch) + "\n")
        run(capsys, ["plot", str(log)])
        counts[name] = [_pixels_of(tmp_path / f"{name}_{kind}.png", colour)
                        for kind, colour in (("curves", blue), ("curves", orange),
                                             ("activity", blue))]
    # two points (loss, accuracy) per colour in the curves, one in the activity
    for drawn, blank, points in zip(counts["one"], counts["blank"], (2, 2, 1)):
        assert drawn >= blank + 10 * points, (counts, points)


def test_plot_reads_a_log_written_under_another_name(tmp_path, capsys):
    """``train --log run.log``: the log is plotted as a log (curves, activity and the
    raster of its checkpoint), not refused as "not a readable checkpoint"."""
    run(capsys, TINY + ["--epochs", "1", "--save", str(tmp_path / "m.pt"), "--log",
                        str(tmp_path / "run.log")])
    out = run(capsys, ["plot", str(tmp_path / "run.log"), "--out", str(tmp_path / "png")]).out
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == [
        "run_activity.png", "run_curves.png", "run_raster.png"]
    assert out.count(".png") == 3


def test_plot_of_a_log_finds_its_own_checkpoint_only(tmp_path, capsys, monkeypatch):
    """A log names its checkpoint by an absolute path, so plotting it from another folder
    draws that run's raster; where another run's checkpoint now sits at that path, no
    raster of that other network is drawn, and the plot says why."""
    monkeypatch.chdir(tmp_path)
    run(capsys, TINY + ["--epochs", "1", "--save", "run/m.pt"])
    log = tmp_path / "run" / "m.metrics.jsonl"
    assert json.loads(log.read_text().splitlines()[0])["checkpoint"] == str(
        tmp_path / "run" / "m.pt")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = run(capsys, ["plot", str(log), "--out", str(tmp_path / "png1")]).out
    assert out.count(".png") == 3
    monkeypatch.chdir(tmp_path)
    run(capsys, TINY + ["--epochs", "1", "--hidden", "8", "--save", "run/m.pt", "--log",
                        "other.jsonl", "--overwrite"])
    with pytest.warns(UserWarning, match="holds another run than the log"):
        out = run(capsys, ["plot", str(log), "--out", str(tmp_path / "png2")]).out
    assert out.count(".png") == 2


def test_steps_that_disagree_with_dt_and_duration_are_refused(tmp_path, capsys):
    labels = [c for c in range(20) for _ in range(2)]
    write_heidelberg(tmp_path / "shd_train.h5", labels, seed=0)
    write_heidelberg(tmp_path / "shd_test.h5", labels[::2], seed=1)
    err = run(capsys, ["train", "--data", "shd", "--data-dir", str(tmp_path), "--dt", "0.01",
                       "--duration", "1.4", "--steps", "100", "--epochs", "1"], 2).err
    assert "--steps 100 disagrees with --duration 1.4 / --dt 0.01 (140 bins)" in err


def test_plan_prints_the_report_of_the_configured_network(capsys):
    from snn_ipu import plan
    from snn_ipu.training import TrainConfig, build_model

    out = run(capsys, ["plan", "--data", "shd", "--hidden", "256", "256",
                       "--batch-size", "32"]).out
    assert "network 700-256-256-20, batch 32, T=100, target ipu2" in out
    config = TrainConfig(data="shd", hidden=[256, 256], batch_size=32)
    expected = str(plan(build_model(config, 700, 20), 32, 100, target="ipu2", activity=0.05))
    assert expected in out
    out = run(capsys, ["plan", "--data", "shd", "--hidden", "256", "256", "--batch-size", "32",
                       "--pipelined", "--input-max-spikes", "20"]).out
    expected = plan(build_model(config, 700, 20), 32, 100, activity=0.05, input_max_spikes=20,
                    pipelined=True)
    assert expected.disjoint and str(expected) in out and "pipelined:" in out


def test_plan_exits_1_when_the_network_does_not_fit_and_prints_the_report(capsys):
    """Scripts read the exit status: 0 when it fits, 1 when it does not (the report is
    printed either way), 2 for a mistake. A 20000-neuron hidden layer at batch 64 does
    not fit a Mk2 IPU: each of its tiles holds every sample's combined list of 4000
    entries with membranes and gradients, 64 x (4000 x 12 + 8) bytes = 3.1e6 > 624 KiB."""
    captured = run(capsys, ["plan", "--data", "randman", "--hidden", "20000",
                            "--batch-size", "64"], 1)
    assert "network 100-20000-10, batch 64" in captured.out
    assert "DOES NOT FIT" in captured.out and "layer hidden1:" in captured.out
    assert captured.err == ""
    out = run(capsys, ["plan", "--data", "randman", "--hidden", "16", "--batch-size", "8"]).out
    assert " - fits" in out


def test_plan_of_a_checkpoint_refuses_options_that_change_its_network(tmp_path, capsys):
    """--checkpoint plans the checkpoint's network: --hidden 512 planned a network of 512
    neurons under the checkpoint's name, and --lr was dropped without a word. Options that
    change the network, or that a plan does not read, are refused by name (exit 2, before
    the report); the run's batch size, steps and list capacity may change."""
    path = tmp_path / "model.pt"
    run(capsys, TINY + ["--epochs", "1", "--save", str(path)])
    plan = ["plan", "--checkpoint", str(path)]
    out = run(capsys, plan).out
    assert "network 20-16-16-3, batch 8, T=12, target ipu2" in out
    for extra, named in ((["--hidden", "512"], "--hidden"),
                         (["--data", "digits"], "--data"),
                         (["--recurrent"], "--recurrent"),
                         (["--randman-inputs", "40"], "--randman-inputs"),
                         (["--lr", "0.1", "--epochs", "3"], "--epochs, --lr")):
        captured = run(capsys, plan + extra, 2)
        assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
        assert f"snn-ipu plan: error: --checkpoint plans the checkpoint's network; {named} " \
               "cannot change it (only --batch-size, --steps, --dt, --duration, " \
               "--max-spikes can)" in captured.err
    # the run's options: a batch of 32 over 40 steps with lists of 5 entries
    out = run(capsys, plan + ["--batch-size", "32", "--steps", "40", "--max-spikes", "5"]).out
    assert "network 20-16-16-3, batch 32, T=40, target ipu2" in out
    assert "plan on ipu2: batch 32, 40 steps" in out
    assert re.search(r"hidden2 +leaky +16->16 +5/5 ", out)
    # what the checkpoint's data does not read is refused as train refuses it
    err = run(capsys, plan + ["--dt", "0.01"], 2).err
    assert "--dt (only for event data" in err


@pytest.mark.parametrize("activity", ["2", "1.01", "0"])
def test_plan_activity_outside_a_fraction_is_refused_before_any_report(capsys, activity):
    """--activity must lie in (0, 1]: refused by argparse (exit 2) before the report's
    first line; above 1 it printed "network ..." and then the planner's error."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["plan", "--data", "randman", "--hidden", "8", "--activity", activity])
    captured = capsys.readouterr()
    assert stop.value.code == 2 and captured.out == ""
    assert "argument --activity" in captured.err


@pytest.mark.parametrize("flag", ["--reg-lower", "--reg-upper"])
def test_a_rate_penalty_above_one_spike_per_step_is_refused_at_parsing(capsys, flag):
    """RATE is in spikes per step: 10 (a rate in Hz) was parsed and failed in the first
    training step; at 1 it is kept, with its strength."""
    with pytest.raises(SystemExit) as stop:
        cli.main(TINY + ["--epochs", "1", flag, "10", "0.5"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"argument {flag}: RATE is in spikes per step" in err
    assert "rate * dt" in err
    args = cli.build_parser().parse_args(TINY + [flag, "1", "0.5"])
    assert getattr(args, flag[2:].replace("-", "_")) == [1.0, 0.5]


def test_help_names_the_program_and_every_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: snn-ipu train")
    parser = cli.build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    for action in train._actions:
        if action.dest != "help":
            assert "default" in (action.help or ""), action.dest
    assert "(default: digits)" in text and "(default: 128 128)" in text


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
    ("--epochs", "0"), ("--batch-size", "0"), ("--hidden", "-3"), ("--randman-classes", "1"),
    ("--randman-samples-per-class", "2"), ("--lr", "-1"), ("--lr", "nan"),
    ("--randman-alpha", "inf"), ("--grad-window", "-0.1"), ("--steps", "0"), ("--beta", "1.5"),
    ("--data", "mnist"), ("--data", "tonic:"),
])
def test_bad_train_flags_are_named_by_argparse(capsys, flag, value):
    argv = list(TINY)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_spiking_output_layer_keeps_exact_gradients():
    config = training.TrainConfig(readout="spikes", grad_window=0.1, hidden=[16, 16],
                                  backend="reference")
    model = training.build_model(config, 20, 3)
    assert [layer.grad_window for layer in model] == [0.1, 0.1, None]


@pytest.mark.parametrize("argv, message", [
    (["--device", "tpu"], "--device must be cpu, cuda or cuda:N, got 'tpu'"),
    (["--device", "cuda:x"], "--device must be cpu, cuda or cuda:N, got 'cuda:x'"),
    (["--device", "cuda", "--backend", "emulator"], "--backend emulator runs on the CPU"),
    (["--backend", "triton"], "--backend triton runs on NVIDIA GPUs: add --device cuda"),
    (["--backend", "ipu", "--device", "cpu"], "--backend ipu runs on the IPU"),
    pytest.param(["--device", "cuda"], "torch.cuda.is_available() is False",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="has a GPU")),
])
def test_a_device_the_backend_cannot_use_is_refused_before_any_work(tmp_path, capsys, argv,
                                                                    message, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    save = tmp_path / "model.pt"
    err = run(capsys, TINY + ["--save", str(save)] + argv, code=2).err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not save.exists()


def test_triton_backend_trains_from_the_command_line_as_the_reference_does(
        tmp_path, capsys, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the GPU kernels, run on the CPU
    argv = list(TINY)
    argv[argv.index("--randman-samples-per-class") + 1] = "4"  # one batch: the
    argv[argv.index("--batch-size") + 1] = "16"  # interpreter runs every kernel in numpy
    argv[argv.index("--hidden") + 1:argv.index("--hidden") + 3] = ["12"]
    from snn_ipu.backends import triton as triton_backend

    calls = []
    real = triton_backend.spiking_layer
    monkeypatch.setattr(triton_backend, "spiking_layer",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    states = {}
    for backend in ("reference", "triton"):
        save = tmp_path / f"{backend}.pt"
        run(capsys, argv + ["--epochs", "1", "--backend", backend, "--device", "cpu",
                            "--save", str(save)])
        states[backend] = load_checkpoint(save)
        assert bool(calls) == (backend == "triton")  # the kernels ran, and only there
    assert states["triton"]["metrics"][0]["loss"] == pytest.approx(
        states["reference"]["metrics"][0]["loss"], rel=1e-4)
    for name, ref in states["reference"]["model"].items():
        torch.testing.assert_close(states["triton"]["model"][name], ref, rtol=1e-4, atol=1e-5)


def test_plot_of_a_moved_run_folder_draws_the_raster_of_its_checkpoint(tmp_path, capsys):
    """A run folder moved after training: its log names the checkpoint by the old absolute
    path, and the checkpoint beside the log is the run's. The raster is drawn from it (it
    was dropped with "not there"), the same PNG as before the move."""
    first, moved = tmp_path / "first", tmp_path / "moved"
    run(capsys, TINY + ["--epochs", "1", "--save", str(first / "m.pt")])
    run(capsys, ["plot", str(first / "m.metrics.jsonl"), "--out", str(tmp_path / "before")])
    first.rename(moved)
    out = run(capsys, ["plot", str(moved / "m.metrics.jsonl"), "--out",
                       str(tmp_path / "after")]).out
    assert out.count(".png") == 3
    assert (tmp_path / "after" / "m_raster.png").read_bytes() == \
        (tmp_path / "before" / "m_raster.png").read_bytes()
