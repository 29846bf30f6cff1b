"""A fingerprint of the emulator's results on fixed inputs, for refactors that must
not change a bit: run it before and after, on the same machine, and compare.

    python benchmarks/emulator_fingerprint.py            # one line per case, then a total

Each case runs a small network forward and backward on the emulator and hashes the
output lists, the recorded membranes and every gradient. The host tile plan depends
on the machine (CPU count, L2 size), so fingerprints are comparable on one machine
only; whether results are *right* is the test suite's job (against the reference
backend and snnTorch), not this script's.
"""

from __future__ import annotations

import hashlib
import itertools
import warnings

import torch

from snn_ipu import LIFLayer, ReadoutLayer, SynapticLayer
from snn_ipu import surrogate as sg
from snn_ipu.backends import emulator


def cases():
    models = ("leaky", "synaptic")
    options = itertools.product(
        models, ("subtract", "zero", "none"), (False, True), (None, 0.3),
        ("host", "ipu2"),
    )
    for i, (model, reset, recurrent, window, target) in enumerate(options):
        yield dict(model=model, reset=reset, recurrent=recurrent, grad_window=window,
                   plan_target=target, surrogate=[sg.ATan(2.0), sg.FastSigmoid(5.0),
                                                  sg.Triangle(0.8, 1.0)][i % 3],
                   density=0.3 if i % 4 else 0.8, max_spikes=None if i % 5 else 6,
                   half=i % 7 == 3, learn=i % 6 == 1, carry=i % 9 == 2, threads=1 + i % 2)


def run(case) -> str:
    torch.manual_seed(0)
    cls = SynapticLayer if case["model"] == "synaptic" else LIFLayer
    kw = dict(reset=case["reset"], grad_window=case["grad_window"], surrogate=case["surrogate"],
              backend="emulator", plan_target=case["plan_target"],
              dtype=torch.float16 if case["half"] else torch.float32,
              learn_beta=case["learn"], learn_threshold=case["learn"])
    net = torch.nn.Sequential(
        cls(40, 30, recurrent=case["recurrent"], **kw),
        cls(30, 20, max_spikes=case["max_spikes"], overflow="drop", **kw),
        ReadoutLayer(20, 5, backend="emulator", plan_target=case["plan_target"]),
    )
    with torch.no_grad():
        net[0].weight.mul_(4.0)
        net[1].weight.mul_(3.0)
    for layer in net:
        layer.record_membrane = True
        layer.carry_state = case["carry"]
    emulator.set_num_threads(case["threads"])
    h = hashlib.sha256()
    for _ in range(2 if case["carry"] else 1):
        x = (torch.rand(12, 3, 40) < case["density"]).float().requires_grad_()
        hidden = net[1](net[0](x))
        out = net[2](hidden)
        (out.square().sum() + hidden.to_dense().sum()).backward()
        tensors = [x.grad, hidden.ids, hidden.counts, hidden.values, out]
        tensors += [layer.last_membrane for layer in net]
        tensors += [p.grad for p in net.parameters()]
        for t in tensors:
            if t is not None:
                h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    warnings.simplefilter("ignore")
    total = hashlib.sha256()
    for i, case in enumerate(cases()):
        digest = run(case)
        total.update(digest.encode())
        print(i, digest[:16])
    print("total", total.hexdigest())


if __name__ == "__main__":
    main()
