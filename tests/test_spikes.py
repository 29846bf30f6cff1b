"""The spike-list format against hand-built expectations."""

import pytest
import torch
from conftest import binary

from snn_ipu import SparseSpikes, SpikeOverflowError


def test_from_dense_hand_example():
    x = torch.zeros(2, 1, 6)
    x[0, 0, [4, 1]] = 1
    x[1, 0, 5] = 1
    s = SparseSpikes.from_dense(x)
    assert s.capacity == 2
    assert s.ids.tolist() == [[[1, 4]], [[5, 0]]]
    assert s.counts.tolist() == [[[2, 2]], [[1, 1]]]
    assert s.values.tolist() == [[[1.0, 1.0]], [[1.0, 0.0]]]
    assert s.spike_counts().tolist() == [[0, 1, 0, 0, 1, 1]]


def test_eligible_entries_follow_spikes_and_carry_gradient():
    x = torch.tensor([[[0.0, 1.0, 0.0, 1.0]]], requires_grad=True)
    elig = torch.tensor([[[True, True, False, False]]])
    s = SparseSpikes.from_dense(x, eligible=elig)
    assert s.ids.tolist() == [[[1, 3, 0]]]
    assert s.counts.tolist() == [[[2, 3]]]
    (s.to_dense() * torch.tensor([10.0, 20.0, 30.0, 40.0])).sum().backward()
    assert x.grad.tolist() == [[[10.0, 20.0, 0.0, 40.0]]]


def test_roundtrip_random():
    x = binary((7, 3, 50), 0.1, 1)
    s = SparseSpikes.from_dense(x)
    assert torch.equal(s.to_dense(), x)
    assert torch.equal(s.spike_counts(), x.sum(0))
    assert torch.equal(s.num_spikes(), x.sum(-1).long())


def test_overflow_policies():
    x = torch.zeros(3, 2, 8)
    x[1, 1, [0, 2, 3, 7]] = 1
    with pytest.raises(SpikeOverflowError, match="timestep 1, sample 1: 4 spikes"):
        SparseSpikes.from_dense(x, max_spikes=3)
    with pytest.warns(RuntimeWarning, match="dropped 1 spikes"):
        s = SparseSpikes.from_dense(x, max_spikes=3, overflow="drop")
    assert s.ids[1, 1].tolist() == [0, 2, 3] and s.dropped == 1
    assert s.to("cpu").dropped == 1 and s.detach().dropped == 1  # the count goes along
    g = SparseSpikes.from_dense(x, max_spikes=3, overflow="grow")
    assert g.capacity == 4 and torch.equal(g.to_dense(), x)


@pytest.mark.parametrize("max_spikes", [float("nan"), float("inf"), 2.5, 0, True, "3"])
def test_from_dense_refuses_bad_capacities(max_spikes):
    with pytest.raises(ValueError, match="max_spikes must be a positive integer or None"):
        SparseSpikes.from_dense(torch.zeros(2, 1, 3), max_spikes=max_spikes)


def test_from_dense_takes_whole_capacities_of_any_int_type():
    import numpy as np

    x = torch.zeros(2, 1, 5)
    x[0, 0, :3] = 1
    for k in (4, np.int64(4), 4.0):
        assert SparseSpikes.from_dense(x, max_spikes=k).capacity == 4


def test_eligible_must_be_a_bool_tensor():
    import numpy as np

    x = torch.zeros(2, 1, 3)
    for mask, what in ((torch.full((2, 1, 3), float("nan")), "torch.float32"),
                       (np.ones((2, 1, 3), bool), "ndarray")):
        with pytest.raises(TypeError, match=f"must be a bool torch.Tensor mask, got {what}"):
            SparseSpikes.from_dense(x, eligible=mask)


