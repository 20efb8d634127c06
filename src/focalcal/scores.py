"""Confidence scores and the quantities built from them, shared by the metrics and the losses.

A confidence-score function (CSF; Zhou et al. 2025, Table 1) maps a sample's class probabilities
to one number, larger = more confident. This module is the one place where the library computes
them, ranks samples by them (the AURC) and smooths their distribution (the selective-risk loss):
:mod:`focalcal.metrics` and :mod:`focalcal.losses` both call it.

Scores
------
:data:`SCORES` names the three CSFs. Every function takes log-probabilities of shape ``(..., K)``
(classes in the last dimension) and returns shape ``(...)``. **Every score lies in [0, 1]**:

``"msp"``
    maximum softmax probability ``max_k p_k`` (in ``[1/K, 1]``);
``"neg_entropy"``
    negative entropy rescaled from ``[-log K, 0]`` to ``[0, 1]``:
    ``1 + sum_k p_k log p_k / log K = 1 - H(p) / log K`` (0 for the uniform row, 1 for a one-hot
    row). The rescaling changes no ranking; it lets one set of bins on [0, 1] serve all three
    scores (the smoothed CDF of the selective-risk loss bins them). Zhou et al.'s released code
    does not rescale the same way: its ``neg_entropy_normalized`` (``loss/selectAU.py``) divides
    ``-H(p) - log K`` by ``-log K``, which maps ``[-log K, 0]`` onto ``[1, 2]``, and then clamps to
    ``[0, 1]``, so every sample scores 1 (``selective_risk_loss(..., variant="released")``
    reproduces that);
``"margin"``
    ``p_(1) - p_(2)``, the gap between the two largest probabilities.

:func:`from_log_probs` gives the values (differentiable); :func:`ranking_key` a key with the same
order that stays strict for rows whose top probability rounds to 1 (it is computed in log space).

AURC weights and ties
---------------------
The empirical AURC of per-sample losses ``l`` is ``mean_i alpha_i l_i`` with rank weights
``alpha`` (:func:`aurc_weights`); for distinct scores the sample of ascending rank ``r`` has
``alpha = H_N - H_{N-r}`` (harmonic numbers). Tied scores are handled by ``ties``
(:data:`TIES`):

``"average"``
    each tied sample gets the mean weight of its group's positions: the AURC averaged over all
    orders of the ties (independent of the order of the samples; :func:`focalcal.metrics.aurc`);
``"threshold"``
    every sample is a threshold and a threshold accepts every sample with a score ``>=`` it, so
    tied samples are accepted together (the risk-coverage curve with one point per sample, ties
    giving repeated points; the selective-risk area of the empirical measure);
``"sorted"``
    ties broken by position: of two tied samples the one that comes first in the input counts as
    the more confident (a stable sort). One sort and no grouping; the AURC training loss
    (:func:`focalcal.losses.aurc_loss`) uses it.

All three agree when the scores are distinct.
"""

from __future__ import annotations

import math
import torch
from torch import Tensor

from ._validation import (
    ArrayLike,
    as_float_tensor,
    check_choice,
    check_finite,
    check_int,
    check_nonempty,
    check_positive,
)

__all__ = [
    "SCORES",
    "TIES",
    "aurc_weights",
    "check_score",
    "from_log_probs",
    "rank_weights",
    "ranking_key",
    "smoothed_cdf",
]

#: confidence-score functions (CSFs) of Zhou et al. (2025), Table 1
SCORES = ("msp", "neg_entropy", "margin")

#: tie rules of :func:`aurc_weights`
TIES = ("average", "threshold", "sorted")


def check_score(score: str) -> str:
    """``score`` if it is one of :data:`SCORES`, else ``ValueError`` naming the argument.

    Examples
    --------
    >>> from focalcal.scores import check_score
    >>> check_score("margin")
    'margin'
    >>> try:
    ...     check_score("entropy")
    ... except ValueError as err:
    ...     print(err)
    score must be one of 'msp', 'neg_entropy', 'margin'; got 'entropy'
    """
    return check_choice(score, "score", SCORES)


# --------------------------------------------------------------------------------------------
# score values and ranking keys
# --------------------------------------------------------------------------------------------

def _neg_entropy(logp: Tensor) -> Tensor:
    """``sum_k p_k log p_k`` over the last dim; a zero probability contributes 0 (also at log 0)."""
    p = logp.exp()
    return torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1)


