"""``nn.Module`` forms of the losses: they store their (checked) parameters and call the function.

Each parameter is checked by the same function the loss function uses, once when the module is
built (so a bad configuration fails at ``make_loss``, not in the first training step); the
tensors are checked by the loss function on every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .._validation import ArrayLike, check_choice, check_gamma, check_int
from ..metrics.kernel import check_kde_params, check_mmce_params
from ..scores import bin_counts, check_score
from ._core import check_ignore_index, check_lamda, check_reduction, prepare
from .curvature import hessian_trace_loss
from .focal import (
    DUAL_VARIANTS,
    FLSD53,
    FLSD532,
    adafocal_gamma_fn,
    adafocal_tables,
    adafocal_update,
    check_adafocal_params,
    check_epoch_schedule,
    check_schedule,
    cross_entropy_loss,
    dual_focal_loss,
    focal_family,
    focal_gamma_at_epoch,
    focal_loss,
    inverse_focal_loss,
    sample_dependent_focal_loss,
)
from .regularised import brier_loss, check_alpha, kde_xe_loss, label_smoothing_loss, mmce_loss
from .selective import (
    _selective_risk,
    aurc_loss,
    check_aurc_params,
    check_selective_params,
    check_selective_variant,
)


class _LossModule(nn.Module):
    def __init__(self, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__()
        self.reduction = check_reduction(reduction)
        self.ignore_index = check_ignore_index(ignore_index)

    def _kw(self) -> dict[str, Any]:
        return {"reduction": self.reduction, "ignore_index": self.ignore_index}


# --------------------------------------------------------------------------------------------
# the focal family
# --------------------------------------------------------------------------------------------

class CrossEntropyLoss(_LossModule):
    """Module form of :func:`~focalcal.losses.cross_entropy_loss`.

    Examples
    --------
    >>> from focalcal.losses import CrossEntropyLoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> loss_fn = CrossEntropyLoss(reduction='sum')
    >>> loss_fn(logits, labels)
    tensor(1.6341)
    """

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return cross_entropy_loss(logits, labels, **self._kw())


class FocalLoss(_LossModule):
    """Module form of :func:`~focalcal.losses.focal_loss`.

    Examples
    --------
    >>> from focalcal.losses import FocalLoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> loss_fn = FocalLoss(gamma=3.0)
    >>> loss_fn
    FocalLoss(gamma=3.0, reduction='mean')
    >>> loss_fn(logits, labels)
    tensor(0.1655)
    """

    def __init__(self, gamma: float = 3.0, reduction: str = "mean", ignore_index: int = -100, *,
                 label_smoothing: float = 0.0) -> None:
        super().__init__(reduction, ignore_index)
        self.gamma = check_gamma(gamma, "gamma", minimum=0.0)
        self.label_smoothing = check_gamma(label_smoothing, "label_smoothing", minimum=0.0, maximum=1.0)

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return focal_loss(logits, labels, self.gamma, label_smoothing=self.label_smoothing, **self._kw())

    def extra_repr(self) -> str:
        smoothing = f", label_smoothing={self.label_smoothing}" if self.label_smoothing else ""
        return f"gamma={self.gamma}{smoothing}, reduction={self.reduction!r}"


class InverseFocalLoss(FocalLoss):
    """Module form of :func:`~focalcal.losses.inverse_focal_loss`.

    Examples
    --------
    >>> from focalcal.losses import InverseFocalLoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> InverseFocalLoss(gamma=2.0)(logits, labels)
    tensor(1.0853)
    """

    def __init__(self, gamma: float = 2.0, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(gamma, reduction, ignore_index)

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return inverse_focal_loss(logits, labels, self.gamma, **self._kw())


class SampleDependentFocalLoss(_LossModule):
    """Module form of :func:`~focalcal.losses.sample_dependent_focal_loss` (FLSD-53 by default).

    Examples
    --------
    >>> from focalcal.losses import SampleDependentFocalLoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> loss_fn = SampleDependentFocalLoss(schedule=[(0.2, 5.0), (1.0, 3.0)])
    >>> loss_fn.schedule
    ((0.2, 5.0), (1.0, 3.0))
    >>> loss_fn(logits, labels)
    tensor(0.1655)
    """

    def __init__(self, schedule: Sequence[tuple[float, float]] = FLSD53, reduction: str = "mean",
                 ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.schedule = check_schedule(schedule)

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return sample_dependent_focal_loss(logits, labels, self.schedule, **self._kw())

    def extra_repr(self) -> str:
        return f"schedule={self.schedule}, reduction={self.reduction!r}"


class FLSD53Loss(SampleDependentFocalLoss):
    """FLSD-53 of Mukhoti et al. (2020): ``gamma = 5`` for ``p_t < 0.2``, else ``3``.

    :class:`SampleDependentFocalLoss` with ``schedule=FLSD53`` fixed (the registry's
    ``make_loss("flsd53")``); only ``reduction`` and ``ignore_index`` are parameters.

    Examples
    --------
    >>> import torch
    >>> from focalcal.losses import FLSD53Loss, focal_loss
    >>> logits, labels = torch.tensor([[2.0, 0.0, -1.0], [3.0, 0.0, -1.0]]), torch.tensor([0, 2])
    >>> FLSD53Loss(reduction="none")(logits, labels)  # p_t = 0.84 gets gamma 3, p_t = 0.02 gamma 5
    tensor([6.4736e-04, 3.7290e+00])
    >>> focal_loss(logits[:1], labels[:1], gamma=3.0), focal_loss(logits[1:], labels[1:], gamma=5.0)
    (tensor(0.0006), tensor(3.7290))
    """

    def __init__(self, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(FLSD53, reduction, ignore_index)


class FLSD532Loss(SampleDependentFocalLoss):
    """FLSD-532 of Mukhoti et al. (2020, App. E): ``gamma`` 5 below ``p_t = 0.2``, 3 below 0.5, else 2.

    :class:`SampleDependentFocalLoss` with ``schedule=FLSD532`` fixed (``make_loss("flsd532")``).

    Examples
    --------
    >>> import torch
    >>> from focalcal.losses import FLSD532Loss
    >>> FLSD532Loss().schedule
    ((0.2, 5.0), (0.5, 3.0), (1.0, 2.0))
    >>> logits, labels = torch.tensor([[2.0, 0.0, -1.0], [3.0, 0.0, -1.0]]), torch.tensor([0, 2])
    >>> FLSD532Loss(reduction="none")(logits, labels)  # p_t = 0.84 gets gamma 2, p_t = 0.02 gamma 5
    tensor([0.0041, 3.7290])
    """

    def __init__(self, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(FLSD532, reduction, ignore_index)


class ScheduledFocalLoss(_LossModule):
    """Focal loss with ``gamma`` by epoch (FLSc-531 by default); the trainer calls ``set_epoch``.

    Parameters
    ----------
    gammas, milestones
        See :func:`~focalcal.losses.focal_gamma_at_epoch`.
    total_epochs : int, optional
        If given, the milestones (which refer to Mukhoti's 350-epoch runs) are rescaled by
        ``total_epochs / 350`` and rounded, so that a shorter run keeps the proportions.

    Examples
    --------
    >>> from focalcal.losses import ScheduledFocalLoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> loss_fn = ScheduledFocalLoss(total_epochs=35)
    >>> loss_fn.milestones
    (10, 25)
    >>> loss_fn.set_epoch(12)
    >>> loss_fn.gamma
    3.0
    >>> loss_fn(logits, labels)
    tensor(0.1655)
    """

    def __init__(self, gammas: Sequence[float] = (5.0, 3.0, 1.0), milestones: Sequence[int] = (100, 250),
                 total_epochs: int | None = None, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        g, m = check_epoch_schedule(gammas, milestones)
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

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return focal_loss(logits, labels, self.gamma, **self._kw())

    def extra_repr(self) -> str:
        return f"gammas={self.gammas}, milestones={self.milestones}, epoch={self.epoch}"


class DualFocalLoss(_LossModule):
    """Module form of :func:`~focalcal.losses.dual_focal_loss`.

    Examples
    --------
    >>> from focalcal.losses import DualFocalLoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> DualFocalLoss(gamma=5.0)(logits, labels)
    tensor(0.9780)
    """

    def __init__(self, gamma: float = 5.0, variant: str = "paper", reduction: str = "mean",
                 ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.gamma = check_gamma(gamma, "gamma", minimum=0.0)
        self.variant = check_choice(variant, "variant", DUAL_VARIANTS)

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return dual_focal_loss(logits, labels, self.gamma, variant=self.variant, **self._kw())

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, variant={self.variant!r}"


class AdaFocalLoss(_LossModule):
    """AdaFocal (Ghosh et al. 2022): per-bin ``gamma`` updated from validation calibration.

    State (buffers, saved in ``state_dict``): ``bin_edges`` (M+1,) and signed ``gammas`` (M,).
    Initially ``M = n_bins`` equal-width bins on [0, 1] with ``gamma = gamma_initial``. The loss
    of a training sample is :func:`~focalcal.losses.adafocal_loss` with the ``gamma`` of the bin
    of its ``p_t``.

    :meth:`update` (call it after every epoch with the validation logits) splits the validation
    top-label confidences into ``M`` equal-mass bins (the binning of :mod:`focalcal.metrics`,
    ``binning="mass"``; the released code interpolates edges with Mukhoti's
    ``histedges_equalN`` instead), computes each bin's gap ``E_b = C_b - A_b`` (mean confidence
    minus accuracy; 0 for an empty bin) and updates, as in the released code,

    * ``gamma_b <- gamma_b * exp(lamda * E_b)`` if ``gamma_b > 0`` (focal: more focusing when
      over-confident), ``gamma_b * exp(-lamda * E_b)`` if ``gamma_b < 0`` (inverse focal);
    * if ``|gamma_b| < switch_pt`` it flips to ``-switch_pt`` (from positive) or ``+switch_pt``
      (from negative): the switch between focal and inverse focal;
    * clipping to ``[gamma_min, gamma_max]``;

    and then adopts the validation bin edges. Defaults: 15 bins, ``lamda = 1``, ``gamma_initial =
    1``, ``gamma_max = 20``, ``switch_pt = 0.2`` (released ``main.py``); ``gamma_min`` defaults to
    ``-gamma_max`` (symmetric clipping); the released script uses ``gamma_min = -2``.

    Examples
    --------
    >>> from focalcal.losses import AdaFocalLoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> loss_fn = AdaFocalLoss(n_bins=2)
    >>> loss_fn(logits, labels)
    tensor(0.3309)
    >>> gaps = loss_fn.update(logits, labels)
    >>> loss_fn.gammas
    tensor([1.5712, 0.8554], dtype=torch.float64)
    """

    def __init__(self, n_bins: int = 15, lamda: float = 1.0, gamma_initial: float = 1.0,
                 gamma_max: float = 20.0, gamma_min: float | None = None, switch_pt: float = 0.2,
                 reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        n_bins, self.lamda, g0, self.gamma_max, self.gamma_min, self.switch_pt = check_adafocal_params(
            n_bins, lamda, gamma_initial, gamma_max, gamma_min, switch_pt)
        self.register_buffer("bin_edges", torch.linspace(0.0, 1.0, n_bins + 1, dtype=torch.float64))
        self.register_buffer("gammas", torch.full((n_bins,), g0, dtype=torch.float64))
        self._table_key: tuple[Any, ...] | None = None

    @property
    def n_bins(self) -> int:
        return self.gammas.numel()

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        # the state was checked when it was set; the tables in the logits' dtype are cached
        # until the buffers change (update, load_state_dict, in-place edits bump _version)
        batch = prepare(logits, labels, self.ignore_index, self.reduction)
        key = (batch.x.dtype, batch.x.device, self.gammas.data_ptr(), self.gammas._version,
               self.bin_edges.data_ptr(), self.bin_edges._version)
        if self._table_key != key:
            self._tables = adafocal_tables(self.bin_edges, self.gammas, batch.x.dtype, batch.x.device)
            self._gamma_fn = adafocal_gamma_fn(*self._tables)
            self._table_key = key
        return focal_family(batch, self._gamma_fn, False, self.reduction)

    @torch.no_grad()
    def update(self, val_logits: ArrayLike, val_labels: ArrayLike) -> Tensor:
        """Update the per-bin ``gamma`` from validation logits (N, K) and labels (N,); returns gaps.

        See ``focalcal.losses.focal.adafocal_update``.

        Returns
        -------
        Tensor, shape (M,), float64
            The calibration gaps ``C_b - A_b`` that drove the update.
        """
        gammas, edges, gap = adafocal_update(self.gammas, val_logits, val_labels, lamda=self.lamda,
                                             gamma_min=self.gamma_min, gamma_max=self.gamma_max,
                                             switch_pt=self.switch_pt, ignore_index=self.ignore_index)
        self.gammas.copy_(gammas.to(self.gammas.device))
        self.bin_edges.copy_(edges.to(self.bin_edges.device, self.bin_edges.dtype))
        return gap

    def extra_repr(self) -> str:
        return (f"n_bins={self.n_bins}, lamda={self.lamda}, gamma_max={self.gamma_max}, "
                f"gamma_min={self.gamma_min}, switch_pt={self.switch_pt}")


# --------------------------------------------------------------------------------------------
# regularised and selective losses
# --------------------------------------------------------------------------------------------

class BrierLoss(_LossModule):
    """Module form of :func:`~focalcal.losses.brier_loss`.

    Examples
    --------
    >>> from focalcal.losses import BrierLoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> BrierLoss()(logits, labels)
    tensor(0.2949)
    """

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return brier_loss(logits, labels, **self._kw())


class LabelSmoothingLoss(_LossModule):
    """Module form of :func:`~focalcal.losses.label_smoothing_loss`.

    Examples
    --------
    >>> from focalcal.losses import LabelSmoothingLoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> LabelSmoothingLoss(alpha=0.05)(logits, labels)
    tensor(0.6239)
    """

    def __init__(self, alpha: float = 0.05, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.alpha = check_alpha(alpha)

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return label_smoothing_loss(logits, labels, self.alpha, **self._kw())


class MMCELoss(_LossModule):
    """Module form of :func:`~focalcal.losses.mmce_loss`.

    Examples
    --------
    >>> from focalcal.losses import MMCELoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> MMCELoss(lamda=2.0)(logits, labels)
    tensor(1.3828)
    """

    def __init__(self, lamda: float = 2.0, weighted: bool = True, kernel_width: float = 0.4,
                 reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.lamda = check_lamda(lamda)
        self.weighted, self.kernel_width = check_mmce_params(weighted, kernel_width)

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return mmce_loss(logits, labels, self.lamda, weighted=self.weighted,
                         kernel_width=self.kernel_width, **self._kw())


class KDEXELoss(_LossModule):
    """Module form of :func:`~focalcal.losses.kde_xe_loss`.

    Examples
    --------
    >>> from focalcal.losses import KDEXELoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> KDEXELoss(lamda=0.3, bandwidth=0.1)(logits, labels)
    tensor(1.0315)
    """

    def __init__(self, lamda: float = 0.3, bandwidth: float | str = "auto", p: float = 1.0,
                 mode: str = "canonical", reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.lamda = check_lamda(lamda)
        self.bandwidth, self.p, self.mode = check_kde_params(bandwidth, p, mode)

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return kde_xe_loss(logits, labels, self.lamda, bandwidth=self.bandwidth, p=self.p,
                           mode=self.mode, **self._kw())


class AURCLoss(_LossModule):
    """Module form of :func:`~focalcal.losses.aurc_loss`.

    Examples
    --------
    >>> from focalcal.losses import AURCLoss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> AURCLoss()(logits, labels)
    tensor(0.2948)
    """

    def __init__(self, score: str = "msp", weights: str = "harmonic", ties: str = "sorted",
                 reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.score, self.weights, self.ties = check_aurc_params(score, weights, ties)

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return aurc_loss(logits, labels, score=self.score, weights=self.weights, ties=self.ties,
                         **self._kw())


class SelectiveRiskLoss(_LossModule):
    """Module form of :func:`~focalcal.losses.selective_risk_loss`, with the released code's histogram.

    With ``variant="released"`` the module holds what the authors' ``SelectiveAULoss`` holds: a
    histogram of the confidence scores of every batch it has been called on since it was last
    cleared (each call adds its batch before computing the weights, ``G`` is normalised by the
    number of scores in it), and :meth:`set_epoch` clears it. The lab's trainer calls
    ``set_epoch`` before every epoch (:class:`focalcal.lab.train.EpochScheduled`), so the
    histogram covers the batches of the current epoch, as the released ``src/train.py`` clears it
    once per epoch. The histogram is not part of ``state_dict()`` (a resumed run starts an epoch,
    which clears it). The other variants keep no state: each call is the function's.

    Examples
    --------
    >>> from focalcal.losses import SelectiveRiskLoss, selective_risk_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> SelectiveRiskLoss(coverage=0.9)(logits, labels)
    tensor(0.2422)
    >>> released = SelectiveRiskLoss(coverage=0.9, variant="released")
    >>> released.nu
    0.05
    >>> released(logits, labels)  # the histogram holds this batch
    tensor(0.2376)
    >>> confident = torch.tensor([[9.0, 0.0, 0.0], [0.0, 9.0, 0.0], [0.0, 0.0, 9.0]])
    >>> released(confident, labels)  # weighted by the histogram of both batches
    tensor(6.7523)
    >>> selective_risk_loss(confident, labels, coverage=0.9, variant="released")  # this batch alone
    tensor(4.5117)
    >>> released.set_epoch(1)  # cleared: the first call's value again
    >>> released(logits, labels)
    tensor(0.2376)
    """

    def __init__(self, score: str = "msp", coverage: float = 0.9, threshold: float | None = None,
                 nu: float | None = None, n_bins: int = 64, conditional: bool = False,
                 variant: str = "paper", reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__(reduction, ignore_index)
        self.score = check_score(score)
        self.variant, nu, self.conditional = check_selective_variant(variant, nu, conditional)
        self.coverage, self.threshold, self.nu, self.n_bins = check_selective_params(
            coverage, threshold, nu, n_bins)
        self._counts: Tensor | None = None
        self._total = 0

    def set_epoch(self, epoch: int) -> None:
        """Clear the accumulated histogram (``variant="released"``); the trainer calls it before
        every epoch with the 0-based epoch."""
        check_int(epoch, "epoch", minimum=0)
        self._counts, self._total = None, 0

    def _add(self, scores: Tensor) -> tuple[Tensor, int]:
        counts = bin_counts(scores.detach().double(), self.n_bins, None)[0]
        if self._counts is None or self._counts.device != counts.device:
            self._counts = counts
        else:
            self._counts += counts
        self._total += scores.shape[0]
        return self._counts, self._total

    def forward(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        histogram = (self._add if self.variant == "released" else None)
        return _selective_risk(logits, labels, self.score, self.coverage, self.threshold, self.nu,
                               self.n_bins, self.conditional, self.variant, self.reduction,
                               self.ignore_index, histogram)

    def extra_repr(self) -> str:
        return f"variant={self.variant!r}, score={self.score!r}, coverage={self.coverage}, nu={self.nu}"


# --------------------------------------------------------------------------------------------
# curvature
# --------------------------------------------------------------------------------------------

class HessianTracePenalty(_LossModule):
    """``CE + lamda * tr(H)`` (curvature paper, eq. 33); called as ``f(logits, labels, model=, inputs=)``.

    ``requires_model = True`` tells the trainer to pass the network and the batch inputs. A fresh
    set of ``n_probes`` Rademacher probes is drawn per call (from a private generator seeded with
    ``seed`` if given). See :func:`~focalcal.losses.hessian_trace_loss`.

    Examples
    --------
    >>> import torch
    >>> from focalcal.losses import HessianTracePenalty
    >>> net = torch.nn.Linear(4, 3)
    >>> with torch.no_grad():
    ...     _ = net.weight.copy_(torch.arange(12.0).reshape(3, 4) / 10)
    ...     _ = net.bias.zero_()
    >>> inputs, labels = torch.tensor([[1.0, -1.0, 0.5, 0.0], [0.0, 1.0, -0.5, 2.0]]), torch.tensor([0, 2])
    >>> loss_fn = HessianTracePenalty(lamda=1e-3, seed=0)
    >>> loss = loss_fn(net(inputs), labels, model=net, inputs=inputs)
    >>> loss.backward()
    >>> loss.detach()
    tensor(0.8643)
    """

    requires_model = True

    def __init__(self, lamda: float = 1e-3, n_probes: int = 1, seed: int | None = None,
                 reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__("mean", ignore_index)
        self.reduction = check_choice(reduction, "reduction", ("mean", "sum"))
        self.lamda = check_lamda(lamda)
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

    def forward(self, logits: Tensor, labels: ArrayLike, *, model: nn.Module | None = None,
                inputs: Tensor | None = None) -> Tensor:
        if model is None:
            raise ValueError("HessianTracePenalty needs model= (and inputs=): call it as "
                             "loss_fn(logits, labels, model=model, inputs=x)")
        dev = next(model.parameters()).device
        return hessian_trace_loss(logits, labels, model=model, inputs=inputs, lamda=self.lamda,
                                  n_probes=self.n_probes, generator=self._generator(dev), **self._kw())

    def extra_repr(self) -> str:
        return f"lamda={self.lamda}, n_probes={self.n_probes}"
