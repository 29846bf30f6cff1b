"""Surrogate derivatives against snnTorch's autograd and hand-computed values."""

from dataclasses import dataclass

import pytest
import snntorch.surrogate as sts
import torch

from snn_ipu import LIFLayer, surrogate
from snn_ipu._codes import SURROGATES
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


@pytest.mark.parametrize("backend", ["reference", "emulator"])
def test_a_window_of_triangles_width_gives_the_exact_gradients(backend):
    """Triangle's derivative is zero at and below ``threshold - width``, so a window of
    its width lists every neuron whose derivative is not: the gradients of
    ``grad_window=None`` (the reference's, every neuron listed), with fewer entries."""
    from snn_ipu import LIFLayer, SparseSpikes

    T, B, IN, HID, OUT = 25, 4, 40, 60, 6
    tri = surrogate.Triangle(width=0.4)
    g = torch.Generator().manual_seed(3)
    x = SparseSpikes.from_dense((torch.rand(T, B, IN, generator=g) < 0.2).float())
    w1 = torch.randn(HID, IN, generator=g) * 0.5
    w2 = torch.randn(OUT, HID, generator=g) * 0.6
    readout = torch.randn(OUT, generator=g)

    def grads(window, on):
        torch.manual_seed(0)
        layers = [LIFLayer(IN, HID, beta=0.9, surrogate=tri, grad_window=window, backend=on),
                  LIFLayer(HID, OUT, beta=0.9, surrogate=tri, grad_window=window, backend=on)]
        with torch.no_grad():
            layers[0].weight.copy_(w1)
            layers[1].weight.copy_(w2)
        hidden = layers[0](x)
        (layers[1](hidden).to_dense().sum(0) * readout).sum().backward()
        listed = int(hidden.counts[..., 1].sum())
        return [p.grad for layer in layers for p in (layer.weight, layer.bias)], listed

    exact, all_listed = grads(None, "reference")
    assert all_listed == T * B * HID
    windowed, listed = grads(tri.width, backend)
    assert listed < all_listed / 2  # the window follows the neurons near threshold
    for got, want, what in zip(windowed, exact, ("w1", "b1", "w2", "b2")):
        assert float(want.abs().max()) > 0, what
        # float32 sums in another order than the reference's: errors relative to the
        # gradient's scale (1e-5 of it on an AVX2 host), not to each element
        scale = float(want.abs().max())
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * scale, msg=what)
    # a narrower window cuts the derivative off where it is not zero
    narrower, _ = grads(tri.width / 2, backend)
    assert not torch.allclose(narrower[0], exact[0], rtol=1e-3, atol=1e-5)


def test_a_subclass_may_change_defaults_but_not_the_derivative():
    """The emulator and the IPU evaluate the built-in derivative of a surrogate's kind in
    C++; a Python override reached the reference backend alone (a layer's dL/dW summed
    to 94207 there and 119 on the emulator for the same model)."""

    class Steep(surrogate.ATan):
        def derivative(self, x):
            return 100.0 * torch.ones_like(x)

    with pytest.raises(TypeError, match=r"Steep overrides ATan\.derivative"):
        surrogate.get(Steep())
    with pytest.raises(TypeError, match="overrides ATan.derivative"):
        LIFLayer(4, 3, surrogate=Steep())
    layer = LIFLayer(4, 3)
    with pytest.raises(TypeError, match="overrides ATan.derivative"):
        layer.surrogate = Steep()

    class Renamed(surrogate.FastSigmoid):
        kind = SURROGATES["sigmoid"]  # FastSigmoid's slope read as Sigmoid's

    with pytest.raises(TypeError, match="is not one of snn_ipu's surrogates"):
        surrogate.get(Renamed())

    @dataclass(frozen=True)
    class Extra(surrogate.Triangle):
        offset: float = 1.0  # a third parameter no native code reads

    with pytest.raises(TypeError, match="changes Triangle's parameters"):
        surrogate.get(Extra())

    @dataclass(frozen=True)
    class ATan5(surrogate.ATan):
        alpha: float = 5.0

    assert surrogate.get(ATan5()) == ATan5()
    torch.testing.assert_close(ATan5().derivative(X), snntorch_derivative(sts.atan(5.0)))


@pytest.mark.parametrize("make, shown", [
    (lambda: surrogate.ATan(1e39), "inf"),  # NaN gradients
    (lambda: surrogate.Sigmoid(slope=1e39), "inf"),
    (lambda: surrogate.Triangle(width=1e-46), "0.0"),  # no gradient at all
    (lambda: surrogate.FastSigmoid(slope=1e-46), "0.0"),  # the straight-through estimator
    (lambda: surrogate.Triangle(height=1e-50), "0.0"),
])
def test_parameters_must_survive_float32(make, shown):
    with pytest.raises(ValueError, match=f"is {shown} in float32"):
        make()


def test_small_and_large_float32_parameters_are_kept():
    # a float32 subnormal and a value near float32's largest are still > 0 and finite
    assert surrogate.FastSigmoid(1e-44).slope == 1e-44
    assert surrogate.ATan(3e38).alpha == 3e38
    assert surrogate.Triangle(1e-3, 2.0).derivative(torch.tensor([0.0])).item() == 2.0