def from_log_probs(log_probs: Tensor, score: str = "msp") -> Tensor:
    """The confidence score of every row of ``log_probs`` ``(..., K) -> (...)``, in [0, 1].

    Differentiable (the selective-risk loss takes gradients through it). See the module docstring
    for the three scores; ``log_probs`` are log-probabilities (e.g. ``log_softmax`` of logits).

    Examples
    --------
    >>> import torch
    >>> from focalcal.scores import from_log_probs
    >>> log_probs = torch.tensor([[0.7, 0.2, 0.1], [0.5, 0.3, 0.2]]).log()
    >>> from_log_probs(log_probs, "msp")
    tensor([0.7000, 0.5000])
    >>> from_log_probs(log_probs, "margin")
    tensor([0.5000, 0.2000])
    >>> from_log_probs(log_probs, "neg_entropy")  # 1 - H(p) / log 3
    tensor([0.2702, 0.0628])
    """
    score = check_score(score)
    if score == "msp":
        return log_probs.max(-1).values.exp()
    if score == "margin":
        top2 = log_probs.topk(2, dim=-1).values
        l1, l2 = top2[..., 0], top2[..., 1]
        # p1 - p2 = p1 (1 - exp(l2 - l1)): no cancellation when both are close to 1/2
        return l1.exp() * -torch.expm1(l2 - l1)
    k = log_probs.shape[-1]
    return (1.0 + _neg_entropy(log_probs) / math.log(k)).clamp(0.0, 1.0)


def ranking_key(log_probs: Tensor, score: str = "msp") -> Tensor:
    """A key ``(..., K) -> (...)`` that orders the rows as :func:`from_log_probs` does.

    ``"msp"``: ``log p_max``; ``"margin"``: ``log(p_(1) - p_(2))``; ``"neg_entropy"``:
    ``sum_k p_k log p_k``. In log space a row whose top probability rounds to 1 keeps a distinct
    key, so saturated rows are still ranked by their logits. Not meant for gradients.

    Examples
    --------
    Two saturated rows whose top probability rounds to 1 in float64 still rank by their logits
    (log-probabilities of the logits ``(40, 0)`` and ``(39, 0)``):

    >>> import math, torch
    >>> from focalcal.scores import from_log_probs, ranking_key
    >>> log_probs = torch.tensor([[-math.exp(-40), -40.0], [-math.exp(-39), -39.0]], dtype=torch.float64)
    >>> from_log_probs(log_probs)
    tensor([1., 1.], dtype=torch.float64)
    >>> key = ranking_key(log_probs)
    >>> bool(key[0] > key[1])
    True
    """
    score = check_score(score)
    if score == "msp":
        return log_probs.max(-1).values
    if score == "margin":
        top2 = log_probs.topk(2, dim=-1).values
        l1, l2 = top2[..., 0], top2[..., 1]
        return l1 + torch.log(-torch.expm1(l2 - l1))
    return _neg_entropy(log_probs)


# --------------------------------------------------------------------------------------------
# AURC rank weights
# --------------------------------------------------------------------------------------------

def _threshold_weights(key: Tensor) -> Tensor:
    """``alpha_j = sum_{i : g_i <= g_j} 1 / N_>=(g_i)`` with ``N_>=(t) = #{i : g_i >= t}``."""
    n = key.shape[-1]
    srt = torch.sort(key, dim=-1).values
    n_acc = n - torch.searchsorted(srt, srt, right=False)   # N_>=(g_(i)) in ascending order
    csum = torch.cumsum(1.0 / n_acc.to(torch.float64), dim=-1)
    # sum over i with g_i <= g_j: up to the last sorted position holding the value g_j
    last = torch.searchsorted(srt, key.contiguous(), right=True) - 1
    return csum.gather(-1, last)


