"""Exact reference quantities for checking the selective-classification view of calibration.

The theory chapters check Zhou et al. (2025) and the curvature paper against quantities that are
computed *exactly*, not estimated: the AURC and the selective risk of the empirical measure of a
finite sample (by sorting), and the calibration errors of a distribution with finitely many atoms.
The training-time approximations that the papers propose live in :mod:`focalcal.losses`
(the selective-risk weights, the Hutchinson trace estimator); this module gives the exact
counterparts they are compared with, and :func:`smoothed_cdf`, the library's bin-based smoothed
CDF of Zhou et al.'s eq. (15) (:func:`focalcal.scores.smoothed_cdf`) in float64, so that its bias
against :func:`empirical_cdf` can be measured. The rank weights come from the library too
(:func:`focalcal.scores.aurc_weights`, ``ties="threshold"``).

Score conventions
-----------------
Scores are confidence scores ``g(x)`` (larger = more confident) of shape ``(..., N)``, batched
over leading dims. ``G(x) = P(g(x') <= g(x))`` is the CDF of the score (Zhou et al., eq. 6) and
``N_>=(t) = #{j : g_j >= t}`` the number of samples accepted at threshold ``t``. A selective
classifier at threshold ``t`` accepts every sample with ``g >= t``, so tied samples are always
accepted together.
"""

from __future__ import annotations

from typing import Any

import torch

from focalcal import scores as scores_lib
from focalcal._validation import as_float_tensor, check_finite, check_nonempty, check_probs

__all__ = [
    "discrete_calibration_errors",
    "empirical_cdf",
    "risk_coverage_curve",
    "selective_risk_area",
    "selective_weights",
    "smoothed_cdf",
]


def _scores(scores: Any, name: str = "scores") -> torch.Tensor:
    s = as_float_tensor(scores, name)
    check_nonempty(s, name)
    check_finite(s, name)
    return s


def empirical_cdf(scores: Any, at: Any = None) -> torch.Tensor:
    """Empirical CDF ``G_n(t) = #{j : g_j <= t} / N`` of the scores.

    Parameters
    ----------
    scores : Tensor, shape (..., N)
        The sample of confidence scores that defines the empirical measure.
    at : Tensor, shape (..., M), optional
        Points at which to evaluate ``G_n``; defaults to the scores themselves (``M = N``).
        Leading dims must match those of ``scores``.

    Returns
    -------
    Tensor, shape (..., M), float64
        Values in ``[0, 1]``; ``G_n(g_i)`` counts sample ``i`` and its ties.
    """
    s = _scores(scores).to(torch.float64)
    t = s if at is None else _scores(at, "at").to(torch.float64)
    if t.shape[:-1] != s.shape[:-1]:
        raise ValueError(f"at must have the leading dims of scores {tuple(s.shape[:-1])}, "
                         f"got shape {tuple(t.shape)}")
    srt = torch.sort(s, dim=-1).values
    return torch.searchsorted(srt, t.contiguous(), right=True).to(torch.float64) / s.shape[-1]


def smoothed_cdf(scores: Any, at: Any = None, *, nu: float = 0.1, n_bins: int = 64,
                 edges: Any = None) -> torch.Tensor:
    """The library's bin-based smoothed CDF (:func:`focalcal.scores.smoothed_cdf`) in float64.

    ``G_nu(t) = (1/N) sum_k h_k sigmoid((t - c_k) / nu)`` (Zhou et al. 2025, eqs. 13-15), the
    one the selective-risk loss uses, evaluated in float64 so that its bias against
    :func:`empirical_cdf` can be measured; arguments as there.

    Returns
    -------
    Tensor, shape (..., M), float64
    """
    s = _scores(scores).to(torch.float64)
    t = None if at is None else _scores(at, "at").to(torch.float64)
    e = None if edges is None else as_float_tensor(edges, "edges").to(torch.float64)
    return scores_lib.smoothed_cdf(s, t, nu=nu, n_bins=n_bins, edges=e)


