"""Batch preparation, reduction and the fused autograd function shared by every loss.

Conventions (:class:`torch.nn.CrossEntropyLoss`'s) are in the :mod:`focalcal.losses` docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .._validation import ArrayLike, check_choice, label_tensor

REDUCTIONS = ("mean", "sum", "none")

#: ``phi(u, aux) -> (loss (M,), dloss/du (M, m))`` of the gathered log-probabilities ``u`` (M, m)
Phi: TypeAlias = Callable[[Tensor, "Tensor | None"], tuple[Tensor, Tensor]]
#: ``log p -> (index (M, m), aux, scratch (M, K) or None)``: columns picked inside the forward
Picker: TypeAlias = Callable[[Tensor], tuple[Tensor, "Tensor | None", "Tensor | None"]]

_LOW_PRECISION = (torch.float16, torch.bfloat16)

#: the fused backward calls PyTorch's private fused kernel ``torch._log_softmax_backward_data``
#: (what ``F.cross_entropy`` uses) when it exists and works, else the public formula
#: ``g - exp(log p) * rowsum(g)``; the tests switch this off to run both paths
USE_PRIVATE_LOG_SOFTMAX_BACKWARD = hasattr(torch, "_log_softmax_backward_data")

#: the device types on which the fused function runs its arithmetic through ``torch.compile``
#: (:func:`use_compiled`): on CUDA the eager forward and backward are some fifteen small kernel
#: launches, each longer than its arithmetic at the papers' batch sizes; the compiled ones fuse them.
#: The CPU keeps the eager path (its kernels are vectorised and a compilation costs seconds to
#: minutes); the tests add ``"cpu"`` to check the compiled path against the eager one
COMPILED_DEVICE_TYPES: frozenset[str] = frozenset({"cuda"})


# --------------------------------------------------------------------------------------------
# parameter checks shared by the functions and their modules
# --------------------------------------------------------------------------------------------

def check_reduction(reduction: str) -> str:
    return check_choice(reduction, "reduction", REDUCTIONS)


def check_ignore_index(ignore_index: int) -> int:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)):
        raise ValueError(f"ignore_index must be an integer, got {ignore_index!r}")
    return int(ignore_index)


def check_lamda(lamda: float) -> float:
    try:
        v = float(lamda)
    except (TypeError, ValueError) as err:
        raise ValueError(f"lamda must be a real number >= 0, got {lamda!r}") from err
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"lamda must be a finite number >= 0, got {v}")
    return v


# --------------------------------------------------------------------------------------------
# input handling and reduction
# --------------------------------------------------------------------------------------------

class Batch:
    """Logits flattened to (M, K) and labels to (M,), with what is needed to undo it."""

    __slots__ = ("x", "t", "valid", "n_valid", "out_shape", "logits")

    def __init__(self, x: Tensor, t: Tensor, valid: Tensor | None, n_valid: int,
                 out_shape: tuple[int, ...], logits: Tensor) -> None:
        self.x, self.t, self.valid, self.n_valid = x, t, valid, n_valid
        self.out_shape, self.logits = out_shape, logits

    @property
    def n(self) -> int:
        return self.x.shape[0]

    @property
    def k(self) -> int:
        return self.x.shape[1]

    def selected(self) -> tuple[Tensor, Tensor]:
        """(logits, labels) of the non-ignored samples (for batch-coupled losses)."""
        if self.valid is None:
            return self.x, self.t
        return self.x[self.valid], self.t[self.valid]

    def scatter_back(self, per_sample: Tensor) -> Tensor:
        """Per-sample values of the selected samples -> (M,) with zeros at ignored positions."""
        if self.valid is None:
            return per_sample
        out = per_sample.new_zeros(self.n)
        return out.masked_scatter(self.valid, per_sample)


def prepare(logits: ArrayLike, labels: ArrayLike, ignore_index: int, reduction: str,
            min_samples: int = 0) -> Batch:
    """Check and flatten ``(logits, labels)``; raises ``ValueError`` naming the bad argument."""
    if not isinstance(logits, Tensor):
        try:
            logits = torch.as_tensor(np.asarray(logits))
        except (TypeError, ValueError) as err:
            raise ValueError(f"logits must be an array of numbers, got {type(logits).__name__}") from err
    if not logits.is_floating_point():
        raise ValueError(f"logits must be a floating tensor, got dtype {logits.dtype}")
    labels = label_tensor(labels, "labels")
    if logits.dim() == 0:
        raise ValueError("logits must have a class dimension, got a 0-d tensor")
    if logits.dim() == 1:
        if labels.dim() != 0:
            raise ValueError(f"for logits of shape (K,) labels must be a 0-d tensor, got shape "
                             f"{tuple(labels.shape)}")
        x, t, out_shape = logits.unsqueeze(0), labels.reshape(1), ()
    else:
        expected = (logits.shape[0],) + tuple(logits.shape[2:])
        if tuple(labels.shape) != expected:
            raise ValueError(f"labels must have shape {expected} for logits of shape "
                             f"{tuple(logits.shape)} (class dimension 1), got {tuple(labels.shape)}")
        out_shape = expected
        if logits.dim() == 2:
            x, t = logits, labels
        else:
            x = logits.movedim(1, -1).reshape(-1, logits.shape[1])
            t = labels.reshape(-1)
    k = x.shape[1]
    if k < 2:
        raise ValueError(f"logits must have at least 2 classes, got shape {tuple(logits.shape)}")
    if x.shape[0] == 0:
        raise ValueError(f"logits is empty (shape {tuple(logits.shape)}); pass at least one sample")
    if x.dtype in _LOW_PRECISION:
        x = x.float()
    if t.dtype != torch.long or t.device != x.device:
        t = t.to(device=x.device, dtype=torch.long)
    lo, hi = torch.aminmax(t)
    valid, n_valid = None, x.shape[0]
    # fast path: every label is a class and ignore_index is not (the default -100)
    if int(lo) < 0 or int(hi) >= k or 0 <= ignore_index < k:
        valid = t != ignore_index
        bad = valid & ((t < 0) | (t >= k))
        if bool(bad.any()):
            vals = t[bad]
            raise ValueError(f"labels must lie in [0, {k - 1}] or equal ignore_index={ignore_index}; "
                             f"got values in [{int(vals.min())}, {int(vals.max())}]")
        n_valid = int(valid.sum())
        if n_valid == 0 and reduction == "mean":
            raise ValueError(f"every label equals ignore_index={ignore_index}; the mean over no "
                             f"samples is undefined (use reduction='sum' or 'none')")
        t = torch.where(valid, t, torch.zeros_like(t))
    if n_valid < min_samples:
        raise ValueError(f"logits must hold at least {min_samples} sample(s) whose label is not "
                         f"ignore_index for this loss, got {n_valid}")
    return Batch(x, t, valid, n_valid, out_shape, logits)


def check_output(out: Tensor, batch: Batch) -> Tensor:
    ok = math.isfinite(float(out.detach())) if out.dim() == 0 else bool(torch.isfinite(out).all())
    if not ok:
        bad = ~torch.isfinite(batch.logits)
        if bool(bad.any()):
            raise ValueError(f"logits contains {int(bad.sum())} NaN or infinite value(s); all "
                             f"entries must be finite")
        raise ValueError("the loss is not finite although the logits are; check the loss "
                         "parameters (e.g. bandwidth, nu)")
    return out


def reduce_loss(per_sample: Tensor, batch: Batch, reduction: str) -> Tensor:
    """Reduce (M,) per-sample losses that are already 0 at ignored positions."""
    if reduction == "none":
        out = per_sample.reshape(batch.out_shape)
    elif reduction == "sum":
        out = per_sample.sum()
    elif batch.valid is None:
        out = per_sample.mean()
    else:
        out = per_sample.sum() / batch.n_valid
    return check_output(out, batch)


def reduction_scale(batch: Batch, reduction: str) -> float | None:
    """Factor of the reduced sum (None: no reduction)."""
    if reduction == "none":
        return None
    return 1.0 if reduction == "sum" else 1.0 / batch.n_valid


# --------------------------------------------------------------------------------------------
# the fused autograd function of the focal family
# --------------------------------------------------------------------------------------------

class _FusedLogProbLoss(torch.autograd.Function):
    """``loss = scale * sum_i phi(log p_{i, idx_i})`` (or the (M,) vector if ``scale`` is None).

    ``index`` is an (M, m) index tensor, or a function ``log p -> (index, aux, scratch)`` that
    picks the columns from the log-probabilities inside the forward (the dual-focal competitor;
    ``scratch`` is an (M, K) work buffer that the backward reuses, which saves one large
    allocation). ``phi(u, aux)`` maps the gathered log-probabilities ``u`` (M, m) to
    ``(loss (M,), dloss/du (M, m))`` without autograd; the reduction is done here so that the
    whole loss is one autograd node. Backward: ``dl_i/dz_ij = sum_a c_ia (1[j = idx_ia] - p_ij)``.
    """

    @staticmethod
    def forward(ctx: Any, logits: Tensor,
                index: Tensor | Picker, phi: Phi, valid: Tensor | None,
                scale: float | None) -> Tensor:
        scratch = None
        ctx.compiled = not callable(index) and use_compiled(logits.device)
        if ctx.compiled:
            logp, loss, dphi = _compiled("forward")(logits, index, phi, valid)
        else:
            logp = torch.log_softmax(logits, dim=1)
            if callable(index):
                index, aux, scratch = index(logp)
            else:
                aux = None
            loss, dphi = _masked(*phi(logp.gather(1, index), aux), valid)
        ctx.save_for_backward(logp, index, dphi)
        ctx.scratch, ctx.scale = scratch, scale
        return loss if scale is None else loss.sum() * scale

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        logp, index, dphi = ctx.saved_tensors
        c = dphi * grad_out.unsqueeze(1) if ctx.scale is None else dphi * (grad_out * ctx.scale)
        if ctx.compiled:
            return _compiled("backward")(logp, index, c), None, None, None, None
        # G = sum_a c_ia e_{idx_ia}; the gradient is log_softmax's backward applied to G
        g = torch.zeros_like(logp) if ctx.scratch is None else ctx.scratch.zero_()
        ctx.scratch = None
        g.scatter_add_(1, index, c)
        return log_softmax_backward(g, logp), None, None, None, None


def _masked(loss: Tensor, dphi: Tensor, valid: Tensor | None) -> tuple[Tensor, Tensor]:
    if valid is not None:
        loss = torch.where(valid, loss, torch.zeros_like(loss))
        dphi = torch.where(valid.unsqueeze(1), dphi, torch.zeros_like(dphi))
    return loss, dphi


def use_compiled(device: torch.device) -> bool:
    """Whether the fused function runs through ``torch.compile`` on ``device``: its type is in
    :data:`COMPILED_DEVICE_TYPES` (CUDA). A loss whose columns are picked inside the forward
    (dual focal) stays eager everywhere."""
    return device.type in COMPILED_DEVICE_TYPES


def _forward_arithmetic(logits: Tensor, index: Tensor, phi: Phi, valid: Tensor | None
                        ) -> tuple[Tensor, Tensor, Tensor]:
    logp = torch.log_softmax(logits, dim=1)
    loss, dphi = _masked(*phi(logp.gather(1, index), None), valid)
    return logp, loss, dphi


def _backward_arithmetic(logp: Tensor, index: Tensor, c: Tensor) -> Tensor:
    g = torch.zeros_like(logp).scatter_add_(1, index, c)
    return g - torch.exp(logp) * g.sum(1, keepdim=True)


_COMPILED: dict[str, Callable[..., Any]] = {}


def _compiled(which: str) -> Callable[..., Any]:
    """The ``torch.compile``\\ d forward or backward arithmetic, compiled on first use (``phi`` is
    traced into the graph; Dynamo recompiles for another ``phi`` code or closure value, e.g. another
    ``gamma``, and for other shapes)."""
    if which not in _COMPILED:
        fn = _forward_arithmetic if which == "forward" else _backward_arithmetic
        _COMPILED[which] = torch.compile(fn, dynamic=False)
    return _COMPILED[which]


def log_softmax_backward(g: Tensor, logp: Tensor) -> Tensor:
    """``g - exp(log p) * rowsum(g)``: the gradient through ``log p = log_softmax(z, dim=1)``.

    Uses PyTorch's fused kernel ``torch._log_softmax_backward_data`` (the one ``F.cross_entropy``
    uses: one pass over (M, K) instead of a separate exp and multiply, together about twice as
    slow on the CPU) while :data:`USE_PRIVATE_LOG_SOFTMAX_BACKWARD` is true. The kernel is
    private: if it is missing or its signature differs (another torch version), the first failure
    switches to the public formula for good. ``g`` may be overwritten.
    """
    global USE_PRIVATE_LOG_SOFTMAX_BACKWARD
    if USE_PRIVATE_LOG_SOFTMAX_BACKWARD:
        try:
            return torch._log_softmax_backward_data(g, logp, 1, logp.dtype)
        except (AttributeError, TypeError, NotImplementedError):
            USE_PRIVATE_LOG_SOFTMAX_BACKWARD = False
    row = g.sum(1, keepdim=True)
    return g.sub_(torch.exp(logp).mul_(row))


def fused_loss(batch: Batch, index: Tensor | Picker, phi: Phi, reduction: str) -> Tensor:
    """Apply the fused function to a prepared batch and reduce (see :class:`_FusedLogProbLoss`)."""
    out = _FusedLogProbLoss.apply(batch.x, index, phi, batch.valid, reduction_scale(batch, reduction))
    if reduction == "none":
        out = out.reshape(batch.out_shape)
    return check_output(out, batch)


def column_of_value(hit: Tensor, a: Tensor, v: Tensor) -> Tensor:
    """Column of ``v`` (M, 1) in each row of ``a`` (M, K), the highest among ties; uses ``hit``.

    ``a.argmax(1)`` runs about ten times slower on the CPU than ``amax`` for rows of ~100 (its
    kernel is not vectorised); an equality test written into the float buffer ``hit`` (which may
    be ``a`` itself), a product with the column numbers and ``amax`` find the same column in
    three vectorised passes.
    """
    cols = torch.arange(a.shape[1], dtype=a.dtype, device=a.device)
    torch.eq(a, v, out=hit)
    return hit.mul_(cols).amax(1).long()


def ratio_log_p_over_b(u: Tensor, b: Tensor) -> Tensor:
    """``log p / b`` with 0 where ``b = 0`` (then ``u = 0`` and the ratio is multiplied by
    ``b**gamma = 0``); elsewhere it is finite (``-1`` in the limit ``p -> 1`` for ``b = 1 - p``)."""
    return torch.div(u, b).nan_to_num_(nan=0.0)


def penalised(batch: Batch, penalty: Tensor, ce: Tensor, lamda: float, reduction: str) -> Tensor:
    """``ce_i + lamda * penalty`` per selected sample, scattered back and reduced."""
    per_sample = batch.scatter_back(ce + lamda * penalty)
    return reduce_loss(per_sample, batch, reduction)