def rank_weights(key: Tensor, position_weights: Tensor, *, ties: str = "average") -> Tensor:
    """Weights that depend on the rank of each sample's key, with ties by ``"average"`` or ``"sorted"``.

    ``position_weights[r]`` (shape ``(N,)``) is the weight of the sample at descending position
    ``r`` (0 = most confident). ``"sorted"`` assigns them in the order of a stable descending sort
    of ``key`` (..., N); ``"average"`` gives every tie group the mean of its positions' weights.
    Returns float64 weights of the shape of ``key``, in the input order.

    Examples
    --------
    >>> import torch
    >>> from focalcal.scores import rank_weights
    >>> position_weights = torch.tensor([1.0, 2.0, 3.0])  # most confident first
    >>> rank_weights(torch.tensor([0.2, 0.9, 0.5]), position_weights)
    tensor([3., 1., 2.], dtype=torch.float64)
    >>> rank_weights(torch.tensor([0.5, 0.9, 0.5]), position_weights)  # the tie shares 2 and 3
    tensor([2.5000, 1.0000, 2.5000], dtype=torch.float64)
    """
    check_choice(ties, "ties", ("average", "sorted"))
    srt, order = torch.sort(key.detach(), dim=-1, descending=True, stable=True)
    w = position_weights.to(torch.float64).expand(srt.shape)
    if ties == "average":
        # a tie group gets the mean weight of its positions = the mean over all orders of the ties
        new = torch.ones_like(srt, dtype=torch.bool)
        new[..., 1:] = srt[..., 1:] != srt[..., :-1]
        gid = new.cumsum(-1) - 1
        gsum = torch.zeros_like(w).scatter_add_(-1, gid, w)
        gcnt = torch.zeros_like(w).scatter_add_(-1, gid, torch.ones_like(w))
        w = (gsum / gcnt.clamp(min=1)).gather(-1, gid)
    return torch.empty_like(w).scatter_(-1, order, w)


def aurc_weights(key: Tensor, *, ties: str = "average") -> Tensor:
    """Rank weights ``alpha`` with ``AURC = mean_i alpha_i l_i``, shape ``(..., N)``, float64.

    Parameters
    ----------
    key : Tensor, shape (..., N)
        Confidence scores or any key with their order (e.g. :func:`ranking_key`); larger = more
        confident. Batched over the leading dims.
    ties : {"average", "threshold", "sorted"}
        The tie rule (module docstring). For distinct keys all give
        ``alpha = H_N - H_{N-r}`` for the sample of ascending rank ``r``.

    Returns
    -------
    Tensor, shape (..., N), float64
        Non-negative weights, non-decreasing in the key; no gradient.

    Notes
    -----
    ``O(N log N)``: one sort and a cumulative sum, no loop over samples.

    Examples
    --------
    >>> import torch
    >>> from focalcal.scores import aurc_weights
    >>> aurc_weights(torch.tensor([0.9, 0.8, 0.7]))  # H_3 - H_0, H_3 - H_1, H_3 - H_2
    tensor([1.8333, 0.8333, 0.3333], dtype=torch.float64)
    >>> aurc_weights(torch.tensor([0.9, 0.8, 0.8]))  # the tied pair shares 0.8333 + 0.3333
    tensor([1.8333, 0.5833, 0.5833], dtype=torch.float64)
    >>> aurc_weights(torch.tensor([0.9, 0.8, 0.8]), ties="threshold")  # accepted together
    tensor([1.6667, 0.6667, 0.6667], dtype=torch.float64)
    """
    check_choice(ties, "ties", TIES)
    key = key.detach()
    if ties == "threshold":
        return _threshold_weights(key)
    n = key.shape[-1]
    # the sample at descending position r (1-based) is in the accepted set of the k >= r most
    # confident ones: weight sum_{k=r}^N 1/k = H_N - H_{r-1}
    inv = 1.0 / torch.arange(1, n + 1, dtype=torch.float64, device=key.device)
    return rank_weights(key, inv.flip(0).cumsum(0).flip(0), ties=ties)


# --------------------------------------------------------------------------------------------
# the bin-based smoothed CDF (Zhou et al. 2025, eqs. 13-15)
# --------------------------------------------------------------------------------------------

def bin_counts(scores: Tensor, n_bins: int, edges: Tensor | None) -> tuple[Tensor, Tensor]:
    """Counts ``(..., B)`` of the (detached) scores in the bins and the bin centres ``(B,)``.

    Equal-width bins on [0, 1] (``edges=None``): bin ``floor(s * B)``, the last one closed.
    Explicit edges: ``[e_k, e_{k+1})``, the last one closed. Scores are assumed inside the edges.
    """
    s = scores.detach()
    if edges is None:
        idx = (s * n_bins).floor().clamp(0, n_bins - 1).long()
        centres = (torch.arange(n_bins, dtype=s.dtype, device=s.device) + 0.5) / n_bins
    else:
        n_bins = edges.numel() - 1
        idx = (torch.bucketize(s.contiguous(), edges, right=True) - 1).clamp_(0, n_bins - 1)
        centres = 0.5 * (edges[:-1] + edges[1:])
    counts = torch.zeros(*s.shape[:-1], n_bins, dtype=s.dtype, device=s.device)
    counts.scatter_add_(-1, idx, torch.ones_like(s))
    return counts, centres


