"""Curvature of a loss in a network's parameters: the curvature paper's regulariser and probes.

- :func:`hutchinson_trace` and :func:`hessian_trace_loss`: the explicit regulariser
  ``CE + lamda * tr(H)`` (eq. 33) on one batch, differentiable for training;
- :func:`hessian_max_eigenvalue` (Lanczos) and :func:`hessian_trace` (Hutchinson): the
  ``lambda_max(H_val)`` and ``Tr(H_val)`` of the paper's Figs. 2-4, measured on a whole data set
  from Hessian-vector products accumulated over its batches, never forming ``H``;
- :func:`focal_loss_reference`: the focal loss as a plain ``log_softmax`` formula, which autograd
  differentiates twice (the fused :func:`~focalcal.losses.focal_loss` has a single backward).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .._validation import ArrayLike, check_choice, check_gamma, check_int
from ._core import check_ignore_index, check_lamda, check_reduction, prepare, reduce_loss
from .focal import cross_entropy_loss

#: ``loss_fn(logits, labels) -> scalar``: the *mean* loss of a batch, twice differentiable
LossFn = Callable[[Tensor, Tensor], Tensor]
#: a re-iterable collection of ``(inputs, labels)`` batches (a list, a ``DataLoader``)
Batches = Iterable[tuple[Tensor, Tensor]]


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

    Examples
    --------
    A diagonal Hessian ``diag(1, 2, 3)``: every Rademacher probe gives its trace exactly.

    >>> import torch
    >>> from focalcal.losses import hutchinson_trace
    >>> w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64, requires_grad=True)
    >>> loss = 0.5 * (torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) * w**2).sum()
    >>> float(hutchinson_trace(loss, [w], n_probes=4, generator=torch.Generator().manual_seed(0)))
    6.0
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


def hessian_trace_loss(logits: Tensor, labels: ArrayLike, *, model: nn.Module,
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
    logits : Tensor, shape (N, K)
    labels : Tensor of int, shape (N,)
    model : nn.Module
    inputs : Tensor, optional
        Needed only when ``logits`` has no graph.
    lamda : float >= 0
    reduction : {"mean", "sum"}
        Of the cross-entropy whose Hessian is taken (a trace has no per-sample form).

    Examples
    --------
    A zero linear model on two samples: CE = log 3 and tr(H) = 4/3 (estimated from 64 probes).

    >>> import torch
    >>> from torch import nn
    >>> from focalcal.losses import hessian_trace_loss
    >>> net = nn.Linear(2, 3).double()
    >>> with torch.no_grad():
    ...     _ = net.weight.zero_(), net.bias.zero_()
    >>> x, y = torch.eye(2, dtype=torch.float64), torch.tensor([0, 1])
    >>> out = hessian_trace_loss(net(x), y, model=net, lamda=0.1, n_probes=64,
    ...                          generator=torch.Generator().manual_seed(0))
    >>> round(float(out.detach()), 4)  # log 3 = 1.0986, plus 0.1 times the trace estimate
    1.2264
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
    base = cross_entropy_loss(logits, labels, reduction=reduction, ignore_index=ignore_index)
    if lamda == 0.0:
        return base
    tr = hutchinson_trace(base, params, n_probes, generator=generator)
    out = base + lamda * tr
    if not bool(torch.isfinite(out)):
        raise ValueError("the Hessian-trace penalty is not finite; check the model outputs and lamda")
    return out


# --------------------------------------------------------------------------------------------
# a twice-differentiable focal loss
# --------------------------------------------------------------------------------------------

def focal_loss_reference(logits: ArrayLike, labels: ArrayLike, gamma: float = 3.0, *,
                         reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Focal loss ``-(1 - p_t)^gamma log p_t`` as a plain formula that autograd differentiates twice.

    Same values, shapes and checks as :func:`~focalcal.losses.focal_loss`, which is faster but
    fused into an autograd function with a single backward; this one is built from
    ``torch.log_softmax``, ``expm1`` and ``pow``, so Hessian-vector products (double backward)
    go through it. Where ``1 - p_t`` rounds to 0 the factor ``(1 - p_t)^gamma`` and its
    derivatives are taken as 0, their limit (for ``0 < gamma < 2`` the derivatives of
    ``(1 - p_t)^gamma`` in ``p_t`` are infinite there and autograd would give ``inf * 0 = nan``);
    ``gamma = 0`` is the cross-entropy.

    Examples
    --------
    >>> import torch
    >>> from focalcal.losses import focal_loss, focal_loss_reference
    >>> z, y = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([0])
    >>> round(float(focal_loss_reference(z, y, 2.0)), 6) == round(float(focal_loss(z, y, 2.0)), 6)
    True
    """
    gamma = check_gamma(gamma, "gamma", minimum=0.0)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction)
    logp_t = torch.log_softmax(batch.x, dim=1).gather(1, batch.t.unsqueeze(1)).squeeze(1)
    if gamma == 0.0:
        per_sample = -logp_t
    else:
        b = -torch.expm1(logp_t)
        pos = b > 0
        weight = torch.where(pos, torch.where(pos, b, torch.ones_like(b)).pow(gamma), torch.zeros_like(b))
        per_sample = -weight * logp_t
    if batch.valid is not None:
        per_sample = torch.where(batch.valid, per_sample, torch.zeros_like(per_sample))
    return reduce_loss(per_sample, batch, reduction)


