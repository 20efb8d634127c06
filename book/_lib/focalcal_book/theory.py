"""Grids and fits that the theory chapters use to check a paper's numerical claims.

The chapters compare calibration maps with temperature scaling (TS) in the way Komisarenko &
Kull (2024) do, but vectorised and with the ranges stated:

- :func:`simplex_grid` and :func:`barycentric_to_cartesian` give the barycentric grids and the
  ternary-plot coordinates for figures on the probability simplex;
- :func:`logit_grid` gives the logit vectors whose entries all lie in an interval (softmax is
  shift-invariant, so the last logit is pinned to 0 and only the spread matters);
- :func:`minimax_inverse_temperature` finds the TS map closest to a given map in the worst case
  (the maximum absolute probability difference over a set of logits);
- :func:`refine_worst_logits` and :func:`adaptive_minimax_inverse_temperature` sharpen that fit
  when the worst case sits between grid points (an exchange algorithm: fit on a grid, move the
  worst points uphill by gradient ascent, add them, refit);
- :func:`tightest_temperature_bounds` gives the two TS maps that sandwich a binary calibration
  map on a grid of logits;
- :func:`refute_at` records a counterexample (a point where a claimed relation fails, evaluated
  in mpmath) as a ``refuted`` verdict of :mod:`focalcal_book.verify`;
- :func:`reference_focal_map` (from :mod:`focalcal_book.oracles`, the one copy of the papers'
  formulas) evaluates the focal calibration map in mpmath at any precision, the slow reference
  that float64 screens are confirmed against.

Conventions: probabilities are ``(..., K)`` tensors whose last dimension indexes classes; TS with
temperature ``T`` maps logits ``z`` to ``softmax(z / T)``; results are float64 tensors (or python
floats for scalars) because these functions serve claim checking, not training.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import mpmath
import numpy as np
import sympy as sp
import torch
from scipy.optimize import minimize_scalar

from focalcal._validation import ArrayLike, as_float_tensor, check_finite, check_int, check_nonempty, check_positive

from .oracles import reference_focal_map
from .verify import REFUTED, Verdict

__all__ = [
    "simplex_grid",
    "barycentric_to_cartesian",
    "logit_grid",
    "minimax_inverse_temperature",
    "tightest_temperature_bounds",
    "refine_worst_logits",
    "adaptive_minimax_inverse_temperature",
    "reference_focal_map",
    "refute_at",
]

# Ternary-plot vertices: class 1 bottom-left, class 2 bottom-right, class 3 on top.
_TRIANGLE = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.5, math.sqrt(3.0) / 2.0]], dtype=torch.float64)

# Above this many grid points the dense construction would need gigabytes; refuse early.
_MAX_GRID_POINTS = 20_000_000


def _integer_lattice(n_steps: int, dims: int) -> np.ndarray:
    """All non-negative integer vectors of length ``dims`` with sum <= ``n_steps`` (C order)."""
    if (n_steps + 1) ** dims > _MAX_GRID_POINTS:
        raise ValueError(f"a grid with {n_steps} steps in {dims + 1} classes has more than "
                         f"{_MAX_GRID_POINTS} candidate points; use fewer steps")
    axes = np.meshgrid(*[np.arange(n_steps + 1)] * dims, indexing="ij")
    pts = np.stack([a.ravel() for a in axes], axis=-1)
    return pts[pts.sum(-1) <= n_steps]


def simplex_grid(n: int, k: int = 3, *, interior: bool = False,
                 dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The barycentric grid of the probability simplex with spacing ``1 / n``.

    Parameters
    ----------
    n : int
        Number of steps per edge (>= 1); every coordinate is a multiple of ``1 / n``.
    k : int
        Number of classes (>= 2).
    interior : bool
        Keep only the points with every coordinate > 0 (where log-losses are finite).
    dtype : torch.dtype
        Floating dtype of the result.

    Returns
    -------
    torch.Tensor
        Shape ``(M, k)`` with rows summing to 1; ``M = C(n + k - 1, k - 1)`` points, or
        ``C(n - 1, k - 1)`` with ``interior=True``. Rows are in lexicographic order of the first
        ``k - 1`` coordinates.
    """
    n = check_int(n, "n", minimum=1)
    k = check_int(k, "k", minimum=2)
    if interior and n < k:
        raise ValueError(f"n must be >= k = {k} for an interior grid, got n = {n}")
    counts = _integer_lattice(n, k - 1)
    counts = np.concatenate([counts, n - counts.sum(-1, keepdims=True)], axis=-1)
    if interior:
        counts = counts[(counts > 0).all(-1)]
    return torch.as_tensor(counts, dtype=dtype) / n


