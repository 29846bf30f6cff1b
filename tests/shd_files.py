"""Tiny SHD/SSC files in the official HDF5 layout (Cramer et al. 2022; the Zenke lab's
dataset page): spikes/times (vlen float16, seconds), spikes/units (vlen uint16),
labels (uint16), extra/keys (bytes), extra/speaker (uint16), extra/meta_info/{gender,
age, body_height} (per speaker)."""

import h5py
import numpy as np


def class_pattern(label, rng, num_channels=700, duration=1.0):
    """Events of a sample of ``label``: a burst in a band of channels that moves with
    the label, at a time that moves with it too (a learnable toy task)."""
    n = int(rng.integers(40, 90))
    centre = (label * 97) % num_channels
    units = np.clip(centre + rng.integers(-15, 16, n), 0, num_channels - 1)
    times = np.clip(0.1 + 0.04 * (label % 5) + rng.normal(0, 0.02, n), 0, duration - 1e-3)
    order = np.argsort(times)
    return times[order], units[order]


def write_heidelberg(path, labels, num_classes=20, seed=0, num_channels=700, speakers=3):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        times = f.create_dataset("spikes/times", (len(labels),),
                                 dtype=h5py.vlen_dtype(np.dtype("float16")))
        units = f.create_dataset("spikes/units", (len(labels),),
                                 dtype=h5py.vlen_dtype(np.dtype("uint16")))
        for i, label in enumerate(labels):
            t, u = class_pattern(label, rng, num_channels)
            times[i] = t.astype(np.float16)
            units[i] = u.astype(np.uint16)
        f.create_dataset("labels", data=np.asarray(labels, dtype=np.uint16))
        words = [f"{lang}-{n}" for lang in ("english", "german") for n in range(10)]
        keys = (words * (num_classes // 20 + 1))[:num_classes]
        f.create_dataset("extra/keys", data=np.array([k.encode() for k in keys]))
        f.create_dataset("extra/speaker",
                         data=rng.integers(0, speakers, len(labels)).astype(np.uint16))
        f.create_dataset("extra/meta_info/gender",
                         data=np.array([b"female", b"male", b"female"][:speakers]))
        f.create_dataset("extra/meta_info/age", data=np.arange(20, 20 + speakers,
                                                                dtype=np.uint16))
        f.create_dataset("extra/meta_info/body_height",
                         data=np.arange(160, 160 + speakers, dtype=np.uint16))
    return path
