"""Ahead-of-time compilation of every kernel specialisation the triton backend launches
(:data:`~.triton_kernels.SPECIALISATIONS`) for NVIDIA targets, without a GPU: Triton
lowers each to PTX and runs the ``ptxas`` its wheel ships to make the cubin, so a kernel
that would not compile on an A100 (sm_80) or H100 (sm_90) fails CI.

``python -m snn_ipu.backends.triton_aot [--arch 80 90]`` compiles them and prints one
line per specialisation, the count and the time. Run it without ``TRITON_INTERPRET``
(the interpreter replaces the kernels by Python functions, which cannot be compiled).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Dict, List, Sequence

__all__ = ["compile_all", "main"]


def compile_all(arch: int, verbose: bool = False) -> List[Dict[str, object]]:
    """Compiles every specialisation for ``GPUTarget("cuda", arch, 32)``; returns, for
    each, its name, the sizes of its PTX and cubin and the seconds it took."""
    from .triton import _interpreter_on

    if _interpreter_on():
        raise RuntimeError("unset TRITON_INTERPRET: the interpreter's kernels cannot be compiled")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .triton_kernels import SPECIALISATIONS

    target = GPUTarget("cuda", arch, 32)
    out = []
    for spec in SPECIALISATIONS:
        start = time.perf_counter()
        compiled = triton.compile(
            ASTSource(fn=spec.kernel.jit, signature=spec.signature, constexprs=spec.constexprs),
            target=target, options={"num_warps": spec.num_warps})
        entry = {"name": spec.name, "arch": arch, "ptx": len(compiled.asm["ptx"]),
                 "cubin": len(compiled.asm["cubin"]), "seconds": time.perf_counter() - start}
        out.append(entry)
        if verbose:
            print(f"sm_{arch} {spec.name}: ptx {entry['ptx']} chars, cubin {entry['cubin']} "
                  f"bytes, {entry['seconds']:.2f} s", flush=True)
    return out


def main(argv: Sequence[str] = ()) -> int:
    p = argparse.ArgumentParser(prog="python -m snn_ipu.backends.triton_aot",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", type=int, nargs="+", default=[80, 90],
                   help="compute capabilities (80: A100, 90: H100)")
    args = p.parse_args(list(argv))
    start = time.perf_counter()
    results = [r for arch in args.arch for r in compile_all(arch, verbose=True)]
    print(f"{len(results)} compilations ({len(results) // len(args.arch)} specialisations x "
          f"{len(args.arch)} targets) in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
