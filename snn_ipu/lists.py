"""Building and reading the ``[T, B, K]`` id lists of :class:`~snn_ipu.SparseSpikes`:
from dense masks (on the CPU by a native scan of their rows, elsewhere by the positions
of their nonzeros, or, where values cannot be read, by a top-k of a rank, which has a
static shape), and selecting the listed entries of a ``[T, B, K]`` tensor.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from ._native import _C, numpy_view
from .overflow import Overflow

__all__ = ["capacity_and_overflow", "listed_mask", "listed_only", "lists_by_nonzero",
           "lists_by_rank", "lists_from_masks"]


def _ranks(rows: torch.Tensor, per_row: torch.Tensor) -> torch.Tensor:
    """The rank of each entry within its row, for entries in row-major order
    (``nonzero``'s) with ``per_row`` entries in each row."""
    starts = torch.cumsum(per_row, 0) - per_row
    return torch.arange(rows.numel(), device=rows.device) - starts[rows]


def lists_from_masks(
    spikes: torch.Tensor,
    eligible: Optional[torch.Tensor],
    capacity: Optional[int],
    policy: str = "error",
) -> Tuple[torch.Tensor, torch.Tensor, Overflow]:
    """ids [T,B,K] and counts [T,B,2] from bool masks [T,B,N].

    ``eligible`` marks gradient-eligible neurons (spikes may be marked too;
    they are listed once, as spikes). ``capacity=None`` fits the largest list.
    With ``policy="drop"`` the first ``capacity`` entries are kept, spikes first.
    """
    T, B, N = spikes.shape
    spikes = spikes.reshape(T * B, N)
    only = None if eligible is None else (eligible.reshape(T * B, N) & ~spikes)
    return _lists_from_entries(
        T, B, spikes.nonzero(as_tuple=True),
        None if only is None else only.nonzero(as_tuple=True), capacity, policy,
    )


def _lists_from_entries(
    T: int, B: int, spikes: Tuple[torch.Tensor, torch.Tensor],
    only: Optional[Tuple[torch.Tensor, torch.Tensor]], capacity: Optional[int], policy: str,
) -> Tuple[torch.Tensor, torch.Tensor, Overflow]:
    """:func:`lists_from_masks` from the (row, neuron) entries of the spikes and of the
    eligible-only neurons, each in row-major order; rows are (t, b). Counting the rows
    with ``bincount`` over the entries, not a sum over the dense mask, keeps the cost
    with the spikes."""
    G = T * B
    n_spk = torch.bincount(spikes[0], minlength=G)
    needed = n_spk if only is None else n_spk + torch.bincount(only[0], minlength=G)
    max_needed = int(needed.max()) if needed.numel() else 0
    K, overflow = capacity_and_overflow(n_spk, needed, max_needed, capacity, policy, B)
    ids = torch.zeros(G, K, dtype=torch.int32, device=n_spk.device)

    def place(rows, neurons, rank):
        if max_needed > K:  # only then can an entry fall outside the list
            keep = rank < K
            rows, neurons, rank = rows[keep], neurons[keep], rank[keep]
        ids[rows, rank] = neurons.to(torch.int32)

    place(*spikes, _ranks(spikes[0], n_spk))
    if only is not None:
        place(*only, _ranks(only[0], needed - n_spk) + n_spk[only[0]])
    return ids.reshape(T, B, K), _counts(n_spk, needed, K).reshape(T, B, 2), overflow


def _counts(n_spk: torch.Tensor, needed: torch.Tensor, capacity: int) -> torch.Tensor:
    """int32 [rows, 2]: the spikes and the entries of each row's list of ``capacity``
    entries (its first ones, spikes first)."""
    return torch.stack([n_spk.clamp(max=capacity), needed.clamp(max=capacity)],
                       -1).to(torch.int32)


def capacity_and_overflow(
    n_spk: torch.Tensor, needed: torch.Tensor, max_needed: int, capacity: Optional[int],
    policy: str, batch: int,
) -> Tuple[int, Overflow]:
    """The capacity K of a list whose rows (t, b), flattened, need ``needed`` entries of
    which ``n_spk`` are spikes (``max_needed`` the largest), under ``capacity`` (None:
    fit the busiest row) and the overflow ``policy``; and what K leaves out: every row
    keeps its first K entries, spikes first."""
    overflow = Overflow(0, 0, None)
    K = max(max_needed, 1) if capacity is None else int(capacity)
    if max_needed > K:
        if policy == "grow":
            K = max_needed
        else:
            g = int(torch.nonzero(needed > K)[0, 0])
            kept_spk = n_spk.clamp(max=K)
            kept = needed.clamp(max=K)
            overflow = Overflow(
                int((n_spk - kept_spk).sum()),
                int(((needed - n_spk) - (kept - kept_spk)).sum()),
                (g // batch, g % batch, int(n_spk[g]), int(needed[g])),
            )
    return K, overflow


def lists_by_nonzero(
    x: torch.Tensor, capacity: Optional[int], policy: str, eligible: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor, Overflow]:
    """``from_dense``'s lists from the nonzero entries of ``x``, checked to be spikes."""
    T, B, N = x.shape
    flat = x.detach().reshape(T * B, N)
    if flat.device.type == "cpu" and flat.dtype in _NATIVE_DTYPES:
        return _native_lists(x, flat, capacity, policy, eligible)
    # One pass finds the spikes and, through their values, anything not 0 or 1.
    entries = flat.nonzero(as_tuple=True)
    nonzero = flat[entries]
    if not bool((nonzero == 1).all()):
        bad = nonzero[nonzero != 1]
        _not_binary(bad[0].item(), not bool(torch.isfinite(bad).all()))
    only = None
    if eligible is not None:
        only = (eligible.reshape(T * B, N) & (flat == 0)).nonzero(as_tuple=True)
    return _lists_from_entries(T, B, entries, only, capacity, policy)


def _not_binary(value, non_finite: bool) -> None:
    """Raises for dense spikes holding ``value`` (the first entry neither 0 nor 1), or a
    NaN or inf somewhere."""
    if non_finite:
        raise ValueError("dense spikes contain NaN or inf")
    raise ValueError(
        f"dense spikes must be binary (0 or 1), found {value}: encode "
        "analog inputs first (snn_ipu.encoding.rate, latency, delta); event "
        "counts become spikes with (x > 0); for dropout multiply by an unscaled "
        "0/1 mask (F.dropout scales what it keeps by 1/(1-p))"
    )


# The dtypes the native scan reads as they are (bool as uint8); the other real ones are
# read as float32, where 0 and 1 stay exactly 0 and 1 and nothing else becomes either.
_NATIVE_DTYPES = {torch.float32: None, torch.float64: None, torch.uint8: None,
                  torch.bool: torch.uint8, torch.float16: torch.float32,
                  torch.bfloat16: torch.float32, torch.int8: torch.float32,
                  torch.int16: torch.float32, torch.int32: torch.float32}


def _native_lists(x: torch.Tensor, flat: torch.Tensor, capacity: Optional[int], policy: str,
                  eligible: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, Overflow]:
    """:func:`lists_by_nonzero` by the native scan of the rows: one pass counts each
    row's spikes and eligible-only entries (and finds any entry neither 0 nor 1), one
    writes the lists once their capacity is known."""
    # imported here: the backends package imports this one (its contract, SparseSpikes)
    from .backends.emulator_threads import get_num_threads

    T, B, N = x.shape
    as_type = _NATIVE_DTYPES[flat.dtype]
    if as_type is torch.uint8:
        flat = flat.view(torch.uint8)
    elif as_type is not None:
        flat = flat.to(as_type)
    rows = numpy_view(flat)
    mask = None if eligible is None else numpy_view(eligible.reshape(T * B, N))
    threads = get_num_threads()
    row_spikes, row_only, bad, non_finite = _C.dense_list_counts(rows, mask, threads)
    if bad >= 0:
        _not_binary(x.detach().reshape(-1)[bad].item(), non_finite)
    n_spk = torch.from_numpy(row_spikes)
    needed = n_spk if eligible is None else n_spk + torch.from_numpy(row_only)
    max_needed = int(needed.max()) if needed.numel() else 0
    K, overflow = capacity_and_overflow(n_spk, needed, max_needed, capacity, policy, B)
    ids = torch.from_numpy(_C.dense_list_ids(rows, mask, row_spikes, row_only, K, threads))
    return ids.reshape(T, B, K), _counts(n_spk, needed, K).reshape(T, B, 2), overflow


# Ranks are float32 keys below 4N, exact while 4N <= 2**24.
_MAX_RANKED_NEURONS = 2**22


def lists_by_rank(
    x: torch.Tensor, capacity: Optional[int], policy: str, eligible: Optional[torch.Tensor],
    where: str = "SparseSpikes.from_dense",
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``from_dense``'s lists from ops of static shape, for tensors whose values cannot
    be read (``_devices``): each (t, b) lists its first K neurons in the order spikes,
    then eligible-only neurons, then the rest, each part by ascending id (a top-k of a
    rank). The listed entries are those of :func:`lists_by_nonzero`; the padding holds
    the unlisted ids instead of 0."""
    T, B, N = x.shape
    device = x.device.type
    if capacity is not None and capacity < N and policy != "drop":
        raise ValueError(
            f"{where}: spikes on {device!r} tensors (a model traced for "
            "the IPU) cannot be counted before their list is built, so a capacity "
            f"max_spikes={capacity} below N={N} needs overflow='drop' (spikes past it are "
            "dropped, the lowest ids kept, and the list's .dropped counts them), or "
            "max_spikes=None for lists of N entries"
        )
    if N > _MAX_RANKED_NEURONS:
        raise ValueError(
            f"{where}: {N} neurons on {device!r} tensors; lists built in "
            f"a traced model take at most {_MAX_RANKED_NEURONS} (list them on the host)"
        )
    K = N if capacity is None else capacity
    spiking = x.detach() != 0
    rank = spiking.float() * (2 * N) + torch.arange(
        N - 1, -1, -1, dtype=torch.float32, device=x.device)
    n_spikes = spiking.sum(-1, dtype=torch.int32)
    n_listed = n_spikes
    if eligible is not None:
        only = eligible & ~spiking
        rank = rank + only.float() * N
        n_listed = n_spikes + only.sum(-1, dtype=torch.int32)
    ids = torch.topk(rank, min(K, N), dim=-1, sorted=True).indices.to(torch.int32)
    if K > N:  # a capacity above the layer width: padding with id 0, as from entries
        ids = torch.cat([ids, ids.new_zeros(T, B, K - N)], -1)
    counts = torch.stack([n_spikes.clamp(max=K), n_listed.clamp(max=K)], -1)
    return ids, counts, (n_spikes - counts[..., 0]).sum()


def listed_mask(counts: torch.Tensor, capacity: int, which: int) -> torch.Tensor:
    """bool [T,B,K]: entry k is below counts[..., which] (0: spikes, 1: all listed)."""
    k = torch.arange(capacity, device=counts.device)
    return k < counts[..., which : which + 1].long()


def listed_only(v: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``v`` ([T,B,K]) at the listed entries, 0 at the padding: selected, not multiplied by
    the mask, so that an infinite value or gradient at a padding entry does not become a
    NaN (inf * 0) that reaches a listed neuron."""
    return torch.where(listed_mask(counts, v.shape[-1], 1), v, v.new_zeros(()))
