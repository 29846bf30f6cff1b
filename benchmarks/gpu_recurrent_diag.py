"""Where the recurrent scan kernels go wrong on a GPU (docs/gpu.md, "Measured on an
H100": wrong gradients at a few neurons, which Triton's interpreter does not show).

Runs a two-layer net (recurrent LIF of 1100 neurons -> LIF, subtract reset, ATan) on
CUDA with the triton backend, records every launch of the two per-sample scan kernels
(``neuron_scan`` and ``neuron_scan_backward``: their arguments before and after), and
reruns each launch on the same inputs through Triton's interpreter at the GPU's own
tile sizes. It prints, per output buffer, how many entries differ and at which indices
of the last dimension (the neurons, for [T, B, N] buffers). Then it reruns the backward
scan on the GPU with variants (``num_stages=1``, other warp counts, and source edits:
an extra barrier at the top of each step, a volatile load of the scattered surrogate,
no read-modify-write of the threshold gradient in phase 1, ATan only) and says which
agree with the interpreter. One call, about a minute after the extension is built:

    python benchmarks/gpu_recurrent_diag.py            # on a machine with a CUDA GPU

Needs Triton and a CUDA build of torch; run from the repository's root (it imports the
tests' helpers). ``TRITON_INTERPRET=1 python benchmarks/gpu_recurrent_diag.py --cpu``
checks the script itself on a CPU: a small layer, the interpreter on both sides, no
variants."""

from __future__ import annotations

import copy
import importlib.util
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Dict, List

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import tie_free_net  # noqa: E402

from snn_ipu import surrogate as sg  # noqa: E402
from snn_ipu.backends import triton as tbackend  # noqa: E402
from snn_ipu.backends import triton_kernels as kernels  # noqa: E402

SCANS = ("neuron_scan_kernel", "neuron_scan_backward_kernel")
# What the backward scan writes that the rest of the backward reads.
BACKWARD_OUTPUTS = ("di_ptr", "dthr_ptr", "recg_ptr")
launches: Dict[str, list] = {}


def record_launches(name: str) -> None:
    """Every launch of kernel ``name`` from now on keeps (grid, args before, args after,
    keyword arguments) in ``launches[name]``."""
    kernel = getattr(kernels, name)
    base = type(kernel)

    class Recorded(base):
        def __getitem__(self, grid):
            launch = base.__getitem__(self, grid)

            def run(*args, **kw):
                before = [a.clone() if torch.is_tensor(a) else a for a in args]
                out = launch(*args, **kw)
                if args[0].is_cuda:
                    torch.cuda.synchronize()
                after = [a.clone() if torch.is_tensor(a) else a for a in args]
                launches.setdefault(name, []).append((grid, before, after, dict(kw)))
                return out

            return run

    kernel.__class__ = Recorded


def report(what: str, got: torch.Tensor, want: torch.Tensor) -> int:
    """Prints how many entries of ``got`` differ from ``want`` (beyond 1e-5 of its
    scale) and the first indices of the last dimension that do; returns the count."""
    got, want = got.cpu().double(), want.cpu().double()
    err = (got - want).abs()
    scale = float(want.abs().max().clamp(min=1e-12))
    bad = err > 1e-5 * scale
    where = sorted({int(i[-1]) for i in bad.nonzero()})[:24]
    print(f"    {what}: {int(bad.sum())} differ (max {float(err.max()):.2e}, scale "
          f"{scale:.2e}); last-dim indices {where}", flush=True)
    return int(bad.sum())


def interpreted(name: str, grid, before: list, kw: dict) -> List:
    """The launch rerun by Triton's interpreter on CPU copies of its inputs, at the
    launch's own (the GPU's) tile sizes; returns the arguments after it."""
    args = [a.cpu() if torch.is_tensor(a) else a for a in before]
    getattr(kernels, name).interpreted[grid](
        *args, **{k: v for k, v in kw.items() if k != "num_warps"})
    return args


def variant(name: str, edit: Callable[[str], str]):
    """kernels' module with the backward scan's source edited, loaded from a file (Triton
    reads a kernel's source from its file)."""
    src = Path(kernels.__file__).read_text()
    start = src.index("def neuron_scan_backward_kernel(")
    end = src.index("@Kernel", start)
    src = src[:start] + edit(src[start:end]) + src[end:]
    src = src.replace("from .._codes import", "from snn_ipu._codes import")
    path = Path(tempfile.mkdtemp()) / f"scan_{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.neuron_scan_backward_kernel


