"""Training losses of the five papers, in log space, with finite gradients everywhere.

Every loss is a function ``xxx_loss(logits, target, ..., reduction="mean", ignore_index=-100)``
plus a thin :class:`torch.nn.Module` (``XxxLoss``), and :func:`make_loss` builds any of them by
name from :data:`LOSSES` (the sweep and the notebooks use it).

Conventions (those of :class:`torch.nn.CrossEntropyLoss`)
---------------------------------------------------------
``logits`` has shape ``(N, K)``, ``(N, K, d1, ..., dk)`` (class dimension 1) or ``(K,)``
(one sample); ``target`` holds integer class indices of shape ``(N,)``, ``(N, d1, ..., dk)`` or
``()``. Targets equal to ``ignore_index`` are dropped: they contribute 0 to ``"sum"`` and to the
``"none"`` output, and ``"mean"`` divides by the number of the other targets. A ``"mean"`` over a
batch in which *every* target is ignored raises ``ValueError`` (``nn.CrossEntropyLoss`` silently
returns NaN there; this is the one place where we differ). float16/bfloat16 logits are computed in
float32.

Batch-coupled losses (MMCE, KDE-XE, AURC, selective risk) are defined on the whole batch (after
dropping ignored targets). Penalties that are a single number for the batch (MMCE, ECE-KDE) are
added per sample for ``"none"`` (``ce_i + lamda * penalty``), so ``"mean"`` is the mean of
``"none"`` and ``"sum"`` is ``N`` times ``"mean"``.

Numerics
--------
All losses start from ``log p = log_softmax(logits)``; ``1 - p_t`` is ``-expm1(log p_t)``. The
focal family (focal, FLSD, FLSc, inverse focal, dual focal, AdaFocal) is one fused autograd
function whose backward uses the closed-form derivative: for ``l = -(1 + s p)^gamma log p`` with
``s = -1`` (focal) or ``+1`` (inverse focal),

    dl/dlog p = -(1 + s p)^gamma * (1 + gamma * s * p * log p / (1 + s p)),

which for ``s = -1`` is ``-g(p, gamma)``, Mukhoti et al.'s (2020) Prop. 1 factor. The ratio
``log p / (1 - p)`` is bounded (it tends to -1 as ``p -> 1``), so the gradient is finite for every
``gamma >= 0`` and every finite logit, also for ``gamma < 1`` where ``d/dp (1 - p)^gamma`` itself
is infinite at ``p = 1`` (autograd through ``pow`` gives ``inf * 0 = nan`` there). The gradient with
respect to the logits is ``dl/dlog p_t * (onehot(t) - p)``; no second softmax pass is made. These
fused losses are differentiable once (``torch.autograd.gradcheck`` passes; double backward is not
supported), which is all a training step needs. Per-sample ``gamma`` (FLSD, AdaFocal) is chosen
from the detached ``p_t``.

Non-finite logits raise ``ValueError`` (checked lazily: only when the loss comes out non-finite,
so the hot path pays for one ``isfinite`` on the reduced loss, not a pass over the logits).

Where the papers disagree (details in each docstring)
-----------------------------------------------------
* FLSD-53: Mukhoti et al. §5.1 put ``p_t = 0.2`` in the ``gamma = 3`` bin (``[0, 0.2)`` -> 5),
  their Table 4 caption in the ``gamma = 5`` bin (``[0, 0.2]`` -> 5). We follow §5.1 and the released
  code (``p_t < 0.2`` -> 5). Prop. 2 gives ``gamma*(0.2) = 4.85`` and ``gamma*(0.25) = 3.07``
  (``g(0.2, 5) = 0.987``, ``g(0.25, 3) = 1.007``), the "approximately 1" of §4.
* Dual focal: Tao et al. (2023) define ``p_j`` as the largest non-target probability; the released
  code uses the largest probability *strictly below* ``p_t``. Zhou et al. (2025, App. C.3, eq. 26)
  describe the released weight for ``p_t < p_j`` as ``(1 - p_t)^gamma``; that holds only when
  ``p_t`` is the smallest probability (e.g. ``K = 2``). For ``p = (0.5, 0.3, 0.2)``, ``t = 1``:
  paper ``(1 - 0.3 + 0.5)^gamma = 1.2^gamma``, released ``(1 - 0.3 + 0.2)^gamma = 0.9^gamma``,
  Zhou's eq. 26 ``0.7^gamma``.
* Inverse focal: ``dl/dp_t = -gamma (1+p)^(gamma-1) log p - (1+p)^gamma / p`` is positive for some
  ``p`` iff ``gamma > min_p (1+p)/(-p log p) = 1/W(1/e) = 3.5911`` (at ``p = W(1/e) = 0.2785``;
  :func:`inverse_focal_gamma_threshold`). Zhou et al. write 3.5 in §5 and 4 in App. C.2, and the
  derivative printed in App. C.2 has the sign of the first term flipped (as printed it is negative
  for every ``gamma``).
* AdaFocal: the brief's symmetric clipping ``[-gamma_max, gamma_max]`` is the default; the released
  script clips to ``[-2, 20]``. Its equal-mass validation bins come from Mukhoti's interpolated
  edges (groups differ by one sample, the least confident sample falls outside every bin); we use
  exact equal-mass groups.
* MMCE: Kumar et al. define ``MMCE = sqrt(MMCE^2)``; Mukhoti's released unweighted ``MMCE``
  returns ``MMCE^2`` and their ``MMCE_weighted`` normalises the pair sums twice.
* Selective risk: the authors' code accumulates the histogram over all batches seen so far and
  takes ``tau`` with ``torch.quantile`` (a sort); we build it per batch (eq. 15 with ``n`` = batch
  size) and take ``tau`` with ``kthvalue`` (a selection).

* Selective risk: Zhou et al.'s Prop. 4.6 (eq. 12) drops the normalisation ``1 / P(X_tau)`` of the
  conditional expectation in eq. 11 (their proof integrates against ``dP`` instead of
  ``dP / P(X_tau)``), so eq. 12 = ``G(tau) *`` eq. 11. :func:`selective_risk_loss` implements the
  paper's estimator (eq. 16, = eq. 12) and ``conditional=True`` restores eq. 11.
* The curvature paper's eq. 30-31 (the focal gradient diverges at ``p -> 1`` for ``gamma < 0.5``)
  concern their eq. 30, which is not the derivative of the focal loss: ``dl/dp = -g(p, gamma)/p``
  and ``dl/dz_t = -(1 - p) g(p, gamma)`` tend to 0 for every ``gamma > 0`` (tested).

Speed (``bench/bench_losses.py``, 4096 x 100 float32 logits, one CPU thread): the focal family
costs about as much as ``F.cross_entropy`` (one ``log_softmax``, one ``exp`` in the backward, a few
length-``N`` operations); dual focal also has to find the competitor column, which on the CPU is
two or three more passes over the logits (``argmax`` over short rows is not vectorised there).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ._validation import check_choice, check_gamma, check_int, check_positive

__all__ = [
    "FLSD53",
    "FLSD532",
    "LOSSES",
    "CSFS",
    "AURCLoss",
    "AdaFocalLoss",
    "BrierLoss",
    "CrossEntropyLoss",
    "DualFocalLoss",
    "FocalLoss",
    "HessianTracePenalty",
    "InverseFocalLoss",
    "KDEXELoss",
    "LabelSmoothingLoss",
    "MMCELoss",
    "SampleDependentFocalLoss",
    "ScheduledFocalLoss",
    "SelectiveRiskLoss",
    "adafocal_loss",
    "aurc_loss",
    "brier_loss",
    "confidence_scores",
    "cross_entropy_loss",
    "dual_focal_loss",
    "ece_kde",
    "flsd_loss",
    "focal_gamma_at_epoch",
    "focal_loss",
    "hessian_trace_loss",
    "hutchinson_trace",
    "inverse_focal_gamma_threshold",
    "inverse_focal_loss",
    "kde_bandwidth",
    "kde_xe_loss",
    "label_smoothing_loss",
    "make_loss",
    "mmce",
    "mmce_loss",
    "prop2_schedule",
    "sample_dependent_focal_loss",
    "scheduled_focal_loss",
    "selective_risk_loss",
    "selective_risk_weights",
]

REDUCTIONS = ("mean", "sum", "none")
CSFS = ("msp", "neg_entropy", "margin")

#: Mukhoti et al. (2020) sample-dependent schedules as ``(threshold, gamma)`` pairs: ``gamma`` of
#: the first pair with ``p_t < threshold``; the last pair covers everything above the previous
#: threshold, ``p_t = 1`` included.
FLSD53: tuple[tuple[float, float], ...] = ((0.2, 5.0), (1.0, 3.0))
FLSD532: tuple[tuple[float, float], ...] = ((0.2, 5.0), (0.5, 3.0), (1.0, 2.0))

_LOW_PRECISION = (torch.float16, torch.bfloat16)


# ============================================================================================
# input handling
# ============================================================================================

def _check_reduction(reduction: Any) -> str:
    return check_choice(reduction, "reduction", REDUCTIONS)


def _check_ignore_index(ignore_index: Any) -> int:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)):
        raise ValueError(f"ignore_index must be an integer, got {ignore_index!r}")
    return int(ignore_index)


class _Batch:
    """Logits flattened to (M, K) and targets to (M,), with what is needed to undo it."""

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
        """(logits, targets) of the non-ignored samples (for batch-coupled losses)."""
        if self.valid is None:
            return self.x, self.t
        return self.x[self.valid], self.t[self.valid]

    def scatter_back(self, per_sample: Tensor) -> Tensor:
        """Per-sample values of the selected samples -> (M,) with zeros at ignored positions."""
        if self.valid is None:
            return per_sample
        out = per_sample.new_zeros(self.n)
        return out.masked_scatter(self.valid, per_sample)


def _prepare(logits: Any, target: Any, ignore_index: int, reduction: str,
             min_samples: int = 0) -> _Batch:
    if not isinstance(logits, Tensor):
        try:
            logits = torch.as_tensor(np.asarray(logits))
        except (TypeError, ValueError) as err:
            raise ValueError(f"logits must be an array of numbers, got {type(logits).__name__}") from err
    if not logits.is_floating_point():
        raise ValueError(f"logits must be a floating tensor, got dtype {logits.dtype}")
    if not isinstance(target, Tensor):
        try:
            target = torch.as_tensor(np.asarray(target))
        except (TypeError, ValueError) as err:
            raise ValueError("target must be an array of integer class indices") from err
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        raise ValueError(f"target must hold integer class indices, got dtype {target.dtype} "
                         f"(probability targets are not supported)")
    if logits.dim() == 0:
        raise ValueError("logits must have a class dimension, got a 0-d tensor")
    if logits.dim() == 1:
        if target.dim() != 0:
            raise ValueError(f"for logits of shape (K,) target must be a 0-d tensor, got shape "
                             f"{tuple(target.shape)}")
        x, t, out_shape = logits.unsqueeze(0), target.reshape(1), ()
    else:
        expected = (logits.shape[0],) + tuple(logits.shape[2:])
        if tuple(target.shape) != expected:
            raise ValueError(f"target must have shape {expected} for logits of shape "
                             f"{tuple(logits.shape)} (class dimension 1), got {tuple(target.shape)}")
        out_shape = expected
        if logits.dim() == 2:
            x, t = logits, target
        else:
            x = logits.movedim(1, -1).reshape(-1, logits.shape[1])
            t = target.reshape(-1)
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
    # fast path: every target is a class and ignore_index is not (the default -100)
    if int(lo) < 0 or int(hi) >= k or 0 <= ignore_index < k:
        valid = t != ignore_index
        bad = valid & ((t < 0) | (t >= k))
        if bool(bad.any()):
            vals = t[bad]
            raise ValueError(f"target must lie in [0, {k - 1}] or equal ignore_index={ignore_index}; "
                             f"got values in [{int(vals.min())}, {int(vals.max())}]")
        n_valid = int(valid.sum())
        if n_valid == 0 and reduction == "mean":
            raise ValueError(f"every target equals ignore_index={ignore_index}; the mean over no "
                             f"samples is undefined (use reduction='sum' or 'none')")
        t = torch.where(valid, t, torch.zeros_like(t))
    if n_valid < min_samples:
        raise ValueError(f"this loss needs at least {min_samples} non-ignored samples in the batch, "
                         f"got {n_valid}")
    return _Batch(x, t, valid, n_valid, out_shape, logits)


def _check_output(out: Tensor, batch: _Batch) -> Tensor:
    ok = math.isfinite(float(out.detach())) if out.dim() == 0 else bool(torch.isfinite(out).all())
    if not ok:
        bad = ~torch.isfinite(batch.logits)
        if bool(bad.any()):
            raise ValueError(f"logits contains {int(bad.sum())} NaN or infinite value(s); all "
                             f"entries must be finite")
        raise ValueError("the loss is not finite although the logits are; check the loss "
                         "parameters (e.g. bandwidth, nu)")
    return out


def _reduce(per_sample: Tensor, batch: _Batch, reduction: str) -> Tensor:
    """Reduce (M,) per-sample losses that are already 0 at ignored positions."""
    if reduction == "none":
        out = per_sample.reshape(batch.out_shape)
    elif reduction == "sum":
        out = per_sample.sum()
    elif batch.valid is None:
        out = per_sample.mean()
    else:
        out = per_sample.sum() / batch.n_valid
    return _check_output(out, batch)


def _scale(batch: _Batch, reduction: str) -> float | None:
    """Factor of the reduced sum (None: no reduction)."""
    if reduction == "none":
        return None
    return 1.0 if reduction == "sum" else 1.0 / batch.n_valid


# ============================================================================================
# the fused focal family
# ============================================================================================

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
    def forward(ctx: Any, logits: Tensor, index: Tensor | Callable[[Tensor], tuple[Tensor, Any, Tensor | None]],
                phi: Callable[[Tensor, Any], tuple[Tensor, Tensor]], valid: Tensor | None,
                scale: float | None) -> Tensor:
        logp = torch.log_softmax(logits, dim=1)
        scratch = None
        if callable(index):
            index, aux, scratch = index(logp)
        else:
            aux = None
        loss, dphi = phi(logp.gather(1, index), aux)
        if valid is not None:
            loss = torch.where(valid, loss, torch.zeros_like(loss))
            dphi = torch.where(valid.unsqueeze(1), dphi, torch.zeros_like(dphi))
        ctx.save_for_backward(logp, index, dphi)
        ctx.scratch, ctx.scale = scratch, scale
        return loss if scale is None else loss.sum() * scale

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        logp, index, dphi = ctx.saved_tensors
        c = dphi * grad_out.unsqueeze(1) if ctx.scale is None else dphi * (grad_out * ctx.scale)
        # G = sum_a c_ia e_{idx_ia}; the gradient G - p * rowsum(G) is exactly log_softmax's
        # backward, whose fused kernel is what F.cross_entropy uses: one pass over (M, K) instead of
        # a separate exp and multiply (together about twice as slow on the CPU)
        g = torch.zeros_like(logp) if ctx.scratch is None else ctx.scratch.zero_()
        ctx.scratch = None
        g.scatter_add_(1, index, c)
        grad = torch._log_softmax_backward_data(g, logp, 1, logp.dtype)
        return grad, None, None, None, None


def _fused(batch: _Batch, index: Any, phi: Callable[[Tensor, Any], tuple[Tensor, Tensor]],
           reduction: str) -> Tensor:
    out = _FusedLogProbLoss.apply(batch.x, index, phi, batch.valid, _scale(batch, reduction))
    if reduction == "none":
        out = out.reshape(batch.out_shape)
    return _check_output(out, batch)


def _column_of_value(hit: Tensor, a: Tensor, v: Tensor) -> Tensor:
    """Column of ``v`` (M, 1) in each row of ``a`` (M, K), the highest among ties; uses ``hit``.

    ``a.argmax(1)`` runs about ten times slower on the CPU than ``amax`` for rows of ~100 (its
    kernel is not vectorised); an equality test written into the float buffer ``hit`` (which may
    be ``a`` itself), a product with the column numbers and ``amax`` find the same column in
    three vectorised passes.
    """
    cols = torch.arange(a.shape[1], dtype=a.dtype, device=a.device)
    torch.eq(a, v, out=hit)
    return hit.mul_(cols).amax(1).long()


def _ratio_log_p_over_b(u: Tensor, b: Tensor) -> Tensor:
    """``log p / b`` with 0 where ``b = 0`` (then ``u = 0`` and the ratio is multiplied by
    ``b**gamma = 0``); elsewhere it is finite (``-1`` in the limit ``p -> 1`` for ``b = 1 - p``)."""
    return torch.div(u, b).nan_to_num_(nan=0.0)


def _phi_focal(gamma: float | Tensor, sign: float | tuple[Tensor, Tensor], positive: bool = False
               ) -> Callable[[Tensor, Any], tuple[Tensor, Tensor]]:
    """phi for ``-(1 + s p)^gamma log p`` with ``s = -1`` (focal) or ``s = +1`` (inverse focal).

    ``dphi/du = -b^gamma (1 + gamma s p u / b)`` with ``b = 1 + s p``. ``sign`` is ``-1.0``,
    ``+1.0`` or, per sample, ``(s, is_inverse)`` tensors; ``positive`` says that a per-sample
    ``gamma`` is > 0 everywhere.
    """

    def phi(u2: Tensor, aux: Any = None) -> tuple[Tensor, Tensor]:
        u = u2.squeeze(1)
        p = torch.exp(u)
        if isinstance(sign, tuple):
            s, inv = sign
            b = torch.where(inv, p + 1.0, torch.expm1(u).neg_())
        elif sign > 0:
            s, b = 1.0, p + 1.0
        else:
            s, b = -1.0, torch.expm1(u).neg_()
        if isinstance(gamma, Tensor):
            # exp(gamma log b) is vectorised (pow with a tensor exponent is not) and gives 0 at
            # b = 0 for gamma > 0; a gamma of 0 needs pow's 0**0 = 1
            bg = torch.exp(gamma * torch.log(b)) if positive else torch.pow(b, gamma)
            q = bg * p * (gamma * s)
            dphi = torch.addcmul(bg, q, _ratio_log_p_over_b(u, b))
        elif gamma == 0.0:
            bg, dphi = torch.ones_like(u), torch.ones_like(u)
        else:
            bg = b * b if gamma == 2.0 else torch.pow(b, gamma)
            dphi = torch.addcmul(bg, bg * p, _ratio_log_p_over_b(u, b), value=gamma * s)
        return (bg * u).neg_(), dphi.neg_().unsqueeze(1)

    return phi


def _focal_family(batch: _Batch, gamma: float | Callable[[Tensor], Any], inverse: bool,
                  reduction: str) -> Tensor:
    """Focal (``inverse=False``) or inverse focal loss; ``gamma`` may be a function of the
    detached ``log p_t`` returning per-sample ``gamma`` or ``(|gamma|, (s, is_inverse))``."""
    if callable(gamma):
        positive = bool(getattr(gamma, "positive", False))

        def phi(u2: Tensor, aux: Any = None) -> tuple[Tensor, Tensor]:
            g = gamma(u2.squeeze(1))
            if isinstance(g, tuple):
                return _phi_focal(g[0], g[1], positive)(u2)
            return _phi_focal(g, 1.0 if inverse else -1.0, positive)(u2)
        fn = phi
    else:
        fn = _phi_focal(gamma, 1.0 if inverse else -1.0)
    return _fused(batch, batch.t.unsqueeze(1), fn, reduction)


# ============================================================================================
# cross-entropy, focal, inverse focal
# ============================================================================================

def cross_entropy_loss(logits: Any, target: Any, *, reduction: str = "mean",
                       ignore_index: int = -100) -> Tensor:
    """Cross-entropy ``-log p_t`` (the reference); ``F.cross_entropy`` after input checks.

    Parameters
    ----------
    logits : Tensor, shape (N, K), (N, K, d1, ...) or (K,)
    target : Tensor of int, shape (N,), (N, d1, ...) or ()
    reduction : {"mean", "sum", "none"}
    ignore_index : int
        Targets with this value are skipped, as in :class:`torch.nn.CrossEntropyLoss`.

    Returns
    -------
    Tensor
        Scalar, or the shape of ``target`` for ``reduction="none"``.
    """
    reduction = _check_reduction(reduction)
    ignore_index = _check_ignore_index(ignore_index)
    batch = _prepare(logits, target, ignore_index, reduction)
    if batch.valid is None and reduction != "none":
        return _check_output(F.cross_entropy(batch.x, batch.t, reduction=reduction), batch)
    out = F.cross_entropy(batch.x, batch.t, reduction="none")
    if batch.valid is not None:
        out = torch.where(batch.valid, out, torch.zeros_like(out))
    return _reduce(out, batch, reduction)


def focal_loss(logits: Any, target: Any, gamma: float = 3.0, *, reduction: str = "mean",
               ignore_index: int = -100) -> Tensor:
    """Focal loss ``-(1 - p_t)^gamma log p_t`` (Lin et al. 2017; Mukhoti et al. 2020).

    ``gamma = 0`` is the cross-entropy. Shapes, ``reduction`` and ``ignore_index`` as in
    :func:`cross_entropy_loss`.

    Parameters
    ----------
    gamma : float, >= 0
        Focusing parameter (Mukhoti's best fixed value, 3, by default).
    """
    gamma = check_gamma(gamma, "gamma", minimum=0.0)
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction)
    return _focal_family(batch, gamma, False, reduction)


def inverse_focal_loss(logits: Any, target: Any, gamma: float = 2.0, *, reduction: str = "mean",
                       ignore_index: int = -100) -> Tensor:
    """Inverse focal loss ``-(1 + p_t)^gamma log p_t`` (Wang et al. 2021; Zhou et al. 2025, Def. 3.2).

    Up-weights confident samples. ``dl/dp_t = -(1+p)^(gamma-1) (gamma log p + (1+p)/p)`` becomes
    positive somewhere in ``(0, 1)`` iff ``gamma > 3.5911`` (see
    :func:`inverse_focal_gamma_threshold`); above it the loss pushes some correct-class
    probabilities down. Default ``gamma = 2`` (Zhou et al., Table 2, CIFAR-10 ResNet-50).
    Shapes, ``reduction`` and ``ignore_index`` as in :func:`cross_entropy_loss`.
    """
    gamma = check_gamma(gamma, "gamma", minimum=0.0)
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction)
    return _focal_family(batch, gamma, True, reduction)


def inverse_focal_gamma_threshold() -> tuple[float, float]:
    """Smallest ``gamma`` for which the inverse focal loss has a positive ``dl/dp_t`` somewhere.

    ``dl/dp = -(1+p)^(gamma-1) * (gamma log p + (1+p)/p)`` is positive iff
    ``gamma > (1+p) / (-p log p)``; the threshold is the minimum of the right-hand side over
    ``p in (0, 1)``, found with :func:`scipy.optimize.minimize_scalar`.

    Returns
    -------
    (gamma_threshold, p_at_minimum) : (float, float)
        ``(3.5911..., 0.2785...)`` = ``(1/W(1/e), W(1/e))`` with Lambert's ``W`` (at the minimum
        ``-p log p = p (1 + p)``, i.e. ``log p = -(1 + p)``). Zhou et al. (2025) quote 3.5 (§5)
        and 4 (App. C.2).
    """
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(lambda p: (1.0 + p) / (-p * math.log(p)), bounds=(1e-9, 1 - 1e-9),
                          method="bounded", options={"xatol": 1e-12})
    return float(res.fun), float(res.x)


# ============================================================================================
# sample-dependent gamma (FLSD) and epoch-scheduled gamma (FLSc)
# ============================================================================================

def _check_schedule(schedule: Any) -> tuple[tuple[float, float], ...]:
    try:
        pairs = tuple((float(th), float(g)) for th, g in schedule)
    except (TypeError, ValueError) as err:
        raise ValueError("schedule must be a sequence of (threshold, gamma) pairs, e.g. "
                         "[(0.2, 5.0), (1.0, 3.0)]") from err
    if not pairs:
        raise ValueError("schedule must contain at least one (threshold, gamma) pair")
    ths = [th for th, _ in pairs]
    if any(not math.isfinite(th) or th <= 0 for th in ths):
        raise ValueError(f"schedule thresholds must be finite and > 0, got {ths}")
    if any(b <= a for a, b in zip(ths, ths[1:])):
        raise ValueError(f"schedule thresholds must be strictly increasing, got {ths}")
    if ths[-1] < 1.0:
        raise ValueError(f"the last schedule threshold must be >= 1 so that every p_t in [0, 1] gets "
                         f"a gamma, got {ths[-1]}")
    for _, g in pairs:
        check_gamma(g, "schedule gamma", minimum=0.0)
    return pairs


def _schedule_gamma_fn(pairs: tuple[tuple[float, float], ...]) -> Callable[[Tensor], Tensor]:
    # gamma(p_t) = gamma_last + sum_k (gamma_k - gamma_{k+1}) [log p_t < log th_k]: comparisons of
    # log p_t with log thresholds (no exp, exact for p_t that round to 1), written into a float
    # buffer (bool outputs and bucketize are several times slower on the CPU)
    log_edges = [math.log(th) for th, _ in pairs[:-1]]
    gammas = [g for _, g in pairs]
    steps = [gammas[i] - gammas[i + 1] for i in range(len(log_edges))]

    cache: dict[tuple[torch.dtype, torch.device], tuple[Tensor, Tensor]] = {}

    def gamma_of(u: Tensor) -> Tensor:
        if not log_edges:
            return torch.full_like(u, gammas[-1])
        if len(log_edges) == 1:
            return torch.where(u < log_edges[0], gammas[0], gammas[1]).to(u.dtype)
        key = (u.dtype, u.device)
        if key not in cache:
            cache[key] = (torch.tensor(log_edges, dtype=u.dtype, device=u.device),
                          torch.tensor(steps, dtype=u.dtype, device=u.device))
        edges, d = cache[key]
        hit = torch.empty((u.shape[0], len(log_edges)), dtype=u.dtype, device=u.device)
        torch.lt(u.unsqueeze(1), edges, out=hit)
        return torch.addmv(torch.full_like(u, gammas[-1]), hit, d)

    gamma_of.positive = min(gammas) > 0  # type: ignore[attr-defined]
    return gamma_of


def sample_dependent_focal_loss(logits: Any, target: Any, schedule: Sequence[tuple[float, float]],
                                *, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Focal loss whose ``gamma`` depends on the sample's ``p_t`` (Mukhoti et al. 2020, §4).

    Shapes, ``reduction`` and ``ignore_index`` as in :func:`cross_entropy_loss`.

    Parameters
    ----------
    schedule : sequence of (threshold, gamma)
        Increasing thresholds; a sample gets the ``gamma`` of the first pair with
        ``p_t < threshold``. The last threshold must be ``>= 1`` and covers ``p_t = 1`` too.
        :data:`FLSD53` = ``((0.2, 5), (1, 3))``, :data:`FLSD532` = ``((0.2, 5), (0.5, 3), (1, 2))``;
        :func:`prop2_schedule` derives one from Mukhoti's Prop. 2. ``gamma`` is chosen from the
        detached ``p_t``, so no gradient flows through the choice.

    """
    pairs = _check_schedule(schedule)
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction)
    return _focal_family(batch, _schedule_gamma_fn(pairs), False, reduction)


