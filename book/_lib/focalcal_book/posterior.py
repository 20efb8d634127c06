r"""Checks on focal-risk minimisers over many class posteriors at once.

The theory chapters on Mukhoti et al. (2020) and Charoenphakdee et al. (2021) make claims of the
form "for every class posterior :math:`\eta`, the minimiser :math:`q^{\gamma,*}` of the pointwise
focal risk does X". This module turns such claims into vectorised computations over thousands of
posteriors:

- :func:`sample_simplex` draws posteriors that cover the vertices, the faces and the centre of the
  simplex (a mixture of symmetric Dirichlet distributions);
- :func:`focal_risk` is the pointwise conditional risk
  :math:`W(q;\eta) = \sum_i \eta_i\,\ell_\gamma(q_i)` with :math:`\ell_\gamma(q) = -(1-q)^\gamma\log q`
  (Charoenphakdee Eq. (7) with the focal loss, Eq. (5));
- :func:`focal_risk_minimizer` minimises it numerically (constrained Newton), independently of the
  closed form :func:`focalcal.maps.inverse_focal_map`, so the two can be compared;
- :func:`stationarity_spread` measures how far ``q`` is from the first-order (KKT) condition
  :math:`\eta_i\,\ell'_\gamma(q_i) = \text{const}` on the support of :math:`\eta`;
- :func:`confidence_gap`, :func:`classify_confidence` (their Def. 7),
  :func:`strictly_order_preserving` (Thm. 3), :func:`in_uniform_support_set` (Prop. 6);
- :func:`max_eta_overconfidence` searches the simplex for the most :math:`\eta`-over-confident
  focal-risk minimiser with ``K`` classes (their footnote 2).

Conventions: probability rows are ``(..., K)`` tensors (last dimension = classes), computed in
float64 where accuracy matters (these functions serve claim checking, not training); float32 input
is accepted and results come back in the input dtype. ``gamma >= 0`` throughout (the focal loss of
both papers). Bad input raises ``ValueError`` naming the argument.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from focalcal import maps
from focalcal._validation import ArrayLike, as_float_tensor, check_gamma, check_int, check_nonempty, check_probs

__all__ = [
    "ETA_UNDERCONFIDENT",
    "ETA_EXACT",
    "ETA_OVERCONFIDENT",
    "sample_simplex",
    "focal_risk",
    "focal_risk_minimizer",
    "stationarity_spread",
    "confidence_gap",
    "classify_confidence",
    "strictly_order_preserving",
    "in_uniform_support_set",
    "max_eta_overconfidence",
]

#: :func:`classify_confidence` codes (Charoenphakdee et al. (2021), Def. 7).
ETA_UNDERCONFIDENT = -1
ETA_EXACT = 0
ETA_OVERCONFIDENT = 1


def _gamma(gamma: float) -> float:
    # Both papers define focal loss for gamma >= 0; the convexity that makes a stationary point the
    # minimiser (l'' > 0) is only established there.
    return check_gamma(gamma, minimum=0.0)


def _pair(q: ArrayLike, eta: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
    qt = check_probs(q, "q", hint="")
    et = check_probs(eta, "eta", hint="")
    if qt.shape[-1] != et.shape[-1]:
        raise ValueError(f"q and eta must have the same number of classes, got {qt.shape[-1]} and "
                         f"{et.shape[-1]}")
    try:
        torch.broadcast_shapes(qt.shape, et.shape)
    except RuntimeError as err:
        raise ValueError(f"q of shape {tuple(qt.shape)} and eta of shape {tuple(et.shape)} do not "
                         f"broadcast") from err
    return qt, et


# ============================================================================================
# sampling
# ============================================================================================

def sample_simplex(n: int, n_classes: int, *, concentrations: tuple[float, ...] = (0.3, 1.0, 3.0, 30.0),
                   seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Random points of the probability simplex, spread over vertices, faces and centre.

    An equal mixture of symmetric Dirichlet distributions: a small concentration puts rows near
    the vertices and faces (one dominant class), a large one near the uniform vector (where
    :math:`\\max_y q_y \\to 1/K`, the region of Charoenphakdee's footnote 2).

    Parameters
    ----------
    n : int, ``>= 1``
        Number of rows.
    n_classes : int, ``>= 2``
        ``K``.
    concentrations : tuple of float, each ``> 0``
        Dirichlet concentrations of the mixture components (``n`` is split between them as evenly
        as possible).
    seed : int
        Seed of the NumPy generator, so a chapter draws the same posteriors on every build.
    dtype : torch.dtype
        Floating dtype of the result.

    Returns
    -------
    torch.Tensor, shape ``(n, n_classes)``
        Rows sum to 1 (to rounding), entries > 0, rows shuffled.
    """
    n = check_int(n, "n", minimum=1)
    k = check_int(n_classes, "n_classes", minimum=2)
    conc = [float(c) for c in concentrations]
    if not conc or not all(math.isfinite(c) and c > 0 for c in conc):
        raise ValueError(f"concentrations must be a non-empty tuple of positive numbers, got {concentrations!r}")
    rng = np.random.default_rng(seed)
    sizes = [n // len(conc) + (i < n % len(conc)) for i in range(len(conc))]
    parts = [rng.dirichlet(np.full(k, c), size=m) for c, m in zip(conc, sizes) if m > 0]
    x = np.concatenate(parts)[rng.permutation(n)]
    # Dirichlet draws with tiny concentrations can underflow to exact zeros; keep rows interior so
    # that every class is in the support (log-losses finite).
    x = np.maximum(x, np.finfo(np.float64).tiny)
    x = x / x.sum(-1, keepdims=True)
    return torch.as_tensor(x).to(dtype)


# ============================================================================================
# the pointwise focal risk and its minimiser
# ============================================================================================

def focal_risk(q: ArrayLike, eta: ArrayLike, gamma: float) -> torch.Tensor:
    r"""Pointwise conditional focal risk :math:`W(q;\eta) = \sum_i \eta_i\,\ell_\gamma(q_i)`.

    Charoenphakdee et al. (2021) Eq. (7) with the focal loss Eq. (5); for ``K = 2`` and
    ``eta = (t, 1 - t)`` it is the objective of Mukhoti et al. (2020) App. A, Eq. (5).

    Parameters
    ----------
    q : tensor-like, shape ``(..., K)``
        Predicted probability rows.
    eta : tensor-like, shape broadcastable with ``q``
        Class-posterior rows.
    gamma : float, ``>= 0``

    Returns
    -------
    torch.Tensor, shape ``broadcast(q, eta).shape[:-1]``
        Terms with ``eta_i = 0`` contribute 0 (also where ``q_i = 0``); ``+inf`` where ``q_i = 0``
        and ``eta_i > 0``.
    """
    qt, et = _pair(q, eta)
    g = _gamma(gamma)
    dtype = torch.promote_types(qt.dtype, et.dtype)
    qt, et = torch.broadcast_tensors(qt.to(dtype), et.to(dtype))
    ell = maps.focal_loss_term(qt, g)
    # 0 * inf must be 0 here: a class with zero posterior costs nothing whatever q gives it
    return torch.where(et > 0, et * ell, torch.zeros_like(ell)).sum(-1)


def _focal_term_derivatives(q: torch.Tensor, one_minus_q: torch.Tensor,
                            gamma: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""``l(q), l'(q), l''(q)`` of :math:`\ell_\gamma(q) = -(1-q)^\gamma\log q` for ``0 < q < 1``.

    Written out from the definition (not from :mod:`focalcal.maps`) so that the Newton solver
    below is independent of the closed form it is used to check. ``1 - q`` is passed in because
    for the top class it is computed as the sum of the other entries (exact near a vertex).
    """
    lq = torch.log(q)
    l1q = torch.log(one_minus_q)
    a = torch.exp(gamma * l1q)                      # (1-q)^gamma
    b = torch.exp((gamma - 1) * l1q)                # (1-q)^(gamma-1)
    c = torch.exp((gamma - 2) * l1q)                # (1-q)^(gamma-2)
    val = -a * lq
    d1 = gamma * b * lq - a / q
    d2 = -gamma * (gamma - 1) * c * lq + 2 * gamma * b / q + a / (q * q)
    return val, d1, d2


def _one_minus(q: torch.Tensor) -> torch.Tensor:
    # 1 - q_top as the sum of the other entries: 1 - q_top rounds to 0 near a vertex
    top = q.argmax(-1, keepdim=True)
    is_top = torch.zeros_like(q, dtype=torch.bool).scatter_(-1, top, True)
    rest = q.masked_fill(is_top, 0.0).sum(-1, keepdim=True)
    return torch.where(is_top, rest.expand_as(q), 1 - q)


def focal_risk_minimizer(eta: ArrayLike, gamma: float, *, max_iter: int = 100, tol: float = 1e-13) -> torch.Tensor:
    r"""Numerical minimiser of :math:`W(\cdot;\eta)` over the simplex (an independent oracle).

    Equality-constrained damped Newton in ``q`` on the support of :math:`\eta`, vectorised over
    rows, in float64: with the diagonal Hessian :math:`H = \operatorname{diag}(\eta_i\ell''(q_i))`
    (positive: :math:`\ell_\gamma` is strictly convex for ``gamma >= 0``) the step
    :math:`\Delta q = -H^{-1}(\nabla W - \mu\mathbf 1)` with :math:`\mu` chosen so that
    :math:`\sum_i\Delta q_i = 0`, a fraction-to-the-boundary rule that keeps ``q > 0`` and
    Armijo backtracking while far from the minimum (pure Newton steps near it). It starts from
    :math:`q = \eta` (the cross-entropy minimiser) and stops when no step changes any entry by more
    than ``tol`` relative to it. Classes with :math:`\eta_i = 0` get
    :math:`q_i = 0` (:math:`\ell_\gamma` is decreasing, so mass there only costs).

    It uses only the definition of the loss, none of the closed-form machinery of
    :mod:`focalcal.maps`, so agreement with :func:`focalcal.maps.inverse_focal_map` is a genuine
    check of Charoenphakdee et al. (2021), Thm. 11.

    Parameters
    ----------
    eta : tensor-like, shape ``(..., K)``
        Class-posterior rows.
    gamma : float, ``>= 0``
    max_iter : int
        Newton iterations (the convergence is quadratic; 10-30 are typical).
    tol : float
        Relative change of every entry below which a row has converged.

    Returns
    -------
    torch.Tensor, shape and dtype of ``eta`` (not differentiable)
        Agrees with the exact minimiser to ~1e-13 relative in float64; one-hot rows are returned
        unchanged.
    """
    et = check_probs(eta, "eta", hint="")
    g = _gamma(gamma)
    max_iter = check_int(max_iter, "max_iter", minimum=1)
    if not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    shape = et.shape
    e = et.detach().to(torch.float64).reshape(-1, shape[-1])
    e = e / e.sum(-1, keepdim=True)
    support = e > 0
    active = support.sum(-1) > 1            # one-hot rows are their own minimiser
    q = e.clone()
    if g == 0:                              # cross-entropy is strictly proper
        return q.reshape(shape).to(et.dtype)
    half = torch.full_like(q, 0.5)

    def terms(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # off-support entries are exactly 0 in x; a dummy 1/2 keeps their (unused) terms finite
        x = torch.where(support, x, torch.zeros_like(x))
        om = torch.where(support, _one_minus(x), half)
        return _focal_term_derivatives(torch.where(support, x, half), om, g)

    def risk(x: torch.Tensor) -> torch.Tensor:
        val, _, _ = terms(x)
        return torch.where(support, e * val, torch.zeros_like(val)).sum(-1)

    for _ in range(max_iter):
        _, d1, d2 = terms(q)
        grad = torch.where(support, e * d1, torch.zeros_like(d1))
        hinv = torch.where(support, 1.0 / (e * d2), torch.zeros_like(d2))
        mu = (hinv * grad).sum(-1, keepdim=True) / hinv.sum(-1, keepdim=True)
        step = -hinv * (grad - mu)
        decrement = 0.5 * (step * step / torch.where(support, hinv, torch.ones_like(hinv))).sum(-1)
        rel = torch.where(support, step.abs() / q.clamp(min=torch.finfo(q.dtype).tiny), torch.zeros_like(q))
        todo = active & (rel.amax(-1) > tol)
        if not bool(todo.any()):
            break
        # largest t <= 1 keeping q + t step >= 0.01 q on the support (fraction to the boundary)
        shrink = torch.where(support & (step < 0), -0.99 * q / step, torch.full_like(q, math.inf))
        t = torch.clamp(shrink.amin(-1), max=1.0)
        # Armijo backtracking only while far from the minimum: near it the risk differences fall
        # below rounding and the pure Newton step (quadratic convergence) is taken instead.
        far = todo & (decrement > 1e-10 * (1 + risk(q).abs()))
        if bool(far.any()):
            w0 = risk(q)
            slope = (grad * step).sum(-1)
            for _ in range(60):
                ok = risk(q + t[:, None] * step) <= w0 + 1e-4 * t * slope
                if bool(ok[far].all()):
                    break
                t = torch.where(ok | ~far, t, 0.5 * t)
        q = torch.where(todo[:, None], q + t[:, None] * step, q)
        q = torch.where(support, q, torch.zeros_like(q))
        q = q / q.sum(-1, keepdim=True)
    return q.reshape(shape).to(et.dtype)


def stationarity_spread(q: ArrayLike, eta: ArrayLike, gamma: float) -> torch.Tensor:
    r"""Distance of ``q`` from the first-order condition of :math:`\min_q W(q;\eta)`.

    On the simplex, ``q`` with the same support as :math:`\eta` is stationary iff
    :math:`\eta_i\,\ell'_\gamma(q_i)` is the same for every class of the support (the Lagrange
    condition; sufficient for the minimum because :math:`\ell_\gamma` is strictly convex for
    ``gamma >= 0``). This returns the spread of :math:`\log(-\eta_i\ell'_\gamma(q_i))` over the
    support: 0 at the minimiser, a relative error otherwise.

    Parameters
    ----------
    q, eta : tensor-like, shape ``(..., K)`` (broadcastable)
    gamma : float, ``>= 0``

    Returns
    -------
    torch.Tensor, shape ``broadcast(q, eta).shape[:-1]``, float64
        ``max - min`` of the log-stationarity values over the support; ``0`` for rows with one
        class in the support; ``+inf`` where ``q`` puts mass outside the support of ``eta`` or
        none inside it.
    """
    qt, et = _pair(q, eta)
    g = _gamma(gamma)
    qt, et = torch.broadcast_tensors(qt.to(torch.float64), et.to(torch.float64))
    support = et > 0
    safe_q = torch.where(support, qt, torch.full_like(qt, 0.5))
    safe_e = torch.where(support, et, torch.ones_like(et))
    # log(-l'(q)) = -log h(q), from the log-space h of maps (finite wherever 0 < q < 1)
    val = torch.log(safe_e) - torch.log(maps.h(safe_q, g))
    hi = torch.where(support, val, torch.full_like(val, -math.inf)).amax(-1)
    lo = torch.where(support, val, torch.full_like(val, math.inf)).amin(-1)
    spread = hi - lo
    single = support.sum(-1) == 1
    spread = torch.where(single, torch.zeros_like(spread), spread)
    bad = ((qt > 0) & ~support).any(-1) | ((qt <= 0) & support).any(-1)
    return torch.where(bad, torch.full_like(spread, math.inf), spread)


# ============================================================================================
# eta-over/under-confidence (Charoenphakdee Def. 7) and order preservation (Thm. 3)
# ============================================================================================

def confidence_gap(q: ArrayLike, eta: ArrayLike) -> torch.Tensor:
    r""":math:`\max_y q_y - \max_y \eta_y` (Charoenphakdee et al. (2021) Eqs. (8)-(9)).

    Positive: ``q`` is :math:`\eta`-over-confident; negative: :math:`\eta`-under-confident.

    Parameters
    ----------
    q, eta : tensor-like, shape ``(..., K)`` (broadcastable)

    Returns
    -------
    torch.Tensor, shape ``broadcast(q, eta).shape[:-1]``
    """
    qt, et = _pair(q, eta)
    dtype = torch.promote_types(qt.dtype, et.dtype)
    return qt.to(dtype).amax(-1) - et.to(dtype).amax(-1)


def classify_confidence(q: ArrayLike, eta: ArrayLike, *, atol: float = 0.0) -> torch.Tensor:
    """Def. 7 of Charoenphakdee et al. (2021) as integer codes.

    Parameters
    ----------
    q, eta : tensor-like, shape ``(..., K)`` (broadcastable)
        Risk minimiser and class posterior.
    atol : float, ``>= 0``
        Gaps with ``|gap| <= atol`` count as :data:`ETA_EXACT` (rounding of the inputs).

    Returns
    -------
    torch.Tensor of int64, shape ``broadcast(q, eta).shape[:-1]``
        :data:`ETA_OVERCONFIDENT` (1), :data:`ETA_UNDERCONFIDENT` (-1) or :data:`ETA_EXACT` (0).
    """
    if not (math.isfinite(atol) and atol >= 0):
        raise ValueError(f"atol must be a non-negative number, got {atol!r}")
    gap = confidence_gap(q, eta)
    code = torch.where(gap > atol, ETA_OVERCONFIDENT, torch.where(gap < -atol, ETA_UNDERCONFIDENT, ETA_EXACT))
    return code.to(torch.int64)


def strictly_order_preserving(a: ArrayLike, b: ArrayLike) -> torch.Tensor:
    r"""Whether :math:`a_i < a_j \Rightarrow b_i < b_j` for all classes ``i, j`` of each row.

    Charoenphakdee et al. (2021), Sec. 3: the strict order-preserving property that makes a loss
    classification-calibrated (Thm. 3). Ties in ``a`` put no constraint on ``b``. Computed in
    :math:`O(K\log K)` per row: after sorting by ``a``, each entry of ``b`` must exceed the maximum
    of ``b`` over all strictly smaller entries of ``a``.

    Parameters
    ----------
    a, b : tensor-like, shape ``(..., K)`` (same shape), finite

    Returns
    -------
    torch.Tensor of bool, shape ``a.shape[:-1]``
    """
    at = as_float_tensor(a, "a")
    bt = as_float_tensor(b, "b")
    check_nonempty(at, "a")
    if at.shape != bt.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(at.shape)} and {tuple(bt.shape)}")
    if not (bool(torch.isfinite(at).all()) and bool(torch.isfinite(bt).all())):
        raise ValueError("a and b must be finite")
    dtype = torch.promote_types(at.dtype, bt.dtype)
    a_s, order = torch.sort(at.to(dtype), dim=-1, stable=True)
    b_s = torch.gather(bt.to(dtype), -1, order)
    k = a_s.shape[-1]
    idx = torch.arange(k, device=a_s.device).expand_as(a_s)
    new_group = torch.ones_like(a_s, dtype=torch.bool)
    new_group[..., 1:] = a_s[..., 1:] != a_s[..., :-1]
    group_start = torch.cummax(torch.where(new_group, idx, torch.zeros_like(idx)), dim=-1).values
    running_max = torch.cummax(b_s, dim=-1).values
    # max of b over the entries before the group start (strictly smaller a); -inf for the first group
    prev = torch.cat([torch.full_like(running_max[..., :1], -math.inf), running_max[..., :-1]], dim=-1)
    bound = torch.gather(prev, -1, group_start)
    return (b_s > bound).all(-1)


def in_uniform_support_set(v: ArrayLike, *, atol: float = 1e-12) -> torch.Tensor:
    r"""Membership of :math:`\mathcal S^K = \{v\in\Delta^K : v_i \in \{0, \max_j v_j\}\}`.

    Charoenphakdee et al. (2021), Prop. 6: vectors uniform on a subset of classes and zero elsewhere
    (the uniform vector and the one-hot vectors included).

    Parameters
    ----------
    v : tensor-like, shape ``(..., K)``
        Probability rows.
    atol : float, ``>= 0``
        Tolerance for "equal to 0" and "equal to the maximum".

    Returns
    -------
    torch.Tensor of bool, shape ``v.shape[:-1]``
    """
    vt = check_probs(v, "v", hint="")
    if not (math.isfinite(atol) and atol >= 0):
        raise ValueError(f"atol must be a non-negative number, got {atol!r}")
    top = vt.amax(-1, keepdim=True)
    return ((vt <= atol) | ((top - vt) <= atol)).all(-1)


# ============================================================================================
# searching the simplex for eta-over-confidence (Charoenphakdee footnote 2)
# ============================================================================================

def _structured_rows(k: int, n_grid: int) -> torch.Tensor:
    """Rows with ``j`` entries ``m``, ``z`` zeros and the rest equal to ``r <= m``.

    These families contain the extreme points of the over-confident region that random sampling
    misses: near a vector of :math:`\\mathcal S^K` (``r -> 0``) and near the uniform vector.
    """
    # fractions of the way from 1/K to 1/j: uniform, plus geometric towards both ends, where the
    # over-confident region shrinks to as the focusing parameter approaches a threshold
    ends = torch.logspace(-12, -0.5, max(n_grid // 4, 2), dtype=torch.float64)
    frac = torch.cat([torch.linspace(0, 1, n_grid + 2, dtype=torch.float64)[1:-1], ends, 1 - ends])
    rows = []
    for j in range(1, k):
        m = 1.0 / k + (1.0 / j - 1.0 / k) * frac
        for z in range(0, k - j):
            r = (1 - j * m) / (k - j - z)
            m_ok, r_ok = m[r <= m], r[r <= m]
            if m_ok.numel() == 0:
                continue
            rows.append(torch.cat([m_ok[:, None].expand(-1, j), r_ok[:, None].expand(-1, k - j - z),
                                   torch.zeros(m_ok.numel(), z, dtype=torch.float64)], dim=1))
    return torch.cat(rows)


def max_eta_overconfidence(n_classes: int, gamma: float, *, n_grid: int = 2000, n_random: int = 20000,
                           seed: int = 0) -> tuple[float, torch.Tensor]:
    r"""The most :math:`\eta`-over-confident focal-risk minimiser with ``K`` classes.

    Searches candidate minimisers ``q`` (structured families plus :func:`sample_simplex` draws) and
    recovers their posteriors with :math:`\eta = \Psi^\gamma(q)` (:func:`focalcal.maps.focal_map`,
    Charoenphakdee Thm. 11), returning the largest confidence gap
    :math:`\max_y q_y - \max_y\eta_y`. A positive value is an explicit :math:`\eta`-over-confident
    example; a value ``<= 0`` means none was found (numerical evidence, not a proof).

    Parameters
    ----------
    n_classes : int, ``>= 2``
    gamma : float, ``>= 0``
    n_grid : int
        Evenly spaced points per structured family, plus ``n_grid // 2`` geometrically spaced
        towards its ends (there are ``O(K^2)`` families; keep ``K`` small).
    n_random : int
        Additional random candidates.
    seed : int

    Returns
    -------
    (gap, q) : (float, torch.Tensor of shape ``(K,)``, float64)
        The largest gap and the minimiser ``q`` that attains it (sorted decreasingly).
    """
    k = check_int(n_classes, "n_classes", minimum=2)
    g = _gamma(gamma)
    n_grid = check_int(n_grid, "n_grid", minimum=1)
    n_random = check_int(n_random, "n_random", minimum=1)
    cand = torch.cat([_structured_rows(k, n_grid), sample_simplex(n_random, k, seed=seed)])
    gap = confidence_gap(cand, maps.focal_map(cand, g))
    i = int(gap.argmax())
    return float(gap[i]), torch.sort(cand[i], descending=True).values
