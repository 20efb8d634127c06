"""Calibration and selective-prediction metrics.

Scores come first, then labels, as in the losses, the calibrators (``fit(logits, labels)``),
torch and scikit-learn: ``ece(probs, labels)``, or with logits ``ece(logits=logits,
labels=labels)``. Exactly one of ``probs`` and ``logits`` is required and ``labels`` is
required; each violation is a ``ValueError`` naming the argument. The library never guesses from
the value range whether a score is a probability or a logit, so logits are passed by keyword.

- ``probs``: rows on the simplex, shape ``(N, K)``, in any precision (see below);
- ``logits``: unnormalised scores, shape ``(N, K)``; logits that look like probabilities (every
  entry in [0, 1], rows summing to 1 by the rule below) warn (``UserWarning``), as in the
  calibrators: their softmax is flattened towards uniform and every metric of it is wrong;
- ``labels``: integer class indices, shape ``(N,)``; floating, bool and complex dtypes are
  refused with the library's one message (as by :mod:`focalcal.losses` and the calibrators),
  even when the values are whole numbers;
- ``score``: the confidence-score function of the selective metrics.

The differentiable kernel estimates (:func:`mmce`, :func:`ece_kde`, :func:`kde_bandwidth`) are
training penalties too and take logits only, ``(logits, labels)`` positionally.

.. _probs-tolerance:

Probabilities in any precision
------------------------------
Every function of the library that takes probabilities (the metrics' ``probs`` and
``true_probs``, :func:`focalcal.maps.focal_map`, :func:`focalcal.maps.inverse_focal_map`)
applies one rule, whatever dtype the array arrives in (float16 or bfloat16 tensors, float32
cast to float64, NumPy arrays, lists): every entry lies in [0, 1], and every row sums to 1 within

    ``tol(K) = (2 + log2 K) * 2**-7``

(the row sums taken in float64). ``2**-7`` is one unit in the last place of bfloat16 at 1, the
coarsest precision probabilities plausibly come in (an AMP evaluation loop's softmax), and
``log2 K`` allows for the rounding of a softmax accumulated pairwise over ``K`` classes:
0.023 for ``K = 2``, 0.042 for ``K = 10``, 0.068 for ``K = 100``, 0.094 for ``K = 1000``.
The tolerance does not depend on the current dtype, because a float32 softmax cast to float64
still carries float32's rounding. It stays below 0.5 for every practical ``K``, so the check
still catches scores that are not distributions (rows summing to 0.5 or 2, negative entries,
logits passed as ``probs``); it is not a test of normalisation to rounding. The metrics use
the probabilities as given; the maps renormalise rows before use. Metrics of half-precision
input accumulate their statistics in float64 (below).

Binary scores come as two columns: a 1-D ``p(y=1)`` of shape ``(N,)`` is refused with the
form to pass instead, ``torch.stack([1 - p, p], dim=-1)`` (or, for one binary logit ``z``,
``logits=torch.stack([torch.zeros_like(z), z], dim=-1)``).

Shapes
------
``probs`` / ``logits`` have shape ``(..., N, K)`` (``N`` samples, ``K`` classes, any leading batch
dimensions, e.g. a grid of temperatures) and ``labels`` has shape ``(N,)``.

Return types
------------
Each function has one return type:

- the scalar metrics :func:`ece`, :func:`smooth_ece`, :func:`mce`, :func:`classwise_ece`, :func:`nll`,
  :func:`brier`, :func:`accuracy`, :func:`kl_to_posterior`, :func:`aurc` and :func:`eaurc`
  take one model's ``(N, K)`` scores and return a Python ``float``; input with leading batch
  dims is refused with a pointer to their batched forms;
- :mod:`focalcal.metrics.batched` has the same functions for ``(..., N, K)`` input (e.g. a grid
  of temperatures): they return a :class:`torch.Tensor` of shape ``(...)``, as does the batched
  core :func:`calibration_error`;
- :func:`confidence_score` returns a Tensor of per-sample scores ``(..., N)``;
- the differentiable penalties :func:`mmce` and :func:`ece_kde` return a 0-d Tensor (with a
  graph), :func:`kde_bandwidth` a ``float``;
- :func:`frac_confident` returns a :class:`Confident` of Python numbers and
  :func:`reliability_data` a :class:`ReliabilityData` of tensors.

All values are fractions, never percentages.

Confidence scores and the AURC come from :mod:`focalcal.scores` (scores in [0, 1]; the tie rule
of the AURC is chosen with ``ties=``).

Binning conventions
-------------------
Shared by :func:`calibration_error`, :func:`ece`, :func:`mce`, :func:`classwise_ece` and
:func:`reliability_data`.

``binning="width"``
    ``n_bins`` equal-width bins ``(lo, hi]`` with edges ``b / n_bins`` (the float64 numbers nearest
    to them), as in Mukhoti et al. (2020, eq. 1). A confidence of exactly 0 goes into the first bin
    and a confidence of exactly 1 into the last, so every sample is counted once.
``binning="mass"``
    equal-mass (adaptive) bins, Mukhoti's AdaECE. The ``N`` confidences are sorted and the sample at
    sorted position ``i`` (0-based) goes into bin ``floor(i * n_bins / N)``: contiguous groups whose
    sizes differ by at most one, every sample in exactly one bin. Tied confidences always share a
    bin: a group of ties takes the bin of its *last* sorted position, i.e. a sample with confidence
    ``c`` goes into bin ``floor(n_bins * (#{conf <= c} - 1) / N)``. The bins are therefore
    half-open intervals ``[lo, hi)`` of confidence. When ``N`` is a multiple of ``n_bins`` this is
    exactly the binning of ``netcal.metrics.ECE(equal_intervals=False)`` (quantile edges).

Empty bins contribute nothing; ``N < n_bins`` is allowed. With per-bin sample count ``n_b``, mean
confidence ``C_b`` and accuracy ``A_b``:

- ``norm="l1"``: ``sum_b n_b / N * |A_b - C_b|`` (the ECE);
- ``norm="l2"``: ``sqrt(sum_b n_b / N * (A_b - C_b)**2)`` (root of the weighted mean squared gap);
- ``norm="max"``: ``max_b |A_b - C_b|`` over non-empty bins (the MCE).

All bin statistics are accumulated in float64 whatever the input dtype.
"""

