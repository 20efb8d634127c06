"""Training losses of the five papers, in log space, with finite gradients everywhere.

Every loss is a function ``xxx_loss(logits, labels, ..., reduction="mean", ignore_index=-100)``
plus a thin :class:`torch.nn.Module` (``XxxLoss``) that stores its parameters and calls the
function, and :func:`make_loss` builds any of them by name from :data:`LOSSES` (the sweep and the
notebooks use it).

Layout
------
``_core`` (batch preparation, reduction, the fused autograd function), ``focal``
(cross-entropy, focal, inverse focal, FLSD, FLSc, dual focal, AdaFocal), ``regularised``
(Brier, label smoothing, MMCE, KDE-XE), ``selective`` (AURC, selective risk),
``curvature`` (Hutchinson trace, Hessian-trace penalty, ``lambda_max`` and ``Tr(H)`` over a
data set, a twice-differentiable focal loss), ``modules`` (the
``nn.Module`` forms) and ``registry`` (:data:`LOSSES`, :func:`make_loss`). Confidence scores,
AURC rank weights and the smoothed CDF come from :mod:`focalcal.scores`; the calibration-error
penalties (:func:`focalcal.metrics.mmce`, :func:`focalcal.metrics.ece_kde`) from
:mod:`focalcal.metrics`.

Conventions (those of :class:`torch.nn.CrossEntropyLoss`)
---------------------------------------------------------
``logits`` has shape ``(N, K)``, ``(N, K, d1, ..., dk)`` (class dimension 1) or ``(K,)``
(one sample); ``labels`` holds integer class indices of shape ``(N,)``, ``(N, d1, ..., dk)`` or
``()`` (``torch.nn.functional`` says ``target``; focalcal says ``labels`` in the losses, the
metrics and the calibrators alike; :class:`FLSD53Loss` is ``make_loss("flsd53")``). Labels equal
to ``ignore_index`` are dropped: they contribute 0 to ``"sum"`` and to the ``"none"`` output, and
``"mean"`` divides by the number of the other labels. A ``"mean"`` over a batch in which *every*
label is ignored raises ``ValueError`` (``nn.CrossEntropyLoss`` silently returns NaN there; this
is the one place where we differ). float16/bfloat16 logits are computed
in float32. Every loss returns a Tensor: 0-d, or the shape of ``labels`` for ``"none"``.

Batch-coupled losses (MMCE, KDE-XE, AURC, selective risk) are defined on the whole batch (after
dropping ignored labels). Penalties that are a single number for the batch (MMCE, ECE-KDE) are
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
respect to the logits is ``dl/dlog p_t * (onehot(t) - p)``; no second softmax pass is made (the
backward of ``log_softmax`` runs PyTorch's fused kernel where it is available, the public
formula elsewhere: ``_core.log_softmax_backward``). These fused losses are differentiable
once (``torch.autograd.gradcheck`` passes; double backward is not supported), which is all a
training step needs. Per-sample ``gamma`` (FLSD, AdaFocal) is chosen from the detached ``p_t``.

Non-finite logits raise ``ValueError`` (checked lazily: only when the loss comes out non-finite,
so the hot path pays for one ``isfinite`` on the reduced loss, not a pass over the logits).

Papers and released code
------------------------
Where the papers contradict themselves or their released code (the FLSD-53 bucket boundary, the
dual-focal competitor, the inverse-focal gradient threshold, the selective-risk normalisation,
the curvature paper's eqs. 30-31), the book's errata page (``book/theory/errata.md``) shows it with
executed checks; the docstrings here say which convention each function follows.

Speed (``bench/bench_losses.py``, 4096 x 100 float32 logits, one CPU thread): the focal family
costs about as much as ``F.cross_entropy`` (one ``log_softmax``, one ``exp`` in the backward, a few
length-``N`` operations); dual focal also has to find the competitor column, which on the CPU is
two or three more passes over the logits (``argmax`` over short rows is not vectorised there).
"""

from __future__ import annotations

from ..scores import SCORES, TIES
from ._core import REDUCTIONS
from .curvature import (
    TraceEstimate,
    focal_loss_reference,
    hessian_max_eigenvalue,
    hessian_trace,
    hessian_trace_loss,
    hutchinson_trace,
)
from .focal import (
    FLSD53,
    FLSD532,
    adafocal_loss,
    cross_entropy_loss,
    dual_focal_loss,
    flsd_loss,
    focal_gamma_at_epoch,
    focal_loss,
    inverse_focal_gamma_threshold,
    inverse_focal_loss,
    prop2_schedule,
    sample_dependent_focal_loss,
    scheduled_focal_loss,
)
from .modules import (
    AdaFocalLoss,
    AURCLoss,
    BrierLoss,
    CrossEntropyLoss,
    DualFocalLoss,
    FLSD53Loss,
    FLSD532Loss,
    FocalLoss,
    HessianTracePenalty,
    InverseFocalLoss,
    KDEXELoss,
    LabelSmoothingLoss,
    MMCELoss,
    SampleDependentFocalLoss,
    ScheduledFocalLoss,
    SelectiveRiskLoss,
)
from .registry import DISPLAY_NAMES, LOSSES, make_loss
from .regularised import brier_loss, kde_xe_loss, label_smoothing_loss, mmce_loss
from .selective import aurc_loss, selective_risk_loss, selective_risk_weights

__all__ = [
    "DISPLAY_NAMES",
    "FLSD53",
    "FLSD532",
    "LOSSES",
    "REDUCTIONS",
    "SCORES",
    "TIES",
    "AURCLoss",
    "AdaFocalLoss",
    "BrierLoss",
    "CrossEntropyLoss",
    "DualFocalLoss",
    "FLSD53Loss",
    "FLSD532Loss",
    "FocalLoss",
    "HessianTracePenalty",
    "InverseFocalLoss",
    "KDEXELoss",
    "LabelSmoothingLoss",
    "MMCELoss",
    "SampleDependentFocalLoss",
    "ScheduledFocalLoss",
    "SelectiveRiskLoss",
    "TraceEstimate",
    "adafocal_loss",
    "aurc_loss",
    "brier_loss",
    "cross_entropy_loss",
    "dual_focal_loss",
    "flsd_loss",
    "focal_gamma_at_epoch",
    "focal_loss",
    "focal_loss_reference",
    "hessian_max_eigenvalue",
    "hessian_trace",
    "hessian_trace_loss",
    "hutchinson_trace",
    "inverse_focal_gamma_threshold",
    "inverse_focal_loss",
    "kde_xe_loss",
    "label_smoothing_loss",
    "make_loss",
    "mmce_loss",
    "prop2_schedule",
    "sample_dependent_focal_loss",
    "scheduled_focal_loss",
    "selective_risk_loss",
    "selective_risk_weights",
]
