"""SHD/SSC from files in the official layout, the collate functions, the digits code
and the tonic adapter, each against values computed here independently."""

import importlib.util
import pickle

import h5py
import numpy as np
import pytest
import torch
from shd_files import write_heidelberg

from snn_ipu import SparseSpikes
from snn_ipu.data import (
    SHD,
    SSC,
    EventCollate,
    TonicEvents,
    collate_dense,
    digits_datasets,
    load_digits_spikes,
)


@pytest.fixture
def shd_root(tmp_path):
    write_heidelberg(tmp_path / "shd_train.h5", [0, 3, 19, 3, 7, 0])
    write_heidelberg(tmp_path / "shd_test.h5", [1, 2], seed=1)
    return tmp_path


def test_shd_reads_the_official_layout(shd_root):
    data = SHD(shd_root, "train")
    assert len(data) == 6 and data.num_inputs == 700 and data.num_classes == 20
    with h5py.File(shd_root / "shd_train.h5") as f:
        for i in range(6):
            (times, units), label = data[i]
            assert times.dtype == np.float64 and units.dtype == np.int64
            np.testing.assert_array_equal(times, f["spikes/times"][i].astype(np.float64))
            np.testing.assert_array_equal(units, f["spikes/units"][i])
            assert label == int(f["labels"][i])
        assert data.speakers.tolist() == f["extra/speaker"][()].tolist()
    assert data.classes[:2] == ["english-0", "english-1"] and len(data.classes) == 20
    assert data.meta_info()["age"].tolist() == [20, 21, 22]
    assert data[-1][1] == 0
    with pytest.raises(IndexError):
        data[6]


def test_the_handle_is_per_process_and_not_pickled(shd_root):
    data = SHD(shd_root, "test")
    data[0]
    clone = pickle.loads(pickle.dumps(data))
    assert clone._file is None
    np.testing.assert_array_equal(clone[1][0][0], data[1][0][0])
    loader = torch.utils.data.DataLoader(
        data, batch_size=2, num_workers=1,
        collate_fn=EventCollate(700, num_steps=25, duration=1.0))
    (spikes, labels), = list(loader)
    assert isinstance(spikes, SparseSpikes) and spikes.dense_shape == (25, 2, 700)
    assert labels.tolist() == [1, 2]


def test_collated_batch_is_the_binning_of_each_sample(shd_root):
    data = SHD(shd_root, "train")
    spikes, labels = EventCollate(700, num_steps=50, duration=1.0)([data[i] for i in (0, 2)])
    dense = spikes.to_dense()
    for column, i in enumerate((0, 2)):
        (times, units), _ = data[i]
        expected = torch.zeros(50, 700)
        # the edges t * 0.02 as the binning draws them
        edges = np.arange(51) * 0.02
        expected[np.searchsorted(edges, times, side="right") - 1, units] = 1
        assert torch.equal(dense[:, column], expected)
    assert labels.tolist() == [0, 19]


def test_event_collate_checks_its_arguments_when_built():
    """A policy misspelt ("Drop") was accepted by the constructor and failed at the first
    batch, in a worker mid-epoch; each argument is checked when the collate is built."""
    for grid, message in (({"outside": "Drop"}, "outside must be one of"),
                          ({"overflow": "clip"}, "overflow"),
                          ({"dt": 0.3}, "disagrees with duration")):
        with pytest.raises(ValueError, match=message):
            EventCollate(700, **{"num_steps": 10, "duration": 1.0, **grid})
    collate = EventCollate(700, num_steps=10, duration=1.0, outside="drop")
    spikes, _ = collate([((np.array([0.05, 1.0, 2.5]), np.array([3, 4, 5])), 1)])
    assert spikes.events_outside == 2 and spikes.to_dense()[0, 0, 3] == 1


def test_missing_files_say_where_and_how(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing is downloaded here"):
        SHD(tmp_path, "train")
    (tmp_path / "ssc_valid.h5.gz").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="gunzip"):
        SSC(tmp_path, "valid")
    with pytest.raises(ValueError, match="split must be one of"):
        SHD(tmp_path, "valid")


def test_broken_files_are_named(tmp_path):
    with h5py.File(tmp_path / "shd_train.h5", "w") as f:
        f.create_dataset("labels", data=np.zeros(2, np.uint16))
    with pytest.raises(ValueError, match="no 'spikes/times' dataset"):
        SHD(tmp_path, "train")
    write_heidelberg(tmp_path / "shd_test.h5", [0, 8], num_channels=800)  # 8: ~776
    data = SHD(tmp_path, "test")
    with pytest.raises(ValueError, match=r"units must lie in \[0, 700\)"):
        for i in range(len(data)):
            data[i]
    write_heidelberg(tmp_path / "ssc_train.h5", [0, 40], num_classes=41)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 35\)"):
        SSC(tmp_path, "train")[0]


