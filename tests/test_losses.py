"""snn_ipu.losses against snntorch.functional (independent reference), hand-computed
values, the sparse input form and error cases."""

import math

import numpy as np
import pytest
import snntorch.functional as SF
import torch
import torch.nn.functional as F

from snn_ipu import SparseSpikes
from snn_ipu.losses import (
    accuracy,
    ce_count_loss,
    ce_membrane_loss,
    ce_rate_loss,
    mse_count_loss,
    mse_membrane_loss,
    spike_count,
)


def random_spikes(T=12, B=5, N=4, p=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(T, B, N, generator=g) < p).float()


def random_targets(B=5, C=4, seed=1):
    return torch.randint(0, C, (B,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def spk():
    return random_spikes()


@pytest.fixture
def targets():
    return random_targets()


def test_spike_count_dense_and_sparse_agree(spk):
    sparse = SparseSpikes.from_dense(spk)
    assert torch.equal(spike_count(spk), spk.sum(0))
    assert torch.equal(spike_count(sparse), spk.sum(0))


def test_spike_count_population_is_contiguous_blocks():
    spk = torch.zeros(2, 1, 6)
    spk[0, 0, 0] = spk[1, 0, 1] = 1  # class 0 (neurons 0, 1)
    spk[0, 0, 5] = 1  # class 2 (neurons 4, 5)
    assert spike_count(spk, population=2).tolist() == [[2.0, 0.0, 1.0]]


def test_ce_count_matches_snntorch(spk, targets):
    ours = ce_count_loss(spk, targets)
    ref = SF.ce_count_loss()(spk, targets)
    assert torch.allclose(ours, ref.reshape(()), atol=1e-6)


def test_ce_count_hand_computed():
    # one sample, counts (2, 0): -log(e^2 / (e^2 + 1))
    spk = torch.zeros(3, 1, 2)
    spk[0, 0, 0] = spk[2, 0, 0] = 1
    expected = -math.log(math.exp(2) / (math.exp(2) + 1))
    assert ce_count_loss(spk, torch.tensor([0])).item() == pytest.approx(expected, rel=1e-6)


def test_ce_count_population_matches_snntorch():
    spk = random_spikes(N=12, seed=3)
    targets = random_targets(C=3)
    ours = ce_count_loss(spk, targets, population=4)
    ref = SF.ce_count_loss(population_code=True, num_classes=3)(spk, targets)
    assert torch.allclose(ours, ref.reshape(()), atol=1e-6)


def test_ce_rate_matches_snntorch(spk, targets):
    ours = ce_rate_loss(spk, targets)
    ref = SF.ce_rate_loss()(spk.clone(), targets)
    assert torch.allclose(ours, ref.reshape(()), atol=1e-6)


def test_ce_rate_differs_from_count(spk, targets):
    # guards against ce_rate_loss silently being the count loss
    assert not torch.allclose(ce_rate_loss(spk, targets), ce_count_loss(spk, targets))


def test_ce_rate_population_pools_each_step():
    spk = random_spikes(N=6, seed=4)
    targets = random_targets(C=3, seed=5)
    pooled = spk.reshape(12, 5, 3, 2).sum(-1)
    by_step = torch.stack([F.cross_entropy(pooled[t], targets) for t in range(12)]).mean()
    assert torch.allclose(ce_rate_loss(spk, targets, population=2), by_step)


@pytest.mark.parametrize("population", [1, 3])
def test_mse_count_matches_snntorch(population):
    spk = random_spikes(N=4 * population, seed=6)
    targets = random_targets(C=4)
    ref_fn = (
        SF.mse_count_loss(correct_rate=0.8, incorrect_rate=0.1)
        if population == 1
        else SF.mse_count_loss(0.8, 0.1, population_code=True, num_classes=4)
    )
    ours = mse_count_loss(spk, targets, 0.8, 0.1, population=population)
    assert torch.allclose(ours, ref_fn(spk, targets).reshape(()), atol=1e-6)


def test_mse_count_hand_computed():
    # T=4, rates (1, 0): targets 4 and 0; counts (1, 2) -> ((1-4)^2 + (2-0)^2) / 2 / 4
    spk = torch.zeros(4, 1, 2)
    spk[0, 0, 0] = spk[1, 0, 1] = spk[2, 0, 1] = 1
    loss = mse_count_loss(spk, torch.tensor([0]), 1.0, 0.0)
    assert loss.item() == pytest.approx((9 + 4) / 2 / 4)


def test_ce_membrane_max_matches_snntorch():
    mem = torch.randn(10, 6, 5, generator=torch.Generator().manual_seed(7))
    targets = random_targets(B=6, C=5)
    ref = SF.ce_max_membrane_loss()(mem, targets)
    assert torch.allclose(ce_membrane_loss(mem, targets), ref.reshape(()), atol=1e-6)


@pytest.mark.parametrize(
    "reduction,reduce",
    [("mean", lambda m: m.mean(0)), ("last", lambda m: m[-1]), ("sum", lambda m: m.sum(0))],
)
def test_ce_membrane_other_reductions(reduction, reduce):
    mem = torch.randn(10, 6, 5, generator=torch.Generator().manual_seed(8))
    targets = random_targets(B=6, C=5)
    expected = torch.nn.functional.cross_entropy(reduce(mem), targets)
    assert torch.allclose(ce_membrane_loss(mem, targets, time_reduction=reduction), expected)


@pytest.mark.parametrize("loss_fn", [ce_count_loss, ce_rate_loss, mse_count_loss])
def test_sparse_input_gives_same_loss_and_gradient(loss_fn, spk, targets):
    dense = spk.clone().requires_grad_(True)
    sparse_src = spk.clone().requires_grad_(True)
    sparse = SparseSpikes.from_dense(sparse_src)
    loss_dense = loss_fn(dense, targets)
    loss_sparse = loss_fn(sparse, targets)
    assert torch.allclose(loss_dense, loss_sparse, atol=1e-6)
    loss_dense.backward()
    loss_sparse.backward()
    # from_dense passes gradients back only at spike positions
    mask = spk.bool()
    assert torch.allclose(dense.grad[mask], sparse_src.grad[mask], atol=1e-6)
    assert dense.grad.abs().sum() > 0


def test_gradient_matches_snntorch(spk, targets):
    ours_in = spk.clone().requires_grad_(True)
    ref_in = spk.clone().requires_grad_(True)
    ce_count_loss(ours_in, targets).backward()
    SF.ce_count_loss()(ref_in, targets).backward()
    assert torch.allclose(ours_in.grad, ref_in.grad, atol=1e-6)


def test_accuracy_matches_snntorch(spk):
    targets = spk.sum(0).argmax(1)
    targets[0] = (targets[0] + 1) % 4  # one wrong
    assert accuracy(spk, targets) == pytest.approx(SF.accuracy_rate(spk, targets))
    assert accuracy(spk, targets) == pytest.approx(4 / 5)
    assert accuracy(SparseSpikes.from_dense(spk), targets) == pytest.approx(4 / 5)


def test_accuracy_is_exact_not_float32_rounded():
    spk = torch.zeros(2, 3, 2)
    spk[:, 0, 0] = 1.0  # sample 0 says class 0; samples 1 and 2 tie, to class 0
    acc = accuracy(spk, torch.tensor([0, 1, 1]))
    assert acc == 1 / 3 and acc == SF.accuracy_rate(spk, torch.tensor([0, 1, 1]))


def test_accuracy_population_matches_snntorch():
    spk = random_spikes(N=8, B=20, seed=9)
    targets = random_targets(B=20, C=4, seed=10)
    ours = accuracy(spk, targets, population=2)
    ref = SF.accuracy_rate(spk, targets, population_code=True, num_classes=4)
    assert ours == pytest.approx(ref)


def test_accuracy_on_membrane_with_max():
    mem = torch.zeros(3, 2, 3)
    mem[1, 0, 2] = 5.0  # sample 0: peak in class 2
    mem[:, 1, 1] = 1.0  # sample 1: class 1 all along
    mem[2, 1, 0] = 2.0  # ...but class 0 peaks higher
    assert accuracy(mem, torch.tensor([2, 0]), time_reduction="max") == 1.0
    assert accuracy(mem, torch.tensor([2, 1]), time_reduction="sum") == 1.0


def test_duck_typed_sparse_object(spk, targets):
    class Duck:
        def to_dense(self):
            return spk

        def spike_counts(self):
            return spk.sum(0)

        num_steps = spk.shape[0]

    assert torch.allclose(ce_count_loss(Duck(), targets), ce_count_loss(spk, targets))
    assert torch.allclose(ce_rate_loss(Duck(), targets), ce_rate_loss(spk, targets))
    assert torch.allclose(mse_count_loss(Duck(), targets), mse_count_loss(spk, targets))


# -- errors -------------------------------------------------------------------


@pytest.mark.parametrize("loss_fn", [ce_count_loss, ce_rate_loss])
def test_population_must_divide_outputs(loss_fn, targets):
    with pytest.raises(ValueError, match="not divisible by population"):
        loss_fn(random_spikes(N=5), targets, population=2)


@pytest.mark.parametrize("bad", [torch.tensor([0, 1, 2, 3, 4]), torch.tensor([-1, 0, 0, 0, 0])])
def test_targets_out_of_range(spk, bad):
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 4\)"):
        ce_count_loss(spk, bad)


def test_targets_with_population_are_class_indices():
    spk = random_spikes(N=8)
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        ce_count_loss(spk, torch.tensor([0, 1, 2, 3, 5]), population=2)


def test_bad_shapes(spk, targets):
    with pytest.raises(ValueError, match=r"\[T, B, N\]"):
        ce_count_loss(spk[0], targets)
    with pytest.raises(ValueError, match="targets must have shape"):
        ce_count_loss(spk, targets[:3])
    with pytest.raises(ValueError, match="integer class indices"):
        ce_count_loss(spk, targets.float())
    with pytest.raises(ValueError, match="reduction"):
        ce_membrane_loss(spk, targets, time_reduction="median")
    with pytest.raises(ValueError, match="correct_rate"):
        mse_count_loss(spk, targets, correct_rate=1.5)
    with pytest.raises(ValueError, match="positive int"):
        spike_count(spk, population=0)


def test_losses_train_through_a_real_layer():
    from snn_ipu import LIFLayer

    torch.manual_seed(0)
    layer = LIFLayer(6, 4, backend="reference")
    x = random_spikes(T=10, B=5, N=6, p=0.5, seed=11)
    targets = random_targets()
    out = layer(x)
    assert isinstance(out, SparseSpikes)
    loss = ce_rate_loss(out, targets) + ce_count_loss(out, targets)
    loss.backward()
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0
    assert torch.allclose(spike_count(out), out.to_dense().sum(0))


def test_accuracy_refuses_nan_outputs():
    """argmax ranks NaN first: a diverged output in the target's column scored 1.0."""
    mem = torch.tensor([[[math.nan, 5.0, 0.0]], [[math.nan, 6.0, 0.0]]])
    with pytest.raises(ValueError, match="NaN or inf"):
        accuracy(mem, torch.tensor([0]), time_reduction="max")


@pytest.mark.parametrize("fn", [accuracy, ce_count_loss, mse_count_loss, spike_count])
def test_population_true_is_refused(fn, targets):
    """snnTorch's population_code=True is not a population size (True passed as 1)."""
    spk = random_spikes(N=20)
    args = (spk,) if fn is spike_count else (spk, targets)
    with pytest.raises(ValueError, match="population_code=True is population=N // num_classes"):
        fn(*args, population=True)


def test_population_takes_numpy_ints(targets):
    import numpy as np

    spk = random_spikes(N=8)
    assert torch.equal(ce_count_loss(spk, targets, population=np.int64(2)),
                       ce_count_loss(spk, targets, population=2))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
@pytest.mark.parametrize("fn", [ce_count_loss, ce_rate_loss, mse_count_loss])
def test_every_integer_target_dtype_gives_the_int64_loss(fn, dtype, spk, targets):
    assert torch.equal(fn(spk, targets.to(dtype)), fn(spk, targets))


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.uint8])
@pytest.mark.parametrize("fn", [ce_count_loss, ce_rate_loss, mse_count_loss])
def test_bool_and_integer_spikes_count_as_floats(fn, dtype, spk, targets):
    """Spikes as `mem > thr` (bool) or integers: snnTorch's float loss of the same 0/1 values."""
    ref = {ce_count_loss: SF.ce_count_loss(), ce_rate_loss: SF.ce_rate_loss(),
           mse_count_loss: SF.mse_count_loss(1.0, 0.0)}[fn]
    torch.testing.assert_close(fn(spk.to(dtype), targets), ref(spk, targets).reshape(()))


