"""Proper scores, accuracy, the KL divergence to a known posterior, and Mukhoti's ``|S99|``."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from .._validation import ArrayLike, check_int, check_probs, check_unit_interval
from ._inputs import as_probs, log_probs, scored, scores_of, top_label

__all__ = ["Confident", "accuracy", "brier", "frac_confident", "kl_to_posterior", "nll"]


def nll(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
        logits: ArrayLike | None = None) -> Tensor:
    """Mean negative log-likelihood ``-mean_i log p_{i, y_i}`` (nats).

    From ``logits`` it is computed with ``log_softmax`` (finite for any finite logits). From
    ``probs`` a zero probability of the true class is clamped to the smallest normal number of
    the dtype (``-log`` of it is about 87.3 in float32, 708.4 in float64) instead of giving
    ``inf``; pass ``logits=`` for exact values.

    Shapes as in :func:`focalcal.metrics.batched.ece`; returns a Tensor of shape ``(...)``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import batched
    >>> probs = torch.tensor([[0.5, 0.5], [0.25, 0.75]], dtype=torch.float64)
    >>> batched.nll(probs, torch.tensor([0, 1]))  # (log 2 + log 4/3) / 2
    tensor(0.4904, dtype=torch.float64)
    """
    t, name, lab = scored(probs, labels, logits)
    logp = log_probs(t, name)
    idx = lab.expand(*logp.shape[:-1]).unsqueeze(-1)
    return -logp.gather(-1, idx).squeeze(-1).mean(-1)


def brier(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
          logits: ArrayLike | None = None) -> Tensor:
    """Brier score ``mean_i sum_k (p_{ik} - 1[y_i = k])**2`` (Zhou et al. 2025, Def. A.2), in [0, 2].

    The multi-class sum over classes, not divided by ``K``. Shapes as in
    :func:`focalcal.metrics.batched.ece`; returns a Tensor of shape ``(...)``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import batched
    >>> probs = torch.tensor([[0.5, 0.5], [0.25, 0.75]])
    >>> batched.brier(probs, torch.tensor([0, 1]))  # (0.25 + 0.25 + 0.0625 + 0.0625) / 2
    tensor(0.3125)
    """
    t, name, lab = scored(probs, labels, logits)
    p = as_probs(t, name)
    onehot = torch.zeros_like(p).scatter_(-1, lab.expand(*p.shape[:-1]).unsqueeze(-1), 1.0)
    return (p - onehot).square().sum(-1).mean(-1)


def accuracy(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
             logits: ArrayLike | None = None, top_k: int = 1) -> Tensor:
    """Fraction of samples whose label is among the ``top_k`` highest scores.

    ``top_k=1`` breaks ties towards the lowest class index (as :func:`focalcal.metrics.batched.ece`
    does); for ``top_k > 1`` ties at the cut are broken by ``torch.topk``. Shapes as in
    :func:`focalcal.metrics.batched.ece`; returns a Tensor of shape ``(...)``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import batched
    >>> logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0], [1.0, 2.0, 0.0]])
    >>> labels = torch.tensor([0, 1, 1])
    >>> batched.accuracy(logits=torch.stack([logits, -logits]), labels=labels)  # two models
    tensor([0.6667, 0.0000])
    >>> batched.accuracy(logits=logits, labels=labels, top_k=2)
    tensor(1.)
    """
    top_k = check_int(top_k, "top_k", minimum=1)
    scores, _, lab = scored(probs, labels, logits)
    k = scores.shape[-1]
    if top_k > k:
        raise ValueError(f"top_k must be <= the number of classes {k}, got {top_k}")
    if top_k == 1:
        hit = scores.argmax(-1) == lab
    else:
        hit = (scores.topk(top_k, dim=-1).indices == lab.unsqueeze(-1)).any(-1)
    return hit.to(torch.float64).mean(-1).to(scores.dtype)


def kl_to_posterior(probs: ArrayLike | None = None, true_probs: ArrayLike | None = None, *,
                    logits: ArrayLike | None = None) -> Tensor:
    """Mean KL divergence ``mean_i KL(true_i || p_i) = mean_i sum_k t_ik log(t_ik / p_ik)`` (nats).

    For synthetic tasks whose posterior ``true_probs`` is known. Terms with ``t_ik = 0`` are 0;
    with ``probs=``, a zero ``p_ik`` where ``t_ik > 0`` is clamped to the smallest normal number
    of the dtype (pass ``logits=`` for exact values).

    Parameters
    ----------
    probs : Tensor, shape (..., N, K), optional
        The model's probabilities (any precision, :ref:`probs-tolerance`); exactly one of
        ``probs`` and ``logits`` is required.
    true_probs : Tensor, shape (..., N, K)
        The true posterior of every sample (rows summing to 1 by the same rule; required);
        broadcast against the model's.
    logits : Tensor, shape (..., N, K), optional, keyword-only
        The model's logits, instead of ``probs``.

    Returns
    -------
    Tensor, shape (...)

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import batched
    >>> true_probs = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    >>> probs = torch.tensor([[0.75, 0.25]], dtype=torch.float64)
    >>> batched.kl_to_posterior(probs, true_probs)  # 0.5 log(0.5/0.75) + 0.5 log(0.5/0.25)
    tensor(0.1438, dtype=torch.float64)
    >>> logits = torch.tensor([[[0.0, 0.0]], [[1.0, 0.0]]])  # two models, one sample
    >>> batched.kl_to_posterior(logits=logits, true_probs=torch.tensor([[0.5, 0.5]]))
    tensor([0.0000, 0.1201])
    """
    if true_probs is None:
        raise ValueError("true_probs is required: pass the known posterior (..., N, K) after the "
                         "model's scores, e.g. kl_to_posterior(probs, true_probs)")
    t = check_probs(true_probs, "true_probs")
    logp = log_probs(*scores_of(probs, logits))
    if t.dim() < 2 or t.shape[-2:] != logp.shape[-2:]:
        raise ValueError(f"true_probs and the model's scores must both have shape (..., N, K) with "
                         f"the same N and K, got {tuple(t.shape)} and {tuple(logp.shape)}")
    kl = (torch.xlogy(t, t) - torch.where(t > 0, t * logp, torch.zeros_like(logp))).sum(-1)
    # rounding can make a KL of ~0 slightly negative
    return kl.mean(-1).clamp(min=0)


class Confident(NamedTuple):
    """Mukhoti et al.'s ``|S99|``: the samples predicted with confidence above a threshold.

    Examples
    --------
    >>> from focalcal.metrics import Confident
    >>> c = Confident(fraction=0.25, accuracy=1.0, count=1)
    >>> c.fraction, c.count
    (0.25, 1)
    """

    fraction: float
    """fraction of samples with top-class probability > threshold"""
    accuracy: float
    """accuracy on those samples (``nan`` when there are none: undefined)"""
    count: int
    """how many samples"""


def frac_confident(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
                   logits: ArrayLike | None = None, threshold: float = 0.99) -> Confident:
    """Fraction of samples predicted with confidence ``> threshold`` and their accuracy.

    With ``threshold=0.99`` this is ``|S99|`` of Mukhoti et al. (2020, Appendix F, Table 13),
    reported there in percent; here as fractions.

    Parameters
    ----------
    probs : Tensor, shape (N, K), optional
        Probabilities (any precision, :ref:`probs-tolerance`); exactly one of ``probs`` and
        ``logits`` (no batch dims).
    labels : Tensor of int, shape (N,)
    logits : Tensor, shape (N, K), optional, keyword-only
    threshold : float in [0, 1)
        Strict threshold on the top-class probability.

    Returns
    -------
    Confident
        ``(fraction, accuracy, count)`` as Python numbers; ``accuracy`` is ``nan`` when
        ``count == 0``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import frac_confident
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> labels = torch.tensor([0, 1, 1, 0])
    >>> frac_confident(probs, labels, threshold=0.9)
    Confident(fraction=0.25, accuracy=1.0, count=1)
    >>> frac_confident(probs, labels, threshold=0.5)
    Confident(fraction=1.0, accuracy=0.75, count=4)
    """
    thr = float(check_unit_interval(torch.tensor(float(threshold)), "threshold", open_right=True))
    conf, correct = top_label(probs, labels, logits)
    if conf.dim() != 1:
        raise ValueError(f"frac_confident takes scores of shape (N, K), got batch dims "
                         f"{tuple(conf.shape[:-1])}")
    sel = conf > thr
    count = int(sel.sum())
    acc = float(correct[sel].double().mean()) if count else math.nan
    return Confident(count / conf.shape[-1], acc, count)
