r"""The fast exact selection of the focal-temperature-scaling search (``method="fast"``).

Private; used by :mod:`focalcal.posthoc`. The prepared fitting set (:class:`Problem`), the exact
kernel and its formulas are in ``focalcal._fts_search``.

The selected pair is the exact search's, and its score the exact kernel's; most grid points are
never evaluated exactly, because a cheap *lower bound* of their score already exceeds the best
exact score found (branch and bound over temperature intervals, one path per gamma):

* A bound over a box ``[gamma_a, gamma_b] x [T_a, T_b]`` needs, at ``T_a`` and ``T_b``, per row
  the sums of ``w_j`` over groups of classes of adjacent gaps (the first ones alone, then runs of
  growing length, ``focalcal._fts_search.group_starts``) -- one pass over the classes per temperature
  (:func:`group_sums`). Every factor of ``rho`` is monotone in ``beta`` (``w_j``, ``E``, ``q_t``,
  ``r_t``, and the range of each ``q_j``) and, for fixed ``q``, in ``gamma``; and
  :math:`h^\gamma(q)/q = (1-q)^{-\gamma}/(1+\gamma f(q))` with :math:`f(q) = -q\log q/(1-q)`
  increasing is a product of two factors each monotone in ``q`` and in ``gamma``. So each factor's
  range over the box (and over a group's ``q``) is attained at a corner that the sign of
  ``gamma`` names, and the products of the ranges bound ``rho`` for every row, hence the
  confidence (:func:`row_bounds`).
* At a single ``(gamma, T)`` whose bound does not discard it, the rows are bounded again with
  second-order group sums (:func:`_point_sums`: Jensen's inequality and the chord over each group's
  ``f``, with the sums of ``w_j^2`` and ``w_j^2 beta delta_j``, one more pass over the classes,
  :func:`second_sums`, at the temperatures where a point needs it). The worst case over a
  group's ``q`` loses terms of first order in ``gamma``: on 10k x 100 N(0, 9) logits it left 200
  of the 4500 pairs to the exact NLL, the second-order sums 51.
* Any binned l1 calibration error is at least the 1-bin one, ``|mean(conf) - accuracy|`` (the
  triangle inequality over bins, for equal-width and equal-mass bins alike). At a single
  temperature the confidence intervals are narrow enough for a sharper bound: rows whose possible
  bins lie in one run of bins count in that run's sum, the others cost their largest error
  (:func:`binned_lower_bound`). The NLL is bounded row by row; over a box of temperatures also
  as the mean cross-entropy (convex in ``beta``: tangents at the box's ends, from the slope that
  :func:`group_sums` also returns) plus the focal map's correction bounded row by row
  (:func:`_split_lower`), which at ``gamma = 0`` is of second order in the box's width.
* Every path is cut into boxes of ``_FIRST_STEP`` temperatures; a box whose bound does not exceed
  the best exact score of its group (plus the tie tolerance) is split at its middle temperature,
  whose own point bound is computed (a half of at most ``_POINT_WIDTH`` steps is not bounded as a
  box: its interior points get their point bounds at once); at every level the live point of
  smallest estimated score of every path is evaluated exactly, which lowers the threshold. Points
  whose bound stays below the final threshold are evaluated exactly at the end, in one batch (the
  pairs of one temperature share its work). A point is discarded only when its bound exceeds
  ``best + 1e-12 * max(1, |best|)`` (the tie tolerance of the selection) by a margin of ``1e-9``
  that covers the rounding of the bounds, so the pair selected among the evaluated ones, with the
  tie rule, is the pair the full exact search selects. The pairs whose bound stays below the best
  score are evaluated exactly: 9-50 of the paper's 4500 on the released networks, for the three
  criteria (``bench/bench_posthoc.py`` counts them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import torch

from ._fts_search import (BIG_GAMMA, TIE_RTOL, _MIN_EXP, Problem, _map, _run_parts, exact_scores,
                          one_minus_r, softplus)
from .metrics.binned import _width_index

# a pair is discarded only if its lower bound exceeds the tie threshold by this (relative) margin
_MARGIN = 1e-9
# the point bounds raise the runner-up's q to e^this (_at_point)
_POINT_MIN_LOG_C = -40.0
# temperatures per first-level box of the branch and bound
_FIRST_STEP = 64
# boxes of at most this many temperature steps are not bounded: their interior points are (a box
# bound costs what a point bound costs, and three in four of those of 2 steps failed to discard
# their box on the benchmark problems)
_POINT_WIDTH = 2
# the equal-mass bounds count rows in at most 2**_MASS_BITS buckets of confidence (_bin_ranges)
_MASS_BITS = 14

__all__ = ["BIG_GAMMA", "Path", "box_bounds", "binned_lower_bound", "fast_scores", "group_sums", "product_paths",
           "row_bounds", "Terms"]

# ============================================================================================
# lower bounds over boxes of (gamma, T)
# ============================================================================================

class Sums(NamedTuple):
    """The first pass over the classes at one temperature (:func:`group_sums`)."""

    ws: torch.Tensor  # (groups, rows): sums of w_j over each group
    wdd: torch.Tensor | None  # (rows,), NLL only: sum over all classes of w_j (delta_j - delta_1)


def _class_pass(prob: Problem, betas: Sequence[float], outs: list[list[torch.Tensor]], second: bool,
                pool: ThreadPoolExecutor | None) -> None:
    """Fill ``outs[i]`` (see :func:`group_sums` and :func:`second_sums`) at ``betas[i]``, block by block."""
    blocks = prob.dd_t  # prepared here, not in the worker threads
    sizes = torch.tensor(prob.ends) - torch.tensor(prob.starts)
    group = torch.repeat_interleave(torch.arange(len(sizes)), sizes).to(prob.device)  # each class's group

    def add(o: torch.Tensor, sl: slice, x: torch.Tensor, sign: int) -> None:
        # plain sums in class order (no differences of running sums)
        o[:, sl] = torch.zeros_like(o[:, sl]).index_add_(0, group, x, alpha=sign)

    def part(b0: int, b1: int) -> None:
        for blk in range(b0, b1):
            sl = prob.block(blk)
            dd = blocks[blk]  # (classes, rows of the block): a group is a run of leading rows
            for beta, o in zip(betas, outs):
                u = prob.log_w(dd, beta)  # log w_j
                w = torch.exp(u)
                if second:  # u w^2 <= 0 is negated
                    w2 = w * w
                    add(o[0], sl, w2, 1)
                    add(o[1], sl, u.mul_(w2), -1)
                    continue
                add(o[0], sl, w, 1)
                if len(o) == 2:  # -u / beta = delta_j - delta_1 (where u is clamped, a term below e^-300 of w_1)
                    o[1][sl] = (u * w).sum(0).mul_(-1.0 / beta)

    _run_parts(pool, part, prob.n_blocks)


def group_sums(prob: Problem, temps: Sequence[float], pool: ThreadPoolExecutor | None) -> list[Sums]:
    """Per temperature, over each group of classes the sums of ``w_j`` and, for the NLL (rows not
    deduplicated), the sum over all classes of ``w_j (delta_j - delta_1)``, the slope of the
    cross-entropy (:func:`_ce_moments`): the one pass over all classes that a bound needs."""
    nll = prob.weights is None
    shape = (len(prob.starts), prob.rows)
    outs = [[torch.empty(shape, dtype=torch.float64, device=prob.device)]
            + ([torch.empty(prob.rows, dtype=torch.float64, device=prob.device)] if nll else []) for _ in temps]
    _class_pass(prob, [1.0 / t for t in temps], outs, False, pool)
    return [Sums(o[0], o[1] if nll else None) for o in outs]


def second_sums(prob: Problem, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Over each group of classes the sums of ``w_j^2`` and of ``w_j^2 beta delta_j``, ``(groups,
    rows)`` each, at one temperature (for the point bounds, :func:`_point_sums`; computed only at
    temperatures where some point needs them, on the calling thread)."""
    out = [torch.empty(len(prob.starts), prob.rows, dtype=torch.float64, device=prob.device) for _ in range(2)]
    _class_pass(prob, [beta], [out], True, None)
    return out[0], out[1]


