"""Built-in datasets that need no download."""

from .randman import SpikeDataset, batches, make_randman, randman_times, split

__all__ = ["SpikeDataset", "batches", "make_randman", "randman_times", "split"]
