"""Surrogate derivatives against snnTorch's autograd and hand-computed values."""

import pytest
import snntorch.surrogate as sts
import torch

from snn_ipu import surrogate
from snn_ipu.backends.reference import spike

X = torch.linspace(-2, 2, 81, dtype=torch.float64)


def snntorch_derivative(fn):
    x = X.clone().requires_grad_()
    fn(x).sum().backward()
    return x.grad


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (surrogate.ATan(2.0), sts.atan(2.0)),
        (surrogate.ATan(5.0), sts.atan(5.0)),
        (surrogate.FastSigmoid(25.0), sts.fast_sigmoid(25.0)),
        (surrogate.Sigmoid(10.0), sts.sigmoid(10.0)),
        (surrogate.StraightThrough(), sts.straight_through_estimator()),
    ],
)
def test_matches_snntorch(ours, theirs):
    torch.testing.assert_close(ours.derivative(X), snntorch_derivative(theirs))


def test_triangle_by_hand():
    tri = surrogate.Triangle(width=0.5, height=2.0)
    x = torch.tensor([-1.0, -0.25, 0.0, 0.1, 0.5])
    assert tri.derivative(x).tolist() == pytest.approx([0.0, 1.0, 2.0, 1.6, 0.0])


def test_derivative_only_where_near():
    x = torch.tensor([-0.3, -0.2, -0.1, 0.0, 0.4], requires_grad=True)
    near = torch.tensor([False, False, True, True, True])
    spike(x, surrogate.StraightThrough(), near).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]


def test_infinite_gradient_outside_the_window_gives_zero_not_nan():
    """The emulator never reads the gradient at neurons outside the window; the reference
    selects it away rather than multiplying it by a zero derivative (inf * 0 = NaN)."""
    x = torch.tensor([-0.5, 0.1], requires_grad=True)
    s = spike(x, surrogate.StraightThrough(), torch.tensor([False, True]))
    s.backward(torch.tensor([float("inf"), 2.0]))
    assert x.grad.tolist() == [0.0, 2.0]


def test_names():
    assert surrogate.get("atan") == surrogate.ATan(2.0)
    assert surrogate.get(None) == surrogate.ATan(2.0)
    assert isinstance(surrogate.get("fast_sigmoid"), surrogate.FastSigmoid)


def test_sigmoid_keeps_both_tails_in_float32():
    """The closed form in float64 (snnTorch's, which is exact there) against ours in float32,
    where s * (1 - s) lost the positive tail to cancellation (0.0 at x = 0.8, slope 25)."""
    x = torch.tensor([-0.8, -0.5, 0.5, 0.8])
    exact = 25.0 * torch.exp(-25.0 * x.double()) / (1 + torch.exp(-25.0 * x.double())) ** 2
    ours = surrogate.Sigmoid(25.0).derivative(x)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours.double(), exact, rtol=1e-5, atol=0)
    assert ours[3] > 0 and ours[3] == ours[0]


def test_get_refuses_the_base_class_and_classes():
    with pytest.raises(TypeError, match="abstract base class; use ATan()"):
        surrogate.get(surrogate.Surrogate())
    with pytest.raises(TypeError, match=r"pass ATan\(\) rather than the class"):
        surrogate.get(surrogate.ATan)