def barycentric_to_cartesian(probs: ArrayLike) -> torch.Tensor:
    """Ternary-plot coordinates of 3-class probability vectors.

    Parameters
    ----------
    probs : array_like, shape (..., 3)
        Non-negative weights; each row is normalised before mapping, so unnormalised
        barycentric weights are accepted too.

    Returns
    -------
    torch.Tensor, shape (..., 2)
        ``(x, y)`` in the equilateral triangle with class 1 at (0, 0), class 2 at (1, 0) and
        class 3 at (1/2, sqrt(3)/2).
    """
    t = as_float_tensor(probs, "probs").to(torch.float64)
    check_nonempty(t, "probs")
    if t.shape[-1] != 3:
        raise ValueError(f"probs must have 3 classes in its last dimension, got shape {tuple(t.shape)}")
    check_finite(t, "probs")
    if bool((t < 0).any()):
        raise ValueError("probs must be non-negative barycentric weights")
    total = t.sum(-1, keepdim=True)
    if bool((total <= 0).any()):
        raise ValueError("every row of probs must have a positive sum")
    return (t / total) @ _TRIANGLE


def logit_grid(k: int, spread: float, step: float, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Logit vectors (last entry 0) whose entries differ by at most ``spread``.

    Softmax and temperature scaling only see differences of logits, so the vectors whose entries
    all lie in an interval of length ``spread`` (e.g. logits in ``(-5, 5)`` for ``spread=10``)
    are represented, up to a shift, by the vectors with last entry 0 and
    ``max(z) - min(z) <= spread``.

    Parameters
    ----------
    k : int
        Number of classes (>= 2).
    spread : float
        Largest allowed ``max(z) - min(z)`` (> 0).
    step : float
        Grid spacing of the first ``k - 1`` entries (> 0); the endpoints ``+-spread`` are included
        when ``spread / step`` is an integer.

    Returns
    -------
    torch.Tensor, shape (M, k)
    """
    k = check_int(k, "k", minimum=2)
    spread = check_positive(spread, "spread")
    step = check_positive(step, "step")
    n_half = int(round(spread / step))
    if abs(n_half * step - spread) > 1e-9 * spread:
        n_half = int(math.floor(spread / step))
    if (2 * n_half + 1) ** (k - 1) > _MAX_GRID_POINTS:
        raise ValueError(f"logit grid with step {step:g} and spread {spread:g} in {k} classes is too "
                         f"large; use a larger step")
    axis = np.arange(-n_half, n_half + 1) * step
    mesh = np.meshgrid(*[axis] * (k - 1), indexing="ij")
    z = np.stack([m.ravel() for m in mesh] + [np.zeros(mesh[0].size)], axis=-1)
    keep = (z.max(-1) - z.min(-1)) <= spread * (1 + 1e-12)
    return torch.as_tensor(z[keep], dtype=dtype)


def _max_ts_error(logits: torch.Tensor, target: torch.Tensor, inv_temperatures: torch.Tensor) -> torch.Tensor:
    """``max |softmax(b z) - target|`` over rows and classes, for each ``b`` (vectorised)."""
    probs = torch.softmax(inv_temperatures[:, None, None] * logits[None], dim=-1)
    return (probs - target[None]).abs().amax(dim=(-2, -1))


def minimax_inverse_temperature(logits: ArrayLike, target: ArrayLike, *, bounds: tuple[float, float],
                                n_scan: int = 64, xatol: float = 1e-9,
                                chunk: int = 16) -> tuple[float, float]:
    """The inverse temperature whose TS map is closest to ``target`` in the worst case.

    Solves ``min_b max_{rows, classes} |softmax(b * logits) - target|`` over ``b`` in ``bounds``:
    a scan of ``n_scan`` equispaced values brackets the best one (the objective is a maximum of
    many terms and need not be unimodal on the whole interval), then bounded Brent refines it.

    Parameters
    ----------
    logits : array_like, shape (N, K)
        Logit vectors at which the two maps are compared.
    target : array_like, shape (N, K)
        The map to approximate, evaluated at ``logits`` (probabilities).
    bounds : (float, float)
        Search interval for the inverse temperature ``b = 1 / T`` (0 < lo < hi).
    n_scan : int
        Number of scan points (>= 3).
    xatol : float
        Absolute tolerance of the refinement in ``b``.
    chunk : int
        Scan values evaluated together (memory ~ ``chunk * N * K`` doubles).

    Returns
    -------
    (float, float)
        ``(b_star, max_abs_error)``; ``T = 1 / b_star``.
    """
    z = as_float_tensor(logits, "logits").to(torch.float64)
    tgt = as_float_tensor(target, "target").to(torch.float64)
    if z.dim() != 2 or z.shape[-1] < 2:
        raise ValueError(f"logits must have shape (N, K) with K >= 2, got {tuple(z.shape)}")
    if tgt.shape != z.shape:
        raise ValueError(f"target must have the shape of logits {tuple(z.shape)}, got {tuple(tgt.shape)}")
    check_nonempty(z, "logits")
    check_finite(z, "logits")
    check_finite(tgt, "target")
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError) as err:
        raise ValueError(f"bounds must be a pair of numbers (lo, hi), got {bounds!r}") from err
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
        raise ValueError(f"bounds must satisfy 0 < lo < hi, got {bounds!r}")
    n_scan = check_int(n_scan, "n_scan", minimum=3)
    check_positive(xatol, "xatol")
    chunk = check_int(chunk, "chunk", minimum=1)

    scan = torch.linspace(lo, hi, n_scan, dtype=torch.float64)
    errs = torch.cat([_max_ts_error(z, tgt, scan[i:i + chunk]) for i in range(0, n_scan, chunk)])
    i = int(torch.argmin(errs))
    a, b = float(scan[max(i - 1, 0)]), float(scan[min(i + 1, n_scan - 1)])

    def objective(beta: float) -> float:
        return float(_max_ts_error(z, tgt, torch.tensor([beta], dtype=torch.float64))[0])

    res = minimize_scalar(objective, bounds=(a, b), method="bounded", options={"xatol": xatol})
    best_b, best_e = (float(res.x), float(res.fun)) if res.fun <= float(errs[i]) else (float(scan[i]), float(errs[i]))
    return best_b, best_e


def _project_spread(z: torch.Tensor, spread: float) -> torch.Tensor:
    """Clamp each row into a window of width ``spread`` around its mid-range, then pin z_K = 0."""
    mid = 0.5 * (z.amax(-1, keepdim=True) + z.amin(-1, keepdim=True))
    z = torch.minimum(torch.maximum(z, mid - spread / 2), mid + spread / 2)
    return z - z[..., -1:]


def refine_worst_logits(logits: ArrayLike, target_fn: Callable[[torch.Tensor], torch.Tensor], inv_temperature: float, *,
                        spread: float, n_points: int = 32, steps: int = 150, lr: float = 0.05) -> torch.Tensor:
    """Move the logits where TS is worst further uphill (local maxima of the discrepancy).

    Starting from the ``n_points`` rows of ``logits`` with the largest
    ``max_c |softmax(b z)_c - target_fn(z)_c|``, runs ``steps`` steps of normalised gradient ascent
    (step ``lr`` in logit units, decaying linearly to 0) on
    that discrepancy, keeping every row inside the logit box (``max(z) - min(z) <= spread``, last
    entry 0).

    Parameters
    ----------
    logits : array_like, shape (N, K)
    target_fn : callable
        ``(M, K)`` float64 logits -> ``(M, K)`` probabilities, differentiable with torch autograd
        (e.g. ``lambda z: focalcal.maps.focal_map_from_logits(z, gamma)``).
    inv_temperature : float
        ``b = 1 / T`` of the TS map.
    spread : float
        Width of the logit box (> 0).
    n_points, steps : int
        Number of starting rows and of ascent steps.
    lr : float
        Initial step length in logit units.

    Returns
    -------
    torch.Tensor, shape (n_points, K), float64
        The refined rows (their discrepancy is at least that of their starting rows).
    """
    z = as_float_tensor(logits, "logits").to(torch.float64)
    if z.dim() != 2 or z.shape[-1] < 2:
        raise ValueError(f"logits must have shape (N, K) with K >= 2, got {tuple(z.shape)}")
    check_finite(z, "logits")
    b = check_positive(inv_temperature, "inv_temperature")
    spread = check_positive(spread, "spread")
    n_points = check_int(n_points, "n_points", minimum=1)
    steps = check_int(steps, "steps", minimum=0)
    check_positive(lr, "lr")

    def discrepancy(x: torch.Tensor) -> torch.Tensor:
        return (torch.softmax(b * x, -1) - target_fn(x)).abs().amax(-1)

    with torch.no_grad():
        start = z[torch.topk(discrepancy(z), min(n_points, len(z))).indices]
    best, best_val = start.clone(), discrepancy(start)
    x = start.clone()
    # normalised gradient ascent with a decaying step (plain torch: torch.optim would import dynamo)
    for i in range(steps):
        x.requires_grad_(True)
        (grad,) = torch.autograd.grad(discrepancy(x).sum(), x)
        with torch.no_grad():
            norm = grad.norm(dim=-1, keepdim=True).clamp_min(1e-30)
            x = _project_spread(x + lr * (1 - i / max(steps, 1)) * grad / norm, spread)
            val = discrepancy(x)
            better = val > best_val
            best[better], best_val[better] = x[better], val[better]
    return best.detach()


def adaptive_minimax_inverse_temperature(target_fn: Callable[[torch.Tensor], torch.Tensor], k: int, *,
                                         spread: float, step: float, bounds: tuple[float, float],
                                         rounds: int = 2, n_points: int = 16, steps: int = 40,
                                         n_scan: int = 24, refit_window: float = 1.0,
                                         xatol: float = 1e-6) -> tuple[float, float, torch.Tensor]:
    """Minimax TS fit to a map over the logit box, with the worst points refined off the grid.

    Exchange algorithm: fit :func:`minimax_inverse_temperature` on ``logit_grid(k, spread, step)``;
    then, ``rounds`` times, add the rows found by :func:`refine_worst_logits` at the current fit and
    refit. The reported error is a lower bound on the true worst case over the box that is much
    tighter than the grid's when the worst case is a sharp peak between grid points.

    Parameters
    ----------
    target_fn : callable
        ``(M, K)`` float64 logits -> ``(M, K)`` probabilities, differentiable.
    k : int
        Number of classes.
    spread, step : float
        Logit box width and coarse grid spacing (see :func:`logit_grid`).
    bounds : (float, float)
        Search interval of the inverse temperature.
    rounds, n_points, steps, n_scan : int
        Exchange rounds, rows refined per round, ascent steps, scan points of the first fit.
    refit_window : float
        Later fits search ``b +- refit_window`` (within ``bounds``) with ``n_scan // 2`` points.
    xatol : float
        Tolerance of each fit in ``b``.

    Returns
    -------
    (float, float, torch.Tensor)
        ``(b_star, max_abs_error, logits_used)``.
    """
    rounds = check_int(rounds, "rounds", minimum=0)
    refit_window = check_positive(refit_window, "refit_window")
    z = logit_grid(k, spread, step)
    with torch.no_grad():
        target = target_fn(z)
    b, err = minimax_inverse_temperature(z, target, bounds=bounds, n_scan=n_scan, xatol=xatol)
    for _ in range(rounds):
        extra = refine_worst_logits(z, target_fn, b, spread=spread, n_points=n_points, steps=steps)
        z = torch.cat([z, extra])
        with torch.no_grad():
            target = torch.cat([target, target_fn(extra)])
        # the refined rows move the optimum only locally: rescan a window around the last fit
        lo, hi = max(bounds[0], b - refit_window), min(bounds[1], b + refit_window)
        b, err = minimax_inverse_temperature(z, target, bounds=(lo, hi), n_scan=max(n_scan // 2, 3), xatol=xatol)
    return b, err, z


def tightest_temperature_bounds(logits: ArrayLike, mapped_logits: ArrayLike) -> tuple[float, float]:
    """The two TS maps that sandwich a binary calibration map on a grid of logits.

    For a map ``s -> m(s)`` on log-odds with ``m(s) / s > 0`` for ``s != 0``, temperature
    scaling ``s -> s / T`` satisfies ``s / T_soft <= m(s) <= s / T_sharp`` for every ``s > 0`` of
    the grid (and the reverse for ``s < 0``) exactly when ``1 / T_soft <= min m(s)/s`` and
    ``1 / T_sharp >= max m(s)/s``. Since the sigmoid is increasing, the same ordering holds for
    the probabilities.

    Parameters
    ----------
    logits : array_like, shape (N,)
        Log-odds ``s`` of the grid (zeros are ignored: every TS map passes through (0, 1/2)).
    mapped_logits : array_like, shape (N,)
        Log-odds of the calibrated probabilities at ``logits``.

    Returns
    -------
    (float, float)
        ``(T_sharp, T_soft)``: the largest temperature whose TS map lies above the map for
        ``s > 0`` and the smallest one whose TS map lies below it (``T_sharp <= T_soft``).
    """
    s = as_float_tensor(logits, "logits").to(torch.float64)
    m = as_float_tensor(mapped_logits, "mapped_logits").to(torch.float64)
    check_nonempty(s, "logits")
    if m.shape != s.shape:
        raise ValueError(f"mapped_logits must have the shape of logits {tuple(s.shape)}, got {tuple(m.shape)}")
    check_finite(s, "logits")
    check_finite(m, "mapped_logits")
    nz = s != 0
    if not bool(nz.any()):
        raise ValueError("logits must contain at least one non-zero value")
    ratio = m[nz] / s[nz]
    if bool((ratio <= 0).any()):
        raise ValueError("mapped_logits must have the sign of logits (m(s) / s > 0); "
                         "no temperature-scaling map can bound a map that crosses 1/2 elsewhere")
    return 1.0 / float(ratio.max()), 1.0 / float(ratio.min())


_RELATIONS = {
    "==": lambda a, b, tol: abs(a - b) <= tol * max(mpmath.mpf(1), abs(a)),
    "<=": lambda a, b, tol: a <= b,
    "<": lambda a, b, tol: a < b,
    ">=": lambda a, b, tol: a >= b,
    ">": lambda a, b, tol: a > b,
}


def refute_at(claim: str, lhs: sp.Expr | float, rhs: sp.Expr | float, point: Mapping, *, relation: str = "==",
              dps: int = 30) -> Verdict:
    """Record that ``lhs <relation> rhs`` fails at ``point``: a ``refuted`` verdict.

    Both sides are SymPy expressions (or numbers) evaluated with mpmath at ``dps`` digits at
    ``point`` (a mapping ``{symbol: value}``; values may be strings or rationals for exactness).
    The claimed relation must *fail* there (for ``"=="``: a relative difference above
    ``10**-(dps - 8)``); if it holds, the supposed counterexample is not one and
    ``AssertionError`` is raised, so a wrong refutation fails the book build like a wrong proof.

    Returns
    -------
    Verdict
        status ``refuted``; ``detail`` gives the point and both values.
    """
    if relation not in _RELATIONS:
        raise ValueError(f"relation must be one of {', '.join(_RELATIONS)}, got {relation!r}")
    dps = check_int(dps, "dps", minimum=15)
    if not isinstance(point, Mapping) or not point:
        raise ValueError("point must be a non-empty mapping {sympy symbol: value}")
    symbols = list(point.keys())
    exprs = [sp.sympify(lhs), sp.sympify(rhs)]
    free = set().union(*(e.free_symbols for e in exprs)) - set(symbols)
    if free:
        raise ValueError(f"point does not give values for {sorted(map(str, free))}")
    with mpmath.workdps(dps):
        args = [mpmath.mpf(sp.N(sp.sympify(point[k]), dps + 10)) for k in symbols]
        a, b = (sp.lambdify(symbols, e, modules="mpmath")(*args) for e in exprs)
        a, b = mpmath.mpf(a), mpmath.mpf(b)
        tol = mpmath.mpf(10) ** (-(dps - 8))
        if not (mpmath.isfinite(a) and mpmath.isfinite(b)):
            raise AssertionError(f"counterexample to {claim!r} is not finite: lhs = {a}, rhs = {b}")
        if _RELATIONS[relation](a, b, tol):
            raise AssertionError(f"not a counterexample to {claim!r}: lhs = {mpmath.nstr(a, 12)} "
                                 f"{relation} rhs = {mpmath.nstr(b, 12)} holds at the point")
        pt = ", ".join(f"{k} = {mpmath.nstr(v, 8)}" for k, v in zip(symbols, args))
        detail = (f"at {pt}: lhs = {mpmath.nstr(a, 10)}, rhs = {mpmath.nstr(b, 10)} "
                  f"(lhs - rhs = {mpmath.nstr(a - b, 5)}); claimed lhs {relation} rhs")
    return Verdict(claim, REFUTED, f"counterexample, mpmath at {dps} digits", detail)