def flsd_loss(logits: Any, target: Any, gamma_high: float = 3.0, *, reduction: str = "mean",
              ignore_index: int = -100) -> Tensor:
    """FLSD-53 (``gamma_high = 3``) and FLSD-532 (``gamma_high = 2``) of Mukhoti et al. (2020).

    ``gamma = 5`` for ``p_t < 0.2``, ``3`` for ``0.2 <= p_t < 0.5`` and ``gamma_high`` for
    ``p_t >= 0.5``. This is the released code's form (``FocalLossAdaptive(gamma=gamma_high)``);
    with ``gamma_high = 3`` it is the paper's FLSD-53 "5 if ``p_t in [0, 0.2)``, else 3" (§5.1;
    the Table 4 caption writes ``[0, 0.2]``, a boundary of measure zero), and with
    ``gamma_high = 2`` the FLSD-532 of App. E.
    """
    gamma_high = check_gamma(gamma_high, "gamma_high", minimum=0.0)
    return sample_dependent_focal_loss(logits, target, ((0.2, 5.0), (0.5, 3.0), (1.0, gamma_high)),
                                       reduction=reduction, ignore_index=ignore_index)


def prop2_schedule(thresholds: Sequence[float]) -> tuple[tuple[float, float], ...]:
    """A sample-dependent schedule from Mukhoti et al.'s Prop. 2.

    For increasing ``p_0`` values ``a_1 < ... < a_m`` in (0, 0.5), bucket ``k`` (``p_t`` in
    ``[a_{k-1}, a_k)``, the last one extended to 1) gets ``gamma*(a_k)`` from
    :func:`focalcal.maps.gamma_star`, so that ``g(p, gamma) >= 1`` (a larger gradient than the
    cross-entropy) for ``p_t <= a_k`` within the bucket and ``g < 1`` above ``a_m``.
    ``prop2_schedule([0.2, 0.25])`` = ``((0.2, 4.85), (1.0, 3.07))``, which FLSD-53 rounds to
    ``((0.2, 5), (1, 3))``.

    Returns
    -------
    tuple of (threshold, gamma)
        Usable as ``schedule`` of :func:`sample_dependent_focal_loss`.
    """
    from .maps import gamma_star

    try:
        a = [float(v) for v in thresholds]
    except (TypeError, ValueError) as err:
        raise ValueError("thresholds must be a sequence of numbers in (0, 0.5)") from err
    if not a:
        raise ValueError("thresholds must contain at least one p_0")
    if any(not (0.0 < v < 0.5) for v in a):
        raise ValueError(f"thresholds must lie in (0, 0.5) (Prop. 2 has a real gamma* there), got {a}")
    if any(b <= c for c, b in zip(a, a[1:])):
        raise ValueError(f"thresholds must be strictly increasing, got {a}")
    gammas = [float(gamma_star(v)) for v in a]
    return tuple(zip(a[:-1] + [1.0], gammas))