@dataclass
class Terms:
    """Per-row quantities at one temperature: ``beta``, ``-beta delta_1``, ``log(1+E)``,
    ``log(1 - q_t)``, ``r_t``, the group sums of ``w_j`` (:func:`group_sums`), ``log w_j`` of each
    group's first and last class and, for the NLL, the mean cross-entropy of ``softmax(z / T)`` and
    its derivative in ``beta`` (:func:`_ce_moments`); the sums of :func:`second_sums` once a point
    bound needs them."""

    beta: float
    c1: torch.Tensor
    sp: torch.Tensor
    lu: torch.Tensor
    r: torch.Tensor
    ws: torch.Tensor    # (groups, rows)
    u_first: torch.Tensor  # (groups, rows): log w_j of each group's first class
    u_last: torch.Tensor   # (groups, rows): log w_j of each group's last class
    w2: torch.Tensor | None = None   # (groups, rows), second_sums (_at_point)
    w2u: torch.Tensor | None = None  # (groups, rows), second_sums (_at_point)
    ends: list[torch.Tensor] | None = None  # the groups' q ranges at this temperature (_ends_at)
    lq_hi: torch.Tensor | None = None  # log q of each group's first class (_ends_at)
    point: _AtPoint | None = None  # what the second-order point bounds share (_at_point)
    ce: tuple[float, float] | None = None  # NLL only: mean cross-entropy and its slope in beta

    @classmethod
    def at(cls, prob: Problem, t: float, sums: Sums) -> Terms:
        beta = 1.0 / t
        c1 = prob.d1 * -beta
        log_e = torch.log(sums.ws.sum(0)) + c1
        sp = softplus(log_e)
        lu = log_e - sp
        return cls(beta, c1, sp, lu, 1 - one_minus_r(torch.exp(log_e.clamp(min=_MIN_EXP))), sums.ws,
                   prob.log_w(prob.dd_first, beta), prob.log_w(prob.dd_last, beta),
                   ce=None if sums.wdd is None else _ce_moments(prob, beta, c1, sp, lu, sums.wdd))


def _ce_moments(prob: Problem, beta: float, c1: torch.Tensor, sp: torch.Tensor, lu: torch.Tensor,
                wdd: torch.Tensor) -> tuple[float, float]:
    r"""Mean cross-entropy of ``softmax(beta z)`` and its derivative in ``beta``.

    Per row :math:`CE = \log(1 + E) + [y \ne t]\,\beta\delta_y` and, with :math:`\delta_j =
    \delta_1 + (\delta_j - \delta_1)`, :math:`CE' = [y \ne t]\,\delta_y - \sum_{j \ne t} q_j
    \delta_j = [y \ne t]\,\delta_y - (1 - q_t)\,\delta_1 - q_1 \sum_j w_j (\delta_j - \delta_1)`
    (``q_1`` the runner-up's ``q``; ``wdd`` the sum over all classes of ``w_j (delta_j - delta_1)``,
    from :func:`group_sums`).
    """
    dy = torch.where(prob.correct, torch.zeros_like(prob.d1), prob.d1 + prob.ddy)
    ce = float((sp + beta * dy).mean())
    slope = dy - prob.d1 * torch.exp(lu) - torch.exp(c1 - sp) * wdd
    return ce, float(slope.mean())


