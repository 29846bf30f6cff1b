"""snn_ipu.encoding against snntorch.spikegen (independent reference)."""

import math

import pytest
import torch
from snntorch import spikegen

from snn_ipu import SparseSpikes
from snn_ipu.encoding import delta, latency, latency_times, rate


def test_rate_identical_draws_to_snntorch():
    data = torch.rand(4, 7, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(123)
    ours = rate(data, num_steps=20, gain=0.8)
    torch.manual_seed(123)
    ref = spikegen.rate(data, num_steps=20, gain=0.8)
    assert ours.shape == (20, 4, 7)
    assert torch.equal(ours, ref)


def test_rate_generator_reproducible_and_statistics():
    data = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0, 1.7])
    a = rate(data, 4000, generator=torch.Generator().manual_seed(1))
    b = rate(data, 4000, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    assert set(a.unique().tolist()) <= {0.0, 1.0}
    expected = data.clamp(0, 1)
    assert torch.allclose(a.mean(0), expected, atol=0.03)
    assert a[:, 0].sum() == 0 and a[:, 4].all() and a[:, 5].all()


def test_rate_time_varying_input_and_offset():
    data = torch.full((5, 3), 0.2)
    torch.manual_seed(4)
    ours = rate(data, None)
    torch.manual_seed(4)
    assert torch.equal(ours, spikegen.rate(data, time_var_input=True))
    # snnTorch ignores gain/offset for time-varying input; we apply them: p = 0.2 * 2 + 0.1
    many = rate(torch.full((4000, 3), 0.2), None, gain=2.0, offset=0.1,
                generator=torch.Generator().manual_seed(5))
    assert many.shape == (4000, 3)
    assert torch.allclose(many.mean(0), torch.full((3,), 0.5), atol=0.03)


@pytest.mark.parametrize("dtype, gain", [(torch.uint8, 4), (torch.int8, 4),
                                         (torch.int16, 512)])
def test_rate_of_integer_data_with_an_integer_gain_does_not_wrap(dtype, gain):
    """p = clip(x * gain + offset, 0, 1) by hand: 0 never fires, 64 and 127 always. In
    the data's own dtype 64 * gain wrapped (to 0 or below), and a feature that should
    always fire never did."""
    data = torch.tensor([0, 64, 127], dtype=dtype)
    spikes = rate(data, 50, gain=gain, generator=torch.Generator().manual_seed(0))
    assert spikes.sum(0).tolist() == [0.0, 50.0, 50.0]
    # an integer offset alike: 0 - 64 is below 0, never firing (uint8 wrapped it to 192)
    spikes = rate(data, 50, gain=1, offset=-64, generator=torch.Generator().manual_seed(0))
    assert spikes.sum(0).tolist() == [0.0, 0.0, 50.0]


def test_rate_of_uint8_pixels_draws_as_snntorch():
    data = torch.randint(0, 256, (4, 7), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(0))
    torch.manual_seed(9)
    ours = rate(data, 20, gain=1 / 255)
    torch.manual_seed(9)
    assert torch.equal(ours, spikegen.rate(data, num_steps=20, gain=1 / 255))


@pytest.mark.parametrize("bad", [{"gain": "2"}, {"offset": None}, {"gain": True}])
def test_rate_names_a_gain_or_offset_that_is_not_a_number(bad):
    with pytest.raises(TypeError, match=f"{next(iter(bad))} must be a number"):
        rate(torch.rand(3), 4, **bad)


def test_rate_output_feeds_sparse_spikes():
    x = rate(torch.rand(3, 10, generator=torch.Generator().manual_seed(2)), 6)
    assert torch.equal(SparseSpikes.from_dense(x).to_dense(), x)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(tau=2),
        dict(tau=1.5, threshold=0.05),
        dict(normalize=True),
        dict(linear=True, normalize=True),
        dict(linear=True, tau=10),
        dict(tau=1.5, clip=True, threshold=0.2),
        dict(linear=True, normalize=True, clip=True, threshold=0.3),
        dict(normalize=True, first_spike_time=3),
    ],
)
def test_latency_matches_snntorch(kwargs):
    data = torch.rand(6, 9, generator=torch.Generator().manual_seed(3))
    data[0, 0], data[0, 1], data[0, 2] = 0.0, 1.0, 0.005  # edges and a sub-threshold value
    ours = latency(data, num_steps=25, **kwargs)
    ref = spikegen.latency(data, num_steps=25, **kwargs)
    assert ours.shape == (25, 6, 9)
    assert torch.equal(ours, ref)


def test_latency_times_match_snntorch_code():
    data = torch.tensor([0.02, 0.5, 1.0])
    times = latency_times(data, 5, normalize=True, linear=True)
    assert torch.allclose(times, torch.tensor([3.92, 2.0, 0.0]))
    ref, _ = spikegen.latency_code(data, num_steps=5, normalize=True)
    assert torch.allclose(latency_times(data, 5, normalize=True), ref)


def test_latency_one_spike_per_feature_brighter_first():
    data = torch.tensor([0.2, 0.6, 1.0])
    spikes = latency(data, 20, linear=True, normalize=True)
    assert torch.equal(spikes.sum(0), torch.ones(3))
    first = spikes.argmax(0)
    assert first[2] < first[1] < first[0]
    assert first.tolist() == [15, 8, 0]  # round(19 * (1 - x)), half to even