@pytest.mark.parametrize("fn", [ce_count_loss, ce_rate_loss, mse_count_loss])
def test_count_losses_refuse_a_membrane(fn, targets):
    mem = torch.randn(12, 5, 4)
    with pytest.raises(ValueError, match="must be 0/1 spikes.*ce_membrane_loss"):
        fn(mem, targets)


@pytest.mark.parametrize("T, B", [(0, 5), (12, 0)])
@pytest.mark.parametrize("sparse", [False, True])
def test_empty_time_or_batch_is_an_error(T, B, sparse):
    spk = torch.zeros(T, B, 4)
    out = SparseSpikes.from_dense(spk) if sparse else spk
    targets = torch.zeros(B, dtype=torch.long)
    for fn in (ce_count_loss, ce_rate_loss, mse_count_loss, accuracy):
        with pytest.raises(ValueError, match=f"T={T} steps and B={B} samples"):
            fn(out, targets)
    if not sparse:
        for reduction in ("max", "last"):
            with pytest.raises(ValueError, match=f"T={T} steps"):
                ce_membrane_loss(spk, targets, time_reduction=reduction)
            with pytest.raises(ValueError, match=f"T={T} steps"):
                accuracy(spk, targets, time_reduction=reduction)


def test_mse_membrane_matches_snntorch():
    mem = torch.randn(9, 5, 4, generator=torch.Generator().manual_seed(3), requires_grad=True)
    targets = random_targets()
    # snnTorch 1.0 moves a negative off_target below on_target to 0 (see the docstring)
    for on, off in ((1.0, 0.0), (0.8, 0.0), (1.0, 0.3), (-1.0, -0.5)):
        ours = mse_membrane_loss(mem, targets, on, off)
        ref = SF.mse_membrane_loss(on_target=on, off_target=off)(mem, targets).reshape(())
        torch.testing.assert_close(ours, ref)
        g_ours, = torch.autograd.grad(ours, mem)
        g_ref, = torch.autograd.grad(ref, mem)
        torch.testing.assert_close(g_ours, g_ref)


