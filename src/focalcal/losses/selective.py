"""Selective-classification losses of Zhou et al. (2025): the AURC loss and the selective-risk loss.

Both weight the per-sample cross-entropy by a function of the rank of the sample's confidence
score (:mod:`focalcal.scores`: the scores, the AURC rank weights and the smoothed CDF).

The selective-risk loss comes in three variants (:data:`SELECTIVE_VARIANTS`): ``"paper"``, eqs.
13-17 and the gradient of App. C.4 eq. 27 as printed; ``"released"``, what the authors' code
(github.com/han678/CalibWeightedRisk, ``loss/selectAU.py``, ``loss/aurc.py``, ``src/train.py``)
computes; ``"detached"``, the paper's loss with the weights' gradient cut off (a plain reweighted
cross-entropy). :func:`selective_risk_loss` says what differs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from collections.abc import Callable

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

#: the variants of :func:`selective_risk_loss`
SELECTIVE_VARIANTS = ("paper", "released", "detached")

#: ``nu`` of each variant when none is given: the paper's CIFAR-10 value (App. E.2) and the
#: released code's default (``SelectiveAULoss(hist_sigma=0.05)``, ``--hist_sigma 0.05``)
DEFAULT_NU = {"paper": 0.1, "released": 0.05, "detached": 0.1}

# the check_* helpers are shared with .modules, not API
__all__ = ["AURC_WEIGHTS", "DEFAULT_NU", "SELECTIVE_VARIANTS", "aurc_loss", "selective_risk_loss",
           "selective_risk_weights"]


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


def check_selective_variant(variant: str, nu: float | None, conditional: bool) -> tuple[str, float, bool]:
    """``(variant, nu, conditional)`` of the selective-risk loss, checked; ``nu=None`` gives the
    variant's :data:`DEFAULT_NU`. ``conditional=True`` is refused with ``variant="released"``
    (the released code has no such normalisation)."""
    variant = check_choice(variant, "variant", SELECTIVE_VARIANTS)
    conditional = check_choice(conditional, "conditional", (True, False))
    if conditional and variant == "released":
        raise ValueError("conditional=True is defined for variant 'paper' and 'detached' only; the "
                         "released code does not divide by G(tau)")
    return variant, check_positive(DEFAULT_NU[variant] if nu is None else nu, "nu"), bool(conditional)


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
        ``G(tau)`` are constants, App. C.4; a sample exactly at ``tau`` gets none, as eq. 27's
        case ``g >= tau`` says: with the coverage rule that is the ``k``-th smallest score). ``G_nu`` is clamped to ``[1/(N+1), N/(N+1)]`` as in the
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

    # where(g < tau, g, tau), not minimum(g, tau): minimum splits the gradient of a tie in half,
    # and with the coverage rule one sample always sits exactly at tau (eq. 27 gives it none)
    beta = -torch.log1p(-cdf(torch.where(scores < tau, scores, tau)))
    if conditional:
        with torch.no_grad():
            g_tau = cdf(tau)
        beta = beta / g_tau
    return beta


def _released_scores(logp: Tensor, score: str) -> Tensor:
    """The confidence score as the released code computes it from ``log_softmax(z)``.

    ``"msp"`` and ``"margin"``: of ``softmax(clamp(softmax(z), 1e-9, 1 - 1e-9))`` (``SelectiveAULoss``
    passes the clamped probabilities to a score function that applies the softmax again); computed
    as ``log_softmax`` of the probabilities. ``"neg_entropy"``: 1 for every sample (its
    normalisation maps ``-H(p)`` from ``[-log K, 0]`` onto ``[1, 2]``, which the clamp to
    ``[0, 1]`` sends to 1), with no gradient.
    """
    if score == "neg_entropy":
        return torch.ones(logp.shape[:-1], dtype=logp.dtype, device=logp.device)
    p = logp.exp().clamp(1e-9, 1.0 - 1e-9)
    return from_log_probs(torch.log_softmax(p, dim=-1), score)


def _released_weights(g: Tensor, coverage: float, threshold: float | None, nu: float, n_bins: int,
                      counts: Tensor, total: int) -> Tensor:
    """``beta`` of the released code from the histogram ``counts`` of ``total`` scores (this batch's
    included): ``tau = torch.quantile(g, coverage)`` with its gradient, ``G`` clamped to the batch's
    ``[1/(N+1), N/(N+1)]``, ``-ln(1 - G(tau))`` where ``g >= tau`` and ``-ln(1 - G(g))`` below."""
    n = g.shape[0]
    centres = (torch.arange(n_bins, dtype=g.dtype, device=g.device) + 0.5) / n_bins
    c = counts.to(g.dtype)
    lo, hi = 1.0 / (n + 1), n / (n + 1.0)

    def cdf(s: Tensor) -> Tensor:
        return cdf_from_counts(s, c, centres, nu, total).clamp(lo, hi)

    if threshold is None:
        tau = torch.quantile(g, coverage)
    else:
        tau = torch.tensor(threshold, dtype=g.dtype, device=g.device)
    return torch.where(g >= tau, -torch.log1p(-cdf(tau)), -torch.log1p(-cdf(g)))


#: ``add(scores) -> (counts, total)``: adds the detached scores of a batch to a histogram and
#: returns its counts over ``n_bins`` equal-width bins of [0, 1] and the number of scores in it
Histogram = Callable[[Tensor], "tuple[Tensor, int]"]


def batch_histogram(n_bins: int) -> Histogram:
    """The histogram of the current batch alone (what the functional form uses)."""

    def add(scores: Tensor) -> tuple[Tensor, int]:
        return bin_counts(scores.detach(), n_bins, None)[0], scores.shape[0]

    return add


def selective_risk_loss(logits: ArrayLike, labels: ArrayLike, *, score: str = "msp",
                        coverage: float = 0.9, threshold: float | None = None, nu: float | None = None,
                        n_bins: int = 64, conditional: bool = False, variant: str = "paper",
                        reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Zhou et al.'s (2025) selective-risk loss ``AU_{P_X_tau} = mean_i beta_i CE_i`` (eq. 17).

    ``beta`` from :func:`selective_risk_weights` on the differentiable confidence score ``score``
    (:func:`focalcal.scores.from_log_probs`: ``"msp"``, ``"neg_entropy"``, ``"margin"``, all in
    [0, 1]) of the batch. The histogram is built from the current batch (eq. 15 with ``n`` = batch
    size). Cost ``O(N (K_classes + n_bins))``: no pairwise matrix, no sort (``variant="released"``
    takes a quantile). Defaults: MSP, ``coverage = 0.9``, 64 bins, ``nu`` by variant
    (:data:`DEFAULT_NU`). ``"none"`` returns ``beta_i CE_i``.

    For a sample below ``tau`` the weight's gradient makes the loss fall as its confidence falls:
    ``d(beta_i CE_i)/dg_i = CE_i G'(g_i) / (1 - G(g_i)) > 0`` (eq. 27). The variants:

    ``variant="paper"`` (default)
        Eqs. 13-17 and 27 as printed: ``tau`` the ``ceil(coverage * N)``-th smallest score
        (``torch.kthvalue``, no gradient), ``beta_i = -ln(1 - G(min(g_i, tau)))``, the gradient
        through ``G(g_i)`` for ``g_i < tau`` only; ``nu = 0.1`` (App. E.2, CIFAR-10).
    ``variant="released"``
        What ``SelectiveAULoss`` of the authors' code computes: ``"msp"`` and ``"margin"`` are
        scored on ``softmax(softmax(z))`` (for ``K`` classes the MSP then lies in
        ``[1/K, e/(e + K - 1)]``, ``[0.1, 0.232]`` for 10), ``"neg_entropy"`` is 1 for every
        sample (the released normalisation followed by a clamp to [0, 1]; the loss is then
        ``-ln(1 - G(1))`` times the cross-entropy); ``tau = torch.quantile(g, coverage)``
        (linear interpolation) *with* its gradient, so the constant weight of the samples with
        ``g_i >= tau`` moves with the two scores ``tau`` interpolates; ``nu = 0.05``; ``G``
        clamped to ``[1/(N+1), N/(N+1)]`` (the code uses its configured batch size, which is
        ``N`` but for a smaller last batch). The code accumulates the histogram over the
        batches of an epoch and clears it once per epoch: :class:`~focalcal.losses.SelectiveRiskLoss`
        does that (the trainer calls its ``set_epoch``); **this function sees the batch alone**,
        so its histogram is the batch's. ``conditional=True`` is refused. Not carried over: the
        code replaces NaN scores by 0 (here non-finite logits raise).
    ``variant="detached"``
        The paper's loss with ``beta`` detached: a cross-entropy reweighted by the rank of the
        confidence, without the term that rewards lowering a low confidence.

    Examples
    --------
    >>> from focalcal.losses import selective_risk_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> selective_risk_loss(logits, labels, coverage=0.9)
    tensor(0.2422)
    >>> selective_risk_loss(logits, labels, coverage=0.9, variant='released')
    tensor(0.2376)
    """
    score = check_score(score)
    variant, nu, conditional = check_selective_variant(variant, nu, conditional)
    coverage, threshold, nu, n_bins = check_selective_params(coverage, threshold, nu, n_bins)
    return _selective_risk(logits, labels, score, coverage, threshold, nu, n_bins, conditional, variant,
                           check_reduction(reduction), check_ignore_index(ignore_index),
                           batch_histogram(n_bins) if variant == "released" else None)


def _selective_risk(logits: ArrayLike, labels: ArrayLike, score: str, coverage: float,
                    threshold: float | None, nu: float, n_bins: int, conditional: bool, variant: str,
                    reduction: str, ignore_index: int, histogram: Histogram | None) -> Tensor:
    """The checked loss; ``histogram`` (``variant="released"`` only) supplies the counts."""
    batch = prepare(logits, labels, ignore_index, reduction, min_samples=1)
    x, t = batch.selected()
    logp = torch.log_softmax(x, dim=1)
    ce = -logp.gather(1, t.unsqueeze(1)).squeeze(1)
    g = _released_scores(logp, score) if variant == "released" else from_log_probs(logp, score)
    if not bool(torch.isfinite(g.detach()).all()):
        check_output(g.detach().sum(), batch)  # raises, naming the logits
    if variant == "released":
        assert histogram is not None
        with torch.no_grad():
            counts, total = histogram(g)
        beta = _released_weights(g, coverage, threshold, nu, n_bins, counts, total)
    else:
        beta = _selective_weights(g.detach() if variant == "detached" else g, coverage, threshold, nu,
                                  n_bins, conditional)
    return reduce_loss(batch.scatter_back(beta * ce), batch, reduction)