def focal_gamma_at_epoch(epoch: int, gammas: Sequence[float] = (5.0, 3.0, 1.0),
                         milestones: Sequence[int] = (100, 250)) -> float:
    """``gamma`` of an epoch-scheduled focal loss (Mukhoti et al. 2020, App. E).

    ``gammas[k]`` for the 0-based ``epoch`` with ``k = #{m in milestones : m <= epoch}``;
    FLSc-531 is ``gammas=(5, 3, 1), milestones=(100, 250)`` (gamma 5 for the first 100 epochs,
    3 for the next 150, 1 for the last 100 of 350), FLSc-532 ends with 2.
    """
    epoch = check_int(epoch, "epoch", minimum=0)
    k = sum(1 for m in milestones if m <= epoch)
    return float(gammas[k])


def _check_epoch_schedule(gammas: Any, milestones: Any) -> tuple[tuple[float, ...], tuple[int, ...]]:
    try:
        g = tuple(check_gamma(v, "gammas", minimum=0.0) for v in gammas)
        m = tuple(check_int(v, "milestones", minimum=1) for v in milestones)
    except TypeError as err:
        raise ValueError("gammas and milestones must be sequences") from err
    if len(g) != len(m) + 1:
        raise ValueError(f"gammas must have one entry more than milestones, got {len(g)} gammas and "
                         f"{len(m)} milestones")
    if any(b <= a for a, b in zip(m, m[1:])):
        raise ValueError(f"milestones must be strictly increasing, got {m}")
    return g, m