def test_a_file_that_is_not_hdf5_is_named(tmp_path):
    """A download still gzipped (or cut short) at shd_train.h5: the error names the file
    and says what it likely is, not h5py's bare "file signature not found"."""
    (tmp_path / "shd_train.h5").write_bytes(b"\x1f\x8b\x08\x00 not hdf5")
    with pytest.raises(OSError, match=r"shd_train.h5 is not a readable HDF5 file .*gunzip"):
        SHD(tmp_path, "train")


def test_labels_must_be_whole_class_indices():
    """int() would truncate a label 2.7 to class 2, and take True as class 1."""
    x = torch.zeros(3, 4)
    spikes, labels = collate_dense([(x, 3), (x, np.int64(1)), (x, torch.tensor(2)), (x, 4.0)])
    assert labels.tolist() == [3, 1, 2, 4]
    for bad in (2.7, -0.5, True, torch.tensor(1.5), "a"):
        with pytest.raises(TypeError, match="labels must be integer class indices"):
            collate_dense([(x, 0), (x, bad)])


def test_tonic_audio_datasets_have_their_class_counts():
    """tonic's SHD, SSC and N-TIDIGITS18 classes list their classes only on an instance
    (read from the files); the task's shape must not need the files."""
    pytest.importorskip("tonic")
    from snn_ipu.data.tasks import task_shape
    from snn_ipu.training import TrainConfig

    for name, classes in (("SHD", 20), ("SSC", 35), ("NTIDIGITS18", 11)):
        shape = task_shape(TrainConfig(data=f"tonic:{name}", duration=1e6))
        assert shape.num_classes == classes, name


def test_collate_dense_is_time_major():
    samples = [(torch.eye(4)[:3], 1), (torch.zeros(3, 4), 0)]  # [T=3, N=4] each
    spikes, labels = collate_dense(samples)
    assert spikes.dense_shape == (3, 2, 4)
    assert torch.equal(spikes.to_dense()[:, 0], torch.eye(4)[:3])
    assert labels.dtype == torch.int64 and labels.tolist() == [1, 0]
    with pytest.raises(ValueError, match=r"sample 1 must be a 2-d tensor \[T, N\]"):
        collate_dense([(torch.zeros(3, 4), 0), (torch.zeros(4, 3), 0)])


def test_digits_code_from_the_images():
    sklearn = pytest.importorskip("sklearn.datasets")
    images, labels = sklearn.load_digits(return_X_y=True)
    spikes, y = load_digits_spikes(num_steps=20)
    assert spikes.shape == (1797, 20, 128) and torch.equal(y, torch.as_tensor(labels))
    for n in (0, 100, 1796):
        for pixel in range(64):
            v = images[n, pixel]
            on, off = spikes[n, :, pixel], spikes[n, :, 64 + pixel]
            assert on.sum() == (v > 0) and off.sum() == (v < 16)
            if v > 0:
                assert int(on.argmax()) == round((1 - v / 16) * 19)
            if v < 16:
                assert int(off.argmax()) == round(v / 16 * 19)
    train, test = digits_datasets(20, seed=0)
    assert len(train) + len(test) == 1797
    counts = torch.bincount(test.labels, minlength=10)
    assert int(counts.min()) >= 35  # stratified: ~20% of each class
    again = digits_datasets(20, seed=0)[1]
    assert torch.equal(again.labels, test.labels)


class FakeTonic:
    """A tonic-style dataset: sensor_size and (events, target) samples."""

    sensor_size = (6, 4, 2)

    def __init__(self, samples):
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]


def tonic_events(rng, n):
    ev = np.zeros(n, dtype=[("x", np.int16), ("y", np.int16), ("t", np.int64), ("p", bool)])
    ev["x"], ev["y"] = rng.integers(0, 6, n), rng.integers(0, 4, n)
    ev["t"], ev["p"] = np.sort(rng.integers(0, 1000, n)), rng.integers(0, 2, n)
    return ev