# --------------------------------------------------------------------------------------------
# lambda_max and Tr(H) of a loss over a data set
# --------------------------------------------------------------------------------------------

class TraceEstimate(NamedTuple):
    """A Hutchinson trace estimate: the mean of ``n_probes`` values ``v^T H v`` and its standard
    error (their standard deviation over ``sqrt(n_probes)``; NaN for one probe).

    Examples
    --------
    >>> from focalcal.losses import TraceEstimate
    >>> est = TraceEstimate(trace=1.31, std_error=0.04, n_probes=100)
    >>> f"{est.trace:.2f} +- {2 * est.std_error:.2f} ({est.n_probes} probes)"
    '1.31 +- 0.08 (100 probes)'
    """

    trace: float
    std_error: float
    n_probes: int


def _check_setup(model: nn.Module, loss_fn: LossFn, batches: Batches) -> list[Tensor]:
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be an nn.Module, got {type(model).__name__}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no parameters with requires_grad=True")
    if not callable(loss_fn):
        raise ValueError(f"loss_fn must be a callable (logits, labels) -> scalar, got {type(loss_fn).__name__}")
    if isinstance(batches, Iterator) or not isinstance(batches, Iterable):
        raise ValueError("batches must be a re-iterable collection of (inputs, labels) pairs (a list "
                         f"or a DataLoader; each Hessian-vector product reads it once), got "
                         f"{type(batches).__name__}")
    return params


