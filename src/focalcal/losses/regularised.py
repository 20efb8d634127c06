"""Losses that regularise the cross-entropy: Brier score, label smoothing, MMCE and KDE-XE.

The calibration-error penalties themselves (:func:`focalcal.metrics.mmce`,
:func:`focalcal.metrics.ece_kde`) are metrics; the losses add them to the cross-entropy.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .._validation import ArrayLike
from ..metrics.kernel import check_kde_params, check_mmce_params, ece_kde_unchecked, mmce_unchecked
from ._core import check_ignore_index, check_lamda, check_reduction, penalised, prepare, reduce_loss

# check_alpha is shared with .modules, not API
__all__ = ["brier_loss", "kde_xe_loss", "label_smoothing_loss", "mmce_loss"]


def check_alpha(alpha: float) -> float:
    """The label-smoothing ``alpha`` in [0, 1) (the bound ``(K-1)/K`` is checked with the logits)."""
    try:
        a = float(alpha)
    except (TypeError, ValueError) as err:
        raise ValueError(f"alpha must be a real number in [0, 1), got {alpha!r}") from err
    if not (math.isfinite(a) and 0.0 <= a < 1.0):
        raise ValueError(f"alpha must lie in [0, 1), got {a}")
    return a


def brier_loss(logits: ArrayLike, labels: ArrayLike, *, reduction: str = "mean",
               ignore_index: int = -100) -> Tensor:
    """Brier score ``sum_k (p_k - 1[k = t])^2`` per sample (Brier 1950; Mukhoti's baseline).

    Computed as ``sum_{k != t} p_k^2 + (1 - p_t)^2`` with ``1 - p_t = -expm1(log p_t)``, so the
    squared error of saturated correct rows is not lost to cancellation.
    Shapes, ``reduction`` and ``ignore_index`` as in :func:`cross_entropy_loss`.

    Examples
    --------
    >>> from focalcal.losses import brier_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> brier_loss(logits, labels)
    tensor(0.2949)
    >>> p = torch.softmax(logits, 1)
    >>> bool(torch.allclose(brier_loss(logits, labels), ((p - torch.eye(3)[labels]) ** 2).sum(1).mean()))
    True
    """
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction)
    logp = torch.log_softmax(batch.x, dim=1)
    p = torch.exp(logp)
    idx = batch.t.unsqueeze(1)
    others = (p * p).scatter(1, idx, 0.0).sum(1)
    per_sample = others + torch.expm1(logp.gather(1, idx).squeeze(1)) ** 2
    if batch.valid is not None:
        per_sample = torch.where(batch.valid, per_sample, torch.zeros_like(per_sample))
    return reduce_loss(per_sample, batch, reduction)


def label_smoothing_loss(logits: ArrayLike, labels: ArrayLike, alpha: float = 0.05, *,
                         reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Cross-entropy with smoothed targets ``s = (1 - alpha) q + alpha (1 - q) / (K - 1)``.

    Mukhoti et al.'s (2020, §5.1) convention, as in their released ``CrossEntropySmoothed``: the
    labelled class keeps ``1 - alpha`` and every other class gets ``alpha / (K - 1)``. PyTorch's
    ``label_smoothing=a`` (Müller et al. 2019) spreads ``a / K`` over *all* classes; the two agree
    for ``a = alpha K / (K - 1)``. Default ``alpha = 0.05`` (Mukhoti's LS-0.05).

    Parameters
    ----------
    alpha : float in [0, (K-1)/K]
        Above ``(K-1)/K`` the labelled class would get less mass than the other classes.

    Examples
    --------
    >>> from focalcal.losses import label_smoothing_loss, cross_entropy_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> label_smoothing_loss(logits, labels, alpha=0.05)
    tensor(0.6239)
    >>> bool(label_smoothing_loss(logits, labels, alpha=0.0) == cross_entropy_loss(logits, labels))
    True
    """
    alpha = check_alpha(alpha)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction)
    k = batch.k
    if alpha > (k - 1) / k:
        raise ValueError(f"alpha must be <= (K-1)/K = {(k - 1) / k:.4g} for K = {k} classes, got {alpha}")
    logp = torch.log_softmax(batch.x, dim=1)
    ut = logp.gather(1, batch.t.unsqueeze(1)).squeeze(1)
    per_sample = -(1.0 - alpha) * ut - (alpha / (k - 1)) * (logp.sum(1) - ut)
    if batch.valid is not None:
        per_sample = torch.where(batch.valid, per_sample, torch.zeros_like(per_sample))
    return reduce_loss(per_sample, batch, reduction)



def mmce_loss(logits: ArrayLike, labels: ArrayLike, lamda: float = 2.0, *, weighted: bool = True,
              kernel_width: float = 0.4, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Cross-entropy plus ``lamda`` times the batch :func:`focalcal.metrics.mmce` (Kumar et al. 2018).

    ``"mean"``: ``mean_i CE_i + lamda * MMCE`` (Mukhoti's ``ce + lamda * mmce``); ``"none"``:
    ``CE_i + lamda * MMCE``; ``"sum"``: ``N`` times ``"mean"``. Ignored labels are left out of the
    MMCE batch. Default ``lamda = 2`` (Mukhoti et al., App. D, image tasks).

    Examples
    --------
    >>> from focalcal.losses import mmce_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> mmce_loss(logits, labels, lamda=2.0)
    tensor(1.3828)
    """
    lamda = check_lamda(lamda)
    weighted, kernel_width = check_mmce_params(weighted, kernel_width)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction, min_samples=1)
    x, t = batch.selected()
    pen = mmce_unchecked(x, t, weighted, kernel_width)
    ce = F.cross_entropy(x, t, reduction="none")
    return penalised(batch, pen, ce, lamda, reduction)


def kde_xe_loss(logits: ArrayLike, labels: ArrayLike, lamda: float = 0.3, *,
                bandwidth: float | str = "auto", p: float = 1.0, mode: str = "canonical",
                reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """KDE-XE: cross-entropy plus ``lamda`` times :func:`focalcal.metrics.ece_kde` of the batch.

    (Popordanoska et al. 2022: ``Risk(f) + lamda * CE(f)``.) Default ``lamda = 0.3`` (the value
    Zhou et al. (2025, App. E.1) quote for CIFAR-10), ``p = 1``, canonical calibration with the
    leave-one-out bandwidth of each batch (:func:`focalcal.metrics.kde_bandwidth`). Reductions as
    in :func:`mmce_loss`.

    Examples
    --------
    >>> from focalcal.losses import kde_xe_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> kde_xe_loss(logits, labels, lamda=0.3, bandwidth=0.1)
    tensor(1.0315)
    """
    lamda = check_lamda(lamda)
    bandwidth, p, mode = check_kde_params(bandwidth, p, mode)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction, min_samples=2)
    x, t = batch.selected()
    pen = ece_kde_unchecked(x, t, bandwidth, p, mode)
    ce = F.cross_entropy(x, t, reduction="none")
    return penalised(batch, pen, ce, lamda, reduction)
