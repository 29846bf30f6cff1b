"""Every kernel specialisation the triton backend launches compiles ahead of time for
the A100 (sm_80) and the H100 (sm_90), to PTX and, through the ptxas in Triton's wheel,
to a cubin: no GPU needed. Run in subprocesses, one per target (in parallel), without
TRITON_INTERPRET. Triton's kernel cache (~/.triton/cache, or TRITON_CACHE_DIR) keys each
compilation by the kernel's source, signature, constexprs, options and target, and
holds only what compiled: a run after an unchanged one takes seconds, a changed kernel
compiles again (~50-100 s per target on a busy 2-core machine, the targets in
parallel)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]


def test_every_specialisation_compiles_for_sm80_and_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    procs = {}
    for arch in (80, 90):
        procs[arch] = subprocess.Popen(
            [sys.executable, "-m", "snn_ipu.backends.triton_aot", "--arch", str(arch)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for arch, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-4000:]
        lines = re.findall(rf"^sm_{arch} (.+): ptx (\d+) chars, cubin (\d+) bytes", out, re.M)
        total = re.search(r"^(\d+) compilations", out, re.M)
        assert total and int(total.group(1)) == len(lines) > 0, out[-4000:]
        assert all(int(ptx) > 0 and int(cubin) > 0 for _, ptx, cubin in lines)
        # kernels from each stage: forward, scan, backward
        assert {"spike_matmul[float16]", "neuron_scan[recurrent, bfloat16]",
                "state_grad_ff", "spike_outer"} <= {n for n, _, _ in lines}
        print(f"\nsm_{arch}: " + out.strip().splitlines()[-1])  # shown with pytest -s