def _hvps(model: nn.Module, params: list[Tensor], loss_fn: LossFn, batches: Batches,
          vectors: Sequence[Tensor]) -> list[Tensor]:
    """``H v`` for every flat vector ``v``, ``H`` the Hessian of the sample-weighted mean loss.

    Each batch contributes ``n_b * H_b v`` (``H_b`` of its mean loss) and the sum is divided by
    ``sum n_b``, so any split of the data gives the same products. One forward and one gradient
    with a graph per batch, then one double backward per vector (a loop: vmapped double backward,
    ``is_grads_batched``, is slower on the CPU).
    """
    out = [torch.zeros_like(v) for v in vectors]
    n_total = 0
    device = params[0].device
    for item in batches:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise ValueError(f"batches must yield (inputs, labels) pairs, got {type(item).__name__}")
        x, y = (t.to(device) for t in item)
        n_b = int(y.shape[0]) if y.dim() else 1
        logits = model(x)
        loss = loss_fn(logits, y)
        if not (isinstance(loss, Tensor) and loss.dim() == 0):
            raise ValueError("loss_fn must return a scalar tensor (the mean loss of the batch)")
        g_logits, *grads = torch.autograd.grad(loss, [logits, *params], create_graph=True,
                                               allow_unused=True)
        if g_logits is None or not g_logits.requires_grad:
            # a once-differentiable loss (the fused focal family) gives a constant gradient in
            # the logits, and H v would silently lose the loss's own curvature
            raise ValueError("loss_fn must be twice differentiable: its gradient in the logits "
                             "carries no graph (the fused focal losses have a single backward; "
                             "use focal_loss_reference)")
        g = torch.cat([(gr if gr is not None else torch.zeros_like(p)).reshape(-1)
                       for gr, p in zip(grads, params)])
        for k, v in enumerate(vectors):
            hv = torch.autograd.grad(g, params, grad_outputs=v, retain_graph=True, allow_unused=True)
            out[k] += n_b * torch.cat([(h if h is not None else torch.zeros_like(p)).reshape(-1)
                                       for h, p in zip(hv, params)])
        n_total += n_b
    if n_total == 0:
        raise ValueError("batches is empty; pass at least one (inputs, labels) batch")
    return [o / n_total for o in out]


def _eval_mode(model: nn.Module) -> Callable[[], None]:
    was = model.training
    model.eval()
    return lambda: model.train(was)


def _probe(n: int, like: Tensor, generator: torch.Generator | None, rademacher: bool) -> Tensor:
    dev = generator.device if generator is not None else like.device
    if rademacher:
        v = torch.randint(0, 2, (n,), generator=generator, device=dev) * 2 - 1
    else:
        v = torch.randn(n, generator=generator, device=dev)
    return v.to(device=like.device, dtype=like.dtype)


def hessian_max_eigenvalue(model: nn.Module, loss_fn: LossFn, batches: Batches, *,
                           n_iter: int = 20, generator: torch.Generator | None = None) -> float:
    """Largest eigenvalue ``lambda_max`` of the Hessian of a loss over a data set (Lanczos).

    ``H`` is the Hessian, in ``model``'s trainable parameters, of the mean of ``loss_fn`` over
    all samples of ``batches`` (each batch weighted by its size). ``n_iter`` Lanczos steps from a
    random start, with full reorthogonalisation, each one Hessian-vector product accumulated over
    the batches (:func:`torch.autograd.grad` twice; ``H`` is never formed): memory is
    ``n_iter + 3`` parameter vectors plus one batch's double-backward graph. The result is the
    largest Ritz value, which converges to the algebraically largest eigenvalue much faster than
    power iteration and is exact once ``n_iter`` reaches the number of parameters. The model is
    measured in eval mode (dropout off, batch-norm statistics frozen), then restored.

    ``loss_fn(logits, labels)`` must return the *mean* loss of a batch and be twice
    differentiable: :func:`~focalcal.losses.cross_entropy_loss` is (it is ``F.cross_entropy``);
    the fused focal family is not, so use :func:`focal_loss_reference` for focal loss.

    Parameters
    ----------
    model : nn.Module
    loss_fn : callable ``(logits, labels) -> scalar Tensor``
    batches : re-iterable of ``(inputs, labels)``
        A list of batches or a ``DataLoader`` (read once per step; an iterator is refused).
    n_iter : int >= 1
        Lanczos steps (Hessian-vector products).
    generator : torch.Generator, optional
        Source of the random start vector.

    Returns
    -------
    float

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from focalcal.losses import cross_entropy_loss, hessian_max_eigenvalue
    >>> net = nn.Linear(2, 3).double()
    >>> with torch.no_grad():
    ...     _ = net.weight.zero_(), net.bias.zero_()
    >>> data = [(torch.eye(2, dtype=torch.float64), torch.tensor([0, 1]))]
    >>> round(hessian_max_eigenvalue(net, cross_entropy_loss, data, n_iter=9), 6)  # softmax at 1/3
    0.5
    """
    params = _check_setup(model, loss_fn, batches)
    n_iter = check_int(n_iter, "n_iter")
    n = sum(p.numel() for p in params)
    restore = _eval_mode(model)
    try:
        v = _probe(n, params[0], generator, rademacher=False)
        v = v / v.norm()
        basis, alphas, betas = [v], [], []
        for j in range(min(n_iter, n)):
            w = _hvps(model, params, loss_fn, batches, [basis[j]])[0]
            alphas.append(float(w @ basis[j]))
            q = torch.stack(basis)
            for _ in range(2):  # twice is enough (Parlett's "twice is enough")
                w = w - q.T @ (q @ w)
            beta = float(w.norm())
            if j + 1 == min(n_iter, n) or beta <= 1e3 * torch.finfo(w.dtype).eps * max(1.0, max(map(abs, alphas))):
                break
            betas.append(beta)
            basis.append(w / beta)
    finally:
        restore()
    k = len(alphas)
    t = torch.diag(torch.tensor(alphas, dtype=torch.float64))
    if k > 1:
        off = torch.tensor(betas[:k - 1], dtype=torch.float64)
        t = t + torch.diag(off, 1) + torch.diag(off, -1)
    return float(torch.linalg.eigvalsh(t)[-1])