def test_mse_membrane_off_target_by_hand():
    mem = torch.tensor([[[0.5, 0.0]], [[1.0, -1.0]]])  # T=2, B=1, C=2, target class 1
    # targets (off, on) = (-0.2, 0.8): ((0.7^2 + 0.8^2) + (1.2^2 + 1.8^2)) / 4
    expected = (0.49 + 0.64 + 1.44 + 3.24) / 4
    got = mse_membrane_loss(mem, torch.tensor([1]), on_target=0.8, off_target=-0.2)
    assert float(got) == pytest.approx(expected)


def test_per_step_membrane_cross_entropy_is_tutorial_5s_loss_over_t():
    """snnTorch's tutorial 5: sum over steps of nn.CrossEntropyLoss on each step's membrane."""
    mem = torch.randn(7, 5, 4, generator=torch.Generator().manual_seed(4))
    targets = random_targets()
    tutorial = sum(torch.nn.CrossEntropyLoss()(mem[t], targets) for t in range(7))
    torch.testing.assert_close(7 * ce_membrane_loss(mem, targets, "per_step"), tutorial)


# -- batch reduction and class weights, against snnTorch -----------------------------

WEIGHT = torch.tensor([0.5, 2.0, 1.0, 3.0])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropies_reduction_and_weight_match_snntorch(spk, targets, reduction, weighted):
    weight = WEIGHT if weighted else None
    mem = torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(3))
    pairs = [
        (ce_count_loss(spk, targets, weight=weight, reduction=reduction),
         SF.ce_count_loss(weight=weight, reduction=reduction)(spk, targets)),
        (ce_rate_loss(spk, targets, weight=weight, reduction=reduction),
         SF.ce_rate_loss(weight=weight, reduction=reduction)(spk.clone(), targets)),
        (ce_membrane_loss(mem, targets, weight=weight, reduction=reduction),
         SF.ce_max_membrane_loss(weight=weight, reduction=reduction)(mem, targets)),
    ]
    for ours, ref in pairs:
        if weighted and reduction == "sum":
            # snnTorch returns the weighted per-sample losses unreduced here
            ref = ref.sum()
        torch.testing.assert_close(ours, ref.reshape(ours.shape), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_squared_errors_reduction_matches_snntorch(spk, targets, reduction):
    mem = torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(
        mse_count_loss(spk, targets, 0.8, 0.2, reduction=reduction),
        SF.mse_count_loss(0.8, 0.2, reduction=reduction)(spk, targets).reshape(
            (5, 4) if reduction == "none" else ()), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(
        mse_membrane_loss(mem, targets, reduction=reduction),
        SF.mse_membrane_loss(reduction=reduction)(mem, targets).reshape(
            (5, 4) if reduction == "none" else ()), rtol=1e-6, atol=1e-6)


def test_squared_error_weight_scales_each_sample_by_its_class(spk, targets):
    # snnTorch 1.0 multiplies [B, C] losses by weight[targets] ([B]), which broadcasts
    # only when B == C (and then along the wrong axis): checked by hand instead
    counts = spk.sum(0)
    target_counts = torch.full((5, 4), float(int(12 * 0.2)))
    target_counts[torch.arange(5), targets] = float(int(12 * 0.8))
    per = (counts - target_counts) ** 2 / 12 * WEIGHT[targets][:, None]
    torch.testing.assert_close(mse_count_loss(spk, targets, 0.8, 0.2, weight=WEIGHT),
                               per.mean())
    mem = torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(5))
    goal = torch.zeros(5, 4)
    goal[torch.arange(5), targets] = 1.0
    per = ((mem - goal) ** 2).mean(0) * WEIGHT[targets][:, None]
    torch.testing.assert_close(mse_membrane_loss(mem, targets, weight=WEIGHT, reduction="sum"),
                               per.sum())


def test_per_step_weighted_by_hand(targets):
    mem = torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(6))
    per = torch.stack([F.cross_entropy(mem[t], targets, reduction="none") for t in range(6)])
    expected = (per.mean(0) * WEIGHT[targets]).mean()
    torch.testing.assert_close(ce_membrane_loss(mem, targets, "per_step", weight=WEIGHT),
                               expected)


