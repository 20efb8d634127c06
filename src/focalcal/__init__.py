"""focalcal: focal loss, focal calibration maps, calibration metrics and post-hoc calibrators.

The library depends on numpy, scipy and torch only. Its entry points, importable from here:

Training losses (:mod:`focalcal.losses`, ``torch.nn.functional`` + ``torch.nn`` pairs)
    :func:`~focalcal.losses.focal_loss` / :class:`~focalcal.losses.FocalLoss`,
    :func:`~focalcal.losses.flsd_loss` (FLSD-53), :func:`~focalcal.losses.make_loss` (every loss
    of the five papers by name).
The focal calibration map (:mod:`focalcal.maps`)
    :func:`~focalcal.maps.focal_map`, :func:`~focalcal.maps.focal_map_from_logits` (log space),
    :func:`~focalcal.maps.inverse_focal_map`.
Post-hoc calibrators (:mod:`focalcal.posthoc`, scikit-learn's ``fit`` / ``predict_proba``)
    :class:`~focalcal.posthoc.TemperatureScaling`, :class:`~focalcal.posthoc.FocalTemperatureScaling`,
    :class:`~focalcal.posthoc.PsiCorrection`.
Metrics (:mod:`focalcal.metrics`)
    :func:`~focalcal.metrics.ece`, :func:`~focalcal.metrics.classwise_ece`,
    :func:`~focalcal.metrics.nll`, :func:`~focalcal.metrics.brier`, :func:`~focalcal.metrics.aurc`.

Also: :mod:`focalcal.scores` (confidence-score functions), :mod:`focalcal.plotting` (reliability
diagrams; ``pip install "focalcal[plot]"``) and the experiment lab :mod:`focalcal.lab`
(``pip install "focalcal[lab]"``).

Every function takes the scores first and then the labels, as torch and scikit-learn do: losses
``focal_loss(logits, labels)``, calibrators ``fit(logits, labels)``, metrics
``ece(probs, labels)`` or ``ece(logits=logits, labels=labels)`` (logits by keyword, so that a
probability is never guessed from the value range). Labels are integer class indices ``(N,)``.

Examples
--------
>>> import torch, focalcal
>>> logits, labels = torch.tensor([[2.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1])
>>> round(float(focalcal.focal_loss(logits, labels, gamma=0.0)), 4)  # gamma = 0 is cross-entropy
0.2201
>>> round(focalcal.nll(torch.softmax(logits, -1), labels), 4)  # the same number, as a metric
0.2201
>>> round(focalcal.ece(logits=logits, labels=labels), 4)  # (0.1192 + 0.2689) / 2
0.1941
"""

from .losses import FocalLoss, flsd_loss, focal_loss, make_loss
from .maps import focal_map, focal_map_from_logits, inverse_focal_map
from .metrics import aurc, brier, classwise_ece, ece, nll
from .posthoc import FocalTemperatureScaling, PsiCorrection, TemperatureScaling

__version__ = "0.1.0"

__all__ = [
    "FocalLoss", "flsd_loss", "focal_loss", "make_loss",
    "focal_map", "focal_map_from_logits", "inverse_focal_map",
    "aurc", "brier", "classwise_ece", "ece", "nll",
    "FocalTemperatureScaling", "PsiCorrection", "TemperatureScaling",
]
