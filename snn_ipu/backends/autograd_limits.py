"""What the native backends' autograd Functions refuse, by the layer's and the backend's
name: their gradients come from kernels, not from a torch graph, so autograd's other
modes would otherwise fail far from their cause (or not at all)."""

from __future__ import annotations

from typing import NoReturn, Optional

import torch

__all__ = ["first_order_only", "no_forward_mode", "unbatched_only", "has_storage"]

# Whether a tensor has storage (not vmap's batched tensor); torch without it: assumed.
has_storage = getattr(torch._C, "_has_storage", lambda t: True)


def first_order_only(name: str, backend: str) -> None:
    """Autograd runs a backward with grad mode on only for create_graph=True; a kernel's
    gradients have no graph, so a second derivative would come out as a missing grad_fn
    far from its cause."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"{name}: the {backend} backend has first-order gradients only; "
            "create_graph=True (higher-order gradients) needs backend='reference'"
        )


def no_forward_mode(name: str, backend: str) -> NoReturn:
    """Called by autograd where a forward-mode tangent (torch.autograd.forward_ad) reaches
    a layer, which otherwise failed with torch's "You must implement the jvp function for
    custom autograd.Function", naming neither the layer nor the backend."""
    raise RuntimeError(
        f"{name}: the {backend} backend has no forward-mode gradients "
        "(torch.autograd.forward_ad); use reverse mode, loss.backward() or "
        "torch.autograd.grad"
    )


def unbatched_only(name: str, backend: str, grad: Optional[torch.Tensor]) -> None:
    """torch.autograd.grad(is_grads_batched=True) (jacobian(vectorize=True)) runs the
    backward under vmap, whose batched gradient has no storage for a kernel to read: it
    failed with a batching rule's error, naming neither the layer nor the cause."""
    if grad is not None and not has_storage(grad):
        raise RuntimeError(
            f"{name}: the {backend} backend's backward takes one gradient at a time; "
            "is_grads_batched=True (torch.autograd.functional.jacobian / hessian with "
            "vectorize=True) needs backend='reference', or vectorize=False"
        )