@pytest.mark.parametrize("bad, match", [
    ("max", "time_reduction='max'"), ("median", "reduction must be one of"),
])
def test_batch_reduction_is_checked_and_points_at_time_reduction(spk, targets, bad, match):
    with pytest.raises(ValueError, match=match):
        ce_membrane_loss(spk, targets, reduction=bad)


def test_an_unknown_time_reduction_names_every_choice(targets):
    mem = torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(6))
    with pytest.raises(ValueError, match=r"time_reduction must be one of .*'per_step'.*'median'"):
        ce_membrane_loss(mem, targets, "median")


@pytest.mark.parametrize("weight, match", [
    (torch.ones(3), r"shape \[C\] = \[4\]"), (torch.tensor([1.0, -1, 1, 1]), ">= 0"),
    (torch.tensor([1.0, float("nan"), 1, 1]), "finite"),
])
def test_bad_class_weights(spk, targets, weight, match):
    with pytest.raises(ValueError, match=match):
        ce_count_loss(spk, targets, weight=weight)


def test_batch_first_dense_inputs_with_time_first_false(spk, targets):
    batch_first = spk.transpose(0, 1).contiguous()
    for fn in (ce_count_loss, ce_rate_loss, mse_count_loss):
        torch.testing.assert_close(fn(batch_first, targets, time_first=False), fn(spk, targets))
    mem = torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(
        ce_membrane_loss(mem.transpose(0, 1), targets, time_first=False),
        ce_membrane_loss(mem, targets))
    assert accuracy(batch_first, targets, time_first=False) == accuracy(spk, targets)
    with pytest.raises(ValueError, match="always time-major"):
        ce_count_loss(SparseSpikes.from_dense(spk), targets, time_first=False)


