"""Selective prediction: confidence scores, AURC and E-AURC (via :mod:`focalcal.scores`)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import ArrayLike, check_choice
from ..scores import aurc_weights, check_score, from_log_probs, ranking_key
from ._inputs import as_log_probs, scored, scores_of

__all__ = ["aurc", "confidence_score", "eaurc"]


def confidence_score(probs: ArrayLike | None = None, *, logits: ArrayLike | None = None,
                     score: str = "msp") -> Tensor:
    """Confidence-score function (CSF) of every sample (Zhou et al. 2025, Table 1).

    :func:`focalcal.scores.from_log_probs` on accurate log-probabilities of ``probs`` or
    ``logits``.

    Parameters
    ----------
    probs : Tensor, shape (..., N, K), optional
        Probabilities (any precision, :ref:`probs-tolerance`); exactly one of ``probs`` and
        ``logits`` is required.
    logits : Tensor, shape (..., N, K), optional, keyword-only
        Unnormalised scores, instead of ``probs``.
    score : {"msp", "neg_entropy", "margin"}
        ``"msp"``: max softmax probability ``max_k p_k``; ``"neg_entropy"``: the negative entropy
        rescaled to [0, 1], ``1 + sum_k p_k log p_k / log K``; ``"margin"``: ``p_(1) - p_(2)``, the
        gap between the two largest probabilities (:mod:`focalcal.scores`).

    Returns
    -------
    Tensor, shape (..., N)
        Scores in [0, 1]; larger means more confident.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import confidence_score
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65]])
    >>> confidence_score(probs)
    tensor([0.9500, 0.7500, 0.6500])
    >>> confidence_score(probs, score="margin")
    tensor([0.9000, 0.5000, 0.3000])
    >>> confidence_score(logits=torch.tensor([[0.0, 0.0], [50.0, 0.0]]), score="neg_entropy")
    tensor([0., 1.])
    """
    check_score(score)
    return from_log_probs(as_log_probs(*scores_of(probs, logits)), score)


def _aurc_inputs(probs: ArrayLike | None, labels: ArrayLike | None, logits: ArrayLike | None,
                 score: str) -> tuple[Tensor, Tensor, torch.dtype]:
    check_score(score)
    t, name, lab = scored(probs, labels, logits)
    logp = as_log_probs(t, name)
    err = (logp.argmax(-1) != lab).to(torch.float64)
    key = ranking_key(logp.to(torch.float64), score)
    return key, err, logp.dtype


def _area(key: Tensor, err: Tensor, ties: str) -> Tensor:
    """``mean_i alpha_i err_i`` (float64), the AURC of :func:`aurc` and :func:`eaurc`."""
    # the weights of N samples sum to N exactly, but not in floating point: all errors could give
    # 1 + 2e-16; the area is a fraction, so it is kept in [0, 1]
    return (aurc_weights(key, ties=ties) * err).mean(-1).clamp_(0, 1)


def aurc(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
         logits: ArrayLike | None = None, score: str = "msp", ties: str = "average") -> Tensor:
    """Area under the risk-coverage curve with the 0/1 loss (Geifman et al. 2019).

    Samples are ranked by the confidence score ``score`` (see :func:`focalcal.metrics.confidence_score`); with
    ``risk(k)`` the error rate of the ``k`` most confident samples,
    ``AURC = (1/N) sum_{k=1}^N risk(k)``, the empirical version of Zhou et al.'s (2025, Def. 3.3)
    ``-E[ln(1 - G(x)) l(f(x), y)]``, computed as ``mean_i alpha_i err_i`` with the rank weights of
    :func:`focalcal.scores.aurc_weights`. The ranking uses log-space scores, so rows whose top
    probability rounds to 1 are still ranked by their logits.

    Parameters
    ----------
    ties : {"average", "threshold", "sorted"}
        How tied scores are ranked (:mod:`focalcal.scores`). The default averages over all orders
        of the ties, so the result does not depend on the order of the samples; ``"threshold"``
        accepts tied samples together.

    Returns
    -------
    Tensor
        Shape ``(...)`` (shapes as in :func:`focalcal.metrics.batched.ece`), a fraction in [0, 1].

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import batched
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> labels = torch.tensor([0, 1, 1, 0])  # the one error is the second most confident
    >>> batched.aurc(probs, labels)  # risks 0, 1/2, 1/3, 1/4 at coverages 1/4, ..., 1
    tensor(0.2708)
    """
    key, err, dtype = _aurc_inputs(probs, labels, logits, score)
    return _area(key, err, ties).to(dtype)


def eaurc(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
          logits: ArrayLike | None = None, score: str = "msp", optimum: str = "asymptotic",
          ties: str = "average") -> Tensor:
    """Excess AURC: :func:`aurc` minus the AURC of the optimal ranking (all errors ranked last).

    Other arguments as in :func:`aurc`.

    Parameters
    ----------
    optimum : {"asymptotic", "exact"}
        ``"asymptotic"`` (Geifman et al. 2019): with error rate ``r``,
        ``AURC* = r + (1 - r) log(1 - r)``. ``"exact"``: the finite-sample optimum
        ``(E - (N - E)(H_N - H_{N-E})) / N`` for ``E`` errors (``H`` harmonic numbers), which
        is slightly larger, so that the exact E-AURC is never negative. They differ by ``O(1/N)``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import batched
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> labels = torch.tensor([0, 1, 1, 0])
    >>> batched.eaurc(probs, labels, optimum="exact")  # 0.2708 - 1/16 (the error ranked last)
    tensor(0.2083)
    >>> batched.eaurc(probs, labels)  # r + (1 - r) log(1 - r) with r = 1/4 as the optimum
    tensor(0.2366)
    """
    check_choice(optimum, "optimum", ("asymptotic", "exact"))
    key, err, dtype = _aurc_inputs(probs, labels, logits, score)
    n = err.shape[-1]
    if optimum == "asymptotic":
        r = err.mean(-1)
        best = r + torch.xlogy(1 - r, 1 - r)
    else:
        e = err.sum(-1)
        harm = torch.special.digamma(torch.tensor(n + 1.0, dtype=torch.float64)) \
            - torch.special.digamma(n - e + 1)
        best = (e - (n - e) * harm) / n
    return (_area(key, err, ties) - best).to(dtype)
