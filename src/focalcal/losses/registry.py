"""The registry of losses by name: :data:`LOSSES`, :func:`make_loss` (the sweep and the lab use
them) and :data:`DISPLAY_NAMES`, the one table of how a loss is named in tables, legends and the book."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

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
    "flsd53": _preset(FLSD53Loss),
    "flsd532": _preset(FLSD532Loss),
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


#: name -> how the loss is written in tables, legends and the book (``focalcal.plotting`` colours a
#: method by this name; the lab labels its runs with it)
DISPLAY_NAMES: dict[str, str] = {
    "ce": "cross-entropy",
    "focal": "focal",
    "flsd53": "FLSD-53",
    "flsd532": "FLSD-532",
    "sample_dependent_focal": "sample-dependent focal",
    "flsc531": "FLSc-531",
    "flsc532": "FLSc-532",
    "dual_focal": "dual focal",
    "dual_focal_released": "dual focal (released)",
    "inverse_focal": "inverse focal",
    "adafocal": "AdaFocal",
    "brier": "Brier",
    "label_smoothing": "label smoothing",
    "mmce": "MMCE",
    "kde_xe": "KDE-XE",
    "aurc": "AURC",
    "selective_risk": "selective-risk",
    "hessian_trace": "Hessian trace",
}

def make_loss(name: str, **params: Any) -> nn.Module:
    """Build the loss registered as ``name`` in :data:`LOSSES` with keyword ``params``.

    Raises
    ------
    ValueError
        For an unknown name (the message lists the valid names), an unknown parameter (lists the
        valid parameters of that loss) or an invalid parameter value.

    Examples
    --------
    >>> from focalcal.losses import make_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> loss_fn = make_loss('flsd53')
    >>> loss_fn
    FLSD53Loss(schedule=((0.2, 5.0), (1.0, 3.0)), reduction='mean')
    >>> loss_fn(logits, labels)
    tensor(0.1655)
    >>> make_loss('focal', gamma=1.0).gamma
    1.0
    """
    if name not in LOSSES:
        raise ValueError(f"name must be one of the registered losses, got {name!r}; "
                         f"valid names: {', '.join(LOSSES)}")
    return LOSSES[name](**params)