def scheduled_focal_loss(logits: Any, target: Any, epoch: int, gammas: Sequence[float] = (5.0, 3.0, 1.0),
                         milestones: Sequence[int] = (100, 250), *, reduction: str = "mean",
                         ignore_index: int = -100) -> Tensor:
    """Focal loss with ``gamma = focal_gamma_at_epoch(epoch, gammas, milestones)`` (FLSc)."""
    g, m = _check_epoch_schedule(gammas, milestones)
    return focal_loss(logits, target, focal_gamma_at_epoch(epoch, g, m), reduction=reduction,
                      ignore_index=ignore_index)


# ============================================================================================
# dual focal
# ============================================================================================

def _phi_dual(gamma: float) -> Callable[[Tensor, Any], tuple[Tensor, Tensor]]:
    """phi for ``-(1 - p_t + p_j)^gamma log p_t`` on ``u = (log p_t, log p_j)``; ``aux`` = has_j."""

    def phi(u: Tensor, has_j: Tensor | None) -> tuple[Tensor, Tensor]:
        ut, uj = u[:, 0], u[:, 1]
        pt = torch.exp(ut)
        pj = torch.exp(uj)
        if has_j is not None:
            pj = torch.where(has_j, pj, torch.zeros_like(pj))
        b = torch.expm1(ut).neg_().add_(pj)
        bg = torch.pow(b, gamma)
        gbr = bg * _ratio_log_p_over_b(ut, b) * gamma
        # d/du_t = -b^g + g b^g (u_t / b) p_t,  d/du_j = -g b^g (u_t / b) p_j
        d_t = torch.addcmul(bg.neg(), gbr, pt)
        d_j = (gbr * pj).neg_()
        return (bg * ut).neg_(), torch.stack((d_t, d_j), dim=1)

    return phi


def _competitor_paper(t: Tensor) -> Callable[[Tensor], tuple[Tensor, None, Tensor]]:
    """Index (t, j) with ``j = argmax_{k != t} log p_k``."""

    def index(logp: Tensor) -> tuple[Tensor, None, Tensor]:
        # mask the target in place (and restore it): no copy of the (M, K) log-probabilities;
        # index_fill_/index_copy_ on the flat view are faster than scatter_ on the CPU
        flat = logp.view(-1)
        pos = torch.arange(logp.shape[0], device=logp.device) * logp.shape[1] + t
        ut = flat.take(pos)
        flat.index_fill_(0, pos, float("-inf"))
        hit = torch.empty_like(logp)
        j = _column_of_value(hit, logp, logp.amax(1, keepdim=True))
        flat.index_copy_(0, pos, ut)
        return torch.stack((t, j), dim=1), None, hit

    return index


