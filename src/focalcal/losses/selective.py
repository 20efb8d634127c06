"""Selective-classification losses of Zhou et al. (2025): the AURC loss and the selective-risk loss.

Both weight the per-sample cross-entropy by a function of the rank of the sample's confidence
score (:mod:`focalcal.scores`: the scores, the AURC rank weights and the smoothed CDF).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._validation import ArrayLike, check_choice, check_int, check_positive, check_unit_interval
from ..scores import (
    aurc_weights,
    bin_counts,
    cdf_from_counts,
    check_score,
    from_log_probs,
    rank_weights,
    ranking_key,
)
from ._core import check_ignore_index, check_output, check_reduction, prepare, reduce_loss

AURC_WEIGHTS = ("harmonic", "log")

# the check_* helpers are shared with .modules, not API
__all__ = ["AURC_WEIGHTS", "aurc_loss", "selective_risk_loss", "selective_risk_weights"]


# --------------------------------------------------------------------------------------------
# AURC
# --------------------------------------------------------------------------------------------

def check_aurc_params(score: str, weights: str, ties: str) -> tuple[str, str, str]:
    """``(score, weights, ties)`` of the AURC loss, checked (``"log"`` weights need no threshold ties)."""
    score = check_score(score)
    weights = check_choice(weights, "weights", AURC_WEIGHTS)
    allowed = ("sorted", "average") if weights == "log" else ("sorted", "average", "threshold")
    return score, weights, check_choice(ties, "ties", allowed)


def aurc_loss(logits: ArrayLike, labels: ArrayLike, *, score: str = "msp", weights: str = "harmonic",
              ties: str = "sorted", reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """AURC as a reweighted cross-entropy (Zhou et al. 2025, Def. 3.3): ``mean_i alpha_i CE_i``.

    The batch is ranked by the confidence score ``score`` (:data:`focalcal.scores.SCORES`,
    ranked in log space; ascending rank ``r_i`` in 1..N, one sort, ``O(N log N)``) and

    * ``weights="harmonic"``: ``alpha_i = H_N - H_{N - r_i}`` (:func:`focalcal.scores.aurc_weights`),
      for which ``mean_i alpha_i l_i`` is exactly the empirical AURC ``(1/N) sum_k risk(top-k)``;
    * ``weights="log"``: ``alpha_i = -ln(1 - r_i / (N + 1))``, the plug-in of ``-ln(1 - G(x))``.

    ``ties`` chooses how tied scores are ranked (:data:`focalcal.scores.TIES`); the default
    ``"sorted"`` breaks them by position (one sort, no grouping). ``weights="log"`` takes
    ``"sorted"`` or ``"average"``. The weights are computed without gradient (a rank is
    piecewise constant); the gradient is that of the weighted cross-entropy. ``"none"`` returns
    ``alpha_i CE_i``.

    Examples
    --------
    >>> from focalcal.losses import aurc_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> aurc_loss(logits, labels)
    tensor(0.2948)
    >>> aurc_loss(logits, labels, reduction='none')
    tensor([0.3114, 0.4315, 0.1415])
    """
    score, weights, ties = check_aurc_params(score, weights, ties)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction, min_samples=1)
    x, t = batch.selected()
    logp = torch.log_softmax(x, dim=1)
    ce = -logp.gather(1, t.unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        key = ranking_key(logp.detach(), score)
        if weights == "harmonic":
            alpha = aurc_weights(key, ties=ties)
        else:
            alpha = _log_weights(key, ties)
    return reduce_loss(batch.scatter_back(alpha.to(ce.dtype) * ce), batch, reduction)


def _log_weights(key: Tensor, ties: str) -> Tensor:
    """``-ln(1 - r / (N + 1))`` for the ascending rank ``r`` of each key (ties: sorted or averaged)."""
    n = key.shape[-1]
    rank = torch.arange(n, 0, -1, dtype=torch.float64, device=key.device)  # by descending position
    return rank_weights(key, -torch.log1p(-rank / (n + 1.0)), ties=ties)


# --------------------------------------------------------------------------------------------
# the selective-risk loss
# --------------------------------------------------------------------------------------------

def check_selective_params(coverage: float, threshold: float | None, nu: float, n_bins: int
                           ) -> tuple[float, float | None, float, int]:
    """``(coverage, threshold, nu, n_bins)`` of the selective-risk loss, checked."""
    coverage = float(coverage)
    if not (0.0 < coverage <= 1.0):
        raise ValueError(f"coverage must lie in (0, 1], got {coverage}")
    if threshold is not None:
        threshold = float(threshold)
        if not (0.0 <= threshold <= 1.0):
            raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
    return coverage, threshold, check_positive(nu, "nu"), check_int(n_bins, "n_bins", minimum=1)


def selective_risk_weights(scores: Tensor, *, coverage: float = 0.9, threshold: float | None = None,
                           nu: float = 0.1, n_bins: int = 64, conditional: bool = False) -> Tensor:
    """Weights ``beta_i`` of Zhou et al.'s (2025) selective-risk loss, eq. 16, in ``O(N * n_bins)``.

    ``beta_i = -ln(1 - G_nu(min(g_i, tau)))`` with the bin-based smoothed CDF (eq. 15)
    ``G_nu(s) = (1/N) sum_k h_k sigmoid((s - c_k) / nu)`` over ``n_bins`` equal-width bins of
    [0, 1] (counts ``h_k``, centres ``c_k``; :func:`focalcal.scores.smoothed_cdf`). Samples above
    ``tau`` get the constant ``-ln(1 - G_nu(tau))`` (eq. 12: ``x`` outside ``X_tau``), those
    below their rank weight.

    Parameters
    ----------
    scores : Tensor, shape (N,)
        Confidence scores in [0, 1] (e.g. :func:`focalcal.scores.from_log_probs`), differentiable.
    coverage : float in (0, 1]
        Fraction of the batch treated as low confidence: ``tau`` is the ``ceil(coverage * N)``-th
        smallest score (``torch.kthvalue``, a selection, no sort; App. E.2). ``coverage = 1``
        covers the whole batch (an AURC-like weighting).
    threshold : float, optional
        A fixed ``tau`` in [0, 1] instead of the coverage rule.
    nu : float > 0
        Sigmoid smoothing (App. E.2; 0.1 for CIFAR-10, 0.01 for CIFAR-100).
    n_bins : int
        Number of bins ``K`` of eq. 13-14 (the authors' code uses 64).
    conditional : bool
        Divide by ``G_nu(tau)``: the expectation over ``x~ ~ P_X_tau`` in eq. 11 is conditional;
        ``True`` gives eq. 11, ``False`` (default) the paper's estimator eq. 16 (the book's
        errata page, ``book/theory/errata.md``, shows how the two differ).

    Returns
    -------
    Tensor, shape (N,)
        ``beta``; its gradient flows through ``g_i`` for ``g_i < tau`` only (``tau``, the counts and
        ``G(tau)`` are constants, App. C.4). ``G_nu`` is clamped to ``[1/(N+1), N/(N+1)]`` as in the
        authors' code, which keeps ``beta`` finite when the sigmoid saturates.

    Examples
    --------
    >>> import torch
    >>> from focalcal.losses import selective_risk_weights
    >>> selective_risk_weights(torch.tensor([0.9, 0.4, 0.7, 0.2]), coverage=0.5)
    tensor([0.4486, 0.4486, 0.4486, 0.2231])
    """
    coverage, threshold, nu, n_bins = check_selective_params(coverage, threshold, nu, n_bins)
    if scores.dim() != 1 or scores.numel() == 0:
        raise ValueError(f"scores must be a non-empty 1-d tensor, got shape {tuple(scores.shape)}")
    check_unit_interval(scores.detach(), "scores")
    return _selective_weights(scores, coverage, threshold, nu, n_bins, conditional)


def _selective_weights(scores: Tensor, coverage: float, threshold: float | None, nu: float,
                       n_bins: int, conditional: bool) -> Tensor:
    n = scores.shape[0]
    with torch.no_grad():
        sd = scores.detach()
        if threshold is None:
            k = min(max(int(math.ceil(coverage * n - 1e-9)), 1), n)
            tau = torch.kthvalue(sd, k).values
        else:
            tau = torch.tensor(threshold, dtype=sd.dtype, device=sd.device)
        counts, centres = bin_counts(sd, n_bins, None)
    lo, hi = 1.0 / (n + 1), n / (n + 1.0)

    def cdf(s: Tensor) -> Tensor:
        return cdf_from_counts(s, counts, centres, nu, n).clamp(lo, hi)

    beta = -torch.log1p(-cdf(torch.minimum(scores, tau)))
    if conditional:
        with torch.no_grad():
            g_tau = cdf(tau)
        beta = beta / g_tau
    return beta


def selective_risk_loss(logits: ArrayLike, labels: ArrayLike, *, score: str = "msp",
                        coverage: float = 0.9, threshold: float | None = None, nu: float = 0.1,
                        n_bins: int = 64, conditional: bool = False, reduction: str = "mean",
                        ignore_index: int = -100) -> Tensor:
    """Zhou et al.'s (2025) selective-risk loss ``AU_{P_X_tau} = mean_i beta_i CE_i`` (eq. 17).

    ``beta`` from :func:`selective_risk_weights` on the differentiable confidence score ``score``
    (:func:`focalcal.scores.from_log_probs`: ``"msp"``, ``"neg_entropy"``, ``"margin"``, all in
    [0, 1]) of the batch. The histogram is built from the current batch (eq. 15 with ``n`` = batch
    size); the authors' code keeps accumulating it over all batches seen so far and takes ``tau``
    with ``torch.quantile`` (a sort). Cost ``O(N (K_classes + n_bins))``: no pairwise matrix, no
    sort. Defaults: MSP, ``coverage = 0.9``, ``nu = 0.1`` (Zhou et al., App. E, CIFAR-10), 64
    bins. ``"none"`` returns ``beta_i CE_i``.

    Examples
    --------
    >>> from focalcal.losses import selective_risk_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> selective_risk_loss(logits, labels, coverage=0.9)
    tensor(0.2422)
    """
    score = check_score(score)
    coverage, threshold, nu, n_bins = check_selective_params(coverage, threshold, nu, n_bins)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction, min_samples=1)
    x, t = batch.selected()
    logp = torch.log_softmax(x, dim=1)
    ce = -logp.gather(1, t.unsqueeze(1)).squeeze(1)
    g = from_log_probs(logp, score)
    if not bool(torch.isfinite(g.detach()).all()):
        check_output(g.detach().sum(), batch)  # raises, naming the logits
    beta = _selective_weights(g, coverage, threshold, nu, n_bins, bool(conditional))
    return reduce_loss(batch.scatter_back(beta * ce), batch, reduction)
