"""The metrics over a batch of models at once: tensors of shape ``(...)``.

Every function here takes ``probs`` / ``logits`` of shape ``(..., N, K)`` (any leading batch
dimensions, e.g. a grid of temperatures or of data sets) with labels ``(N,)`` and returns a
:class:`torch.Tensor` of shape ``(...)`` (0-d for ``(N, K)`` input), in the floating dtype of the
input. The functions of the same name in :mod:`focalcal.metrics` return a Python ``float`` for one
``(N, K)`` input; they call these. Arguments and conventions as documented there.
"""

from __future__ import annotations

from .binned import calibration_error, classwise_ece, ece, mce
from .proper import accuracy, brier, kl_to_posterior, nll
from .selective import aurc, eaurc

__all__ = [
    "accuracy",
    "aurc",
    "brier",
    "calibration_error",
    "classwise_ece",
    "eaurc",
    "ece",
    "kl_to_posterior",
    "mce",
    "nll",
]
