"""The datasets the command line trains on, by name: ``randman``, ``digits``, ``shd``,
``ssc`` and ``tonic:NAME`` (any class of ``tonic.datasets``).

A :class:`Task` holds the train and test sets (indexable, ``(sample, label)``), the
collate function that turns a list of samples into a time-major batch
``(SparseSpikes [T, B, K], labels [B])``, and the network's input and output sizes.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence, Tuple

from .collate import EventCollate, collate_dense
from .digits import DIGITS_CLASSES, DIGITS_INPUTS, digits_datasets
from .heidelberg import NUM_CHANNELS, SHD, SSC
from .randman import make_randman, split
from .tonic_adapter import TonicEvents

__all__ = ["Task", "TaskShape", "DATA_CHOICES", "load_task", "task_shape", "default_steps",
           "default_augmentation"]

DATA_CHOICES = ("randman", "digits", "shd", "ssc", "tonic:NAME")

# Heidelberg spike times are in seconds; the recordings last up to ~1 s (SSC) and
# ~1.4 s (SHD, the window of the dataset paper's own experiments).
_HEIDELBERG_DURATION = {"shd": 1.4, "ssc": 1.0}
# A longer grid (seconds) is a duration or dt given in another unit (ms, tonic's us)
_HEIDELBERG_LONGEST = 100.0


@dataclass
class TaskShape:
    """What the network needs to know about a dataset before loading it."""

    num_inputs: int
    num_classes: int
    num_steps: int


@dataclass
class Task(TaskShape):
    train: Any
    test: Any
    collate: Callable[[Sequence[Tuple[Any, Any]]], Tuple[Any, Any]]
    description: str


def default_augmentation(name: str) -> Tuple[int, float]:
    """(time jitter in steps, spike deletion probability) of training batches, by
    dataset: digits' 1,438 training images overfit without (train accuracy 1.0, test
    ~96%); the other datasets train unaugmented unless asked."""
    return (1, 0.1) if name == "digits" else (0, 0.0)


def default_steps(name: str) -> int:
    return {"randman": 50, "digits": 10}.get(name, 100)


def _tonic_class(name: str):
    try:
        import tonic.datasets
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("--data tonic:NAME needs tonic: pip install 'snn_ipu[tonic]'") from exc
    cls = None if name.startswith("_") else getattr(tonic.datasets, name, None)
    # a dataset is a public class with a sensor (not __class__, a function, a module)
    if not isinstance(cls, type) or getattr(cls, "sensor_size", None) is None:
        raise ValueError(f"tonic.datasets has no dataset {name!r} (a class with a "
                         "sensor_size, e.g. NMNIST, DVSGesture, SHD)")
    return cls


def task_shape(config) -> TaskShape:
    """Sizes of ``config.data`` without reading it (for planning and model building)."""
    name = config.data
    steps = config.num_steps or default_steps(name.split(":")[0])
    if name == "randman":
        return TaskShape(config.randman_inputs, config.randman_classes, steps)
    if name == "digits":
        return TaskShape(DIGITS_INPUTS, DIGITS_CLASSES, steps)
    if name in ("shd", "ssc"):
        classes = SHD.num_classes if name == "shd" else SSC.num_classes
        return TaskShape(NUM_CHANNELS, classes, _event_steps(config, name))
    if name.startswith("tonic:"):
        cls = _tonic_class(name[len("tonic:"):])
        sensor = TonicEvents(_SizeOnly(cls.sensor_size), pool=config.tonic_pool,
                             merge_polarity=config.merge_polarity).sensor_size
        classes = len(getattr(cls, "classes", ())) or _TONIC_CLASSES.get(cls.__name__)
        if classes is None:
            raise ValueError(f"tonic.datasets.{cls.__name__} lists no classes")
        w, h, p = sensor
        return TaskShape(w * h * p, classes, _event_steps(config, name))
    raise ValueError(f"unknown dataset {name!r}; choose one of {DATA_CHOICES}")


# tonic's audio datasets set `classes` on the instance only (from the files), where the
# shape is needed before any data is read
_TONIC_CLASSES = {"SHD": 20, "SSC": 35, "NTIDIGITS18": 11}


class _SizeOnly:
    def __init__(self, sensor_size) -> None:
        self.sensor_size = sensor_size


def _event_grid(config, name: str) -> dict:
    """The time grid of an event dataset: ``num_steps`` and ``duration`` (or ``dt``)."""
    grid = _asked_grid(config, name)
    length = grid["duration"] if "duration" in grid else grid["dt"] * grid["num_steps"]
    if name in _HEIDELBERG_DURATION and length > _HEIDELBERG_LONGEST:
        # a grid in milli- or microseconds (tonic's unit) bins every event of these
        # ~1 s recordings into its first step, silently
        raise ValueError(f"{name}: the time grid lasts {length:g} s; SHD/SSC spike times "
                         "are in seconds (recordings of ~1 s): give --duration/--dt in "
                         f"seconds (default --duration {_HEIDELBERG_DURATION[name]})")
    return grid


def _asked_grid(config, name: str) -> dict:
    duration = config.duration
    if duration is None and config.dt is None:
        duration = _HEIDELBERG_DURATION.get(name)
        if duration is None:
            raise ValueError(f"{name}: give the time grid with --duration or --dt, in the "
                             "unit of the event times (tonic: microseconds)")
    steps = config.num_steps
    if config.dt is not None and duration is not None:
        if steps is not None:
            from ..events import _num_steps_of

            fitted = _num_steps_of(config.dt, duration)
            if fitted != steps:
                raise ValueError(f"{name}: --steps {steps} disagrees with --duration "
                                 f"{duration} / --dt {config.dt} ({fitted} bins); give two "
                                 "of the three")
        return {"dt": config.dt, "duration": duration}
    if config.dt is not None and duration is None:
        if steps is None:
            raise ValueError(f"{name}: --dt needs --steps or --duration (a fixed grid)")
        return {"dt": config.dt, "num_steps": steps}
    return {"num_steps": steps or default_steps(name), "duration": duration}


def _event_steps(config, name: str) -> int:
    from ..events import _num_steps_of

    grid = _event_grid(config, name)
    if "num_steps" in grid:
        return grid["num_steps"]
    return _num_steps_of(grid["dt"], grid["duration"])


def load_task(config, download: bool = False) -> Task:
    """Loads ``config.data`` (see the module docstring); event data from
    ``config.data_dir``. Nothing is downloaded unless ``download`` (tonic datasets
    only): missing files are a FileNotFoundError naming where they were looked for."""
    from .._numbers import flag

    download = flag("download", download)
    name = config.data
    shape = task_shape(config)
    if name == "randman":
        spikes, labels = make_randman(
            num_classes=config.randman_classes, num_inputs=config.randman_inputs,
            num_steps=shape.num_steps, num_samples_per_class=config.randman_samples_per_class,
            dim_manifold=config.randman_dim, alpha=config.randman_alpha, seed=config.seed,
        )
        train, test = split(spikes, labels, test_fraction=0.2)
        collate = partial(collate_dense, max_spikes=None)
        what = (f"randman: {config.randman_classes} classes, {config.randman_inputs} inputs, "
                f"T={shape.num_steps}")
    elif name == "digits":
        train, test = digits_datasets(shape.num_steps, seed=config.seed)
        collate = collate_dense
        what = f"digits (scikit-learn, latency code): T={shape.num_steps}"
    elif name in ("shd", "ssc"):
        root = _data_dir(config, name)
        cls = SHD if name == "shd" else SSC
        train, test = cls(root, "train"), cls(root, "test")
        grid = _event_grid(config, name)
        collate = EventCollate(NUM_CHANNELS, outside=config.outside, **grid)
        what = f"{name.upper()} from {root}: {_grid_text(grid)}"
    elif name.startswith("tonic:"):
        root = _data_dir(config, name)
        cls = _tonic_class(name[len("tonic:"):])
        train, test = (TonicEvents(_make_tonic(cls, root, is_train, download),
                                   pool=config.tonic_pool,
                                   merge_polarity=config.merge_polarity)
                       for is_train in (True, False))
        grid = _event_grid(config, name)
        collate = EventCollate(sensor_size=train.sensor_size, outside=config.outside, **grid)
        what = f"{name} from {root}: sensor {train.sensor_size}, {_grid_text(grid)}"
    else:
        raise ValueError(f"unknown dataset {name!r}; choose one of {DATA_CHOICES}")
    return Task(shape.num_inputs, shape.num_classes, shape.num_steps, train, test, collate,
                f"{what}, {len(train)} train / {len(test)} test samples")


def _grid_text(grid: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in grid.items())


def _data_dir(config, name: str) -> str:
    if not config.data_dir:
        raise ValueError(f"--data {name} needs --data-dir (the folder holding its files)")
    return config.data_dir


def _make_tonic(cls, root: str, train: bool, download: bool = False):
    params = inspect.signature(cls).parameters
    if "train" in params:
        split = {"train": train}
    elif "split" in params:
        split = {"split": "train" if train else "test"}
    else:
        raise ValueError(f"tonic.datasets.{cls.__name__} takes neither train= nor split=; wrap "
                         "it in snn_ipu.data.TonicEvents and train it from Python")
    if "single_digits" in params:
        # N-TIDIGITS18 defaults to every recording, digit sequences included, with the
        # sequence as a string target ("1z3"); the task is its 11 single digits, each
        # target an int (_TONIC_CLASSES)
        split["single_digits"] = True
    if download:
        return _constructed(cls, root, split)
    # tonic downloads (and creates folders) from its constructor when its files are
    # missing; its download() is replaced for the constructor's time by an error that
    # says what is missing and where it was looked for
    had_own = "download" in vars(cls)
    own = vars(cls).get("download")
    cls.download = _refuse_download
    try:
        return _constructed(cls, root, split)
    finally:
        if had_own:
            cls.download = own
        else:
            del cls.download


def _constructed(cls, root: str, split: dict):
    """``cls(save_to=root, **split)``. Some tonic datasets (DVSLip: files on Google
    Drive) print a warning and call ``exit()`` when their files are missing: a run that
    ended with status 0 having trained nothing. That exit is a FileNotFoundError here."""
    try:
        return cls(save_to=root, **split)
    except SystemExit as exc:
        raise FileNotFoundError(
            f"tonic.datasets.{cls.__name__}: its files are not in "
            f"{os.path.join(root, cls.__name__)} (tonic exited with {exc.code!r}; its message "
            "above says where to get them); check --data-dir"
        ) from None


def _refuse_download(dataset) -> None:
    where = getattr(dataset, "location_on_system", None) or "its save_to folder"
    wanted = [str(n) for n in (getattr(dataset, "filename", None),
                               getattr(dataset, "folder_name", None)) if n]
    what = f" ({' and '.join(wanted)})" if wanted else ""
    raise FileNotFoundError(
        f"tonic.datasets.{type(dataset).__name__}: its files{what} are not in {where}; "
        "nothing is downloaded implicitly: check --data-dir, or pass --download "
        "(snn_ipu.data.tasks.load_task(config, download=True)) to fetch them"
    )