@pytest.mark.parametrize("ids_shape, counts_shape, match", [
    ((1, 1, 2), (1, 2), r"counts must have shape \[T, B, 2\]"),
    ((1, 1, 2), (1, 1), r"counts must have shape \[T, B, 2\]"),
    ((1, 2), (1, 1, 2), r"ids must have shape \[T, B, K\]"),
])
def test_constructor_names_the_misshapen_tensor(ids_shape, counts_shape, match):
    """values is built from ids and counts, so their shapes are what is wrong, not values."""
    with pytest.raises(ValueError, match=match):
        SparseSpikes(torch.zeros(ids_shape, dtype=torch.int32),
                     torch.zeros(counts_shape, dtype=torch.int32), 4)


@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_hand_built_lists_need_not_be_ascending(backend):
    """The same spikes listed in reverse order: the same output spikes, and each entry's
    input gradient follows its id (the reference computes densely, so its sums match)."""
    from snn_ipu import LIFLayer

    x = binary((6, 3, 20), 0.3, 0)
    s = SparseSpikes.from_dense(x)
    reversed_ids = s.ids.clone()
    for t in range(6):
        for b in range(3):
            n = int(s.counts[t, b, 0])
            reversed_ids[t, b, :n] = reversed_ids[t, b, :n].flip(0)
    lists = [SparseSpikes(ids, s.counts.clone(), 20, s.values.detach().clone().requires_grad_())
             for ids in (s.ids, reversed_ids)]
    torch.manual_seed(1)
    layer = LIFLayer(20, 8, beta=0.9, backend=backend)
    outs, grads = [], []
    for lst in lists:
        out = layer(lst)
        out.spike_counts().sum().backward()
        outs.append(out.to_dense())
        dense_grad = torch.zeros(6, 3, 20).scatter_add_(-1, lst.ids.long(), lst.values.grad)
        grads.append(dense_grad)
    assert torch.equal(outs[0], outs[1])
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)


def _random_list(T, B, N, p, seed, dtype=torch.float32):
    """A list with spikes, eligible-only entries (value 0, but a gradient) and padding
    whose ids are not all 0, as a layer's output has after a capacity grew."""
    x = binary((T, B, N), p, seed)
    g = torch.Generator().manual_seed(seed + 1)  # not binary()'s stream
    elig = (torch.rand((T, B, N), generator=g) < p) & (x == 0)
    s = SparseSpikes.from_dense(x, eligible=elig)
    assert int((s.counts[..., 1] - s.counts[..., 0]).sum()) > 0 or T * B * N == 1
    K = s.capacity + 2
    ids = torch.zeros(T, B, K, dtype=torch.int32)
    ids[..., : s.capacity] = s.ids
    listed = s.counts[..., 1:2].long()
    pad = torch.randint(0, N, (T, B, K), generator=g, dtype=torch.int32)
    ids = torch.where(torch.arange(K) < listed, ids, pad)
    values = torch.zeros(T, B, K, dtype=dtype)
    values[..., : s.capacity] = s.values.to(dtype)
    return SparseSpikes(ids, s.counts.clone(), N, values.requires_grad_())


