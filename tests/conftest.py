"""Shared helpers: seeded random problems that stay clear of threshold ties."""

import pytest
import torch

BACKENDS = ["reference", "emulator"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def binary(shape, p, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) < p).float()


def assert_rel_close(actual, expected, rtol, what):
    """max |a - e| <= rtol * max |e| (relative to the tensor's scale)."""
    assert actual is not None, f"{what}: no gradient"
    scale = expected.abs().max().clamp(min=1e-12)
    err = (actual - expected).abs().max()
    assert err <= rtol * scale, f"{what}: max error {err:.3e} vs scale {scale:.3e}"


def margin(membrane, threshold, window=None):
    """Distance of every membrane value to the decision lines of the forward pass."""
    m = (membrane - threshold).abs().min()
    if window is not None:
        m = torch.minimum(m, (membrane - (threshold - window)).abs().min())
    return float(m.detach())


def tie_free(make_layer, shape, window=None, seeds=40):
    """(layer, x): the first seed whose reference layer ``make_layer(seed)`` keeps every
    membrane clear of the decision lines (threshold 1) on a binary input ``x``."""
    for seed in range(seeds):
        layer = make_layer(seed)
        x = binary(shape, 0.25, seed)
        layer.record_membrane = True
        with torch.no_grad():
            layer(x)
        layer.record_membrane = False
        if margin(layer.last_membrane, 1.0, window) > 1e-4:
            return layer, x
    pytest.fail("no tie-free seed")