def test_latency_errors():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        latency(torch.tensor([1.5]), 10)
    with pytest.raises(ValueError, match="does not fit"):
        latency(torch.tensor([0.001]), 3, tau=5)
    with pytest.raises(ValueError, match="threshold"):
        latency(torch.tensor([0.5]), 10, threshold=1.5)
    with pytest.raises(ValueError, match="tau"):
        latency(torch.tensor([0.5]), 10, tau=0)


@pytest.mark.parametrize("padding", [False, True])
@pytest.mark.parametrize("off_spike", [False, True])
def test_delta_matches_snntorch(padding, off_spike):
    data = torch.tensor([1.0, 2.0, 0.0, 2.0, 2.9, 2.95])
    ours = delta(data, threshold=1.0, padding=padding, off_spike=off_spike)
    ref = spikegen.delta(data, threshold=1.0, padding=padding, off_spike=off_spike)
    assert torch.equal(ours, ref)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.bool])
def test_delta_of_integer_data_does_not_wrap_around(dtype):
    """Integer frames (uint8 pixels): the change is taken in floats, not in the dtype,
    where 100 - 200 wraps to 156 (a decrease firing an ON spike)."""
    values = [[1], [0], [0], [1]] if dtype == torch.bool else [[100], [20], [20], [75]]
    x = torch.tensor(values, dtype=dtype)
    for padding in (False, True):
        want = delta(x.float(), 10 if dtype != torch.bool else 0.5, padding=padding,
                     off_spike=True)
        got = delta(x, 10 if dtype != torch.bool else 0.5, padding=padding, off_spike=True)
        assert torch.equal(got, want), (dtype, padding)
    assert delta(x.float(), 10, padding=True, off_spike=True).flatten().tolist() == (
        [0.0, -1.0, 0.0, 1.0] if dtype != torch.bool else [0.0, 0.0, 0.0, 0.0])


def test_delta_multidimensional():
    data = torch.rand(8, 2, 3, generator=torch.Generator().manual_seed(5))
    assert torch.equal(delta(data, 0.2, off_spike=True), spikegen.delta(data, 0.2, off_spike=True))


def test_rate_float64_draws_as_snntorch():
    data = torch.rand(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(7)
    ours = rate(data, 7)
    torch.manual_seed(7)
    ref = spikegen.rate(data, num_steps=7)
    assert ours.dtype == torch.float32
    assert torch.equal(ours, ref.float())


@pytest.mark.parametrize("num_steps", [2.0, 2.5, True, 0, -1])
def test_encoders_refuse_bad_step_counts(num_steps):
    x = torch.rand(3)
    for fn in (rate, latency, latency_times):
        with pytest.raises(ValueError, match="num_steps must be an integer >= 1"):
            fn(x, num_steps)


def test_rate_refuses_nan_and_clips_inf():
    with pytest.raises(ValueError, match="NaN"):
        rate(torch.tensor([[math.nan, 0.5]]), 3)
    assert rate(torch.tensor([math.inf, -math.inf]), 4).tolist() == [[1.0, 0.0]] * 4


def test_latency_arguments_after_num_steps_are_keywords():
    """snnTorch's positional order is (threshold, tau): the same call must not silently
    encode differently here."""
    x = torch.tensor([0.9, 0.5, 0.2, 0.1])
    with pytest.raises(TypeError):
        latency(x, 20, 0.3, 0.5)
    with pytest.raises(TypeError):
        latency_times(x, 20, 0.3)
    ref = spikegen.latency(x, 20, 0.3, 0.5)
    assert torch.equal(latency(x, 20, threshold=0.3, tau=0.5), ref)


@pytest.mark.parametrize("kwargs, match", [
    ({"tau": math.nan}, "tau must be finite"), ({"tau": math.inf}, "tau must be finite"),
    ({"first_spike_time": 1.5}, "first_spike_time must be an integer"),
    ({"threshold": "0.1"}, "threshold must be a number"), ({"tau": "1"}, "tau must be a number"),
])
def test_latency_refuses_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        latency(torch.rand(4), 10, **kwargs)


def test_latency_refuses_nan_data_and_encodes_empty_data():
    for fn in (latency, latency_times):
        with pytest.raises(ValueError, match="NaN or inf"):
            fn(torch.tensor([math.nan, 0.5]), 5)
    assert latency(torch.zeros(0, 3), 5, normalize=True).shape == (5, 0, 3)
    assert latency_times(torch.zeros(0), 5, normalize=True).shape == (0,)


@pytest.mark.parametrize("threshold", [0.0, -1.0, math.nan, math.inf])
def test_delta_refuses_non_positive_thresholds(threshold):
    with pytest.raises(ValueError, match="threshold must be finite and > 0"):
        delta(torch.tensor([0.0, 0.5, 0.5]), threshold=threshold)


def test_delta_refuses_nan_data():
    with pytest.raises(ValueError, match="NaN or inf"):
        delta(torch.tensor([0.0, math.nan, 1.0, 1.0]))