from __future__ import annotations

from torch import Tensor

from .._validation import ArrayLike
from ..scores import SCORES, TIES
from . import batched
from .binned import BINNINGS, NORMS, ReliabilityData, calibration_error, reliability_data
from .kernel import ece_kde, kde_bandwidth, mmce
from .proper import Confident, frac_confident
from .selective import confidence_score
from .smooth import smooth_ece

__all__ = [
    "BINNINGS",
    "NORMS",
    "SCORES",
    "TIES",
    "batched",
    "Confident",
    "ReliabilityData",
    "accuracy",
    "aurc",
    "brier",
    "calibration_error",
    "classwise_ece",
    "confidence_score",
    "eaurc",
    "ece",
    "ece_kde",
    "frac_confident",
    "kde_bandwidth",
    "kl_to_posterior",
    "mce",
    "mmce",
    "nll",
    "reliability_data",
    "smooth_ece",
]


# --------------------------------------------------------------------------------------------
# the scalar metrics: one model, a Python float (the batched forms are in .batched)
# --------------------------------------------------------------------------------------------

def _one_model(value: Tensor, name: str) -> float:
    if value.dim() != 0:
        raise ValueError(f"{name} takes one model's scores of shape (N, K) and returns a float; for "
                         f"scores with batch dims {tuple(value.shape)} use "
                         f"focalcal.metrics.batched.{name}")
    return float(value)


def ece(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
        logits: ArrayLike | None = None, n_bins: int = 15, binning: str = "width",
        norm: str = "l1") -> float:
    """Top-label expected calibration error of one model, a fraction in [0, 1].

    :func:`focalcal.metrics.batched.ece` for ``(N, K)`` scores (documented there), as a float.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import ece
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> labels = torch.tensor([0, 1, 1, 0])
    >>> round(ece(probs, labels, n_bins=5), 4)  # bins (0.4, 0.6], (0.6, 0.8], (0.8, 1]
    0.225
    >>> round(ece(logits=probs.log(), labels=labels, n_bins=5), 4)
    0.225
    """
    return _one_model(batched.ece(probs, labels, logits=logits, n_bins=n_bins, binning=binning,
                                  norm=norm), "ece")