def _ce_lower(a: Terms, b: Terms) -> float:
    r"""Lower bound of the mean cross-entropy over ``beta`` in ``[b.beta, a.beta]``.

    Each row's cross-entropy is convex in ``beta`` (a log-sum-exp of affine functions of ``beta``,
    plus an affine term), so the mean lies above its tangents at both ends; the larger of the two
    tangents is smallest where they cross. The bound is of second order in the width of the
    interval, where a bound row by row from the ends' values alone is of first order.
    """
    (fa, da), (fb, db) = a.ce, b.ce
    if db >= 0:  # increasing from the left end on
        return fb
    if da <= 0:  # decreasing up to the right end
        return fa
    x = min(max((fa - fb - da * a.beta + db * b.beta) / (db - da), b.beta), a.beta)
    # at any x the smaller tangent is below the crossing point (one falls, the other rises)
    return min(fb + db * (x - b.beta), fa + da * (x - a.beta))


def _q_ends(lq_lo: torch.Tensor, lq_hi: torch.Tensor) -> list[torch.Tensor]:
    """``log(1 - q)`` and ``f(q) = -q log q / (1 - q)`` at the lower and upper ends of ``q`` ranges."""
    out = []
    for lq in (lq_lo, lq_hi):
        lq = lq.clamp(min=_MIN_EXP)
        q = torch.exp(lq)
        omq = 1 - q
        out += [torch.log(omq), q.mul_(lq).div_(omq).neg_()]
    return out  # l1_lo, f_lo, l1_hi, f_hi  (l1_lo >= l1_hi, f_lo <= f_hi)


def _g_min(ends: list[torch.Tensor], gl: float, gh: float) -> torch.Tensor:
    r"""Lower end of :math:`h^\gamma(q)/q = (1-q)^{-\gamma} / (1 + \gamma f(q))` over a box.

    ``ends`` from :func:`_q_ends`, ``[gl, gh]`` the box's gammas. ``-gamma log(1-q)`` increases
    with ``gamma``, and with ``q`` iff ``gamma > 0``; ``1 + gamma f`` increases with ``gamma``, and
    with ``q`` iff ``gamma > 0``; so each extreme is at one corner, which the signs name.
    """
    l1_lo, f_lo, l1_hi, f_hi = ends
    den_max = (f_hi if gh >= 0 else f_lo).mul(gh).add_(1)
    return den_max.reciprocal_() if gl == 0 else torch.mul(l1_lo if gl > 0 else l1_hi, -gl).exp_().div_(den_max)


def _g_max(ends: list[torch.Tensor], gl: float, gh: float) -> torch.Tensor:
    """Upper end of ``h^gamma(q)/q`` over a box (see :func:`_g_min`)."""
    l1_lo, f_lo, l1_hi, f_hi = ends
    den_min = (f_lo if gl >= 0 else f_hi).mul(gl).add_(1)
    return den_min.reciprocal_() if gh == 0 else torch.mul(l1_hi if gh > 0 else l1_lo, -gh).exp_().div_(den_min)


def _ends_at(prob: Problem, t: Terms) -> list[torch.Tensor]:
    """:func:`_q_ends` of every group's range of ``q`` at the temperature of ``t`` (cached there)."""
    if t.ends is None:
        lo = t.c1 + t.u_last - t.sp
        t.lq_hi = t.c1 + t.u_first - t.sp
        t.ends = _q_ends(lo, t.lq_hi)
    return t.ends


@dataclass
class _AtPoint:
    """Per group and row at one temperature: ``q_hi``, ``1 - q_hi``, :math:`C\\sum_j w_j^2 =
    \\sum_j w_j q_j` and the lower and upper estimates ``F``, ``F/(1-q_hi)`` of the ``w``-weighted
    mean of ``f`` (:func:`_point_sums`)."""

    q_hi: torch.Tensor
    omq_hi: torch.Tensor
    cm2: torch.Tensor
    big_f: torch.Tensor
    big_f_hi: torch.Tensor


def _at_point(prob: Problem, t: Terms) -> _AtPoint:
    """The :class:`_AtPoint` of ``t`` (cached there; built only where a second-order bound is needed)."""
    if t.point is None:
        _ends_at(prob, t)
        t.w2, t.w2u = second_sums(prob, t.beta)
        # C = q of the runner-up, raised to e^-40 where it is smaller: the sums C w_j^2 and C w_j^2
        # beta delta_j then stay normal numbers (a subnormal operand costs 6-20x per element); the
        # raise moves C sum_j w_j^2 by at most e^-40 S_1 and F by at most 41 e^-40, so a group sum
        # by at most 41 |gamma| e^-40 S_1 < 1e-13 S_1 (|gamma| <= BIG_GAMMA): inside the margin
        log_c = (t.c1 - t.sp).clamp_(min=_POINT_MIN_LOG_C)
        c = torch.exp(log_c)
        q_hi = torch.exp(t.lq_hi.clamp(min=_MIN_EXP))
        omq_hi = 1 - q_hi
        big_f = (t.w2u - log_c * t.w2).mul_(c).div_(t.ws)  # sum_j w_j (-q_j log q_j) / S_1, both terms >= 0
        t.point = _AtPoint(q_hi, omq_hi, t.w2 * c, big_f, big_f / omq_hi)
    return t.point


