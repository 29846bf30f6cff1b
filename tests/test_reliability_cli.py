"""The command line's and the data's surfaces, as a hostile user tries them: checkpoints
are never lost or silently damaged, paths are checked before any work, every mistake
ends in one line (exit status 2, no traceback), flags are never coerced, and the data
readers neither hang nor read padding as events (issue 30)."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import urllib.error
import urllib.request
import zipfile

import h5py
import numpy as np
import pytest
import torch
from conftest import adam_step_rates
from shd_files import write_heidelberg

from snn_ipu import SparseSpikes, _memory, cli, losses, regularizers
from snn_ipu.checkpoint import load_checkpoint, save_checkpoint
from snn_ipu.data import SHD
from snn_ipu.data.tonic_adapter import TonicEvents

TINY = ["train", "--data", "randman", "--randman-inputs", "12", "--randman-classes", "2",
        "--randman-samples-per-class", "5", "--steps", "6", "--batch-size", "4",
        "--hidden", "8", "--progress", "off"]


def run(capsys, argv, code=0):
    assert cli.main(argv) == code
    return capsys.readouterr()


def one_line_error(capsys, argv, *fragments):
    """The command fails with exit status 2 and a one-line message holding
    ``fragments`` (a traceback would have escaped cli.main); returns everything printed."""
    captured = run(capsys, argv, 2)
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("snn-ipu "), err
    for fragment in fragments:
        assert fragment in err, err
    return captured.out + err


def python(code, timeout=120):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def trained(tmp_path, capsys):
    """A checkpoint of one finished epoch, and its log."""
    path = tmp_path / "a.pt"
    run(capsys, TINY + ["--epochs", "1", "--save", str(path)])
    return path


# -- checkpoints: lost or corrupted data ----------------------------------------------------

def test_log_may_not_name_the_checkpoint_it_resumes(trained, tmp_path, capsys):
    before = trained.read_bytes()
    one_line_error(capsys, TINY[:1] + ["--resume", str(trained), "--save",
                                       str(tmp_path / "b.pt"), "--log", str(trained),
                                       "--epochs", "2"],
                   "--resume", "--log", "same file")
    assert trained.read_bytes() == before
    # a link to it is the same file too, and so is the checkpoint being saved
    link = tmp_path / "link.jsonl"
    os.symlink(trained, link)
    one_line_error(capsys, TINY[:1] + ["--resume", str(trained), "--log", str(link),
                                       "--epochs", "2"], "same file")
    one_line_error(capsys, TINY + ["--save", str(tmp_path / "c.pt"), "--log",
                                   str(tmp_path / "c.pt")], "--save", "--log", "same file")
    assert load_checkpoint(trained)["epoch"] == 1
    # resuming in place stays allowed
    run(capsys, TINY[:1] + ["--resume", str(trained), "--save", str(trained), "--epochs", "2"])
    assert load_checkpoint(trained)["epoch"] == 2


def test_a_resumed_run_replaces_its_own_log_only(trained, tmp_path, capsys):
    """--resume with --log naming another run's metrics log replaced it without a word
    (its history became the resumed run's under the other run's name); the resumed
    run's own log, beside its checkpoint or named by its start record, is rewritten."""
    other = tmp_path / "other.pt"
    run(capsys, TINY + ["--epochs", "1", "--seed", "1", "--save", str(other)])
    other_log = tmp_path / "other.metrics.jsonl"
    before = other_log.read_bytes()
    one_line_error(capsys, TINY[:1] + ["--resume", str(trained), "--epochs", "2", "--log",
                                       str(other_log)], "--log", "exists", "--overwrite")
    assert other_log.read_bytes() == before
    # its own logs: the default beside it, and a --log whose start record names it
    run(capsys, TINY[:1] + ["--resume", str(trained), "--save", str(trained), "--epochs", "2"])
    custom = tmp_path / "custom.jsonl"
    run(capsys, TINY[:1] + ["--resume", str(trained), "--save", str(trained), "--epochs", "3",
                            "--log", str(custom)])
    run(capsys, TINY[:1] + ["--resume", str(trained), "--save", str(trained), "--epochs", "4",
                            "--log", str(custom)])
    epochs = [json.loads(line).get("epoch") for line in custom.read_text().splitlines()]
    assert epochs == [None, 1, 2, 3, 4]
    run(capsys, TINY[:1] + ["--resume", str(trained), "--epochs", "5", "--log",
                            str(other_log), "--overwrite"])