EDITS = {
    "barrier at each step's top": lambda s: s.replace(
        "        row = t * B + b\n        # 1.",
        "        row = t * B + b\n        tl.debug_barrier()\n        # 1."),
    "volatile load of the scattered surrogate": lambda s: s.replace(
        "du = tl.load(gsrc_ptr + p, mask=mn, other=0.0)",
        "du = tl.load(gsrc_ptr + p, mask=mn, other=0.0, volatile=True)"),
    "no threshold-gradient update in phase 1": lambda s: s.replace(
        "tl.store(dthr_ptr + b * N + j, dthr - gd, mask=mk)", "pass"),
    "ATan only": lambda s: re.sub(
        r"if sg_kind == _SG_ATAN:.*?d = ax \* 0\.0 \+ 1\.0\n",
        "y = sg_p1 * x\n            d = sg_p0 / (1.0 + y * y)\n", s, flags=re.S),
}


def run_case(label: str, steps: int, window: float, device: str) -> None:
    print(f"== {label}", flush=True)
    launches.clear()
    hidden = 1100 if device == "cuda" else 40
    net, x, readout = tie_free_net((steps, 2, 96, hidden, 300), "leaky", "subtract", True,
                                   window, sg.ATan(2.0), min_margin=2e-5)
    ref = copy.deepcopy(net)
    (ref[1](ref[0](x)).to_dense() * readout).sum().backward()
    gpu = copy.deepcopy(net).to(device)
    for layer in gpu:
        layer.backend = "triton"
    (gpu[1](gpu[0](x.to(device))).to_dense() * readout.to(device)).sum().backward()
    for pname in ("bias", "weight", "rec_weight"):
        report(f"layer 1 {pname} grad vs the reference", getattr(gpu[0], pname).grad,
               getattr(ref[0], pname).grad)
    outputs = {}
    for name in SCANS:
        grid, before, after, kw = launches[name][0]
        want = interpreted(name, grid, before, kw)
        names = getattr(kernels, name).arg_names
        print(f"  {name}, GPU against the interpreter:")
        for i, arg in enumerate(names[:len(after)]):
            if torch.is_tensor(after[i]) and not torch.equal(after[i].cpu(), want[i]):
                report(arg, after[i], want[i])
        outputs[name] = (grid, before, kw, dict(zip(names, want)))
    if device != "cuda":
        return
    grid, before, kw, want = outputs["neuron_scan_backward_kernel"]
    names = kernels.neuron_scan_backward_kernel.arg_names
    tries = {"as built": (kernels.neuron_scan_backward_kernel.jit, {}),
             "num_stages=1": (kernels.neuron_scan_backward_kernel.jit, {"num_stages": 1}),
             "4 warps": (kernels.neuron_scan_backward_kernel.jit, {"num_warps": 4}),
             "1 warp": (kernels.neuron_scan_backward_kernel.jit, {"num_warps": 1})}
    for edit_name, edit in EDITS.items():
        tries[edit_name] = (variant(re.sub(r"\W+", "_", edit_name), edit).jit, {})
    print("  backward scan variants on the GPU:")
    for try_name, (jit, extra) in tries.items():
        args = [a.clone() if torch.is_tensor(a) else a for a in before]
        try:
            jit[grid](*args, **{**kw, **extra})
            torch.cuda.synchronize()
        except Exception as exc:  # a variant that does not compile is reported, not fatal
            print(f"   {try_name}: failed ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        print(f"   {try_name}:")
        bad = sum(report(arg, args[i], want[arg]) for i, arg in enumerate(names[:len(args)])
                  if arg in BACKWARD_OUTPUTS)
        print(f"   {try_name}: {'agrees' if bad == 0 else 'differs'}", flush=True)


def main() -> int:
    device = "cpu" if "--cpu" in sys.argv[1:] else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA device (--cpu: the script's own check)")
        return 1
    import triton

    print("torch", torch.__version__, "triton", triton.__version__,
          torch.cuda.get_device_name() if device == "cuda" else "cpu", flush=True)
    warnings.simplefilter("ignore")
    tbackend.RECURRENT_ON_CUDA = True
    tbackend.DENSE_FRACTION = 0.0  # the failing test's dense backward path
    for name in SCANS:
        record_launches(name)
    run_case("T=5, window 0.3 (test_dense_backward_paths)", 5, 0.3, device)
    run_case("T=1", 1, 0.3, device)
    run_case("exact gradients (window 100: every neuron listed)", 5, 100.0, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