@pytest.mark.parametrize("pool, merge", [(None, False), ((2, 2), False), ((4, 3), True)])
def test_tonic_adapter_pools_the_sensor(pool, merge):
    rng = np.random.default_rng(0)
    samples = [(tonic_events(rng, n), k) for k, n in enumerate((30, 0, 200))]
    adapter = TonicEvents(FakeTonic(samples), pool=pool, merge_polarity=merge)
    kx, ky = pool or (1, 1)
    w, h = -(-6 // kx), -(-4 // ky)
    assert adapter.sensor_size == (w, h, 1 if merge else 2)
    collate = EventCollate(sensor_size=adapter.sensor_size, num_steps=4, duration=1000)
    spikes, labels = collate([adapter[i] for i in range(3)])
    assert labels.tolist() == [0, 1, 2]
    for b, (ev, _) in enumerate(samples):
        expected = np.zeros((4, 1 if merge else 2, h, w))
        p = np.zeros(len(ev), int) if merge else ev["p"].astype(int)
        expected[ev["t"] // 250, p, ev["y"] // ky, ev["x"] // kx] = 1
        assert torch.equal(spikes.to_dense()[:, b], torch.from_numpy(
            expected.reshape(4, -1)).float())


def test_tonic_adapter_refuses_frames_and_needs_a_sensor():
    adapter = TonicEvents(FakeTonic([(np.zeros((3, 2, 4, 6)), 0)]))
    with pytest.raises(TypeError, match="leave binning to EventCollate"):
        adapter[0]
    with pytest.raises(ValueError, match="no sensor_size"):
        TonicEvents([(None, 0)])
    with pytest.raises(ValueError, match="pool must be"):
        TonicEvents(FakeTonic([]), pool=(0, 2))


def test_tonic_dataset_class_through_the_adapter():
    tonic = pytest.importorskip("tonic")
    # N-MNIST's sensor, without its files: the adapter reads only sensor_size
    adapter = TonicEvents(FakeTonic([]), sensor_size=tonic.datasets.NMNIST.sensor_size,
                          pool=(2, 2))
    assert adapter.sensor_size == (17, 17, 2) and adapter.num_inputs == 578


def test_tonic_ntidigits_task_is_its_single_digits(tmp_path):
    """tonic's N-TIDIGITS18 holds digit sequences too, with string targets ("1z");
    the task is its 11 single digits, int targets (before: the sequences were samples
    and the first batch failed on the string target '3')."""
    pytest.importorskip("tonic")
    from snn_ipu.data.tasks import load_task
    from snn_ipu.training import TrainConfig

    (tmp_path / "NTIDIGITS18").mkdir()
    with h5py.File(tmp_path / "NTIDIGITS18" / "n-tidigits.hdf5", "w") as f:
        for part, names in (("train", ["man-ab-3", "man-cd-1z", "woman-ef-o"]),
                            ("test", ["man-gh-7"])):
            f.create_dataset(f"{part}_labels", data=np.array([n.encode() for n in names]))
            for n in names:
                f.create_dataset(f"{part}_addresses/{n}", data=np.array([1, 5, 63]))
                f.create_dataset(f"{part}_timestamps/{n}", data=np.array([0.01, 0.2, 0.5]))
    task = load_task(TrainConfig(data="tonic:NTIDIGITS18", data_dir=str(tmp_path),
                                 duration=1e6, num_steps=4))
    assert (task.num_inputs, task.num_classes, len(task.train), len(task.test)) == (64, 11, 2, 1)
    spikes, labels = task.collate([task.train[0], task.train[1]])
    assert labels.tolist() == [3, 0]  # "3", and "o" (oh) is class 0
    expected = torch.zeros(4, 64)
    expected[0, 1] = expected[0, 5] = expected[2, 63] = 1  # 10 ms, 200 ms, 500 ms in 250 ms bins
    assert torch.equal(spikes.to_dense()[:, 0], expected)


def test_tonic_dataset_that_exits_on_missing_files_is_an_error(tmp_path, capsys):
    """tonic's DVSLip prints a warning and calls exit() when its files are missing: the
    command line ended with status 0 having trained nothing."""
    pytest.importorskip("tonic")
    from snn_ipu import cli

    assert cli.main(["train", "--data", "tonic:DVSLip", "--data-dir", str(tmp_path),
                     "--duration", "1000000", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "DVSLip: its files are not in" in err and str(tmp_path / "DVSLip") in err


def test_heidelberg_grid_in_another_time_unit_is_refused(shd_root):
    """SHD's spike times are in seconds: --duration 1.4e6 (tonic's microseconds) made
    dt = 14000 s and binned every event of a sample into step 0 (158 events of 3
    samples into 71 spikes, all at t=0), silently."""
    from snn_ipu.data.tasks import load_task, task_shape
    from snn_ipu.training import TrainConfig

    for grid in ({"duration": 1.4e6}, {"dt": 14000.0, "num_steps": 100},
                 {"duration": 1400.0, "dt": 14.0}):
        with pytest.raises(ValueError, match="SHD/SSC spike times are in seconds"):
            load_task(TrainConfig(data="shd", data_dir=str(shd_root), **grid))
    task = load_task(TrainConfig(data="shd", data_dir=str(shd_root), duration=2.0, dt=0.5))
    assert task.num_steps == 4
    spikes, _ = task.collate([((np.array([0.2, 0.7, 1.9]), np.array([0, 1, 2])), 0)])
    assert spikes.to_dense()[:, 0, :3].nonzero().tolist() == [[0, 0], [1, 1], [3, 2]]
    if importlib.util.find_spec("tonic") is not None:  # tonic's SHD: microseconds
        assert task_shape(TrainConfig(data="tonic:SHD", duration=1.4e6)).num_steps == 100
