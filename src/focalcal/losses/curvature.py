"""The curvature paper's explicit regulariser: a Hutchinson estimate of the Hessian trace.

``hessian_trace_loss = CE + lamda * tr(H)`` (eq. 33) with ``tr(H)`` from :func:`hutchinson_trace`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .._validation import ArrayLike, check_choice, check_int
from ._core import check_lamda
from .focal import cross_entropy_loss

def hutchinson_trace(loss: Tensor, params: Sequence[Tensor], n_probes: int = 1, *,
                     generator: torch.Generator | None = None,
                     probes: Sequence[Sequence[Tensor]] | None = None,
                     create_graph: bool = True) -> Tensor:
    """Hutchinson estimate ``(1/M) sum_m v_m^T H v_m`` of ``tr(d^2 loss / d params^2)``.

    Rademacher probes (``+-1`` entries, ``E[v v^T] = I``) and Hessian-vector products by double
    backprop. With ``create_graph=True`` the estimate itself is differentiable (a third
    backward), which is what training on it needs.

    Parameters
    ----------
    loss : Tensor, scalar, with a graph to ``params``
    params : sequence of Tensor
    n_probes : int
        Number ``M`` of probes (ignored when ``probes`` is given).
    generator : torch.Generator, optional
        Source of the probes (on the parameters' device).
    probes : sequence of sequences of Tensor, optional
        Explicit probes, each a list shaped like ``params``.
    """
    params = list(params)
    if not params:
        raise ValueError("params is empty; pass the parameters whose Hessian trace is wanted")
    if loss.dim() != 0:
        raise ValueError(f"loss must be a scalar, got shape {tuple(loss.shape)}")
    grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
    used = [(p, g) for p, g in zip(params, grads) if g is not None]
    if probes is None:
        n_probes = check_int(n_probes, "n_probes")
        probes = [[(torch.randint(0, 2, p.shape, generator=generator, device=p.device) * 2 - 1).to(p.dtype)
                   for p, _ in used] for _ in range(n_probes)]
    else:
        probes = [list(v) for v in probes]
        by_id = {id(p): i for i, p in enumerate(params)}
        keep = [by_id[id(p)] for p, _ in used]
        probes = [[v[i] for i in keep] for v in probes]
    total = loss.new_zeros(())
    for vs in probes:  # a loop over probes (usually 1), not over samples
        gv = sum((g * v).sum() for (_, g), v in zip(used, vs))
        hv = torch.autograd.grad(gv, [p for p, _ in used], create_graph=create_graph,
                                 retain_graph=True, allow_unused=True)
        total = total + sum((h * v).sum() for h, v in zip(hv, vs) if h is not None)
    return total / len(probes)


def hessian_trace_loss(logits: Tensor, target: ArrayLike, *, model: nn.Module,
                       inputs: Tensor | None = None,
                       lamda: float = 1e-3, n_probes: int = 1, reduction: str = "mean",
                       ignore_index: int = -100, generator: torch.Generator | None = None) -> Tensor:
    """``CE + lamda * tr(H)``, ``H`` the Hessian of the CE in the trainable parameters (eq. 33).

    The curvature paper's explicit curvature regulariser ``L_CE(theta) + tau Tr(H)`` with
    ``Tr(H)`` from :func:`hutchinson_trace`. ``logits`` must carry the graph to ``model``'s
    parameters; if they do not (computed under ``no_grad``), the network is run again on
    ``inputs``. Cost: about three backward passes per probe.

    Parameters
    ----------
    model : nn.Module
    inputs : Tensor, optional
        Needed only when ``logits`` has no graph.
    lamda : float >= 0
    reduction : {"mean", "sum"}
        Of the cross-entropy whose Hessian is taken (a trace has no per-sample form).
    """
    lamda = check_lamda(lamda)
    reduction = check_choice(reduction, "reduction", ("mean", "sum"))
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be an nn.Module, got {type(model).__name__}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no parameters with requires_grad=True")
    if not (isinstance(logits, Tensor) and logits.requires_grad):
        if inputs is None:
            raise ValueError("logits carry no graph to the model; pass inputs= to recompute them")
        logits = model(inputs)
    base = cross_entropy_loss(logits, target, reduction=reduction, ignore_index=ignore_index)
    if lamda == 0.0:
        return base
    tr = hutchinson_trace(base, params, n_probes, generator=generator)
    out = base + lamda * tr
    if not bool(torch.isfinite(out)):
        raise ValueError("the Hessian-trace penalty is not finite; check the model outputs and lamda")
    return out