def hessian_trace(model: nn.Module, loss_fn: LossFn, batches: Batches, *, n_probes: int = 10,
                  generator: torch.Generator | None = None) -> TraceEstimate:
    """Hutchinson estimate of ``Tr(H)``, ``H`` the Hessian of a loss over a data set.

    ``H`` as in :func:`hessian_max_eigenvalue` (same ``loss_fn`` requirements: the mean loss of
    a batch, twice differentiable; for focal loss :func:`focal_loss_reference`). ``n_probes``
    Rademacher probes ``v`` (``E[v v^T] = I``, so ``E[v^T H v] = Tr(H)``); each batch is run
    forward and differentiated once, then one double backward per probe, so the data are read
    once. Memory: ``2 n_probes`` parameter vectors plus one batch's graph.

    Parameters
    ----------
    model : nn.Module
    loss_fn : callable ``(logits, labels) -> scalar Tensor``
    batches : re-iterable of ``(inputs, labels)``
    n_probes : int >= 1
    generator : torch.Generator, optional
        Source of the probes.

    Returns
    -------
    TraceEstimate
        ``(trace, std_error, n_probes)``.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from focalcal.losses import cross_entropy_loss, hessian_trace
    >>> net = nn.Linear(2, 3).double()
    >>> with torch.no_grad():
    ...     _ = net.weight.zero_(), net.bias.zero_()
    >>> data = [(torch.eye(2, dtype=torch.float64), torch.tensor([0, 1]))]
    >>> est = hessian_trace(net, cross_entropy_loss, data, n_probes=200,
    ...                     generator=torch.Generator().manual_seed(0))
    >>> exact = 4 / 3  # tr(diag(p) - p p^T) = 2/3 at p = 1/3, once for W's columns, once for b
    >>> abs(est.trace - exact) < 3 * est.std_error
    True
    """
    params = _check_setup(model, loss_fn, batches)
    n_probes = check_int(n_probes, "n_probes")
    n = sum(p.numel() for p in params)
    restore = _eval_mode(model)
    try:
        probes = [_probe(n, params[0], generator, rademacher=True) for _ in range(n_probes)]
        hv = _hvps(model, params, loss_fn, batches, probes)
    finally:
        restore()
    values = torch.stack([(h * v).sum() for h, v in zip(hv, probes)]).double()
    se = float(values.std() / math.sqrt(n_probes)) if n_probes > 1 else math.nan
    return TraceEstimate(float(values.mean()), se, n_probes)