def _n_accepted(srt: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``N_>=(t)`` for thresholds ``t`` (..., M) given ascending sorted scores (..., N)."""
    return srt.shape[-1] - torch.searchsorted(srt, t.contiguous(), right=False)


def selective_weights(scores: Any, tau: float | None = None) -> torch.Tensor:
    """Per-sample weights ``beta_i`` of the selective risk area of the empirical measure.

    Zhou et al. (2025, eqs. 9-11) write the area under the risk-coverage curve restricted to
    thresholds drawn from the low-confidence region ``X_tau = {x : g(x) < tau}`` as a reweighted
    risk ``E[beta(x) l(f(x), y)]``. For the empirical measure of ``N`` samples, with
    ``m = #{i : g_i < tau}``, swapping the two sums of eq. (9) gives exactly

    ``beta_j = (N / m) * sum_{i : g_i < tau, g_i <= g_j} 1 / N_>=(g_i)``,

    so that ``selective_risk_area(losses, scores, tau) = mean_j beta_j * losses_j``. With
    ``tau=None`` every sample is a threshold (``m = N``) and the area is the AURC; for distinct
    scores the weight of the sample of ascending rank ``r`` is then ``H_N - H_{N-r}`` (harmonic
    numbers), the finite-sample version of ``-ln(1 - G(x))`` (Zhou et al., Def. 3.3).

    Parameters
    ----------
    scores : Tensor, shape (..., N)
        Confidence scores, larger = more confident; ties are accepted together.
    tau : float, optional
        Threshold of the low-confidence region ``g < tau``; ``None`` for the full AURC.

    Returns
    -------
    Tensor, shape (..., N), float64
        Non-negative weights, non-decreasing in the score.

    Raises
    ------
    ValueError
        If no sample has a score below ``tau`` (the region ``X_tau`` is empty).

    Notes
    -----
    ``O(N log N)``: :func:`focalcal.scores.aurc_weights` with ``ties="threshold"`` (one sort, two
    ``searchsorted`` and one cumulative sum; no loop over samples), restricted to the thresholds
    below ``tau``. :func:`focalcal.metrics.aurc` uses ``ties="average"`` by default (the mean over
    the orders of the ties); both agree when the scores are distinct.
    """
    s = _scores(scores).to(torch.float64)
    n = s.shape[-1]
    # the full AURC weights of the threshold rule: sum_{i : g_i <= g_j} 1 / N_>=(g_i)
    full = scores_lib.aurc_weights(s, ties="threshold")
    if tau is None:
        return full
    tau = float(tau)
    if tau != tau:
        raise ValueError("tau must be a number or None, got NaN")
    in_region = s < tau
    m = in_region.sum(-1, keepdim=True)
    if bool((m == 0).any()):
        raise ValueError(f"tau={tau!r} leaves no sample in the low-confidence region g < tau; "
                         f"choose tau above the smallest score")
    # thresholds only from g_i < tau: samples above tau keep the sum up to the last such threshold
    at_tau = torch.where(in_region, full, torch.zeros_like(full)).amax(-1, keepdim=True)
    return torch.where(in_region, full, at_tau) * (n / m.to(torch.float64))


def selective_risk_area(losses: Any, scores: Any, tau: float | None = None) -> torch.Tensor:
    """Selective risk area ``AU_{P_X_tau}`` (Zhou et al. 2025, eq. 9) of the empirical measure.

    ``mean over thresholds t = g_i with g_i < tau`` of the selective risk
    ``sum_j l_j 1[g_j >= t] / N_>=(t)``; with ``tau=None`` this is the AURC of the losses (the
    mean of the risk-coverage curve over all ``N`` thresholds).

    Parameters
    ----------
    losses : Tensor, shape (..., N) or (N,)
        Per-sample losses (e.g. the 0/1 error or the cross-entropy).
    scores : Tensor, shape (..., N)
        Confidence scores.
    tau : float, optional
        Threshold of the low-confidence region, see :func:`selective_weights`.

    Returns
    -------
    Tensor, shape (...), float64
    """
    s = _scores(scores)
    loss = _scores(losses, "losses").to(torch.float64)
    if loss.shape[-1] != s.shape[-1]:
        raise ValueError(f"losses must have N = {s.shape[-1]} entries in the last dim, got shape "
                         f"{tuple(loss.shape)}")
    return (selective_weights(s, tau) * loss).mean(-1)


def risk_coverage_curve(losses: Any, scores: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Risk-coverage curve with one point per sample, ordered by decreasing score.

    Point ``i`` is the selective classifier with threshold ``g_(i)`` (``i``-th largest score):
    coverage ``N_>=(g_(i)) / N`` and risk ``sum_j l_j 1[g_j >= g_(i)] / N_>=(g_(i))``. Tied samples
    give repeated points. The mean of the risks is the AURC (:func:`selective_risk_area`).

    Parameters
    ----------
    losses : Tensor, shape (..., N) or (N,)
    scores : Tensor, shape (..., N)

    Returns
    -------
    coverage, risk : Tensor, shape (..., N), float64
        Coverage non-decreasing along the last dim, from ``1/N`` (or the top tie group) to 1.
    """
    s = _scores(scores).to(torch.float64)
    loss = _scores(losses, "losses").to(torch.float64)
    if loss.shape[-1] != s.shape[-1]:
        raise ValueError(f"losses must have N = {s.shape[-1]} entries in the last dim, got shape "
                         f"{tuple(loss.shape)}")
    n = s.shape[-1]
    s_desc, order = torch.sort(s, dim=-1, descending=True, stable=True)
    l_desc = loss.expand(s.shape).gather(-1, order)
    csum = torch.cumsum(l_desc, dim=-1)
    asc = torch.flip(s_desc, dims=[-1])
    n_acc = _n_accepted(asc, s_desc)  # the whole tie group of g_(i) is accepted
    risk = csum.gather(-1, n_acc - 1) / n_acc.to(torch.float64)
    return n_acc.to(torch.float64) / n, risk


def _group_mean(keys: torch.Tensor, weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Weighted mean of ``values`` (M, D) within groups of identical rows of ``keys`` (M, C)."""
    _, inv = torch.unique(keys, dim=0, return_inverse=True)
    g = int(inv.max()) + 1
    wsum = torch.zeros(g, dtype=weights.dtype).index_add_(0, inv, weights)
    vsum = torch.zeros(g, values.shape[-1], dtype=values.dtype).index_add_(0, inv, weights[:, None] * values)
    return (vsum / wsum.clamp_min(torch.finfo(weights.dtype).tiny)[:, None])[inv]


def discrete_calibration_errors(weights: Any, probs: Any, posteriors: Any,
                                rho: float = 1.0) -> dict[str, float]:
    """Population calibration errors of a classifier on a distribution with finitely many atoms.

    The input space is ``M`` atoms ``x_1..x_M`` with probabilities ``weights``; the classifier
    predicts ``f(x_m) = probs[m]`` and the true class posterior is ``P(y | x_m) = posteriors[m]``.
    The conditional expectations are exact group means over atoms with equal predictions:
    ``E[y | f(x)]`` groups equal rows of ``probs``, ``P(y = c | f_c(x))`` equal values of column
    ``c``, and ``P(y = y_hat | max f)`` equal top probabilities (Zhou et al. 2025, Defs. 3.5, 3.7,
    A.2; the top-label ECE of Guo et al. 2017).

    Parameters
    ----------
    weights : Tensor, shape (M,)
        Atom probabilities (non-negative, summing to 1).
    probs : Tensor, shape (M, K)
        Predictions ``f(x_m)``; the predicted class is the arg-max (lowest index on ties).
    posteriors : Tensor, shape (M, K)
        True posteriors ``P(y | x_m)``.
    rho : float
        The ``L_rho`` exponent (``rho >= 1``) of ``CE_rho`` and ``cwECE_rho``.

    Returns
    -------
    dict
        ``"ce"``: ``CE_rho = (E ||f - E[y|f]||_rho^rho)^(1/rho)``;
        ``"cwece"``: ``cwECE_rho = ((1/K) sum_c E|f_c - P(y=c|f_c)|^rho)^(1/rho)``;
        ``"ece"``: top-label ``E|max_c f_c - P(y = y_hat | max_c f_c)|``;
        ``"brier"``: ``E ||f - e_y||_2^2``; ``"error"``: ``P(y != y_hat)``. All python floats.
    """
    w = as_float_tensor(weights, "weights").to(torch.float64)
    if w.dim() != 1:
        raise ValueError(f"weights must have shape (M,), got shape {tuple(w.shape)}")
    check_finite(w, "weights")
    if bool((w < 0).any()) or abs(float(w.sum()) - 1.0) > 1e-9:
        raise ValueError("weights must be non-negative and sum to 1")
    f = check_probs(probs, "probs").to(torch.float64)
    eta = check_probs(posteriors, "posteriors").to(torch.float64)
    if f.dim() != 2 or f.shape != eta.shape or f.shape[0] != w.shape[0]:
        raise ValueError(f"probs and posteriors must both have shape (M, K) with M = {w.shape[0]}, "
                         f"got {tuple(f.shape)} and {tuple(eta.shape)}")
    rho = float(rho)
    if not rho >= 1.0:
        raise ValueError(f"rho must be >= 1, got {rho}")
    k = f.shape[1]
    cond = _group_mean(f, w, eta)                                   # E[y | f(x)]
    ce = (w * (f - cond).abs().pow(rho).sum(-1)).sum().pow(1.0 / rho)
    # class-wise: group the M*K entries by (class, value) pairs in one call
    cls = torch.arange(k, dtype=torch.float64).repeat(f.shape[0])
    keys = torch.stack([cls, f.reshape(-1)], -1)
    cw_cond = _group_mean(keys, w.repeat_interleave(k), eta.reshape(-1, 1)).view(-1, k)
    cwece = ((w[:, None] * (f - cw_cond).abs().pow(rho)).sum() / k).pow(1.0 / rho)
    conf, pred = f.max(-1)
    p_correct = eta.gather(-1, pred[:, None])
    acc_given_conf = _group_mean(conf[:, None], w, p_correct)[:, 0]
    ece = (w * (conf - acc_given_conf).abs()).sum()
    brier = (w * (f.square().sum(-1) - 2 * (f * eta).sum(-1) + 1)).sum()
    error = (w * (1 - p_correct[:, 0])).sum()
    return {"ce": float(ce), "cwece": float(cwece), "ece": float(ece), "brier": float(brier),
            "error": float(error)}
