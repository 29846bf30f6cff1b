"""What a user can do wrong never crashes or hangs the process, nor gives a silent
wrong answer: each case that once did is run here (in a subprocess where it used to
kill the process) and must end in a clear Python error or in the right result."""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import assert_rel_close, binary

from snn_ipu import LIFLayer, ReadoutLayer, SparseSpikes, SynapticLayer, _memory
from snn_ipu.backends import emulator, emulator_threads


def run_python(code: str, env=None, timeout=120) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter; its exit status tells a crash from an error."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )


def firing_layer(n_in=50, n_out=40, backend="emulator", **kw):
    torch.manual_seed(0)
    layer = LIFLayer(n_in, n_out, backend=backend, **kw)
    with torch.no_grad():
        layer.weight.mul_(5.0)
    return layer


# -- 1. lists edited between a forward pass and its backward pass ---------------------

@pytest.mark.parametrize("edit", [
    "out.ids.data[:] = 2**30",
    "out.counts.data[..., 1] = 2**30",
    "x.ids.data[:] = 2**30",
    "x.counts.data[..., 0] = 2**30",
    "out.ids.numpy()[:] = -7",
])
def test_lists_edited_before_backward_do_not_crash(edit):
    """The backward reads private copies of the lists, so an edit of the ones the user
    holds (out of range here) neither crashes it nor changes its gradient."""
    result = run_python(f"""
        import torch
        from snn_ipu import LIFLayer, SparseSpikes
        def grads(edit):
            torch.manual_seed(0)
            l = LIFLayer(50, 40, backend="emulator")
            l.weight.data *= 5
            x = SparseSpikes.from_dense((torch.rand(20, 4, 50) < .3).float())
            out = l(x)
            if edit:
                {edit}
            out.values.sum().backward()
            return l.weight.grad
        before, after = grads(False), grads(True)
        print("equal" if torch.equal(before, after) else "differ")
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "equal"


@pytest.mark.parametrize("backend", ["emulator", "reference"])
def test_in_range_edits_before_backward_leave_the_gradient_of_the_forward(backend):
    """An in-range edit (another batch's lists, as a prefetching loader that refills a
    shared buffer would make) used to give that batch's gradient silently: the gradient
    is the forward pass's, held against the reference backend on unedited lists."""
    x = SparseSpikes.from_dense(binary((20, 4, 50), 0.3, 1))
    other = SparseSpikes.from_dense(binary((20, 4, 50), 0.3, 2), max_spikes=x.capacity,
                                    overflow="drop")
    expected_layer = firing_layer(backend="reference")
    expected_layer(x).values.sum().backward()
    layer = firing_layer(backend=backend)
    out = layer(x)
    x.ids.data.copy_(other.ids)
    x.counts.data.copy_(other.counts)
    out.ids.data.copy_(out.ids.data.flip(-1))
    out.counts.data[..., 1] = out.counts.data[..., 0]
    out.values.sum().backward()
    assert_rel_close(layer.weight.grad, expected_layer.weight.grad, 1e-4, "weight grad")


@pytest.mark.parametrize("activity, window", [(0.03, 0.1), (0.3, 0.1), (0.3, None)])
def test_weight_reshaped_between_forward_and_backward_is_refused(activity, window):
    """A weight given another shape through .data after the forward pass (heap
    corruption in the native backward before) is refused by name, on the sparse and
    the dense (GEMM) paths."""
    result = run_python(f"""
        import torch
        from snn_ipu import LIFLayer
        torch.manual_seed(0)
        l = LIFLayer(500, 40, grad_window={window}, name="hidden")
        l.weight.data *= 5
        out = l((torch.rand(20, 4, 500) < {activity}).float())
        l.weight.data = torch.randn(40, 400)
        try:
            out.values.sum().backward()
        except RuntimeError as e:
            print(e)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "hidden: weight changed from [40, 500]" in result.stdout
    assert "to [40, 400]" in result.stdout


def test_readout_weight_reshaped_before_backward_is_refused():
    layer = ReadoutLayer(30, 5, name="readout")
    out = layer(binary((6, 2, 30), 0.3, 0))
    layer.weight.data = torch.randn(5, 20)
    with pytest.raises(RuntimeError, match="readout: weight changed from"):
        out.sum().backward()


# -- 3. forked DataLoader workers -----------------------------------------------------

def test_forked_dataloader_workers_run_the_executor():
    """A worker forked after the parent ran a parallel layer used to hang in the
    executor's OpenMP team; it runs on one thread, with the parent's result."""
    result = run_python("""
        import torch
        from torch.utils.data import DataLoader, Dataset
        from snn_ipu import LIFLayer
        torch.manual_seed(0)
        layer = LIFLayer(700, 256)
        x = (torch.rand(100, 64, 700) < 0.05).float()
        with torch.no_grad():
            expected = int(layer(x).counts.sum())
        class Calls(Dataset):
            def __len__(self):
                return 2
            def __getitem__(self, i):
                from snn_ipu.backends import emulator, emulator_threads
                with torch.no_grad():
                    return int(layer(x).counts.sum()), emulator.get_num_threads()
        loader = DataLoader(Calls(), num_workers=1, multiprocessing_context="fork",
                            timeout=60, batch_size=None)
        for total, threads in loader:
            assert total == expected, (total, expected)
            assert threads == 1, threads
        print("ok")
    """, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"


def test_executor_threads_follow_torch_unless_set(monkeypatch):
    monkeypatch.setattr(emulator_threads, "_requested_threads", None)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert emulator.get_num_threads() == 1
    finally:
        torch.set_num_threads(old)
    emulator.set_num_threads(1)
    assert emulator.get_num_threads() == 1


# -- 4. memory ------------------------------------------------------------------------

@pytest.fixture
def little_memory(monkeypatch):
    """64 MiB free, as the pre-flight and the executor's budget see it."""
    monkeypatch.setattr(_memory, "available_bytes", lambda: 64 << 20)


@pytest.mark.parametrize("backend, advice", [
    ("emulator", "a finite grad_window lists only neurons near threshold"),
    ("reference", "the reference backend keeps every neuron-step"),
])
def test_calls_that_cannot_fit_raise_memory_error_first(little_memory, backend, advice):
    """Exact gradients list every neuron-step: the size is known before the call."""
    layer = LIFLayer(20, 4000, backend=backend, name="wide")
    with pytest.raises(MemoryError, match=r"wide: this call needs at least \d+\.\d+ GiB of "
                                          r"memory, more than the 0\.06 GiB free") as info:
        layer(binary((100, 16, 20), 0.1, 0))
    assert advice in str(info.value)


def test_lists_that_outgrow_the_budget_raise_memory_error(little_memory):
    """A window wide enough to list (almost) every neuron is only seen while the lists
    grow: the executor's budget stops them. (Where the input is dense enough for the
    dense input path, its currents, 26 MB, are not available to the lists.)"""
    torch.manual_seed(0)
    layer = LIFLayer(20, 4000, grad_window=50.0, name="windowed")
    x = binary((100, 16, 20), 0.3, 0)
    free = "0\\.04" if x.mean() > emulator.forward_dense_fraction(4000) else "0\\.06"
    with pytest.raises(MemoryError, match=r"windowed: the (spike|output) lists .* need .* GiB of "
                                          rf"memory, more than the {free} GiB available; "
                                          r"list fewer entries"):
        layer(x)
    with torch.no_grad():  # without autograd only spikes are listed: it fits
        layer(x)


def test_the_reproducer_from_the_audit_raises_memory_error():
    """LIFLayer(200, 20000) on [500, 128, 200] with exact gradients: 23.8 GiB of lists,
    killed by the OOM killer before; raises on any machine with less than that free."""
    result = run_python("""
        import torch, snn_ipu
        from snn_ipu import _memory
        if _memory.available_bytes() > 24 * 2**30:
            print("skip")
            raise SystemExit
        try:
            snn_ipu.LIFLayer(200, 20000)((torch.rand(500, 128, 200) < 0.02).float())
        except MemoryError as e:
            print("MemoryError", e)
    """, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    if result.stdout.strip() == "skip":
        pytest.skip("this machine has more than 24 GiB free")
    assert result.stdout.startswith("MemoryError LIFLayer(200->20000): this call needs at "
                                    "least 23.84 GiB")


def quiet_wide_layer(name):
    """A windowed 32-20,000 layer that neither spikes nor comes near threshold: its
    lists are empty (the pre-flight and the executor's budget count almost nothing), but
    its currents and dL/dI are [T, B, 20000] float32 arrays whatever its lists hold."""
    torch.manual_seed(0)
    layer = LIFLayer(32, 20000, grad_window=0.3, name=name)
    with torch.no_grad():
        layer.weight.mul_(0.01)
        layer.bias.zero_()
    return layer


def check_small_call_against_reference(layer):
    """After its MemoryError, the layer runs a call that fits (with weights that make
    it fire), as the reference does."""
    ref = LIFLayer(32, 20000, grad_window=0.3, backend="reference")
    with torch.no_grad():
        layer.weight.mul_(400.0)
    ref.load_state_dict(layer.state_dict())
    x = binary((2, 2, 32), 0.7, 1)
    grads = []
    for each in (layer, ref):
        xg = x.clone().requires_grad_()
        out = each(xg)
        out.values.sum().backward()
        grads.append((out.to_dense(), xg.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and grads[0][0].any()
    assert_rel_close(grads[0][1], grads[1][1], 1e-5, "input grad")


def test_dense_input_path_counts_against_the_memory(little_memory):
    """A dense input takes the forward's GEMM path, whose dense input and currents
    ([1000, 32] and [1000, 20000] float32: 80 MB) neither the pre-flight nor the
    executor's budget counted: the call ran past 64 MiB free without a word."""
    layer = quiet_wide_layer("dense input")
    x = binary((100, 10, 32), 0.7, 0)  # denser than forward_dense_fraction(20000)
    with torch.no_grad(), pytest.raises(MemoryError, match=(
            r"dense input: this call needs at least 0\.07 GiB of memory, more than the "
            r"0\.06 GiB free; its input is dense enough for the dense input path.*run "
            r"fewer timesteps T or samples B per call")):
        layer(x)
    check_small_call_against_reference(layer)


def test_backward_history_counts_against_the_memory(little_memory, monkeypatch):
    """The backward pass keeps dL/dI of every step ([100, 10, 20000] float32: 80 MB)
    where the input needs a gradient, on the sparse paths too: it ran past 64 MiB free
    without a word."""
    monkeypatch.setattr(emulator, "forward_dense_fraction", lambda n_out: 2.0)  # sparse
    layer = quiet_wide_layer("history")
    x = binary((100, 10, 32), 0.7, 0).requires_grad_()
    out = layer(x)  # fits: its lists are empty
    with pytest.raises(MemoryError, match=(
            r"history's backward pass: this call needs at least 0\.07 GiB of memory, more "
            r"than the 0\.06 GiB free; it holds dL/dI of every step; run fewer timesteps")):
        out.values.sum().backward()
    check_small_call_against_reference(layer)

@pytest.mark.parametrize("backend", ["emulator", "reference"])
def test_max_spikes_above_the_layer_width_allocates_no_padding(backend):
    """max_spikes=10**6 on a 4-neuron layer used to allocate 3.3 GB of padding: a list
    holds at most one entry per neuron, so the capacity is the width."""
    layer = LIFLayer(4, 4, max_spikes=10**6, backend=backend)
    out = layer(binary((50, 8, 4), 0.5, 0))
    assert out.capacity == 4 and layer.max_spikes == 10**6


def test_memory_formula_by_hand():
    # every neuron listed: 20 bytes per neuron-step; plus a kept membrane, 4 more
    assert _memory.layer_call_bytes(10, 2, 3, None, True, 1) == 10 * 2 * 3 * (20 + 4)
    # a capacity of 5 entries, 12 bytes each, and a synaptic history (two arrays)
    assert _memory.layer_call_bytes(10, 2, 3, 5, False, 2) == 10 * 2 * 5 * 12 + 10 * 2 * 3 * 8


# -- 5. sizes beyond int32 ------------------------------------------------------------

def test_plan_sizes_beyond_int32_raise():
    result = run_python("""
        import snn_ipu
        for sizes in ([8, 4294967295, 10], [8, 2**31, 10]):
            try:
                snn_ipu.plan(sizes, 2, 5)
            except ValueError as e:
                print("ValueError", e)
        try:
            snn_ipu._native._C.plan_layer(8, 4294967295, 2, 5)
        except ValueError as e:
            print("ValueError", e)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("ValueError") for line in lines)
    assert "below 2**31" in lines[0] and "out_features must be below 2**31" in lines[2]


@pytest.mark.parametrize("n", [2**31, 2**31 + 10, 2**32 + 3])
def test_num_neurons_beyond_int32_raise(n):
    ids = torch.zeros(1, 1, 1, dtype=torch.int32)
    counts = torch.zeros(1, 1, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"num_neurons must be >= 1 and below 2\*\*31"):
        SparseSpikes(ids, counts, n)


# -- 6. fixed constants edited after construction ---------------------------------------

@pytest.mark.parametrize("backend", ["emulator", "reference"])
@pytest.mark.parametrize("cls, name, value, message", [
    (LIFLayer, "threshold", math.nan, "threshold must be finite and > 0"),
    (LIFLayer, "threshold", -1.0, "threshold must be finite and > 0"),
    (LIFLayer, "beta", 2.0, r"beta must lie in \[0, 1\]"),
    (SynapticLayer, "alpha", -0.5, r"alpha must lie in \[0, 1\]"),
    (ReadoutLayer, "beta", math.inf, r"beta must lie in \[0, 1\]"),
])
def test_fixed_constants_are_checked_on_every_forward(backend, cls, name, value, message):
    layer = cls(5, 4, backend=backend, name="layer")
    getattr(layer, name).fill_(value)
    with pytest.raises(ValueError, match=f"layer: {message}"):
        layer(binary((3, 2, 5), 0.5, 0))


def test_learned_decays_are_clamped_as_in_snntorch():
    """A learned beta that an optimizer pushed past 1 is clamped where it is used (as
    snnTorch does), not refused: the layer then runs as with beta = 1."""
    x = binary((6, 2, 5), 0.5, 0)
    learned = LIFLayer(5, 4, beta=0.9, learn_beta=True, backend="reference")
    fixed = LIFLayer(5, 4, beta=1.0, backend="reference")
    fixed.load_state_dict({k: v for k, v in learned.state_dict().items() if k != "beta"},
                          strict=False)
    with torch.no_grad():
        learned.beta.fill_(1.5)
    assert torch.equal(learned(x).to_dense(), fixed(x).to_dense())


# -- 7. flags and numbers are not coerced ----------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(learn_beta="no"), "learn_beta must be True or False, got 'no'"),
    (dict(learn_threshold=1), "learn_threshold must be True or False, got 1"),
    (dict(bias="no"), "bias must be True or False, got 'no'"),
    (dict(recurrent="yes"), "recurrent must be True or False, got 'yes'"),
    (dict(recurrent="one_to_one"), "recurrent must be True or False"),
    (dict(grad_window="0.1"), "grad_window must be None or a number >= 0, got '0.1'"),
    (dict(beta="0.9"), "beta must be a number or a tensor of numbers, got '0.9'"),
    (dict(threshold=True), "threshold must be a number or a tensor of numbers, got True"),
    (dict(name=3), "name must be a string or None, got 3"),
])
def test_flags_and_numbers_are_taken_as_they_are(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        LIFLayer(5, 4, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    # these were cast to float32: True as 1, the imaginary part dropped
    (dict(beta=torch.tensor([True, False, True, True])), "beta must hold real numbers, "
     "got a Tensor of dtype torch.bool"),
    (dict(threshold=np.ones(4, dtype=bool)), "threshold must hold real numbers"),
    (dict(beta=[True, False, True, True]), "beta must hold real numbers"),
    (dict(beta=torch.tensor(0.5 + 0.5j)), "beta must hold real numbers, got a Tensor of "
     "dtype torch.complex64"),
    (dict(threshold=np.complex128(1 + 2j)), "threshold must hold real numbers"),
])
def test_bool_and_complex_constants_are_refused(kwargs, message):
    with pytest.raises(TypeError, match=message):
        LIFLayer(5, 4, **kwargs)
    with pytest.raises(TypeError, match=message):
        SynapticLayer(5, 4, **kwargs)


def test_synaptic_alpha_of_bools_is_refused():
    with pytest.raises(TypeError, match="alpha must hold real numbers"):
        SynapticLayer(5, 4, alpha=np.array([True, True, False, True]))


def test_numpy_flags_and_numbers_are_accepted():
    layer = SynapticLayer(5, 4, bias=np.True_, recurrent=np.False_, learn_alpha=np.True_,
                          grad_window=np.float32(0.5), beta=np.float64(0.8))
    assert layer.recurrent is False and isinstance(layer.alpha, torch.nn.Parameter)
    assert layer.grad_window == 0.5 and float(layer.beta) == pytest.approx(0.8)


# -- 8. SNN_IPU_NUM_THREADS ------------------------------------------------------------

@pytest.mark.parametrize("value", ["", "abc", "2.5", "-1", "0"])
def test_thread_variable_is_parsed_with_a_message_naming_it(value):
    result = run_python("""
        import torch, snn_ipu
        try:
            snn_ipu.LIFLayer(3, 3)(torch.zeros(1, 1, 3))
        except ValueError as e:
            print(e)
    """, env={"SNN_IPU_NUM_THREADS": value})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == f"SNN_IPU_NUM_THREADS must be a positive integer, got " \
                                    f"{value!r}"


def test_thread_variable_above_the_core_count_warns():
    result = run_python("""
        import warnings, torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from snn_ipu.backends import emulator, emulator_threads
        print(emulator.get_num_threads(), [str(w.message) for w in caught])
    """, env={"SNN_IPU_NUM_THREADS": "1000"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("1000 ")
    assert "SNN_IPU_NUM_THREADS=1000 is more than the" in result.stdout


# -- 9. results do not depend on the CPUs a process may use ------------------------------

@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs two CPUs and sched_setaffinity")
def test_results_do_not_depend_on_the_cpus_a_process_may_use():
    """Sample groups and tiles are planned from the machine's CPU count, not from the
    affinity mask: under `taskset -c 0` the gradients are bit-identical."""
    code = """
        import os, sys, torch
        if sys.argv[-1] == "one":
            os.sched_setaffinity(0, {0})
        from snn_ipu import LIFLayer, ReadoutLayer
        torch.manual_seed(0)
        net = torch.nn.Sequential(LIFLayer(100, 64, grad_window=0.2), ReadoutLayer(64, 5))
        with torch.no_grad():
            net[0].weight.mul_(4)
        x = (torch.rand(30, 64, 100) < 0.1).float()
        net(x).square().sum().backward()
        print(net[0].weight.grad.double().sum().item().hex(),
              net[1].weight.grad.double().sum().item().hex(), net[0].stats["sample_groups"])
    """
    results = [subprocess.run([sys.executable, "-c", textwrap.dedent(code), mode],
                              capture_output=True, text=True, timeout=120)
               for mode in ("all", "one")]
    for r in results:
        assert r.returncode == 0, r.stderr[-2000:]
    assert results[0].stdout == results[1].stdout


# -- 10. lists made under inference_mode -------------------------------------------------

def test_lists_made_under_inference_mode_train_alike_on_both_backends():
    with torch.inference_mode():
        x = SparseSpikes.from_dense(binary((10, 2, 20), 0.3, 0))
    grads = []
    for backend in ("reference", "emulator"):
        layer = firing_layer(20, 8, backend=backend)
        layer(x).values.sum().backward()
        grads.append(layer.weight.grad)
    assert grads[0].abs().sum() > 0
    assert_rel_close(grads[1], grads[0], 1e-5, "weight grad")


# -- 11. the reference backend on meta tensors ------------------------------------------

@pytest.mark.parametrize("cls", [LIFLayer, SynapticLayer])
@pytest.mark.parametrize("recurrent", [False, True])
def test_reference_backend_runs_on_meta_tensors(cls, recurrent):
    net = torch.nn.Sequential(
        cls(20, 8, backend="reference", recurrent=recurrent, grad_window=0.2),
        cls(8, 6, backend="reference", max_spikes=6),
        ReadoutLayer(6, 3, backend="reference"),
    ).to("meta")
    out = net(torch.zeros(5, 2, 20, device="meta"))
    assert out.shape == (5, 2, 3) and out.device.type == "meta"
    hidden = net[0](torch.zeros(5, 2, 20, device="meta"))
    assert hidden.capacity == 8 and hidden.ids.device.type == "meta"


def test_meta_tensors_on_the_emulator_say_which_backends_take_them():
    layer = LIFLayer(20, 8, backend="emulator").to("meta")
    with pytest.raises(ValueError, match="the emulator backend runs on the CPU"):
        layer(torch.zeros(5, 2, 20, device="meta"))


# -- 1b. a list edited between two layers ---------------------------------------------

@pytest.mark.parametrize("edit", [None, "counts", "ids"])
def test_a_list_edited_between_two_layers_trains_as_edited(edit):
    """Each layer's backward pass reads the lists its own forward pass read: after an
    in-range edit between two layers, both layers' weight gradients are those of the
    edited network, held against the reference backend."""
    def run(backend):
        torch.manual_seed(0)
        first = LIFLayer(50, 40, grad_window=0.5, backend=backend)
        second = LIFLayer(40, 30, grad_window=0.5, backend=backend)
        with torch.no_grad():
            first.weight.mul_(5.0)
            second.weight.mul_(5.0)
        x = SparseSpikes.from_dense(binary((20, 4, 50), 0.3, 1))
        hidden = first(x)
        if edit == "counts":  # drop every eligible-only entry
            hidden.counts.data[..., 1] = hidden.counts.data[..., 0]
        elif edit == "ids":  # another eligible neuron where a row lists one
            rows = hidden.counts[..., 1] > hidden.counts[..., 0]
            last = (hidden.counts[..., 1] - 1).clamp_min(0).long()
            row_ids = hidden.ids.data.gather(-1, last.unsqueeze(-1)).squeeze(-1)
            unused = (row_ids + 1) % 40
            taken = (hidden.ids.data.unsqueeze(-1) == unused[..., None, None]).any(-2).squeeze(-1)
            change = rows & ~taken
            new = torch.where(change, unused, row_ids)
            hidden.ids.data.scatter_(-1, last.unsqueeze(-1), new.unsqueeze(-1).int())
        second(hidden).values.sum().backward()
        return first.weight.grad, second.weight.grad

    ref_first, ref_second = run("reference")
    emu_first, emu_second = run("emulator")
    assert_rel_close(emu_second, ref_second, 1e-4, "second layer's weight grad")
    assert_rel_close(emu_first, ref_first, 1e-4, "first layer's weight grad")