def _scatter_counts(s):
    """spike_counts from the dense form, in float64: the independent reference."""
    dense = torch.zeros(s.num_steps, s.batch_size, s.num_neurons, dtype=torch.float64)
    listed = torch.arange(s.capacity) < s.counts[..., 1:2].long()
    for t, b, k in listed.nonzero().tolist():
        dense[t, b, s.ids[t, b, k]] += s.values[t, b, k].double()
    return dense.sum(0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,p", [((9, 4, 13), 0.2), ((30, 3, 200), 0.02), ((1, 1, 1), 0.9)])
def test_spike_counts_and_their_gradient_against_the_dense_form(shape, p, dtype):
    s = _random_list(*shape, p, seed=sum(shape), dtype=dtype)
    counts = s.spike_counts()
    assert counts.dtype == dtype and counts.shape == (shape[1], shape[2])
    torch.testing.assert_close(counts.double(), _scatter_counts(s), rtol=1e-6, atol=1e-6)
    w = torch.randn(shape[1], shape[2], dtype=dtype)
    (counts * w).sum().backward()
    listed = torch.arange(s.capacity) < s.counts[..., 1:2].long()
    # dL/dvalues[t, b, k] = w[b, ids[t, b, k]] at the listed entries, 0 on padding
    expected = torch.gather(w.unsqueeze(0).expand(shape[0], -1, -1), -1, s.ids.long())
    torch.testing.assert_close(s.values.grad, expected * listed, rtol=0, atol=0)


@pytest.mark.parametrize("threads", [2, 3])
def test_spike_counts_shared_among_threads_against_the_dense_form(threads):
    """A list large enough to share its samples among threads (an odd number of
    samples, so that the shares differ): the counts and their gradient as the dense
    form's, and the gradient's padding 0."""
    from snn_ipu.backends.emulator import get_num_threads, set_num_threads

    shape = (40, 7, 300)
    s = _random_list(*shape, 0.3, seed=11, dtype=torch.float32)
    assert int(s.counts[..., 1].sum()) > 16384  # past the one-thread size
    old = get_num_threads()
    set_num_threads(threads)
    try:
        counts = s.spike_counts()
        w = torch.randn(shape[1], shape[2])
        (counts * w).sum().backward()
    finally:
        set_num_threads(old)
    torch.testing.assert_close(counts.double(), _scatter_counts(s), rtol=1e-6, atol=1e-6)
    listed = torch.arange(s.capacity) < s.counts[..., 1:2].long()
    expected = torch.gather(w.unsqueeze(0).expand(shape[0], -1, -1), -1, s.ids.long())
    torch.testing.assert_close(s.values.grad, expected * listed, rtol=0, atol=0)


def test_spike_counts_shared_among_threads_name_the_first_faulty_row():
    """Faults in both threads' shares of the samples: the error names the first in
    (t, b) order, whichever thread met its own first."""
    from snn_ipu.backends.emulator import get_num_threads, set_num_threads

    s = _random_list(40, 7, 300, 0.3, seed=11)
    for t, b in ((9, 1), (5, 5)):  # thread 0's samples are 0-2, thread 1's 3-6
        s.counts.data[t, b, 1] = max(int(s.counts[t, b, 1]), 1)
        s.ids.data[t, b, 0] = 300
    old = get_num_threads()
    set_num_threads(2)
    try:
        with pytest.raises(ValueError, match="id 300 at t=5, b=5, k=0 out of"):
            s.spike_counts()
    finally:
        set_num_threads(old)


def test_spike_counts_second_derivative():
    # create_graph=True: the gradient of the counts is itself differentiable
    # (the reference backend's higher-order gradients go through it).
    s = _random_list(6, 3, 11, 0.3, seed=4, dtype=torch.float64)
    counts = s.spike_counts()
    (g,) = torch.autograd.grad((counts ** 2).sum(), s.values, create_graph=True)
    listed = torch.arange(s.capacity) < s.counts[..., 1:2].long()
    expected = 2 * torch.gather(counts.detach().unsqueeze(0).expand(6, -1, -1), -1,
                                s.ids.long()) * listed
    torch.testing.assert_close(g.detach(), expected)
    g.sum().backward()
    # d/dvalues of sum over listed (t, b, k) of 2 counts[b, id]: 2 x the number of
    # listed entries of sample b with that id, at every listed entry of (b, id)
    per_id = torch.zeros(3, 11, dtype=torch.float64)
    for t, b, k in listed.nonzero().tolist():
        per_id[b, s.ids[t, b, k]] += 1
    expected2 = 2 * torch.gather(per_id.unsqueeze(0).expand(6, -1, -1), -1, s.ids.long())
    torch.testing.assert_close(s.values.grad, expected2 * listed)


def test_spike_counts_of_a_list_edited_after_validation_raise():
    s = _random_list(5, 2, 7, 0.4, seed=2)
    s.ids.data[2, 1, 0] = 7  # out of range, past validation
    s.counts.data[2, 1, 1] = max(int(s.counts[2, 1, 1]), 1)
    with pytest.raises(ValueError, match="spike_counts: spike list id 7 at t=2, b=1, k=0 out of"):
        s.spike_counts()
    s = _random_list(5, 2, 7, 0.4, seed=2)
    s.counts.data[0, 0, 1] = s.capacity + 1
    with pytest.raises(ValueError, match="exceed capacity"):
        s.spike_counts()


def test_spike_counts_of_half_values_take_the_torch_form():
    s = _random_list(4, 2, 9, 0.3, seed=5)
    half = SparseSpikes(s.ids, s.counts, 9, s.values.detach().half())
    torch.testing.assert_close(half.spike_counts().double(), _scatter_counts(half), rtol=1e-3,
                               atol=1e-3)


@pytest.mark.parametrize("form", ["to_dense", "spike_counts", "spike_counts_create_graph",
                                  "spike_counts_half"])
def test_an_infinite_gradient_at_an_unlisted_neuron_does_not_reach_the_input(form):
    """Padding entries point at neuron 0. An inf gradient there (a float16 overflow, say)
    must give the input 0 at every unlisted entry and leave the listed ones alone: the
    lists select their entries rather than multiply by a 0/1 mask (inf * 0 = NaN)."""
    dtype = torch.float16 if form == "spike_counts_half" else torch.float32
    x = torch.tensor([[[0.0, 1.0, 1.0]], [[0.0, 0.0, 1.0]]], dtype=dtype, requires_grad=True)
    s = SparseSpikes.from_dense(x)
    assert s.capacity == 2 and s.counts[1, 0, 1] == 1  # step 1 has a padding entry
    out = s.to_dense() if form == "to_dense" else s.spike_counts()
    g = torch.ones_like(out)
    g[..., 0] = float("inf")
    if form == "spike_counts_create_graph":
        (gx,) = torch.autograd.grad(out, x, g, create_graph=True)
    else:
        out.backward(g)
        gx = x.grad
    # from_dense's gradient reaches listed entries (here the spikes) alone
    assert gx.tolist() == [[[0.0, 1.0, 1.0]], [[0.0, 0.0, 1.0]]]


def test_to_moves_the_list_and_keeps_its_gradient_path():
    x = torch.tensor([[[0.0, 1.0, 0.0, 1.0]]], requires_grad=True)
    s = SparseSpikes.from_dense(x, eligible=torch.tensor([[[True, False, False, False]]]))
    moved = s.to("meta")
    assert moved.ids.device.type == moved.counts.device.type == "meta"
    assert moved.values.device.type == "meta" and moved.num_neurons == 4
    assert moved.values_checked == s.values_checked
    back = s.to(torch.device("cpu"))
    assert back.ids.tolist() == s.ids.tolist() and back.counts.tolist() == s.counts.tolist()
    (back.to_dense() * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert x.grad.tolist() == [[[1.0, 2.0, 0.0, 4.0]]]


def test_to_a_dtype_is_refused_by_name():
    s = SparseSpikes.from_dense(torch.tensor([[[0.0, 1.0]]]))
    with pytest.raises(TypeError, match="takes a device, got the dtype torch.float16"):
        s.to(torch.float16)


@pytest.mark.parametrize("moved", ["ids", "counts", "values"])
def test_a_list_split_across_devices_is_refused(moved):
    """ids, counts and values on two devices: torch's scatter with a ``meta`` index into
    a CPU tensor returns garbage instead of raising, so the reference backend computed on
    it silently; the list is refused by name, at construction and at a layer."""
    from snn_ipu import LIFLayer

    s = SparseSpikes.from_dense(torch.tensor([[[0.0, 1.0, 0.0, 1.0]]]))
    parts = {"ids": s.ids, "counts": s.counts, "values": s.values}
    parts[moved] = parts[moved].to("meta")
    with pytest.raises(ValueError, match="must be on one device, got"):
        SparseSpikes(parts["ids"], parts["counts"], 4, parts["values"])
    unchecked = SparseSpikes(parts["ids"], parts["counts"], 4, parts["values"], validate=False)
    with pytest.raises(ValueError, match="LIFLayer.*must be on one device"):
        LIFLayer(4, 3, backend="reference")(unchecked)