def test_the_log_gives_each_epoch_the_rate_its_first_step_took(tmp_path, capsys, monkeypatch):
    """The logged lr was read after the epoch's last scheduler step: the next epoch's
    rate (a 2-epoch cosine run logged 0 for its last epoch, which trained at > 0)."""
    used = adam_step_rates(monkeypatch)
    path = tmp_path / "model.pt"
    run(capsys, TINY + ["--epochs", "2", "--save", str(path)])
    steps = len(used) // 2  # 10 samples, a training split in batches of 4
    log = [json.loads(line) for line in (tmp_path / "model.metrics.jsonl").read_text()
           .splitlines()[1:]]
    assert [e["lr"] for e in log] == [used[0], used[steps]]
    assert log[0]["lr"] == 3e-3 and 0 < log[1]["lr"] < 3e-3


def test_a_second_run_on_the_same_checkpoint_is_refused(tmp_path, capsys):
    """The first run holds the checkpoint's lock (here a process that holds it as a run
    does); the second is refused instead of interleaving its epochs with the first's."""
    from snn_ipu import _paths

    save = tmp_path / "run" / "model.pt"
    save.parent.mkdir()
    holder = subprocess.Popen(  # loads snn_ipu/_paths.py alone (stdlib only): quick
        [sys.executable, "-c", textwrap.dedent(f"""
            import importlib.util, sys
            spec = importlib.util.spec_from_file_location("paths", {str(_paths.__file__)!r})
            paths = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(paths)
            with paths.FileLocks([{str(save)!r}]):
                print("held", flush=True)
                sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        out = one_line_error(capsys, TINY + ["--epochs", "1", "--save", str(save)],
                             "being written by another run", f"process {holder.pid}")
        assert "epoch " not in out
        assert not save.exists()
    finally:
        holder.communicate("", timeout=60)
    run(capsys, TINY + ["--epochs", "1", "--save", str(save)])  # free again
    assert sorted(p.name for p in save.parent.iterdir()) == ["model.metrics.jsonl", "model.pt"]


def test_leftovers_of_a_killed_save_are_removed_at_the_next_save(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    leftover = folder / ".model.pt.k3x_9az1.tmp"  # mkstemp's name for model.pt
    leftover.write_bytes(b"\0" * 1000)
    others = [folder / ".other.pt.k3x_9az1.tmp", folder / "model.pt.tmp",
              folder / ".model.pt.notours.tmp"]
    for path in others:
        path.write_text("not ours")
    run(capsys, TINY + ["--epochs", "1", "--save", str(folder / "model.pt")])
    assert not leftover.exists()
    assert all(path.exists() for path in others)


def test_a_folder_as_save_path_is_refused_before_training(tmp_path, capsys):
    for folder in (tmp_path, "."):
        err = one_line_error(capsys, TINY + ["--epochs", "1", "--save", str(folder)],
                             "is a folder")
        assert "epoch " not in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one_line_error(capsys, TINY + ["--epochs", "1", "--save", str(blocker / "m.pt")],
                   "is a file, not a folder")


def _flip_member_byte(path, member_suffix):
    """Changes one byte inside the data of the zip member ending in ``member_suffix``."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(member_suffix)
                    and i.file_size > 8)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = np.frombuffer(f.read(4), dtype="<u2")
        offset = info.header_offset + 30 + int(name_len) + int(extra_len) + info.file_size // 2
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


@pytest.mark.parametrize("member", ["data/0", "data.pkl"])
def test_a_damaged_checkpoint_is_refused(trained, capsys, member):
    _flip_member_byte(trained, member)
    with pytest.raises(ValueError, match="damaged"):
        load_checkpoint(trained)
    one_line_error(capsys, ["eval", str(trained)], "damaged", "CRC")


@pytest.mark.parametrize("size", [0, 0.5, 0.98])
def test_empty_or_truncated_checkpoints_are_one_line_errors(trained, tmp_path, capsys, size):
    data = trained.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[:int(len(data) * size)])
    for argv in (["eval", str(cut)], TINY[:1] + ["--resume", str(cut), "--epochs", "3"],
                 ["plot", str(cut)], ["plan", "--checkpoint", str(cut)]):
        one_line_error(capsys, argv, str(cut), "not a readable checkpoint")


def test_checkpoint_of_another_network_is_a_one_line_error(trained, capsys):
    one_line_error(capsys, ["eval", str(trained), "--data", "digits"],
                   "do not fit this network")


def test_checkpoint_without_optimizer_state_is_a_one_line_error(trained, capsys):
    state = load_checkpoint(trained)
    del state["optimizer"]
    save_checkpoint(trained, state)
    one_line_error(capsys, TINY[:1] + ["--resume", str(trained), "--epochs", "2"],
                   "has no optimizer", "resume")


def test_resuming_a_finished_run_says_nothing_was_trained(trained, tmp_path, capsys):
    target = tmp_path / "b.pt"
    err = one_line_error(capsys, TINY[:1] + ["--resume", str(trained), "--save", str(target),
                                             "--epochs", "1"],
                         "already trained 1 epochs", "nothing to train")
    assert "checkpoint:" not in err and not target.exists()


def test_saves_keep_the_umask_mode_or_the_files_own(tmp_path, capsys):
    path = tmp_path / "m.pt"
    old = os.umask(0o027)
    try:
        save_checkpoint(path, {"epoch": 1})
        assert path.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
    os.chmod(path, 0o604)
    save_checkpoint(path, {"epoch": 2})
    assert path.stat().st_mode & 0o777 == 0o604
    assert load_checkpoint(path)["epoch"] == 2


# -- one-line errors ------------------------------------------------------------------------

def test_list_overflow_is_a_one_line_error(capsys):
    one_line_error(capsys, TINY + ["--epochs", "1", "--max-spikes", "1", "--hidden", "40"],
                   "max_spikes=1 exceeded", "--max-spikes", "--overflow drop")


@pytest.mark.parametrize("line", [
    '{"event": "epoch", "epoch": 1, "layers": {}}',
    '[1, 2]',
    '{"event": "epoch", "epoch": "one", "loss": 1, "train_acc": 0, "test_loss": 1, '
    '"test_acc": 0, "layers": {}}',
])
def test_plot_of_a_malformed_log_is_a_one_line_error(tmp_path, capsys, line):
    log = tmp_path / "run.metrics.jsonl"
    log.write_text(json.dumps({"event": "start", "config": {}, "checkpoint": None}) + "\n"
                   + line + "\n")
    one_line_error(capsys, ["plot", str(log)], f"{log}:2")


def test_plot_and_bench_out_naming_a_file_are_one_line_errors(trained, tmp_path, capsys):
    blocker = tmp_path / "taken"
    blocker.write_text("x")
    one_line_error(capsys, ["plot", str(trained), "--out", str(blocker)], "is a file")
    assert cli.main(["bench", "--quick", "--out", str(blocker)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a file" in err


def test_bench_out_that_cannot_be_created_is_a_one_line_error(tmp_path, capsys):
    """A folder mkdir refuses (here a name over the file system's 255 bytes) ends in one
    line naming it and exit status 2, as a file in its place does, not a traceback."""
    out = tmp_path / ("x" * 300)
    assert cli.main(["bench", "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("snn-ipu bench: error:"), err
    assert str(out) in err and "cannot create" in err


def test_tonic_name_must_be_a_dataset(capsys):
    pytest.importorskip("tonic")
    for name in ("__class__", "_private", "download_utils", "DOES_NOT_EXIST"):
        one_line_error(capsys, TINY[:1] + ["--data", f"tonic:{name}", "--data-dir", ".",
                                           "--duration", "1000"], "has no dataset")


@pytest.mark.parametrize("seed", [str(2**63), "-1"])
def test_seed_out_of_range_is_refused_up_front(capsys, seed):
    with pytest.raises(SystemExit) as info:
        cli.main(TINY + ["--epochs", "1", "--seed", seed])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert "--seed: must be an integer in [0, " in captured.err and "epoch" not in captured.out


@pytest.mark.parametrize("seed", ["9300000000000", str(2**63 - 1)])
def test_large_seeds_train_with_augmentation(capsys, seed):
    """The data order and the augmentation derive their generators' seeds from the
    run's (times 1000003, then 1000033): they wrap modulo 2**64 instead of overflowing
    torch's seed mid-run."""
    run(capsys, TINY + ["--epochs", "1", "--seed", seed, "--augment-drop", "0.1"])


def test_tonic_never_downloads_implicitly(tmp_path, capsys, monkeypatch):
    tonic = pytest.importorskip("tonic")

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("the test has no network")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    root = tmp_path / "nowhere"
    one_line_error(capsys, TINY[:1] + ["--data", "tonic:NMNIST", "--data-dir", str(root),
                                       "--duration", "1000", "--epochs", "1"],
                   "NMNIST", str(root / "NMNIST"), "nothing is downloaded", "--download")
    assert not root.exists()  # no folders made
    assert "download" not in vars(tonic.datasets.NMNIST)  # the class is left as it was


def test_plan_does_not_build_the_weights():
    """--hidden 20000 20000 holds 1.6 GB of float32 weights; the plan needs sizes only."""
    result = python("""
        import resource
        from snn_ipu import cli
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # 1: the network does not fit on an IPU (its report printed all the same)
        assert cli.main(["plan", "--data", "randman", "--hidden", "20000", "20000"]) == 1
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print("grown_kib", grown)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "20000->20000" in result.stdout
    grown = int(result.stdout.split("grown_kib")[-1])
    assert grown < 400 * 1024, f"plan grew the process by {grown / 1024:.0f} MiB"


# -- data ---------------------------------------------------------------------------------------

def test_binning_huge_times_with_dt_only_is_refused():
    """Garbage float times with only dt given: a grid of 1e21 steps or more (numpy's
    size error before), and 1e25 or 3.4e38 (spun forever before; in a subprocess)."""
    events = (np.array([0.1, 1e21]), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"needs 1e\+21 time steps, more than the 2\*\*31"):
        SparseSpikes.from_events(events, 4, dt=1.0)
    with pytest.raises(ValueError, match="time steps, more than"):
        SparseSpikes.from_events(events, 4, dt=1e-12, duration=1.0)
    outcomes = []

    def bin_garbage():
        for latest in (1e25, float(np.float32(3.4e38))):
            try:
                SparseSpikes.from_events((np.array([0.0, latest]), np.array([0, 1])), 4, dt=1.0)
            except ValueError as e:
                outcomes.append("more than the 2**31" in str(e))

    worker = threading.Thread(target=bin_garbage, daemon=True)  # a hang fails, not blocks
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "from_events spins on a huge event time"
    assert outcomes == [True, True]


def test_binning_has_a_memory_pre_flight(monkeypatch):
    monkeypatch.setattr(_memory, "available_bytes", lambda: 64 << 20)
    events = (np.array([0.0, 1.0 - 1e-7]), np.array([0, 1]))
    with pytest.raises(MemoryError, match=r"SparseSpikes.from_events: this call needs at "
                                          r"least 0\.0\d GiB of memory, more than the 0\.06 "
                                          r"GiB free; 10000\d\d steps of 1 samples"):
        SparseSpikes.from_events(events, 4, dt=1e-6)
    assert SparseSpikes.from_events(events, 4, dt=1e-2).num_steps == 100


def _shd_folder(tmp_path, times, units, labels):
    with h5py.File(tmp_path / "shd_train.h5", "w") as f:
        f.create_dataset("spikes/times", data=times)
        f.create_dataset("spikes/units", data=units)
        f.create_dataset("labels", data=labels)
    return tmp_path


def test_shd_with_padded_2d_events_is_refused(tmp_path):
    times = np.array([[0.1, 0.2, 0.0], [0.3, 0.0, 0.0]], dtype=np.float16)
    units = np.array([[5, 6, 0], [7, 0, 0]], dtype=np.uint16)
    root = _shd_folder(tmp_path, times, units, np.array([0, 1], dtype=np.uint16))
    with pytest.raises(ValueError, match=r"shd_train\.h5: 'spikes/times' is a 2-d float16 "
                                         r"array of shape \(2, 3\), not the official"):
        SHD(root, "train")


def test_shd_labels_of_shape_n_by_1_are_refused(tmp_path):
    write_heidelberg(tmp_path / "shd_train.h5", [0, 1, 2])
    with h5py.File(tmp_path / "shd_train.h5", "a") as f:
        del f["labels"]
        f.create_dataset("labels", data=np.array([[0], [1], [2]], dtype=np.uint16))
    with pytest.raises(ValueError, match=r"shd_train\.h5: 'labels' has shape \(3, 1\)"):
        SHD(tmp_path, "train")


def test_plan_counts_that_would_wrap_raise():
    from snn_ipu import plan

    # before, 2**27 x 2**27 gave fewer cycles than 2**26 x 2**26: uint64 wrapped around
    with pytest.raises(OverflowError, match=r"batch 134217728 x timesteps 134217728 .* too "
                                            r"large to count"):
        plan([700, 256, 20], 2**27, 2**27)
    big = plan([700, 256, 20], 2**14, 2**12)  # large, and counted exactly
    small = plan([700, 256, 20], 2**13, 2**12)
    assert big.layers[0].details["bytes_total"] > small.layers[0].details["bytes_total"]


# -- flags are never coerced ----------------------------------------------------------------

def _flag_calls():
    x = torch.zeros(3, 2, 4)
    x[0, 0, 1] = 1
    labels = torch.tensor([1, 0])
    from snn_ipu import encoding
    from snn_ipu.data import randman
    from snn_ipu.plot import raster

    class Sized:
        sensor_size = (4, 4, 2)

    return {
        "from_dense time_first": lambda: SparseSpikes.from_dense(x, time_first="no"),
        "SparseSpikes validate": lambda: SparseSpikes(
            torch.zeros(1, 1, 1, dtype=torch.int32), torch.zeros(1, 1, 2, dtype=torch.int32),
            4, validate="no"),
        "lower_rate_penalty per_neuron": lambda: regularizers.lower_rate_penalty(
            x, 0.1, per_neuron="no"),
        "upper_rate_penalty per_neuron": lambda: regularizers.upper_rate_penalty(
            x, 0.1, per_neuron="yes"),
        "spike_rates time_first": lambda: regularizers.spike_rates(x, time_first="no"),
        "accuracy time_first": lambda: losses.accuracy(x, labels, time_first="False"),
        "ce_count_loss time_first": lambda: losses.ce_count_loss(x, labels, time_first=0),
        "mse_membrane_loss time_first": lambda: losses.mse_membrane_loss(
            x, labels, time_first="False"),
        "TonicEvents merge_polarity": lambda: TonicEvents(Sized(), merge_polarity="no"),
        "latency linear": lambda: encoding.latency(torch.rand(4), 5, linear="no"),
        "latency normalize": lambda: encoding.latency(torch.rand(4), 5, normalize="no"),
        "delta padding": lambda: encoding.delta(torch.rand(4, 2), padding="no"),
        "delta off_spike": lambda: encoding.delta(torch.rand(4, 2), off_spike="no"),
        "make_randman shuffle": lambda: randman.make_randman(2, 4, 5, 2, shuffle="no"),
        "batches drop_last": lambda: list(randman.batches(torch.zeros(3, 2, 4),
                                                          torch.zeros(3), 2, drop_last="no")),
        "raster time_first": lambda: raster(x, time_first="no"),
    }


@pytest.mark.parametrize("name", sorted(_flag_calls()))
def test_flags_are_checked_as_the_layers_check_them(name):
    with pytest.raises(TypeError, match=r"must be True or False, got"):
        _flag_calls()[name]()


def test_from_snntorch_and_train_flags_are_checked():
    pytest.importorskip("snntorch")
    import snntorch

    from snn_ipu.interop import from_snntorch
    from snn_ipu.training import TrainConfig, train

    net = torch.nn.Sequential(torch.nn.Linear(4, 3), snntorch.Leaky(beta=0.9, init_hidden=True))
    with pytest.raises(TypeError, match="readout must be True or False"):
        from_snntorch(net, readout="no")
    with pytest.raises(TypeError, match="progress must be True or False"):
        train(TrainConfig(data="randman", epochs=1), progress="no")
    with pytest.raises(TypeError, match="download must be True or False"):
        from snn_ipu.data.tasks import load_task

        load_task(TrainConfig(data="randman"), download="no")


def test_t_start_first_matches_tonic_to_frame():
    """tonic's ToFrame(time_window=dt) starts at each sample's first event and drops the
    last partial window; t_start="first" with its frame count and outside="drop" gives
    the same binary frames (docs/data.md, "Matching tonic's ToFrame")."""
    tonic = pytest.importorskip("tonic")
    rng = np.random.default_rng(3)
    sensor = (5, 3, 2)
    dt = 1000
    samples, expected = [], []
    for first in (1234, 40_000):
        n = 300
        events = np.zeros(n, dtype=[("x", int), ("y", int), ("t", int), ("p", int)])
        events["t"] = np.sort(first + rng.integers(0, 20_500, n))
        events["x"] = rng.integers(0, sensor[0], n)
        events["y"] = rng.integers(0, sensor[1], n)
        events["p"] = rng.integers(0, sensor[2], n)
        samples.append(events)
        expected.append(tonic.transforms.ToFrame(sensor, time_window=dt)(events) > 0)
    steps = min(len(frames) for frames in expected)
    assert steps >= 19
    spikes = SparseSpikes.from_events(samples, sensor_size=sensor, dt=dt, t_start="first",
                                      num_steps=steps, outside="drop").to_dense()
    for b, frames in enumerate(expected):
        # tonic's frames [T, P, H, W] flatten in our neuron order (p * H + y) * W + x
        want = torch.from_numpy(frames[:steps].reshape(steps, -1)).float()
        assert torch.equal(spikes[:, b], want)
    # and ours (t_start=0, the last partial bin kept) is ToFrame from 0 with the overhang
    events = samples[0]
    assert events["t"][-1] % dt != 0
    frames = tonic.transforms.ToFrame(sensor, time_window=dt, start_time=0,
                                      include_incomplete=True)(events) > 0
    ours = SparseSpikes.from_events(events, sensor_size=sensor, dt=dt).to_dense()[:, 0]
    assert torch.equal(ours, torch.from_numpy(frames.reshape(len(frames), -1)).float())
