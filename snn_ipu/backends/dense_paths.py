"""Where the emulator's layers leave their sparse row kernels for one BLAS GEMM.

Each choice is a fraction of a layer's ``T*B*n_in`` input rows, from the layer's shape
and one fact of the host, so that the same layer on the same host always takes the same
path (and gives the same bits): whether torch's BLAS runs AVX-512. Our row kernels are
the same on every x86 host; BLAS runs twice as wide on AVX-512, where its GEMM ran at
~170 GMAC/s on 2 cores against ~25-40 G row adds/s (MKL on AVX2: ~40 GMAC/s against
~12 G). Besides the GEMM, a dense path pays per input row (scattering the spikes into a
dense input, gathering dL/dx at the listed entries) and per neuron and step (the
currents, or dL/dI, written out), which the sparse kernels do not: small layers keep
their sparse paths to higher densities than large ones. The break-evens quoted were
measured with training steps of one layer, both paths alternated, 2 threads
(docs/performance.md, "Dense paths").
"""

from __future__ import annotations

import torch


def _wide_gemm_host() -> bool:
    """Whether torch's BLAS runs AVX-512 here (torch < 2.1, PopTorch's 2.0, cannot say)."""
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")()
    return capability.startswith("AVX512")


_WIDE = _wide_gemm_host()
# The row kernels' rate over the GEMM's, where the dense path's other costs vanish.
_FORWARD_ROWS_OVER_GEMM = 0.23 if _WIDE else 0.46
_WEIGHT_GRAD_ROWS_OVER_GEMM = 0.11 if _WIDE else 0.25


def forward_dense_fraction(n_out: int) -> float:
    """The input spike density above which a layer of ``n_out`` neurons computes its
    feed-forward currents with one GEMM on the dense input (which the backward's dL/dW
    then reuses) instead of the tiles' row adds.

    Break-evens: AVX-512, 0.26 for 2312-1466, 0.29 for 1466-1466, 0.38 for 700-256, 0.45
    for 256-256, 0.7 for 128-128 (T=10), below 0.3 for 4096-1024; AVX2, 0.5 for 2312-
    and 4096-input layers, above 0.7 for 700-256. Readouts of 10-20 neurons: never."""
    return _FORWARD_ROWS_OVER_GEMM + 62 / n_out


def backward_dense_fractions(n_in: int, n_out: int) -> tuple[float, float]:
    """The fractions of its input rows above which a layer's backward pass computes
    dL/dx (at the listed entries) and dL/dW (at the spikes) with one GEMM on dL/dI.

    dL/dW: the sparse scatter costs ~(n_out + 40) per spike; the dense path a GEMM,
    plus ~60 per input row and ~40 per neuron and step. Break-evens on AVX-512: 0.41
    for 256-256, 0.35 for 700-256, 0.32 for 2312-256, 0.29 for 256-1466, 0.19 for
    1000-1000, 0.175 for 1466-1466, 0.16 for 2312-1466 (the model: 0.43, 0.35, 0.31,
    0.30, 0.20, 0.17, 0.16), never for readouts of 10-20 neurons; AVX2: 0.3 on L's
    layers (the model: 0.30-0.31).

    dL/dx: the sparse row dots keep up with the GEMM longer than the scatter, to ~0.3
    of the rows on large layers on both hosts, 0.37 on 1466-256, 0.45 on 256-256; past
    half the rows the GEMM won on every layer measured, readouts included (exact
    gradients list every input neuron)."""
    dense_w = (_WEIGHT_GRAD_ROWS_OVER_GEMM * n_out + 60 + 40 * n_out / n_in) / (n_out + 40)
    dense_x = min(0.5, 0.25 + 25 / n_in + 25 / n_out)
    return dense_x, dense_w