def _competitor_released(t: Tensor) -> Callable[[Tensor], tuple[Tensor, Tensor, Tensor]]:
    """Index (t, j) with ``j`` the largest ``log p_k`` strictly below ``log p_t``, and has_j."""

    def index(logp: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        d = logp - logp.gather(1, t.unsqueeze(1))
        # 1/d is negative exactly where log p_k < log p_t and most negative for the largest such
        # entry; ties (d = +0) become +inf and are excluded, as the released strict "<" does
        d.reciprocal_()
        v = d.amin(1, keepdim=True)
        j = _column_of_value(d, d, v)
        return torch.stack((t, j), dim=1), v.squeeze(1) < 0, d

    return index


def dual_focal_loss(logits: Any, target: Any, gamma: float = 5.0, *, variant: str = "paper",
                    reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Dual focal loss ``-(1 - p_t + p_j)^gamma log p_t`` (Tao et al. 2023).

    Shapes, ``reduction`` and ``ignore_index`` as in :func:`cross_entropy_loss`.

    Parameters
    ----------
    gamma : float, >= 0
        Default 5 (Zhou et al. 2025, Table 2, CIFAR-10 ResNet-50).
    variant : {"paper", "released"}
        ``"paper"``: ``p_j = max_{k != t} p_k``, the strongest competitor (Tao et al., eq. 24 of
        Zhou et al.). ``"released"``: ``p_j`` = the largest probability strictly below ``p_t`` and 0
        if there is none (``DualFocalLoss`` of github.com/Linwei94/ICML2023-DualFocalLoss). Both
        agree when the target is the unique argmax. For a misclassified sample the released form
        replaces the competitor by a smaller probability, so it down-weights hard samples
        (Zhou et al., App. C.3), and it jumps wherever ``p_t`` crosses another probability (the
        paper form is continuous). The competitor is chosen by comparing log-probabilities (the
        released code compares probabilities, which can tie where log-probabilities do not;
        among exact ties we take the highest class index); the gradient flows through both
        ``p_t`` and ``p_j``.

    """
    gamma = check_gamma(gamma, "gamma", minimum=0.0)
    variant = check_choice(variant, "variant", ("paper", "released"))
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction)
    pick = _competitor_paper(batch.t) if variant == "paper" else _competitor_released(batch.t)
    return _fused(batch, pick, _phi_dual(gamma), reduction)


# ============================================================================================
# AdaFocal
# ============================================================================================

def _adafocal_gamma_fn(log_inner: Tensor, gammas: Tensor
                       ) -> Callable[[Tensor], tuple[Tensor, tuple[Tensor, Tensor]]]:
    """Per-sample ``(|gamma|, (s, is_inverse))`` from the bin of ``log p_t``.

    ``log_inner`` are the logs of the inner bin edges (log 0 = -inf is a valid boundary) and
    ``gammas`` the signed per-bin values, both already in the dtype/device of the logits.
    """

    def gamma_of(u: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        g = torch.take(gammas, torch.bucketize(u, log_inner, right=True))
        # s = -1 (focal) for gamma > 0, +1 (inverse focal) for gamma < 0
        return g.abs(), (torch.sign(g).neg_(), g < 0)

    gamma_of.positive = bool((gammas != 0).all())  # type: ignore[attr-defined]
    return gamma_of


def _adafocal_tables(bin_edges: Tensor, gammas: Tensor, dtype: torch.dtype, device: torch.device
                     ) -> tuple[Tensor, Tensor]:
    return (torch.log(bin_edges[1:-1].to(torch.float64)).to(device, dtype), gammas.to(device, dtype))


def _check_adafocal_state(bin_edges: Any, gammas: Any) -> tuple[Tensor, Tensor]:
    edges = torch.as_tensor(bin_edges, dtype=torch.float64) if not isinstance(bin_edges, Tensor) else bin_edges
    g = torch.as_tensor(gammas, dtype=torch.float64) if not isinstance(gammas, Tensor) else gammas
    if edges.dim() != 1 or g.dim() != 1 or edges.numel() != g.numel() + 1 or g.numel() < 1:
        raise ValueError(f"bin_edges must have shape (M+1,) and gammas (M,), got "
                         f"{tuple(edges.shape)} and {tuple(g.shape)}")
    if not bool(torch.isfinite(edges).all()) or not bool(torch.isfinite(g).all()):
        raise ValueError("bin_edges and gammas must be finite")
    if bool((edges[1:] < edges[:-1]).any()):
        raise ValueError("bin_edges must be non-decreasing")
    return edges, g


def adafocal_loss(logits: Any, target: Any, bin_edges: Any, gammas: Any, *, reduction: str = "mean",
                  ignore_index: int = -100) -> Tensor:
    """AdaFocal loss for given per-bin ``gamma`` (Ghosh et al. 2022); state in :class:`AdaFocalLoss`.

    A sample falls into bin ``b`` by its ``p_t`` (the first bin takes everything below
    ``bin_edges[1]``, the last everything from ``bin_edges[-2]`` on, otherwise
    ``edges[b] <= p_t < edges[b+1]``, as in the released code). With ``gamma_b >= 0`` its loss is
    the focal loss ``-(1 - p_t)^gamma_b log p_t``, with ``gamma_b < 0`` the inverse focal loss
    ``-(1 + p_t)^|gamma_b| log p_t``.

    Parameters
    ----------
    bin_edges : Tensor, shape (M + 1,)
        Non-decreasing bin edges in [0, 1] (from the validation set's equal-mass bins).
    gammas : Tensor, shape (M,)
        Signed per-bin ``gamma``.
    """
    edges, g = _check_adafocal_state(bin_edges, gammas)
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction)
    tables = _adafocal_tables(edges, g, batch.x.dtype, batch.x.device)
    return _focal_family(batch, _adafocal_gamma_fn(*tables), False, reduction)


# ============================================================================================
# Brier score and label smoothing
# ============================================================================================

def brier_loss(logits: Any, target: Any, *, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Brier score ``sum_k (p_k - 1[k = t])^2`` per sample (Brier 1950; Mukhoti's baseline).

    Computed as ``sum_{k != t} p_k^2 + (1 - p_t)^2`` with ``1 - p_t = -expm1(log p_t)``, so the
    squared error of saturated correct rows is not lost to cancellation.
    Shapes, ``reduction`` and ``ignore_index`` as in :func:`cross_entropy_loss`.
    """
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction)
    logp = torch.log_softmax(batch.x, dim=1)
    p = torch.exp(logp)
    idx = batch.t.unsqueeze(1)
    others = (p * p).scatter(1, idx, 0.0).sum(1)
    per_sample = others + torch.expm1(logp.gather(1, idx).squeeze(1)) ** 2
    if batch.valid is not None:
        per_sample = torch.where(batch.valid, per_sample, torch.zeros_like(per_sample))
    return _reduce(per_sample, batch, reduction)


def label_smoothing_loss(logits: Any, target: Any, alpha: float = 0.05, *, reduction: str = "mean",
                         ignore_index: int = -100) -> Tensor:
    """Cross-entropy with smoothed targets ``s = (1 - alpha) q + alpha (1 - q) / (K - 1)``.

    Mukhoti et al.'s (2020, §5.1) convention, as in their released ``CrossEntropySmoothed``: the
    target class keeps ``1 - alpha`` and every other class gets ``alpha / (K - 1)``. PyTorch's
    ``label_smoothing=a`` (Müller et al. 2019) spreads ``a / K`` over *all* classes; the two agree
    for ``a = alpha K / (K - 1)``. Default ``alpha = 0.05`` (Mukhoti's LS-0.05).

    Parameters
    ----------
    alpha : float in [0, (K-1)/K]
        Above ``(K-1)/K`` the target would get less mass than the other classes.
    """
    alpha = float(alpha)
    if not (math.isfinite(alpha) and 0.0 <= alpha < 1.0):
        raise ValueError(f"alpha must lie in [0, 1), got {alpha}")
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction)
    k = batch.k
    if alpha > (k - 1) / k:
        raise ValueError(f"alpha must be <= (K-1)/K = {(k - 1) / k:.4g} for K = {k} classes, got {alpha}")
    logp = torch.log_softmax(batch.x, dim=1)
    ut = logp.gather(1, batch.t.unsqueeze(1)).squeeze(1)
    per_sample = -(1.0 - alpha) * ut - (alpha / (k - 1)) * (logp.sum(1) - ut)
    if batch.valid is not None:
        per_sample = torch.where(batch.valid, per_sample, torch.zeros_like(per_sample))
    return _reduce(per_sample, batch, reduction)


# ============================================================================================
# batch-level penalties: MMCE, ECE-KDE
# ============================================================================================

def _penalised(batch: _Batch, penalty: Tensor, ce: Tensor, lamda: float, reduction: str) -> Tensor:
    """``ce_i + lamda * penalty`` per selected sample, scattered back and reduced."""
    per_sample = batch.scatter_back(ce + lamda * penalty)
    return _reduce(per_sample, batch, reduction)


def mmce(logits: Tensor, target: Tensor, *, weighted: bool = True, kernel_width: float = 0.4) -> Tensor:
    """Maximum mean calibration error of a batch (Kumar et al. 2018), differentiable.

    With confidence ``r_i = max_k p_ik``, correctness ``c_i``, the Laplacian kernel
    ``k(r, r') = exp(-|r - r'| / kernel_width)`` and coefficients ``a_i``,
    ``MMCE = sqrt(sum_ij a_i a_j k(r_i, r_j) + 1e-10)``:

    * unweighted (MMCE_m): ``a_i = (c_i - r_i) / N``;
    * weighted (MMCE_w): ``a_i = (1 - r_i) / m`` for the ``m`` correct and ``-r_i / n`` for the
      ``n`` incorrect samples, i.e. the RKHS distance between the weighted mean embeddings of the
      two groups. It is 0 when one group is empty (as in the released code).

    The ``1e-10`` keeps the gradient of the square root finite at 0 (released code). Mukhoti et
    al.'s released ``MMCE`` returns the *square* of MMCE_m, and their ``MMCE_weighted`` divides
    each pair sum by ``m^2`` twice (``torch.mean`` and then ``1/(m*m)``); we follow Kumar's
    definition. ``O(N^2)`` time and memory.

    Parameters
    ----------
    logits : Tensor, shape (N, K)
    target : Tensor of int, shape (N,)

    Returns
    -------
    Tensor, scalar
    """
    kernel_width = check_positive(kernel_width, "kernel_width")
    logp = torch.log_softmax(logits, dim=1)
    top, pred = logp.max(1)
    r = torch.exp(top)
    one_minus_r = -torch.expm1(top)
    correct = pred == target
    n = r.shape[0]
    if weighted:
        m = correct.sum().to(r.dtype)
        n_inc = n - m
        a = torch.where(correct, one_minus_r / m.clamp_min(1.0), -r / n_inc.clamp_min(1.0))
        both = (m > 0) & (n_inc > 0)
    else:
        a = torch.where(correct, one_minus_r, -r) / n
        both = None
    kern = torch.exp(-torch.abs(r.unsqueeze(1) - r.unsqueeze(0)) / kernel_width)
    sq = (a.unsqueeze(0) @ kern @ a.unsqueeze(1)).squeeze()
    val = torch.sqrt(sq.clamp_min(0.0) + 1e-10)
    if both is not None:
        val = torch.where(both, val, torch.zeros_like(val))
    return val


def mmce_loss(logits: Any, target: Any, lamda: float = 2.0, *, weighted: bool = True,
              kernel_width: float = 0.4, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Cross-entropy plus ``lamda`` times the batch :func:`mmce` (Kumar et al. 2018).

    ``"mean"``: ``mean_i CE_i + lamda * MMCE`` (Mukhoti's ``ce + lamda * mmce``); ``"none"``:
    ``CE_i + lamda * MMCE``; ``"sum"``: ``N`` times ``"mean"``. Ignored targets are left out of the
    MMCE batch. Default ``lamda = 2`` (Mukhoti et al., App. D, image tasks).
    """
    lamda = _check_lamda(lamda)
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction, min_samples=1)
    x, t = batch.selected()
    pen = mmce(x, t, weighted=bool(weighted), kernel_width=kernel_width)
    ce = F.cross_entropy(x, t, reduction="none")
    return _penalised(batch, pen, ce, lamda, reduction)


def _check_lamda(lamda: Any) -> float:
    try:
        v = float(lamda)
    except (TypeError, ValueError) as err:
        raise ValueError(f"lamda must be a real number >= 0, got {lamda!r}") from err
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"lamda must be a finite number >= 0, got {v}")
    return v


_BANDWIDTH_GRID = tuple(np.concatenate([np.logspace(-5, -1, 15), np.linspace(0.2, 1.0, 5)]).tolist())


def _kde_log_kernel(logp: Tensor, h: float, mode: str) -> tuple[Tensor, Tensor]:
    """Log kernel matrix ``L[j, i] = log k(f_j; centre f_i)`` (diagonal -inf) and the target-free part.

    canonical: Dirichlet density with ``alpha_i = f_i / h + 1`` at ``f_j``;
    top_label: Beta density with ``(r_i / h + 1, (1 - r_i) / h + 1)`` at ``r_j``.
    Returns ``(L, f)`` where ``f`` is ``p`` (canonical) or ``r`` (top label).
    """
    n = logp.shape[0]
    if mode == "canonical":
        f = torch.exp(logp)
        am1 = f / h
        log_beta = torch.lgamma(am1 + 1.0).sum(1) - torch.lgamma((am1 + 1.0).sum(1))
        lk = logp @ am1.T - log_beta.unsqueeze(0)
        out_f = f
    else:
        top, arg = logp.max(1)
        # log(1 - r) from the other classes: finite for saturated rows
        log1m = torch.logsumexp(logp.scatter(1, arg.unsqueeze(1), float("-inf")), dim=1)
        r, one_m = torch.exp(top), torch.exp(log1m)
        a, b = r / h, one_m / h
        log_beta = torch.lgamma(a + 1.0) + torch.lgamma(b + 1.0) - torch.lgamma(a + b + 2.0)
        lk = top.unsqueeze(1) * a.unsqueeze(0) + log1m.unsqueeze(1) * b.unsqueeze(0) - log_beta.unsqueeze(0)
        out_f = r
    eye = torch.eye(n, dtype=torch.bool, device=logp.device)
    lk = lk.masked_fill(eye, float("-inf"))
    return lk, out_f


def kde_bandwidth(logits: Tensor, *, mode: str = "canonical", grid: Sequence[float] | None = None) -> float:
    """Kernel bandwidth maximising the leave-one-out log-likelihood of the KDE (no gradient).

    ``sum_j log( (1/(N-1)) sum_{i != j} k_h(f_j; f_i) )`` over ``grid`` (default: the authors'
    ``logspace(-5, -1, 15)`` and ``linspace(0.2, 1, 5)``), computed in float64. The released
    ``get_bandwidth`` subtracts an extra ``log h`` (the Dirichlet kernel is already a density) and
    starts its maximum at 0, returning -1 when every log-likelihood is negative; we do neither.
    """
    mode = check_choice(mode, "mode", ("canonical", "top_label"))
    grid = _BANDWIDTH_GRID if grid is None else tuple(check_positive(h, "grid") for h in grid)
    with torch.no_grad():
        logp = torch.log_softmax(logits.detach().to(torch.float64), dim=1)
        n = logp.shape[0]
        if n < 2:
            raise ValueError("the leave-one-out bandwidth needs at least 2 samples")
        # one N x N kernel per candidate bandwidth (a loop over the grid, not over samples)
        ll = [float(torch.logsumexp(_kde_log_kernel(logp, h, mode)[0], dim=1).sum()) - n * math.log(n - 1)
              for h in grid]
        ll_arr = np.asarray(ll)
        ll_arr[~np.isfinite(ll_arr)] = -np.inf
    return float(grid[int(np.argmax(ll_arr))])


def ece_kde(logits: Tensor, target: Tensor, *, bandwidth: float | str = "auto", p: float = 1.0,
            mode: str = "canonical") -> Tensor:
    """Differentiable KDE estimate of the ``L_p`` calibration error (Popordanoska et al. 2022).

    ``mode="canonical"``: ``(1/N) sum_j || E_hat[y | f_j] - f_j ||_p^p`` with the leave-one-out
    Nadaraya-Watson estimate ``E_hat[y | f_j] = sum_{i != j} k(f_j; f_i) y_i / sum_{i != j}
    k(f_j; f_i)`` and the Dirichlet kernel ``k(f; f_i) = Dir(f | f_i / h + 1)``.
    ``mode="top_label"``: the same with the top probability ``r = max_k p_k``, the correctness
    ``1[argmax = y]`` and the Beta kernel ``Beta(r | r_i / h + 1, (1 - r_i) / h + 1)``. This is
    the estimate of ``CE_p^p`` (no ``1/p``-th root), as in the authors' ``get_ece_kde``. Kernels
    are evaluated in log space from ``log_softmax``, so saturated rows give finite values
    (``0 * log 0`` never appears); the row-normalised weights are a softmax of the log kernel.
    ``O(N^2 K)`` time, ``O(N^2)`` memory.

    Parameters
    ----------
    logits : Tensor, shape (N, K), N >= 2
    target : Tensor of int, shape (N,)
    bandwidth : float or "auto"
        ``"auto"``: :func:`kde_bandwidth` on the detached batch.
    p : float >= 1
    mode : {"canonical", "top_label"}
    """
    mode = check_choice(mode, "mode", ("canonical", "top_label"))
    p = float(p)
    if not (math.isfinite(p) and p >= 1):
        raise ValueError(f"p must be a finite number >= 1, got {p}")
    if logits.shape[0] < 2:
        raise ValueError("ece_kde needs at least 2 samples (leave-one-out)")
    if isinstance(bandwidth, str):
        check_choice(bandwidth, "bandwidth", ("auto",))
        h = kde_bandwidth(logits, mode=mode)
    else:
        h = check_positive(bandwidth, "bandwidth")
    logp = torch.log_softmax(logits, dim=1)
    lk, f = _kde_log_kernel(logp, h, mode)
    w = torch.softmax(lk, dim=1)
    if mode == "canonical":
        y = F.one_hot(target, logits.shape[1]).to(w.dtype)
        err = (torch.abs(w @ y - f) ** p).sum(1)
    else:
        correct = (logp.detach().argmax(1) == target).to(w.dtype)
        err = torch.abs(w @ correct - f) ** p
    return err.mean()


def kde_xe_loss(logits: Any, target: Any, lamda: float = 0.3, *, bandwidth: float | str = "auto",
                p: float = 1.0, mode: str = "canonical", reduction: str = "mean",
                ignore_index: int = -100) -> Tensor:
    """KDE-XE: cross-entropy plus ``lamda`` times :func:`ece_kde` of the batch.

    (Popordanoska et al. 2022: ``Risk(f) + lamda * CE(f)``.) Default ``lamda = 0.3`` (the value
    Zhou et al. (2025, App. E.1) quote for CIFAR-10), ``p = 1``, canonical calibration with the
    leave-one-out bandwidth of each batch. Reductions as in :func:`mmce_loss`.
    """
    lamda = _check_lamda(lamda)
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction, min_samples=2)
    x, t = batch.selected()
    pen = ece_kde(x, t, bandwidth=bandwidth, p=p, mode=mode)
    ce = F.cross_entropy(x, t, reduction="none")
    return _penalised(batch, pen, ce, lamda, reduction)


# ============================================================================================
# AURC and the selective-risk loss (Zhou et al. 2025)
# ============================================================================================

def confidence_scores(logp: Tensor, csf: str = "msp") -> Tensor:
    """Differentiable confidence-score functions in [0, 1] from log-probabilities (N, K) -> (N,).

    ``"msp"``: ``max_k p_k``; ``"margin"``: ``p_(1) - p_(2)``; ``"neg_entropy"``:
    ``1 + sum_k p_k log p_k / log K``, the negative entropy rescaled from ``[-log K, 0]`` to
    ``[0, 1]`` so that one set of bins on [0, 1] serves all three (the authors' code does the same;
    their Table 1 writes ``sum z_i log z_i`` with the logits ``z``, meaning the probabilities).
    """
    csf = check_choice(csf, "csf", CSFS)
    if csf == "msp":
        return torch.exp(logp.max(1).values)
    if csf == "margin":
        top2 = logp.topk(2, dim=1).values
        return torch.exp(top2[:, 0]) - torch.exp(top2[:, 1])
    p = torch.exp(logp)
    neg_ent = (p * logp).sum(1)
    return (1.0 + neg_ent / math.log(logp.shape[1])).clamp(0.0, 1.0)


def _rank_key(logp: Tensor, csf: str) -> Tensor:
    """A key with the ranking of the CSF that stays strict for saturated rows (log space)."""
    if csf == "msp":
        return logp.max(1).values
    if csf == "margin":
        top2 = logp.topk(2, dim=1).values
        return top2[:, 0] + torch.log(-torch.expm1(top2[:, 1] - top2[:, 0]))
    return (torch.exp(logp) * logp).sum(1)


def aurc_loss(logits: Any, target: Any, *, csf: str = "msp", weights: str = "harmonic",
              reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """AURC as a reweighted cross-entropy (Zhou et al. 2025, Def. 3.3): ``mean_i alpha_i CE_i``.

    The batch is ranked by the confidence score (ascending rank ``r_i`` in 1..N, one sort,
    ``O(N log N)``; ties in arbitrary order) and

    * ``weights="harmonic"``: ``alpha_i = H_N - H_{N - r_i} = psi(N+1) - psi(N - r_i + 1)``, for
      which ``mean_i alpha_i l_i`` is exactly the empirical AURC ``(1/N) sum_k risk(top-k)``;
    * ``weights="log"``: ``alpha_i = -ln(1 - r_i / (N + 1))``, the plug-in of ``-ln(1 - G(x))``.

    The weights are computed without gradient (a rank is piecewise constant); the gradient is that
    of the weighted cross-entropy. ``"none"`` returns ``alpha_i CE_i``.
    """
    csf = check_choice(csf, "csf", CSFS)
    weights = check_choice(weights, "weights", ("harmonic", "log"))
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction, min_samples=1)
    x, t = batch.selected()
    logp = torch.log_softmax(x, dim=1)
    ce = -logp.gather(1, t.unsqueeze(1)).squeeze(1)
    n = x.shape[0]
    with torch.no_grad():
        key = _rank_key(logp.detach(), csf)
        rank = torch.empty(n, dtype=torch.float64, device=x.device)
        rank[torch.argsort(key)] = torch.arange(1, n + 1, dtype=torch.float64, device=x.device)
        if weights == "harmonic":
            alpha = torch.digamma(torch.tensor(n + 1.0, dtype=torch.float64)) - torch.digamma(n - rank + 1.0)
        else:
            alpha = -torch.log1p(-rank / (n + 1.0))
    return _reduce(batch.scatter_back(alpha.to(ce.dtype) * ce), batch, reduction)


def selective_risk_weights(scores: Tensor, *, coverage: float = 0.9, threshold: float | None = None,
                           nu: float = 0.1, n_bins: int = 64, conditional: bool = False) -> Tensor:
    """Weights ``beta_i`` of Zhou et al.'s (2025) selective-risk loss, eq. 16, in ``O(N * n_bins)``.

    ``beta_i = -ln(1 - G_nu(min(g_i, tau)))`` with the bin-based smoothed CDF (eq. 15)
    ``G_nu(s) = (1/N) sum_k h_k sigmoid((s - c_k) / nu)`` over ``n_bins`` equal-width bins of
    [0, 1] (counts ``h_k``, centres ``c_k``). Samples above ``tau`` get the constant
    ``-ln(1 - G_nu(tau))`` (eq. 12: ``x`` outside ``X_tau``), those below their rank weight.

    Parameters
    ----------
    scores : Tensor, shape (N,)
        Confidence scores in [0, 1] (e.g. :func:`confidence_scores`), differentiable.
    coverage : float in (0, 1]
        Fraction of the batch treated as low confidence: ``tau`` is the ``ceil(coverage * N)``-th
        smallest score (``torch.kthvalue``, a selection, no sort; App. E.2). ``coverage = 1``
        covers the whole batch (an AURC-like weighting).
    threshold : float, optional
        A fixed ``tau`` in [0, 1] instead of the coverage rule.
    nu : float > 0
        Sigmoid smoothing (App. E.2; 0.1 for CIFAR-10, 0.01 for CIFAR-100).
    n_bins : int
        Number of bins ``K`` of eq. 13-14 (the authors' code uses 64).
    conditional : bool
        Divide by ``G_nu(tau)``: the expectation over ``x~ ~ P_X_tau`` in eq. 11 is conditional,
        but Prop. 4.6 (eq. 12) and the estimator eq. 16 omit the ``1 / P(X_tau)``; ``True`` gives
        eq. 11, ``False`` (default) the paper's estimator.

    Returns
    -------
    Tensor, shape (N,)
        ``beta``; its gradient flows through ``g_i`` for ``g_i < tau`` only (``tau``, the counts and
        ``G(tau)`` are constants, App. C.4). ``G_nu`` is clamped to ``[1/(N+1), N/(N+1)]`` as in the
        authors' code, which keeps ``beta`` finite when the sigmoid saturates.
    """
    n_bins = check_int(n_bins, "n_bins", minimum=1)
    nu = check_positive(nu, "nu")
    if scores.dim() != 1 or scores.numel() == 0:
        raise ValueError(f"scores must be a non-empty 1-d tensor, got shape {tuple(scores.shape)}")
    if not bool(torch.isfinite(scores.detach()).all()):
        raise ValueError("scores contains NaN or infinite values; all entries must be finite")
    n = scores.shape[0]
    with torch.no_grad():
        sd = scores.detach()
        if threshold is None:
            coverage = float(coverage)
            if not (0.0 < coverage <= 1.0):
                raise ValueError(f"coverage must lie in (0, 1], got {coverage}")
            k = min(max(int(math.ceil(coverage * n - 1e-9)), 1), n)
            tau = torch.kthvalue(sd, k).values
        else:
            tau_f = float(threshold)
            if not (0.0 <= tau_f <= 1.0):
                raise ValueError(f"threshold must lie in [0, 1], got {tau_f}")
            tau = torch.tensor(tau_f, dtype=sd.dtype, device=sd.device)
        idx = (sd * n_bins).floor().clamp(0, n_bins - 1).long()
        counts = torch.bincount(idx, minlength=n_bins).to(sd.dtype)
        centres = (torch.arange(n_bins, dtype=sd.dtype, device=sd.device) + 0.5) / n_bins
    lo, hi = 1.0 / (n + 1), n / (n + 1.0)

    def cdf(s: Tensor) -> Tensor:
        sig = torch.sigmoid((s.unsqueeze(-1) - centres) / nu)
        return (sig @ counts / n).clamp(lo, hi)

    beta = -torch.log1p(-cdf(torch.minimum(scores, tau)))
    if conditional:
        with torch.no_grad():
            g_tau = cdf(tau)
        beta = beta / g_tau
    return beta


def selective_risk_loss(logits: Any, target: Any, *, csf: str = "msp", coverage: float = 0.9,
                        threshold: float | None = None, nu: float = 0.1, n_bins: int = 64,
                        conditional: bool = False, reduction: str = "mean",
                        ignore_index: int = -100) -> Tensor:
    """Zhou et al.'s (2025) selective-risk loss ``AU_{P_X_tau} = mean_i beta_i CE_i`` (eq. 17).

    ``beta`` from :func:`selective_risk_weights` on the differentiable CSF
    :func:`confidence_scores` (``"msp"``, ``"neg_entropy"``, ``"margin"``) of the batch. The
    histogram is built from the current batch (eq. 15 with ``n`` = batch size); the authors' code
    keeps accumulating it over all batches seen so far and takes ``tau`` with ``torch.quantile``
    (a sort). Cost ``O(N (K_classes + n_bins))``: no pairwise matrix, no sort. Defaults: MSP,
    ``coverage = 0.9``, ``nu = 0.1`` (Zhou et al., App. E, CIFAR-10), 64 bins. ``"none"`` returns
    ``beta_i CE_i``.
    """
    reduction = _check_reduction(reduction)
    batch = _prepare(logits, target, _check_ignore_index(ignore_index), reduction, min_samples=1)
    x, t = batch.selected()
    logp = torch.log_softmax(x, dim=1)
    ce = -logp.gather(1, t.unsqueeze(1)).squeeze(1)
    g = confidence_scores(logp, csf)
    if not bool(torch.isfinite(g.detach()).all()):
        _check_output(g.detach().sum(), batch)  # raises, naming the logits
    beta = selective_risk_weights(g, coverage=coverage, threshold=threshold,
                                  nu=nu, n_bins=n_bins, conditional=conditional)
    return _reduce(batch.scatter_back(beta * ce), batch, reduction)


# ============================================================================================
# Hessian-trace penalty (curvature paper, eq. 33)
# ============================================================================================

def hutchinson_trace(loss: Tensor, params: Sequence[Tensor], n_probes: int = 1, *,
                     generator: torch.Generator | None = None, probes: Sequence[Sequence[Tensor]] | None = None,
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


def hessian_trace_loss(logits: Tensor, target: Tensor, *, model: nn.Module, inputs: Tensor | None = None,
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
    lamda = _check_lamda(lamda)
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


# ============================================================================================
# nn.Module wrappers
# ============================================================================================

class _LossModule(nn.Module):
    def __init__(self, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__()
        self.reduction = _check_reduction(reduction)
        self.ignore_index = _check_ignore_index(ignore_index)

    def _kw(self) -> dict[str, Any]:
        return {"reduction": self.reduction, "ignore_index": self.ignore_index}


class CrossEntropyLoss(_LossModule):
    """Module form of :func:`cross_entropy_loss`."""

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return cross_entropy_loss(logits, target, **self._kw())


class FocalLoss(_LossModule):
    """Module form of :func:`focal_loss`."""

    def __init__(self, gamma: float = 3.0, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.gamma = check_gamma(gamma, "gamma", minimum=0.0)

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return focal_loss(logits, target, self.gamma, **self._kw())

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, reduction={self.reduction!r}"


class InverseFocalLoss(FocalLoss):
    """Module form of :func:`inverse_focal_loss`."""

    def __init__(self, gamma: float = 2.0, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(gamma, reduction, ignore_index)

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return inverse_focal_loss(logits, target, self.gamma, **self._kw())


class SampleDependentFocalLoss(_LossModule):
    """Module form of :func:`sample_dependent_focal_loss` (FLSD-53 by default)."""

    def __init__(self, schedule: Sequence[tuple[float, float]] = FLSD53, reduction: str = "mean",
                 ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.schedule = _check_schedule(schedule)

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return sample_dependent_focal_loss(logits, target, self.schedule, **self._kw())

    def extra_repr(self) -> str:
        return f"schedule={self.schedule}, reduction={self.reduction!r}"


class ScheduledFocalLoss(_LossModule):
    """Focal loss with ``gamma`` by epoch (FLSc-531 by default); the trainer calls ``set_epoch``.

    Parameters
    ----------
    gammas, milestones
        See :func:`focal_gamma_at_epoch`.
    total_epochs : int, optional
        If given, the milestones (which refer to Mukhoti's 350-epoch runs) are rescaled by
        ``total_epochs / 350`` and rounded, so that a shorter run keeps the proportions.
    """

    def __init__(self, gammas: Sequence[float] = (5.0, 3.0, 1.0), milestones: Sequence[int] = (100, 250),
                 total_epochs: int | None = None, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        g, m = _check_epoch_schedule(gammas, milestones)
        if total_epochs is not None:
            total_epochs = check_int(total_epochs, "total_epochs")
            m = tuple(max(1, round(v * total_epochs / 350)) for v in m)
            if any(b <= a for a, b in zip(m, m[1:])):
                raise ValueError(f"total_epochs={total_epochs} is too small to keep the milestones "
                                 f"distinct (got {m})")
        self.gammas, self.milestones = g, m
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Set the 0-based epoch whose ``gamma`` the next calls use."""
        self.epoch = check_int(epoch, "epoch", minimum=0)

    @property
    def gamma(self) -> float:
        return focal_gamma_at_epoch(self.epoch, self.gammas, self.milestones)

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return focal_loss(logits, target, self.gamma, **self._kw())

    def extra_repr(self) -> str:
        return f"gammas={self.gammas}, milestones={self.milestones}, epoch={self.epoch}"


class DualFocalLoss(_LossModule):
    """Module form of :func:`dual_focal_loss`."""

    def __init__(self, gamma: float = 5.0, variant: str = "paper", reduction: str = "mean",
                 ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.gamma = check_gamma(gamma, "gamma", minimum=0.0)
        self.variant = check_choice(variant, "variant", ("paper", "released"))

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return dual_focal_loss(logits, target, self.gamma, variant=self.variant, **self._kw())

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, variant={self.variant!r}"


class AdaFocalLoss(_LossModule):
    """AdaFocal (Ghosh et al. 2022): per-bin ``gamma`` updated from validation calibration.

    State (buffers, saved in ``state_dict``): ``bin_edges`` (M+1,) and signed ``gammas`` (M,).
    Initially ``M = n_bins`` equal-width bins on [0, 1] with ``gamma = gamma_initial``. The loss
    of a training sample is :func:`adafocal_loss` with the ``gamma`` of the bin of its ``p_t``.

    :meth:`update` (call it after every epoch with the validation logits) splits the validation
    top-label confidences into ``M`` equal-mass bins (sorted position ``i`` -> bin
    ``floor(i M / N)``, the convention of :mod:`focalcal.metrics`; the released code interpolates
    edges with Mukhoti's ``histedges_equalN``, whose groups differ by one sample and whose
    ``(lo, hi]`` bins drop the least confident sample), computes each bin's gap
    ``E_b = C_b - A_b`` (mean confidence minus accuracy; 0 for an empty bin) and updates, as in
    the released code,

    * ``gamma_b <- gamma_b * exp(lamda * E_b)`` if ``gamma_b > 0`` (focal: more focusing when
      over-confident), ``gamma_b * exp(-lamda * E_b)`` if ``gamma_b < 0`` (inverse focal);
    * if ``|gamma_b| < switch_pt`` it flips to ``-switch_pt`` (from positive) or ``+switch_pt``
      (from negative): the switch between focal and inverse focal;
    * clipping to ``[gamma_min, gamma_max]``;

    and then adopts the validation bin edges. Defaults: 15 bins, ``lamda = 1``, ``gamma_initial =
    1``, ``gamma_max = 20``, ``switch_pt = 0.2`` (released ``main.py``); ``gamma_min`` defaults to
    ``-gamma_max`` (symmetric clipping); the released script uses ``gamma_min = -2``.
    """

    def __init__(self, n_bins: int = 15, lamda: float = 1.0, gamma_initial: float = 1.0,
                 gamma_max: float = 20.0, gamma_min: float | None = None, switch_pt: float = 0.2,
                 reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        n_bins = check_int(n_bins, "n_bins")
        self.lamda = _check_lamda(lamda)
        self.gamma_max = check_positive(gamma_max, "gamma_max")
        gmin = -self.gamma_max if gamma_min is None else float(gamma_min)
        if not (math.isfinite(gmin) and gmin < 0):
            raise ValueError(f"gamma_min must be a finite negative number, got {gamma_min}")
        self.gamma_min = gmin
        self.switch_pt = check_positive(switch_pt, "switch_pt")
        g0 = float(gamma_initial)
        if not (math.isfinite(g0) and abs(g0) >= self.switch_pt and self.gamma_min <= g0 <= self.gamma_max):
            raise ValueError(f"gamma_initial must satisfy |gamma| >= switch_pt={self.switch_pt} and "
                             f"lie in [{self.gamma_min}, {self.gamma_max}], got {gamma_initial}")
        self.register_buffer("bin_edges", torch.linspace(0.0, 1.0, n_bins + 1, dtype=torch.float64))
        self.register_buffer("gammas", torch.full((n_bins,), g0, dtype=torch.float64))
        self._table_key: tuple[Any, ...] | None = None

    @property
    def n_bins(self) -> int:
        return self.gammas.numel()

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        # the state was checked when it was set; the tables in the logits' dtype are cached
        # until the buffers change (update, load_state_dict, in-place edits bump _version)
        batch = _prepare(logits, target, self.ignore_index, self.reduction)
        key = (batch.x.dtype, batch.x.device, self.gammas.data_ptr(), self.gammas._version,
               self.bin_edges.data_ptr(), self.bin_edges._version)
        if self._table_key != key:
            self._tables = _adafocal_tables(self.bin_edges, self.gammas, batch.x.dtype, batch.x.device)
            self._gamma_fn = _adafocal_gamma_fn(*self._tables)
            self._table_key = key
        return _focal_family(batch, self._gamma_fn, False, self.reduction)

    @torch.no_grad()
    def update(self, val_logits: Tensor, val_labels: Tensor) -> Tensor:
        """Update the per-bin ``gamma`` from validation logits (N, K) and labels (N,); returns gaps.

        Returns
        -------
        Tensor, shape (M,), float64
            The calibration gaps ``C_b - A_b`` that drove the update.
        """
        batch = _prepare(val_logits, val_labels, self.ignore_index, "mean", min_samples=1)
        x, t = batch.selected()
        logp = torch.log_softmax(x.detach().to(torch.float64), dim=1)
        top, pred = logp.max(1)
        conf, order = torch.sort(torch.exp(top).cpu())
        acc = (pred == t).to(torch.float64).cpu()[order]
        m, n = self.n_bins, conf.numel()
        # equal mass: the sample at sorted position i goes into bin floor(i M / N)
        b = torch.arange(n) * m // n
        cnt = torch.bincount(b, minlength=m).to(torch.float64)
        c_sum = torch.bincount(b, weights=conf, minlength=m)
        a_sum = torch.bincount(b, weights=acc, minlength=m)
        gap = torch.where(cnt > 0, (c_sum - a_sum) / cnt.clamp_min(1.0), torch.zeros_like(cnt))
        # edge b = the smallest confidence of bin b (1 past an empty tail), so that the lookup of
        # training samples, edges[b] <= p_t < edges[b+1], uses the same boundaries
        first = (torch.arange(1, m) * n + m - 1) // m
        inner = torch.where(first < n, conf[first.clamp_max(n - 1)], torch.ones(m - 1, dtype=conf.dtype))
        edges = torch.cat([torch.zeros(1, dtype=conf.dtype), inner, torch.ones(1, dtype=conf.dtype)])
        g = self.gammas.cpu()
        nxt = torch.where(g > 0, g * torch.exp(self.lamda * gap), g * torch.exp(-self.lamda * gap))
        small = nxt.abs() < self.switch_pt
        nxt = torch.where(small, torch.where(nxt > 0, -self.switch_pt, self.switch_pt).to(nxt.dtype), nxt)
        nxt = nxt.clamp(self.gamma_min, self.gamma_max)
        self.gammas.copy_(nxt.to(self.gammas.device))
        self.bin_edges.copy_(edges.to(self.bin_edges.device, self.bin_edges.dtype))
        return gap

    def extra_repr(self) -> str:
        return (f"n_bins={self.n_bins}, lamda={self.lamda}, gamma_max={self.gamma_max}, "
                f"gamma_min={self.gamma_min}, switch_pt={self.switch_pt}")


class BrierLoss(_LossModule):
    """Module form of :func:`brier_loss`."""

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return brier_loss(logits, target, **self._kw())


class LabelSmoothingLoss(_LossModule):
    """Module form of :func:`label_smoothing_loss`."""

    def __init__(self, alpha: float = 0.05, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        alpha = float(alpha)
        if not (math.isfinite(alpha) and 0.0 <= alpha < 1.0):
            raise ValueError(f"alpha must lie in [0, 1), got {alpha}")
        self.alpha = alpha

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return label_smoothing_loss(logits, target, self.alpha, **self._kw())


class MMCELoss(_LossModule):
    """Module form of :func:`mmce_loss`."""

    def __init__(self, lamda: float = 2.0, weighted: bool = True, kernel_width: float = 0.4,
                 reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.lamda = _check_lamda(lamda)
        self.weighted = check_choice(weighted, "weighted", (True, False))
        self.kernel_width = check_positive(kernel_width, "kernel_width")

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return mmce_loss(logits, target, self.lamda, weighted=self.weighted,
                         kernel_width=self.kernel_width, **self._kw())


class KDEXELoss(_LossModule):
    """Module form of :func:`kde_xe_loss`."""

    def __init__(self, lamda: float = 0.3, bandwidth: float | str = "auto", p: float = 1.0,
                 mode: str = "canonical", reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.lamda = _check_lamda(lamda)
        if isinstance(bandwidth, str):
            check_choice(bandwidth, "bandwidth", ("auto",))
        else:
            bandwidth = check_positive(bandwidth, "bandwidth")
        self.bandwidth = bandwidth
        self.p = float(p)
        if not (math.isfinite(self.p) and self.p >= 1):
            raise ValueError(f"p must be a finite number >= 1, got {p}")
        self.mode = check_choice(mode, "mode", ("canonical", "top_label"))

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return kde_xe_loss(logits, target, self.lamda, bandwidth=self.bandwidth, p=self.p,
                           mode=self.mode, **self._kw())


class AURCLoss(_LossModule):
    """Module form of :func:`aurc_loss`."""

    def __init__(self, csf: str = "msp", weights: str = "harmonic", reduction: str = "mean",
                 ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.csf = check_choice(csf, "csf", CSFS)
        self.weights = check_choice(weights, "weights", ("harmonic", "log"))

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return aurc_loss(logits, target, csf=self.csf, weights=self.weights, **self._kw())


class SelectiveRiskLoss(_LossModule):
    """Module form of :func:`selective_risk_loss`."""

    def __init__(self, csf: str = "msp", coverage: float = 0.9, threshold: float | None = None,
                 nu: float = 0.1, n_bins: int = 64, conditional: bool = False, reduction: str = "mean",
                 ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.csf = check_choice(csf, "csf", CSFS)
        coverage = float(coverage)
        if not (0.0 < coverage <= 1.0):
            raise ValueError(f"coverage must lie in (0, 1], got {coverage}")
        if threshold is not None and not (0.0 <= float(threshold) <= 1.0):
            raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
        self.coverage, self.threshold = coverage, threshold
        self.nu = check_positive(nu, "nu")
        self.n_bins = check_int(n_bins, "n_bins")
        self.conditional = check_choice(conditional, "conditional", (True, False))

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return selective_risk_loss(logits, target, csf=self.csf, coverage=self.coverage,
                                   threshold=self.threshold, nu=self.nu, n_bins=self.n_bins,
                                   conditional=self.conditional, **self._kw())


class HessianTracePenalty(_LossModule):
    """``CE + lamda * tr(H)`` (curvature paper, eq. 33); called as ``f(logits, target, model=, inputs=)``.

    ``requires_model = True`` tells the trainer to pass the network and the batch inputs. A fresh
    set of ``n_probes`` Rademacher probes is drawn per call (from a private generator seeded with
    ``seed`` if given). See :func:`hessian_trace_loss`.
    """

    requires_model = True

    def __init__(self, lamda: float = 1e-3, n_probes: int = 1, seed: int | None = None,
                 reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__("mean", ignore_index)
        self.reduction = check_choice(reduction, "reduction", ("mean", "sum"))
        self.lamda = _check_lamda(lamda)
        self.n_probes = check_int(n_probes, "n_probes")
        self.seed = None if seed is None else check_int(seed, "seed", minimum=0)
        self._generators: dict[str, torch.Generator] = {}

    def _generator(self, device: torch.device) -> torch.Generator | None:
        if self.seed is None:
            return None
        key = str(device)
        if key not in self._generators:
            gen = torch.Generator(device=device)
            gen.manual_seed(self.seed)
            self._generators[key] = gen
        return self._generators[key]

    def forward(self, logits: Tensor, target: Tensor, *, model: nn.Module | None = None,
                inputs: Tensor | None = None) -> Tensor:
        if model is None:
            raise ValueError("HessianTracePenalty needs model= (and inputs=): call it as "
                             "loss_fn(logits, target, model=model, inputs=x)")
        dev = next(model.parameters()).device
        return hessian_trace_loss(logits, target, model=model, inputs=inputs, lamda=self.lamda,
                                  n_probes=self.n_probes, generator=self._generator(dev), **self._kw())

    def extra_repr(self) -> str:
        return f"lamda={self.lamda}, n_probes={self.n_probes}"


# ============================================================================================
# registry
# ============================================================================================

def _preset(cls: type[nn.Module], **fixed: Any) -> Callable[..., nn.Module]:
    sig = inspect.signature(cls.__init__)
    allowed = tuple(n for n in list(sig.parameters)[1:] if n not in fixed)

    @functools.wraps(cls, updated=())
    def factory(**params: Any) -> nn.Module:
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ValueError(f"unknown parameter(s) {', '.join(map(repr, unknown))} for this loss; "
                             f"valid parameters: {', '.join(allowed) or '(none)'}")
        return cls(**fixed, **params)

    factory.params = allowed  # type: ignore[attr-defined]
    return factory


#: name -> factory ``f(**params) -> nn.Module``; use :func:`make_loss`.
LOSSES: dict[str, Callable[..., nn.Module]] = {
    "ce": _preset(CrossEntropyLoss),
    "focal": _preset(FocalLoss),
    "flsd53": _preset(SampleDependentFocalLoss, schedule=FLSD53),
    "flsd532": _preset(SampleDependentFocalLoss, schedule=FLSD532),
    "sample_dependent_focal": _preset(SampleDependentFocalLoss),
    "flsc531": _preset(ScheduledFocalLoss, gammas=(5.0, 3.0, 1.0)),
    "flsc532": _preset(ScheduledFocalLoss, gammas=(5.0, 3.0, 2.0)),
    "dual_focal": _preset(DualFocalLoss, variant="paper"),
    "dual_focal_released": _preset(DualFocalLoss, variant="released"),
    "inverse_focal": _preset(InverseFocalLoss),
    "adafocal": _preset(AdaFocalLoss),
    "brier": _preset(BrierLoss),
    "label_smoothing": _preset(LabelSmoothingLoss),
    "mmce": _preset(MMCELoss),
    "kde_xe": _preset(KDEXELoss),
    "aurc": _preset(AURCLoss),
    "selective_risk": _preset(SelectiveRiskLoss),
    "hessian_trace": _preset(HessianTracePenalty),
}


def make_loss(name: str, **params: Any) -> nn.Module:
    """Build the loss registered as ``name`` in :data:`LOSSES` with keyword ``params``.

    Raises
    ------
    ValueError
        For an unknown name (the message lists the valid names), an unknown parameter (lists the
        valid parameters of that loss) or an invalid parameter value.
    """
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; valid names: {', '.join(LOSSES)}")
    return LOSSES[name](**params)