def _point_sums(t: Terms, p: _AtPoint, g: float, upper: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Bounds of :math:`\sum_{j \in G} w_j h^\gamma(q_j)/q_j` per row and group at one ``(gamma, T)``.

    With :math:`\psi(f) = 1/(1+\gamma f)` (positive and convex in ``f``) the summand is
    :math:`w_j (1-q_j)^{-\gamma} \psi(f(q_j))`. Jensen's inequality bounds
    :math:`\sum_j w_j \psi(f_j)` below by :math:`S_1 \psi(\bar f)`, the chord above, with
    :math:`\bar f` the ``w``-weighted mean of ``f``, which lies between :math:`F = \sum_j w_j
    (-q_j \log q_j) / S_1` and :math:`F/(1-q_{hi})`; as :math:`q_j = C w_j` (``C`` the runner-up's
    ``q``), :math:`\sum_j w_j (-q_j\log q_j) = C(\sum_j w_j^2 \beta\delta_j - \log C
    \sum_j w_j^2)`. The factor :math:`(1-q)^{-\gamma}` is bounded by first-order expansions
    (:math:`1+\gamma q \le (1-q)^{-\gamma} \le 1 + \gamma q e^{x}/(1-q)`, :math:`x = \gamma
    q_{hi}/(1-q_{hi})`, for ``gamma > 0``; :math:`1 - |\gamma| q/(1-q) \le (1-q)^{|\gamma|} \le 1 -
    |\gamma| q (1 - |\gamma| q_{hi}/2)` for ``gamma < 0``) whose ``q`` terms sum to :math:`C \sum_j
    w_j^2`. The gap to the exact sum is of second order in ``gamma`` and in the spread of ``f``
    over the group, where :func:`_g_min` / :func:`_g_max` lose first-order terms.
    """
    s1 = t.ws
    if g == 0:
        return s1, s1
    l1_lo, f_lo, l1_hi, f_hi = t.ends
    psi_hi = (1 + g * f_hi).reciprocal_()  # psi at the group's q ends
    psi_lo = (1 + g * f_lo).reciprocal_() if upper else None

    def chord(x: torch.Tensor) -> torch.Tensor:
        return psi_lo * (1 - g * psi_hi * (x - f_lo))

    hi = None
    if g > 0:
        lower = s1 / (1 + g * torch.minimum(p.big_f_hi, f_hi)) + g * psi_hi * p.cm2
        if upper:
            hi = (s1 * chord(torch.maximum(p.big_f, f_lo))
                  + g * torch.exp(g * p.q_hi / p.omq_hi) * psi_lo * p.cm2 / p.omq_hi)
    else:
        a = -g
        lower = s1 / (1 + g * torch.maximum(p.big_f, f_lo)) - a * psi_hi * p.cm2 / p.omq_hi
        if upper:
            hi = s1 * chord(torch.minimum(p.big_f_hi, f_hi)) - a * (1 - a * p.q_hi / 2) * psi_lo * p.cm2
    return lower, hi


@dataclass
class _Rows:
    """One box's pieces of :func:`row_bounds`, per row: the ends of the log row factor, the group
    sums' lower (and, for the ECE criteria, upper) bounds ``(groups, rows)`` and, for the NLL, the
    upper end of ``log(h(q_y) / h(q_t))`` and, for :func:`_split_lower`, the lower ends of
    ``h^gamma(q)/q`` over each group (``h_lo``), of ``log(1 / H(q_t))`` (``lo_t``) and the upper end
    of ``log(H(q_y) / H(q_t))`` (``hy_hi``), with ``H = h^gamma(q)/q``."""

    row_lo: torch.Tensor
    row_hi: torch.Tensor
    s_lo: torch.Tensor
    s_hi: torch.Tensor | None
    lry_hi: torch.Tensor | None
    h_lo: torch.Tensor | None = None
    lo_t: torch.Tensor | None = None
    hy_hi: torch.Tensor | None = None


def _rows(prob: Problem, a: Terms, b: Terms, g_lo: list[float], g_hi: list[float], nll: bool) -> list[_Rows]:
    """The :class:`_Rows` of the boxes ``[g_lo[k], g_hi[k]] x [T_a, T_b]`` (see :func:`row_bounds`)."""
    if a is b:
        ends = _ends_at(prob, a)
    else:  # each group's q lie between its last class's at T_a and its first class's at T_b
        lo = a.c1 + a.u_last - b.sp
        hi = b.c1 + b.u_first - a.sp
        ends = _q_ends(lo, hi)
    if nll:
        # log(h(q_y) / h(q_t)) = -beta delta_y + log(row factor) + log(h(q_y) / q_y)
        uy_b = prob.ddy * -b.beta
        ends_y = _q_ends(a.c1 + prob.ddy * -a.beta - b.sp, b.c1 + uy_b - a.sp)
    out = []
    for gl, gh in zip(g_lo, g_hi):
        # row factor 1 / H(q_t) = (1 - q_t)^gamma (1 + gamma r_t): log(1 - q_t) increases, r_t
        # decreases with T
        lo_t = gh * (a.lu if gh >= 0 else b.lu) + torch.log(1 + gl * (b.r if gl >= 0 else a.r))
        hi_t = gl * (b.lu if gl >= 0 else a.lu) + torch.log(1 + gh * (a.r if gh >= 0 else b.r))
        row_lo, row_hi = a.c1 + lo_t, b.c1 + hi_t
        h_lo = _g_min(ends, gl, gh)
        if not nll:
            out.append(_Rows(row_lo, row_hi, h_lo.mul_(a.ws), _g_max(ends, gl, gh).mul_(b.ws), None))
            continue
        hy_hi = hi_t + torch.log(_g_max(ends_y, gl, gh))
        out.append(_Rows(row_lo, row_hi, h_lo * a.ws, None, b.c1 + uy_b + hy_hi, h_lo, lo_t, hy_hi))
    return out


def _tighten(prob: Problem, t: Terms, rows: list[_Rows], gammas: list[float], nll: bool) -> list[_Rows]:
    """``rows`` of points ``(gammas[k], T)`` with the group sums' bounds narrowed by the
    second-order ones of :func:`_point_sums` where those are tighter."""
    p = _at_point(prob, t)
    out = []
    for r, g in zip(rows, gammas):
        p_lo, p_hi = _point_sums(t, p, g, not nll)
        out.append(replace(r, s_lo=torch.maximum(r.s_lo, p_lo), s_hi=None if nll else torch.minimum(r.s_hi, p_hi)))
    return out


def _log_rho_bounds(prob: Problem, rows: list[_Rows], nll: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`row_bounds`' output from the pieces."""
    out_lo, out_hi = [], []
    for r in rows:
        lr_lo = r.row_lo + torch.log(r.s_lo.sum(0))
        if nll:  # -log p_y >= log(1 + rho_lo) - [y != t] log(h(q_y) / h(q_t))_hi
            out_lo.append(softplus(lr_lo) - torch.where(prob.correct, torch.zeros_like(r.lry_hi), r.lry_hi))
        else:
            out_lo.append(lr_lo)
            out_hi.append(r.row_hi + torch.log(r.s_hi.sum(0)))
    lo_all = torch.stack(out_lo)
    return lo_all, (torch.full_like(lo_all, math.inf) if nll else torch.stack(out_hi))


def _split_lower(prob: Problem, a: Terms, b: Terms, rows: list[_Rows]) -> np.ndarray:
    r"""Lower bounds of the mean NLL over boxes ``[g_lo, g_hi] x [T_a, T_b]`` of more than one
    temperature (their :class:`_Rows`), as cross-entropy plus the focal map's correction.

    With :math:`H = h^\gamma(q)/q`, :math:`\rho = E m`, where :math:`m = \bar H / H(q_t)` and
    :math:`\bar H` is the ``w``-weighted mean of :math:`H(q_j)` over the non-top classes, so
    :math:`-\log p_y = CE + \psi(E, m) - [y \ne t] \log(H(q_y)/H(q_t))` with
    :math:`\psi = \log(1 + E m) - \log(1 + E)`. The mean cross-entropy is bounded by
    :func:`_ce_lower`. :math:`\psi` increases with ``m`` and, with ``E``, rises iff ``m > 1``;
    over the box ``E`` lies between its values at the ends, and :math:`\bar H \ge h_0 + \sum_G
    S_G(T_a)(h_G - h_0) / \sum_G S_G(T_b)`, ``h_G`` the lower end of ``H`` over group ``G``,
    ``h_0`` their minimum (each group's weight ``S_G`` lies between its values at the ends). The
    correction moves with ``beta`` only through ``H``, so this bound loses a first-order term in
    the box's width times ``gamma``, where :func:`row_bounds` loses one in the width alone.
    """
    ce = _ce_lower(a, b)
    zero = torch.zeros_like(a.sp)
    le_a, le_b = a.lu + a.sp, b.lu + b.sp  # log E at the ends (E falls with beta)
    den = b.ws.sum(0)
    out = np.empty(len(rows))
    for k, r in enumerate(rows):
        h0 = r.h_lo.amin(0)
        log_m = r.lo_t + torch.log(h0 + (r.h_lo - h0).mul_(a.ws).sum(0).div_(den))
        le = torch.where(log_m >= 0, le_a, le_b)
        corr = torch.where(prob.correct, zero, r.hy_hi)  # [y != t] log(H(q_y)/H(q_t)), upper end
        out[k] = float((softplus(le + log_m) - softplus(le) - corr).mean())
    return ce + out


def row_bounds(prob: Problem, a: Terms, b: Terms, g_lo: torch.Tensor, g_hi: torch.Tensor,
               criterion: str, tight: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row and box ``[g_lo, g_hi] x [T_a, T_b]``, shape ``(M, rows)``: bounds of ``log rho``
    (ECE criteria), or a lower bound of ``-log p_y`` and ``+inf`` (NLL).

    ``a`` holds the terms at the lower temperature ``T_a`` (larger beta), ``b`` at ``T_b``. The
    non-top classes are bounded in groups of adjacent gaps (:func:`group_starts`), one by one for
    the first few. With ``tight``, boxes that are points (``a is b``, ``g_lo == g_hi``) get the
    second-order group sums of :func:`_point_sums` too.
    """
    nll = criterion == "nll"
    gl, gh = g_lo.tolist(), g_hi.tolist()
    rows = _rows(prob, a, b, gl, gh, nll)
    if tight and a is b:
        at = [k for k in range(len(gl)) if gl[k] == gh[k]]
        for k, r in zip(at, _tighten(prob, a, [rows[k] for k in at], [gl[k] for k in at], nll)):
            rows[k] = r
    return _log_rho_bounds(prob, rows, nll)


def confidence_bounds(lr_lo: torch.Tensor, lr_hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The confidence ``1 / (1 + rho)`` lies in ``[sigmoid(-log rho_hi), sigmoid(-log rho_lo)]``."""
    return (torch.sigmoid(lr_hi.clamp(_MIN_EXP, -_MIN_EXP).neg_()),
            torch.sigmoid(lr_lo.clamp(_MIN_EXP, -_MIN_EXP).neg_()))


def _order_key(c: torch.Tensor) -> torch.Tensor:
    """An ``int64`` key of confidences in ``[0, 1]`` (float64) that is exactly non-decreasing in them.

    The bit pattern of a non-negative double increases with its value; above 1/2 the key counts
    down the bits of ``1 - c``, exact there (Sterbenz), so that confidences near 1 stay apart.
    """
    half = int(torch.tensor(0.5, dtype=torch.float64).view(torch.int64))
    c = c.contiguous()
    return torch.where(c >= 0.5, 2 * half - (1 - c).view(torch.int64), c.view(torch.int64))


def _bin_ranges(prob: Problem, c_lo: torch.Tensor, c_hi: torch.Tensor, n_bins: int,
                binning: str) -> tuple[torch.Tensor, torch.Tensor]:
    """First and last bin that a confidence in ``[c_lo, c_hi]`` may fall in, per row, ``(M, rows)``.

    Equal-width bins are those of :func:`focalcal.metrics.calibration_error`. An equal-mass bin is
    ``(count(x_j <= x_i) - 1) * n_bins // N``. Row ``i``'s count is at least its own samples plus
    those of the rows whose interval lies in a lower bucket than ``c_lo_i`` (so wholly below it),
    at most those of the rows whose interval starts in ``c_hi_i``'s bucket or a lower one. The
    buckets are ranges of :func:`_order_key`, at most ``2**_MASS_BITS``; coarser buckets only
    widen the ranges, and no sort is needed.
    """
    if binning == "width":
        return _width_index(c_lo, n_bins), _width_index(c_hi, n_bins)
    m = c_lo.shape[0]
    k_lo, k_hi = _order_key(c_lo), _order_key(c_hi)
    base = k_lo.amin(-1, keepdim=True)
    span = int((k_hi - base).max())
    shift = max(0, span.bit_length() - _MASS_BITS)
    b_lo, b_hi = (torch.bitwise_right_shift(k - base, shift) for k in (k_lo, k_hi))
    w = prob.weights.expand_as(c_lo)
    hist_hi, hist_lo = (torch.zeros(m, (span >> shift) + 1, dtype=torch.float64, device=c_lo.device)
                        .scatter_add_(1, b, w) for b in (b_hi, b_lo))
    lo_count = (hist_hi.cumsum(-1) - hist_hi).gather(1, b_lo) + w  # exact: sums of counts
    hi_count = hist_lo.cumsum(-1).gather(1, b_hi)
    return tuple((c.round().long() - 1) * n_bins // prob.n for c in (lo_count, hi_count))


def binned_lower_bound(prob: Problem, c_lo: torch.Tensor, c_hi: torch.Tensor, n_bins: int,
                       binning: str) -> torch.Tensor:
    r"""Lower bound of the binned l1 calibration error when every confidence lies in its interval.

    With :math:`S_b = \sum_{i \in b} (c_i - y_i)` the error is :math:`\sum_b |S_b| / N`. For any
    partition of the bins into runs of adjacent bins, the triangle inequality gives
    :math:`\sum_b |S_b| \ge \sum_G |\sum_{i \in G} (c_i - y_i)|`; a row whose possible bins
    (:func:`_bin_ranges`) lie in one run counts in that run's sum, which lies in ``[L_G, U_G]``
    (from ``c_lo`` and ``c_hi``) and so has absolute value at least ``max(0, L_G, -U_G)``; a row
    whose bins straddle a run boundary is left out, at the cost of its largest ``|c - y|``, counted
    at every boundary it straddles. The best partition is found by dynamic programming over the
    ``n_bins - 1`` boundaries; one run of all bins is the 1-bin bound ``|mean(conf) - accuracy|``.
    """
    m = c_lo.shape[0]
    # widen by far more than the rounding of the exact kernel's confidences, so that a confidence
    # at a bin edge is never placed on the wrong side by the bounds' own rounding
    c_lo = c_lo * (1 - 1e-12)
    c_hi = torch.clamp(c_hi * (1 + 1e-12), max=1.0)
    b_lo, b_hi = _bin_ranges(prob, c_lo, c_hi, n_bins, binning)
    w, nc = prob.weights, prob.n_correct
    lo, hi = c_lo * w - nc, c_hi * w - nc
    worst = torch.where(b_lo < b_hi, nc * (1 - c_lo) + (w - nc) * c_hi, torch.zeros_like(c_hi))
    cell = (b_lo * n_bins + b_hi).view(m, -1)
    off = (torch.arange(m, device=cell.device) * n_bins * n_bins).view(-1, 1)
    tables = []
    for v in (lo, hi, worst):
        t = torch.zeros(m * n_bins * n_bins, dtype=torch.float64, device=v.device)
        tables.append(t.index_add_(0, (cell + off).view(-1), v.reshape(-1)).view(m, n_bins, n_bins))
    # in_lo/in_hi[:, a, e]: rows whose bins lie in [a, e] (b_lo >= a, b_hi <= e); across[:, k]: rows
    # with b_lo < k <= b_hi, which straddle the boundary before bin k (0 for k = 0)
    in_lo, in_hi = (t.flip(1).cumsum(1).flip(1).cumsum(2) for t in tables[:2])
    straddle = tables[2].cumsum(1).flip(2).cumsum(2).flip(2).diagonal(offset=1, dim1=1, dim2=2)
    across = torch.cat([torch.zeros_like(straddle[:, :1]), straddle], -1)
    best = torch.zeros(m, n_bins + 1, dtype=torch.float64, device=c_lo.device)
    for e in range(n_bins):  # best[:, e + 1]: the best runs covering bins 0..e
        run = torch.clamp(torch.maximum(in_lo[:, :e + 1, e], -in_hi[:, :e + 1, e]), min=0)
        best[:, e + 1] = (best[:, :e + 1] + run - across[:, :e + 1]).amax(-1)
    return torch.clamp(best[:, -1] / prob.n, min=0)


def _score_bounds(prob: Problem, lo: torch.Tensor, hi: torch.Tensor, criterion: str, n_bins: int,
                  cut: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds and estimates of the scores from the row bounds of :func:`row_bounds` (see
    :func:`box_bounds`)."""
    if criterion == "nll":
        lb = lo.mean(-1).cpu().numpy()
        return lb, lb
    c_lo, c_hi = confidence_bounds(lo, hi)
    w = prob.weights / prob.n
    m_lo, m_hi = c_lo @ w, c_hi @ w
    lb = torch.clamp(torch.maximum(m_lo - prob.acc, prob.acc - m_hi), min=0).cpu().numpy()
    est = ((m_lo + m_hi) / 2 - prob.acc).abs().cpu().numpy()
    refine = np.ones(len(lb), dtype=bool) if cut is None else lb <= cut
    if refine.any():
        sel = torch.from_numpy(np.flatnonzero(refine)).to(c_lo.device)
        binning = "mass" if criterion == "ece_mass" else "width"
        lb[refine] = np.maximum(lb[refine], binned_lower_bound(prob, c_lo[sel], c_hi[sel], n_bins, binning)
                                .cpu().numpy())
    return lb, est


def box_bounds(prob: Problem, a: Terms, b: Terms, g_lo: torch.Tensor, g_hi: torch.Tensor,
               criterion: str, n_bins: int = 15, cut: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Lower bound of the score over each box ``[g_lo, g_hi] x [T_a, T_b]`` and an estimate, ``(M,)``.

    The binned l1 calibration errors are bounded by the 1-bin error ``|mean(conf) - accuracy|``,
    raised to :func:`binned_lower_bound` for the boxes whose 1-bin bound is at most ``cut`` (all
    when ``cut`` is None; the search skips the boxes it would discard anyway). The NLL is bounded
    row by row (:func:`row_bounds`) and, over more than one temperature where that bound is at most
    ``cut``, also by :func:`_split_lower` (the larger bound is kept). At a point (``a is b``,
    ``g_lo == g_hi``) whose bound is still at most ``cut``, the rows are bounded again with the
    second-order group sums of :func:`_point_sums` (costlier, so only where the first bound did not
    discard the point).
    """
    nll = criterion == "nll"
    gl, gh = g_lo.tolist(), g_hi.tolist()
    rows = _rows(prob, a, b, gl, gh, nll)
    lb, est = _score_bounds(prob, *_log_rho_bounds(prob, rows, nll), criterion, n_bins, cut)
    if nll and a is not b and a.ce is not None and b.ce is not None:  # where the first bound keeps the box
        split = np.arange(len(lb)) if cut is None else np.flatnonzero(lb <= cut)
        if len(split):
            lb[split] = np.maximum(lb[split], _split_lower(prob, a, b, [rows[k] for k in split]))
    if a is b:  # the second pass starts from the first one's pieces
        again = np.flatnonzero((np.array(gl) == np.array(gh)) & (True if cut is None else lb <= cut))
        if len(again):
            tight = _tighten(prob, a, [rows[k] for k in again], [gl[k] for k in again], nll)
            lb[again] = np.maximum(lb[again], _score_bounds(prob, *_log_rho_bounds(prob, tight, nll), criterion,
                                                            n_bins, None if cut is None else cut[again])[0])
    return lb, est


# ============================================================================================
# branch and bound over temperature intervals
# ============================================================================================

@dataclass
class Path:
    """Pairs ``(gammas[i], temps[i])`` along which ``temps`` and ``gammas`` are both monotone.

    ``flat[i]`` is the pair's index in the caller's evaluation order (for the tie rule); pairs of
    paths of the same ``group`` share one threshold (the best exact score of that group so far).
    """

    temps: np.ndarray
    gammas: np.ndarray
    flat: np.ndarray
    group: int = 0


def _cut(best: float) -> float:
    """Largest lower bound that may still hide a pair tied with ``best`` (tie tolerance + margin)."""
    return best + (TIE_RTOL + _MARGIN) * max(1.0, abs(best))


Point = tuple[int, int]   # path, index
Box = tuple[int, int, int]  # path, first index, last index


class _Search:
    """State of one branch-and-bound run over a list of paths (see the module docstring)."""

    def __init__(self, prob: Problem, paths: list[Path], criterion: str, n_bins: int,
                 pool: ThreadPoolExecutor | None) -> None:
        self.prob, self.paths, self.criterion, self.n_bins, self.pool = prob, paths, criterion, n_bins, pool
        self.best = {p.group: math.inf for p in paths}
        self.scores: dict[Point, float] = {}
        self.lb: dict[Point, tuple[float, float]] = {}
        self.cache: dict[float, Terms] = {}
        self.coarse: set[Point] = set()  # point bounds computed before their group had a score
        self.stats = {"temperatures": 0, "bounds": 0}

    def _terms(self, temps: set[float]) -> None:
        new = sorted(t for t in temps if t not in self.cache)
        if new:
            for t, ws in zip(new, group_sums(self.prob, new, self.pool)):
                self.cache[t] = Terms.at(self.prob, t, ws)
            self.stats["temperatures"] += len(new)

    def bounds(self, boxes: list[Box]) -> tuple[np.ndarray, np.ndarray]:
        """Lower bounds and estimates of boxes (a point is a box ``(s, i, i)``); the costlier ECE
        bound only where the 1-bin one does not already discard the box (:func:`box_bounds`)."""
        # the binned bound for points only (over a box of temperatures the confidence intervals
        # are too wide for it to pay), and once their group has a score to compare with
        # (the NLL's boxes take the cut too: their second bound is computed only where it may discard)
        nll = self.criterion == "nll"
        cuts = np.array([_cut(self.best[self.paths[s].group]) if i == j or nll else -np.inf for s, i, j in boxes])
        cuts[np.isinf(cuts)] = -np.inf
        ranges = []
        for s, i, j in boxes:
            p = self.paths[s]
            ranges.append((*sorted((float(p.temps[i]), float(p.temps[j]))),
                           *sorted((float(p.gammas[i]), float(p.gammas[j])))))
        self._terms({r[0] for r in ranges} | {r[1] for r in ranges})
        by_t: dict[tuple[float, float], list[int]] = {}
        for k, r in enumerate(ranges):
            by_t.setdefault(r[:2], []).append(k)
        lb, est = np.empty(len(boxes)), np.empty(len(boxes))

        def one(item: tuple[tuple[float, float], list[int]]) -> None:
            (ta, tb), ks = item
            g = torch.tensor([ranges[k][2:] for k in ks], dtype=torch.float64, device=self.prob.device)
            lb[ks], est[ks] = box_bounds(self.prob, self.cache[ta], self.cache[tb], g[:, 0], g[:, 1],
                                         self.criterion, self.n_bins, cuts[ks])

        _map(self.pool, one, list(by_t.items()))
        self.stats["bounds"] += len(boxes)
        return lb, est

    def point_bounds(self, pts: list[Point], again: bool = False) -> None:
        pts = [p for p in dict.fromkeys(pts) if again or p not in self.lb]
        if pts:
            unscored = {p for p in pts if math.isinf(self.best[self.paths[p[0]].group])}
            lb, est = self.bounds([(s, i, i) for s, i in pts])
            self.lb.update({p: (float(v), float(e)) for p, v, e in zip(pts, lb, est)})
            self.coarse = (self.coarse - set(pts)) | unscored

    def evaluate(self, pts: list[Point]) -> None:
        by_t: dict[float, list[Point]] = {}
        for p in dict.fromkeys(pts):
            if p not in self.scores:
                by_t.setdefault(float(self.paths[p[0]].temps[p[1]]), []).append(p)
        temps = list(by_t)
        gams = [[float(self.paths[s].gammas[i]) for s, i in by_t[t]] for t in temps]
        for t, v in zip(temps, exact_scores(self.prob, temps, gams, self.criterion, self.n_bins, self.pool)):
            for p, x in zip(by_t[t], v.tolist()):
                self.scores[p] = x
                grp = self.paths[p[0]].group
                self.best[grp] = min(self.best[grp], x)

    def alive(self, s: int, v: float) -> bool:
        return v <= _cut(self.best[self.paths[s].group])

    def incumbents(self) -> None:
        """Evaluate, for every path, its unevaluated live point of smallest estimate."""
        pick: dict[int, tuple[float, Point]] = {}
        for p, (v, e) in self.lb.items():
            if p not in self.scores and self.alive(p[0], v) and (p[0] not in pick or e < pick[p[0]][0]):
                pick[p[0]] = (e, p)
        if pick:
            self.evaluate([p for _, p in pick.values()])

    def run(self) -> dict[Point, float]:
        boxes: list[Box] = []
        ends: list[Point] = []
        for s, path in enumerate(self.paths):
            last = len(path.temps) - 1
            cuts = sorted(set(range(0, last, _FIRST_STEP)) | {last})
            boxes += [(s, a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b - a >= 2]
            ends += [(s, i) for i in cuts]
        self.point_bounds(ends)  # in one call: the paths' points of a temperature share its work
        while boxes:
            self.incumbents()
            lb, _ = self.bounds(boxes)
            nxt, mids = [], []
            for (s, a, b), v in zip(boxes, lb):
                if not self.alive(s, v):
                    continue
                m = (a + b) // 2
                halves = [(s, a, m), (s, m, b)]
                mids.append((s, m))
                for bx in halves:  # a small box's interior points are bounded directly
                    if bx[2] - bx[1] > _POINT_WIDTH:
                        nxt.append(bx)
                    else:
                        mids += [(s, i) for i in range(bx[1] + 1, bx[2])]
            self.point_bounds(mids)
            boxes = nxt
            live = {float(self.paths[s].temps[i]) for s, a, b in boxes for i in (a, b)}
            self.cache = {t: v for t, v in self.cache.items() if t in live}
        # the survivors in one batch: pairs of the same temperature share the per-temperature work
        left = [p for p, (v, _) in self.lb.items() if p not in self.scores and self.alive(p[0], v)]
        if self.criterion != "nll":  # their bounds computed before any score, now with a threshold
            self.point_bounds([p for p in left if p in self.coarse], again=True)
        self.evaluate([p for p in left if self.alive(p[0], self.lb[p][0])])
        return self.scores


def fast_scores(prob: Problem, paths: list[Path], criterion: str, n_bins: int,
                pool: ThreadPoolExecutor | None) -> tuple[dict[int, float], dict[str, int]]:
    """Exact scores of a set of pairs that contains, for every group, every pair the tie rule may
    select; returns ``{flat index: score}`` and counters (temperatures summarised, bounds, exact)."""
    search = _Search(prob, paths, criterion, n_bins, pool)
    scores = search.run()
    out = {int(paths[s].flat[i]): v for (s, i), v in scores.items()}
    return out, {**search.stats, "exact": len(out)}


def product_paths(gammas: np.ndarray, temps: np.ndarray, group: int | None = None, offset: int = 0) -> list[Path]:
    """One path per gamma over the sorted ``temps``; flat index ``offset + i * len(temps) + j``.

    ``group=None`` puts all in group 0 (one threshold); otherwise path ``i`` is in ``group + i``.
    """
    order = np.argsort(temps, kind="stable")
    return [Path(temps[order], np.full(len(temps), g), offset + i * len(temps) + order,
                 0 if group is None else group + i) for i, g in enumerate(gammas)]
