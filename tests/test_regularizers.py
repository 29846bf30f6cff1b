"""Activity regularisers against snnTorch (l1_rate_sparsity) and dense formulas."""

import numpy as np
import pytest
import snntorch.functional as SF
import torch

from snn_ipu import LIFLayer, SparseSpikes
from snn_ipu.regularizers import (
    l1_rate_sparsity,
    lower_rate_penalty,
    spike_rates,
    upper_rate_penalty,
)


@pytest.fixture
def spk():
    g = torch.Generator().manual_seed(0)
    return (torch.rand(10, 4, 6, generator=g) < torch.linspace(0.0, 0.5, 6)).float()


def test_l1_rate_sparsity_is_snntorchs(spk):
    expected = SF.reg.l1_rate_sparsity(Lambda=3e-3)(spk)
    torch.testing.assert_close(l1_rate_sparsity(spk, 3e-3), expected)
    torch.testing.assert_close(l1_rate_sparsity(SparseSpikes.from_dense(spk), 3e-3), expected)


def test_rate_bounds_by_hand(spk):
    rates = spk.mean(0)  # [B, N] spikes per step
    lower = ((0.2 - rates).clamp(min=0) ** 2).mean()
    upper = ((rates.mean(1) - 0.1).clamp(min=0) ** 2).mean()
    torch.testing.assert_close(lower_rate_penalty(spk, 0.2), lower)
    torch.testing.assert_close(upper_rate_penalty(spk, 0.1), upper)
    torch.testing.assert_close(upper_rate_penalty(spk, 0.1, per_neuron=True),
                               ((rates - 0.1).clamp(min=0) ** 2).mean())
    torch.testing.assert_close(lower_rate_penalty(spk, 0.2, per_neuron=False),
                               ((0.2 - rates.mean(1)).clamp(min=0) ** 2).mean())
    assert float(lower) > 0 and float(upper) > 0
    torch.testing.assert_close(spike_rates(spk.transpose(0, 1), time_first=False), rates)
    assert float(lower_rate_penalty(spk, 0.0)) == 0.0


def test_penalties_reach_the_weights_through_the_surrogate():
    torch.manual_seed(0)
    layer = LIFLayer(12, 8, backend="reference")
    with torch.no_grad():
        layer.weight.mul_(4)
    x = (torch.rand(15, 3, 12) < 0.3).float()
    out = layer(x)
    (lower_rate_penalty(out, 0.5) + upper_rate_penalty(out, 0.01)).backward()
    assert float(layer.weight.grad.abs().max()) > 0


def test_bad_bounds():
    with pytest.raises(ValueError, match="min_rate"):
        lower_rate_penalty(torch.zeros(2, 1, 1), -0.1)
    with pytest.raises(ValueError, match="scale"):
        l1_rate_sparsity(torch.zeros(2, 1, 1), float("nan"))


@pytest.mark.parametrize("fn, name", [(lower_rate_penalty, "min_rate"),
                                      (upper_rate_penalty, "max_rate")])
@pytest.mark.parametrize("rate", [1.5, 10.0])
def test_rate_bounds_above_one_spike_per_step_are_refused(spk, fn, name, rate):
    """A neuron spikes at most once a step: upper_rate_penalty(spk, 10.0) (10 Hz, say)
    was 0 whatever the spikes, lower_rate_penalty(spk, 1.5) a penalty no network meets."""
    with pytest.raises(ValueError, match=rf"{name} is in spikes per step, in \[0, 1\]"):
        fn(spk, rate)


def test_rate_bounds_at_one_by_hand(spk):
    rates = spk.mean(0)
    torch.testing.assert_close(lower_rate_penalty(spk, 1.0), ((1.0 - rates) ** 2).mean())
    assert float(upper_rate_penalty(spk, 1.0, per_neuron=True)) == 0.0


@pytest.mark.parametrize("call, name", [
    (lambda s: l1_rate_sparsity(s, "1e-3"), "scale"),
    (lambda s: lower_rate_penalty(s, "0.1"), "min_rate"),
    (lambda s: upper_rate_penalty(s, np.True_), "max_rate"),
])
def test_bounds_of_the_wrong_type_are_named(spk, call, name):
    with pytest.raises(TypeError, match=f"{name} must be a number"):
        call(spk)
