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