def mce(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
        logits: ArrayLike | None = None, n_bins: int = 15, binning: str = "width") -> float:
    """Maximum calibration error of one model: :func:`focalcal.metrics.batched.mce`, as a float.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import mce
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> round(mce(probs, torch.tensor([0, 1, 1, 0]), n_bins=5), 4)  # the bin (0.4, 0.6]
    0.45
    """
    return _one_model(batched.mce(probs, labels, logits=logits, n_bins=n_bins, binning=binning),
                      "mce")


def classwise_ece(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
                  logits: ArrayLike | None = None, n_bins: int = 15, binning: str = "width",
                  norm: str = "l1") -> float:
    """Class-wise calibration error of one model: :func:`focalcal.metrics.batched.classwise_ece`.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import classwise_ece
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> round(classwise_ece(probs, torch.tensor([0, 1, 1, 0]), n_bins=5), 4)
    0.4
    """
    return _one_model(batched.classwise_ece(probs, labels, logits=logits, n_bins=n_bins,
                                            binning=binning, norm=norm), "classwise_ece")


def nll(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
        logits: ArrayLike | None = None) -> float:
    """Mean negative log-likelihood (nats) of one model: :func:`focalcal.metrics.batched.nll`.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import nll
    >>> probs = torch.tensor([[0.5, 0.5], [0.25, 0.75]], dtype=torch.float64)
    >>> round(nll(probs, torch.tensor([0, 1])), 4)  # (log 2 + log 4/3) / 2
    0.4904
    """
    return _one_model(batched.nll(probs, labels, logits=logits), "nll")


def brier(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
          logits: ArrayLike | None = None) -> float:
    """Multi-class Brier score of one model: :func:`focalcal.metrics.batched.brier`.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import brier
    >>> probs = torch.tensor([[0.5, 0.5], [0.25, 0.75]])
    >>> round(brier(probs, torch.tensor([0, 1])), 4)  # (0.5 + 0.125) / 2
    0.3125
    """
    return _one_model(batched.brier(probs, labels, logits=logits), "brier")


def accuracy(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
             logits: ArrayLike | None = None, top_k: int = 1) -> float:
    """Top-``k`` accuracy of one model: :func:`focalcal.metrics.batched.accuracy`.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import accuracy
    >>> logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0], [1.0, 2.0, 0.0]])
    >>> labels = torch.tensor([0, 1, 1])
    >>> round(accuracy(logits=logits, labels=labels), 4)
    0.6667
    >>> accuracy(logits=logits, labels=labels, top_k=2)
    1.0
    """
    return _one_model(batched.accuracy(probs, labels, logits=logits, top_k=top_k), "accuracy")


def kl_to_posterior(probs: ArrayLike | None = None, true_probs: ArrayLike | None = None, *,
                    logits: ArrayLike | None = None) -> float:
    """Mean KL divergence (nats) to a known posterior: :func:`focalcal.metrics.batched.kl_to_posterior`.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import kl_to_posterior
    >>> true_probs = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    >>> round(kl_to_posterior(torch.tensor([[0.75, 0.25]], dtype=torch.float64), true_probs), 4)
    0.1438
    >>> kl_to_posterior(true_probs, true_probs)
    0.0
    """
    return _one_model(batched.kl_to_posterior(probs, true_probs, logits=logits), "kl_to_posterior")


def aurc(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
         logits: ArrayLike | None = None, score: str = "msp", ties: str = "average") -> float:
    """AURC with the 0/1 loss of one model: :func:`focalcal.metrics.batched.aurc`.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import aurc
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> labels = torch.tensor([0, 1, 1, 0])  # the one error is the second most confident
    >>> round(aurc(probs, labels), 4)  # risks 0, 1/2, 1/3, 1/4 at coverages 1/4 ... 1
    0.2708
    """
    return _one_model(batched.aurc(probs, labels, logits=logits, score=score, ties=ties), "aurc")


def eaurc(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
          logits: ArrayLike | None = None, score: str = "msp", optimum: str = "asymptotic",
          ties: str = "average") -> float:
    """Excess AURC of one model: :func:`focalcal.metrics.batched.eaurc`.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import eaurc
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> labels = torch.tensor([0, 1, 1, 0])
    >>> round(eaurc(probs, labels, optimum="exact"), 4)  # the best ranking puts the error last
    0.2083
    """
    return _one_model(batched.eaurc(probs, labels, logits=logits, score=score, optimum=optimum,
                                    ties=ties), "eaurc")