def cdf_from_counts(at: Tensor, counts: Tensor, centres: Tensor, nu: float, n: int) -> Tensor:
    """``(1/n) sum_k h_k sigmoid((t - c_k) / nu)`` for ``t`` of shape ``(..., M)``."""
    sig = torch.sigmoid((at.unsqueeze(-1) - centres) / nu)
    return (sig @ counts.unsqueeze(-1)).squeeze(-1) / n


def smoothed_cdf(scores: ArrayLike, at: ArrayLike | None = None, *, nu: float = 0.1,
                 n_bins: int = 64, edges: ArrayLike | None = None) -> Tensor:
    """Bin-based smoothed CDF of the scores (Zhou et al. 2025, eqs. 13-15).

    ``G_nu(t) = (1/N) sum_k h_k sigmoid((t - c_k) / nu)`` with the counts ``h_k`` of the scores
    in the bins and the bin centres ``c_k``. It replaces the indicator ``1[g_j <= t]`` of the
    empirical CDF by a sigmoid step at the centre of the bin of ``g_j``: as ``nu -> 0`` it becomes
    a step function at the centres (each bin counted wholly once ``t`` passes its centre, half at
    the centre itself), as ``nu -> inf`` it tends to 1/2 everywhere. Unclamped (the selective-risk
    loss clamps it to ``[1/(N+1), N/(N+1)]``).

    Parameters
    ----------
    scores : Tensor, shape (..., N)
        The sample of confidence scores, inside the bins (``[0, 1]`` for the default bins).
    at : Tensor, shape (..., M), optional
        Evaluation points (default: the scores); leading dims as for ``scores``. The result is
        differentiable in ``at`` (the counts are not).
    nu : float > 0
        Smoothing of the sigmoid steps (in score units).
    n_bins : int
        Number of equal-width bins on [0, 1] (a score ``s`` is in bin ``floor(s * n_bins)``, 1 in
        the last); ignored when ``edges`` is given.
    edges : Tensor, shape (K + 1,), optional
        Strictly increasing bin edges; bins ``[e_k, e_{k+1})``, the last one closed.

    Returns
    -------
    Tensor, shape (..., M)
        Values in (0, 1), non-decreasing in ``at``, in the floating dtype of the inputs.

    Notes
    -----
    ``O(M K)``: one scatter for the counts and one ``(M, K) @ (K,)`` product.

    Examples
    --------
    >>> import torch
    >>> from focalcal.scores import smoothed_cdf
    >>> scores = torch.tensor([0.1, 0.5, 0.9])
    >>> cdf = smoothed_cdf(scores, at=torch.tensor([0.0, 0.5, 1.0]), nu=0.01, n_bins=10)
    >>> [round(v, 3) for v in cdf.tolist()]  # at 0.5: one score below, one just above (bin centre 0.55)
    [0.0, 0.336, 0.998]
    """
    s = as_float_tensor(scores, "scores")
    check_nonempty(s, "scores")
    check_finite(s, "scores")
    if at is None:
        t = s
    else:
        t = as_float_tensor(at, "at")
        check_nonempty(t, "at")
        check_finite(t, "at")
        if t.shape[:-1] != s.shape[:-1]:
            raise ValueError(f"at must have the leading dims of scores {tuple(s.shape[:-1])}, "
                             f"got shape {tuple(t.shape)}")
        dtype = torch.promote_types(s.dtype, t.dtype)
        s, t = s.to(dtype), t.to(dtype)
    nu = check_positive(nu, "nu")
    if edges is None:
        n_bins = check_int(n_bins, "n_bins", minimum=1)
        e = None
        lo, hi = 0.0, 1.0
    else:
        e = as_float_tensor(edges, "edges").to(s.dtype)
        if e.dim() != 1 or e.numel() < 2 or not bool((e[1:] > e[:-1]).all()):
            raise ValueError("edges must be a 1-d strictly increasing tensor with at least 2 entries")
        lo, hi = float(e[0]), float(e[-1])
    s_lo, s_hi = (float(v) for v in torch.aminmax(s.detach()))
    if s_lo < lo or s_hi > hi:
        raise ValueError(f"scores must lie inside the bin edges [{lo:g}, {hi:g}]; "
                         f"got values in [{s_lo:.4g}, {s_hi:.4g}]")
    counts, centres = bin_counts(s, n_bins, e)
    return cdf_from_counts(t, counts, centres, nu, s.shape[-1])