@pytest.mark.parametrize("call, name", [
    (lambda s, y: mse_count_loss(s, y, True, False), "correct_rate"),  # was 1.0 and 0.0
    (lambda s, y: mse_count_loss(s, y, 0.8, "0.2"), "incorrect_rate"),
    (lambda s, y: mse_membrane_loss(s, y, np.True_), "on_target"),  # was 1.0
    (lambda s, y: mse_membrane_loss(s, y, 1.0, "0"), "off_target"),
])
def test_target_rates_and_potentials_of_the_wrong_type_are_named(spk, targets, call, name):
    with pytest.raises(TypeError, match=f"{name} must be a number"):
        call(spk, targets)


def test_an_unchecked_list_is_checked_before_it_is_counted():
    """A list built with validate=False whose eligible-only entry holds 0.5: the losses
    counted 1.5 spikes where the list has 1 (a layer refused the same list); now they
    refuse it as a layer does, and take a correct unchecked list as a checked one."""
    ids = torch.tensor([[[0, 1]]], dtype=torch.int32)
    counts = torch.tensor([[[1, 2]]], dtype=torch.int32)
    bad = SparseSpikes(ids, counts, 3, values=torch.tensor([[[1.0, 0.5]]]), validate=False)
    with pytest.raises(ValueError, match="eligible-only entries must have value 0"):
        ce_count_loss(bad, torch.tensor([0]))
    with pytest.raises(ValueError, match="eligible-only entries must have value 0"):
        mse_count_loss(bad, torch.tensor([0]))
    good = SparseSpikes(ids, counts, 3, values=torch.tensor([[[1.0, 0.0]]]), validate=False)
    checked = SparseSpikes(ids, counts, 3, values=torch.tensor([[[1.0, 0.0]]]))
    assert float(ce_count_loss(good, torch.tensor([0]))) == float(
        ce_count_loss(checked, torch.tensor([0])))
    assert spike_count(good).tolist() == [[1.0, 0.0, 0.0]]
