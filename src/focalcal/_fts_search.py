r"""The focal-temperature-scaling search: the exact float64 kernel and the fast exact selection.

Used by :mod:`focalcal.posthoc` (private; the public entry points are
:class:`~focalcal.posthoc.FocalTemperatureScaling`, :func:`~focalcal.posthoc.focal_ts_scores` and
the ECE grids of :class:`~focalcal.posthoc.TemperatureScaling`). The calibrators' argument checks,
misuse warnings and plain-TS scores are in ``focalcal._calibrators``.

The exact kernel
----------------
The selection criteria need, per sample and per ``(gamma, T)``, only the mapped probability of the
top class (ECE) and of the true class (NLL). The focal map preserves the argmax, so the top class
is the argmax ``t`` of the logits and the confidence is ``1 / (1 + rho)`` with
:math:`\rho = \sum_{j\neq t} h^\gamma(q_j)/h^\gamma(q_t)`. With the gaps :math:`\delta_j = z_t - z_j`
sorted ascending (``delta_1`` the runner-up), :math:`\beta = 1/T`, :math:`w_j = e^{-\beta(\delta_j -
\delta_1)} \in (0, 1]`, :math:`E = e^{-\beta\delta_1}\sum_j w_j` (so :math:`q_t = 1/(1+E)`) and
:math:`r_t = \log(1+E)/E`,

.. math::

    \rho = e^{-\beta\delta_1}\,(1-q_t)^{\gamma}\,(1+\gamma r_t)
           \sum_{j\neq t} \frac{w_j\,(1-q_j)^{1-\gamma}}{(1-q_j) - \gamma q_j\log q_j},

evaluated in log space outside the sum. Per temperature the exponentials ``w_j``, ``q_j = w_j
e^{-beta delta_1} q_t``, ``log(1 - q_j)`` and ``q_j log q_j`` are shared by every gamma (one exp
and one log per logit); per ``(gamma, T)`` and logit the work is one exp, one division and three
other passes, in float64, in cache-sized blocks of rows. Every exponent is clamped at ``-300`` so
that no subnormal number is formed: ``exp`` of an argument below about ``-708`` (and ``float32``
``exp`` below about ``-87``) takes a slow path, 6-20x slower per element, which is what made
confident trained networks cost several times random logits in loops over ``softmax``; a clamped
term is below ``1e-130`` relative to the runner-up's, which is kept, so no float64 sum changes.
Rows with the same sorted gaps (duplicated or permuted logit rows) have the same confidence and
are computed once, so ties stay ties.

The fast exact selection (``method="fast"``)
--------------------------------------------
The selected pair is the exact search's, and its score the exact kernel's; most grid points are
never evaluated exactly, because a cheap *lower bound* of their score already exceeds the best
exact score found (branch and bound over temperature intervals, one path per gamma):

* A bound over a box ``[gamma_a, gamma_b] x [T_a, T_b]`` needs, at ``T_a`` and ``T_b``, per row
  the sums of ``w_j`` over groups of classes of adjacent gaps (the first ones alone, then runs of
  growing length, :func:`group_starts`) -- one pass over the classes per temperature
  (:func:`group_sums`). Every factor of ``rho`` is monotone in ``beta`` (``w_j``, ``E``, ``q_t``,
  ``r_t``, and the range of each ``q_j``) and, for fixed ``q``, in ``gamma``; and
  :math:`h^\gamma(q)/q = (1-q)^{-\gamma}/(1+\gamma f(q))` with :math:`f(q) = -q\log q/(1-q)`
  increasing is a product of two factors each monotone in ``q`` and in ``gamma``. So each factor's
  range over the box (and over a group's ``q``) is attained at a corner that the sign of
  ``gamma`` names, and the products of the ranges bound ``rho`` for every row, hence the
  confidence (:func:`row_bounds`).
* Any binned l1 calibration error is at least the 1-bin one, ``|mean(conf) - accuracy|`` (the
  triangle inequality over bins, for equal-width and equal-mass bins alike). At a single
  temperature the confidence intervals are narrow enough for a sharper bound: rows whose possible
  bins lie in one run of bins count in that run's sum, the others cost their largest error
  (:func:`binned_lower_bound`). The NLL is bounded row by row.
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
  score are evaluated exactly: 14-59 of the paper's 4500 on the released networks in one run of
  ``bench/bench_posthoc.py``, which counts them).

Both methods run their row blocks on ``torch.get_num_threads()`` worker threads with torch's own
intra-op threading off for the duration (blocks are cache-sized and independent; on a loaded
machine an OpenMP team of two threads stalls at every operation's barrier, which cost 10-40x
here, see ``bench/bench_posthoc.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from .metrics import calibration_error
from .metrics.binned import _width_index

TIE_RTOL = 1e-12
# a pair is discarded only if its lower bound exceeds the tie threshold by this (relative) margin
_MARGIN = 1e-9
# float64 entries per row block of the kernels (cache-sized)
_BLOCK = 1 << 17
# confidences kept at once when scoring many pairs (memory bound)
_CONF_CHUNK = 1 << 22
# exponents are clamped here (see the module docstring): a term e^-300 ~ 1e-130 next to the
# runner-up's e^0 = 1 leaves every float64 sum unchanged, and products of two such stay normal
_MIN_U = -300.0
_MIN_EXP = -700.0
# above this |gamma| the per-class exponent (1 - gamma) log(1 - q_j) could overflow; the kernel
# then uses a row-shifted, clamped form, and the fast search evaluates everything exactly
BIG_GAMMA = 600.0
# temperatures per first-level box of the branch and bound
_FIRST_STEP = 64
# boxes of at most this many temperature steps are not bounded: their interior points are (a box
# bound costs what a point bound costs, and three in four of those of 2 steps failed to discard
# their box on the benchmark problems)
_POINT_WIDTH = 2
# the equal-mass bounds count rows in at most 2**_MASS_BITS buckets of confidence (_bin_ranges)
_MASS_BITS = 14
# the bounds group the non-top classes (ordered by gap) into runs of adjacent columns: the first
# _SINGLE one by one, then runs _GROWTH times longer each (K = 100: 1, 1, 2, 6, 16, 39, 34 classes);
# more groups tighten the bounds and cost more per bound (measured in bench/bench_posthoc.py)
_SINGLE = 2
_GROWTH = 2.5


# ============================================================================================
# scalar helpers and the worker pool
# ============================================================================================

def softplus(x: torch.Tensor) -> torch.Tensor:
    # log(1 + e^x) with an absolute error ~1e-16, i.e. probabilities exact to rounding (torch's
    # softplus is off by up to e^-20 past its threshold; log1p is ~10x slower than log on CPU)
    return x.clamp(min=0) + torch.log(1 + torch.exp(-x.abs().clamp(max=-_MIN_EXP)))


def one_minus_r(e: torch.Tensor) -> torch.Tensor:
    r"""``1 - log1p(E)/E`` for ``E >= 0`` without cancellation (series ``sum (-1)^n E^(n+1)/(n+2)``)."""
    small = e < 0.05
    es = torch.where(small, e, torch.zeros_like(e))
    acc = torch.zeros_like(e)
    for n in range(11, -1, -1):  # 12 terms: truncation < 0.05**12 relative
        acc = ((-1.0) ** n) / (n + 2) + es * acc
    eb = torch.where(small, torch.ones_like(e), e)
    return torch.where(small, es * acc, 1 - torch.log1p(eb) / eb)


def one_plus_gamma_r(gamma: float, omr: torch.Tensor) -> torch.Tensor:
    """``1 + gamma r_t`` from ``1 - r_t``; for ``gamma < 0`` as ``(1 + gamma) + |gamma| (1 - r_t)``."""
    if gamma >= 0:
        return 1 + gamma * (1 - omr)
    return max(1 + gamma, 0.0) - gamma * omr


@contextmanager
def workers(device: torch.device) -> Iterator[ThreadPoolExecutor | None]:
    """A pool of ``torch.get_num_threads()`` threads, torch's intra-op threads set to 1 meanwhile."""
    n = torch.get_num_threads()
    if device.type != "cpu" or n <= 1:
        yield None
        return
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(n, thread_name_prefix="focalcal-fts") as pool:
            yield pool
    finally:
        torch.set_num_threads(n)


def _map(pool: ThreadPoolExecutor | None, fn: Callable, items: list) -> list:
    """``[fn(x) for x in items]``, on the pool's threads when there is one."""
    if pool is None or len(items) < 2:
        return [fn(x) for x in items]
    return list(pool.map(fn, items))


def _run_parts(pool: ThreadPoolExecutor | None, fn: Callable[[int, int], None], n_blocks: int) -> None:
    """Call ``fn(b0, b1)`` on contiguous ranges of row blocks, one per worker."""
    n_parts = 1 if pool is None else min(pool._max_workers, n_blocks)
    cuts = [round(i * n_blocks / n_parts) for i in range(n_parts + 1)]
    ranges = [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    if pool is None or len(ranges) == 1:
        for a, b in ranges:
            fn(a, b)
        return
    for f in [pool.submit(fn, a, b) for a, b in ranges]:
        f.result()


# ============================================================================================
# the prepared fitting set
# ============================================================================================

def group_starts(k1: int) -> list[int]:
    """First columns of the runs of adjacent non-top classes that the bounds treat as one group."""
    starts, s, size = [], 0, 1.0
    while s < k1:
        starts.append(s)
        if len(starts) > _SINGLE:
            size *= _GROWTH
        s += max(1, round(size))
    return starts


class Problem:
    """Sorted gaps to the top logit of a fitting set, prepared once per search.

    ``d1`` (runner-up gap) and ``dd`` (gaps minus ``d1``, ascending) are kept for the distinct
    rows only when ``dedupe`` (ECE criteria: the confidence depends on the sorted gaps alone);
    ``inverse`` maps every sample to its row.
    """

    def __init__(self, z: torch.Tensor, y: torch.Tensor, dedupe: bool) -> None:
        n, k = z.shape
        zs, order = torch.sort(z, dim=-1, descending=True, stable=True)  # ties: first index on top
        self.correct = order[:, 0] == y
        d = zs[:, :1] - zs[:, 1:]  # (N, K - 1), ascending, >= 0
        self.n, self.k1, self.device = n, k - 1, z.device
        self.acc = float(self.correct.double().mean())
        if dedupe:
            d, self.inverse, counts = torch.unique(d, dim=0, return_inverse=True, return_counts=True)
            self.weights = counts.to(torch.float64)
            # correct samples per distinct row (duplicated rows may carry different labels)
            self.n_correct = torch.zeros_like(self.weights).index_add_(0, self.inverse, self.correct.double())
        else:
            self.inverse = None
            self.weights = None
            pos = torch.empty_like(order)
            pos.scatter_(1, order, torch.arange(k, device=z.device).expand(n, k))
            ycol = pos.gather(1, y.view(-1, 1)).squeeze(1) - 1
            self.ycol = torch.where(self.correct, torch.zeros_like(ycol), ycol)
        self.d1 = d[:, 0].contiguous()
        self.dd = (d - d[:, :1]).contiguous()
        if not dedupe:
            self.ddy = self.dd.gather(1, self.ycol.view(-1, 1)).squeeze(1)
        self.rows = d.shape[0]
        self.nb = max(1, min(self.rows, _BLOCK // max(1, self.k1)))
        self.n_blocks = -(-self.rows // self.nb)
        # the bounds' groups of classes: the gaps of each group's first and last class
        self.starts = group_starts(self.k1)
        self.ends = self.starts[1:] + [self.k1]
        self.dd_first = self.dd[:, self.starts].contiguous()
        self.dd_last = self.dd[:, [e - 1 for e in self.ends]].contiguous()

    def block(self, i: int) -> slice:
        return slice(i * self.nb, min(self.rows, (i + 1) * self.nb))

    def expand(self, per_row: torch.Tensor) -> torch.Tensor:
        """Per-row values ``(..., rows)`` as per-sample values ``(..., N)``."""
        return per_row if self.inverse is None else per_row[..., self.inverse]


def _shared(d1: torch.Tensor, dd: torch.Tensor, beta: float):
    """What depends on ``T`` only, for a block of rows: ``u = log w``, ``w``, ``c1``, ``log E``, ``log(1+E)``."""
    u = torch.mul(dd, -beta).clamp_(min=_MIN_U)
    w = torch.exp(u)
    c1 = d1 * -beta
    log_e = torch.log(w.sum(-1)) + c1
    return u, w, c1, log_e, softplus(log_e)


# ============================================================================================
# the exact kernel
# ============================================================================================

def _block_exact(prob: Problem, sl: slice, beta: float, gammas: Sequence[float],
                 out_rho: torch.Tensor, out_logp: torch.Tensor | None) -> None:
    """``rho`` (and ``log p_y``) of the rows ``sl`` for every gamma, written into ``out[:, sl]``."""
    u, w, c1, log_e, sp = _shared(prob.d1[sl], prob.dd[sl], beta)
    log_u = log_e - sp  # log(1 - q_t)
    omr = one_minus_r(torch.exp(log_e.clamp(min=_MIN_EXP)))
    if any(g != 0 for g in gammas):
        # q_j = w_j e^c with c = log q_runner-up; c and u are clamped at -300, so every q_j is a
        # normal number; where the true q_j is below 1e-130, 1 - q_j, log(1 - q_j) and the
        # denominators round to the same float64 values either way
        c = (c1 - sp).clamp_(min=_MIN_U).unsqueeze(-1)
        q = w.mul_(torch.exp(c))
        omq = 1 - q
        l1q = torch.log(omq)
        qlq = q.mul_(u + c)
    if out_logp is not None:
        lqy = prob.ddy[sl] * -beta + c1 - sp  # log q_y (unclamped: the NLL of a confident miss is large)
        qy = torch.exp(lqy.clamp(min=_MIN_EXP))
        miss = ~prob.correct[sl]
    for i, g in enumerate(gammas):
        if g == 0:
            log_rho = log_e
            log_ry = lqy + sp if out_logp is not None else None
        else:
            onegr = one_plus_gamma_r(g, omr)
            row = c1 + g * log_u + torch.log(onegr)
            if abs(g) <= BIG_GAMMA:
                e = torch.exp(torch.add(u, l1q, alpha=1 - g))
                log_rho = row + torch.log(e.div_(torch.add(omq, qlq, alpha=-g)).sum(-1))
            else:  # shift the exponents by their row maximum and clamp
                x = torch.add(u, l1q, alpha=1 - g)
                xm = x.amax(-1, keepdim=True)
                e = torch.exp(x.sub_(xm).clamp_(min=_MIN_EXP))
                log_rho = row + xm.squeeze(-1) + torch.log(e.div_(torch.add(omq, qlq, alpha=-g)).sum(-1))
            if out_logp is not None:
                den_y = (1 - qy) - g * qy * lqy
                log_ry = row + (prob.ddy[sl] * -beta) + (1 - g) * torch.log(1 - qy) - torch.log(den_y)
        rho = torch.exp(log_rho.clamp(min=_MIN_EXP))
        out_rho[i, sl] = rho
        if out_logp is not None:
            out_logp[i, sl] = torch.where(miss, log_ry, torch.zeros_like(log_ry)) - torch.log1p(rho)


def exact_per_temperature(prob: Problem, temps: Sequence[float], gammas: Sequence[Sequence[float]],
                          want_nll: bool, pool: ThreadPoolExecutor | None) -> list[torch.Tensor]:
    """For every ``temps[i]``: ``rho`` (ECE) or ``log p_y`` (NLL) of shape ``(len(gammas[i]), rows)``."""
    outs = [torch.empty(len(g), prob.rows, dtype=torch.float64, device=prob.device) for g in gammas]
    logps = ([torch.empty(len(g), prob.rows, dtype=torch.float64, device=prob.device) for g in gammas]
             if want_nll else [None] * len(gammas))

    def part(b0: int, b1: int) -> None:
        for blk in range(b0, b1):
            sl = prob.block(blk)
            for t, gs, o, lp in zip(temps, gammas, outs, logps):
                _block_exact(prob, sl, 1.0 / t, gs, o, lp)

    _run_parts(pool, part, prob.n_blocks)
    return logps if want_nll else outs


def exact_scores(prob: Problem, temps: Sequence[float], gammas: Sequence[Sequence[float]],
                 criterion: str, n_bins: int, pool: ThreadPoolExecutor | None) -> list[torch.Tensor]:
    """Exact scores ``(len(gammas[i]),)`` of the pairs ``(gammas[i][j], temps[i])``, float64 on the CPU."""
    out: list[torch.Tensor] = []
    per = max(1, _CONF_CHUNK // max(1, prob.n * max((len(g) for g in gammas), default=1)))
    for i0 in range(0, len(temps), per):
        ts, gs = temps[i0:i0 + per], gammas[i0:i0 + per]
        vals = exact_per_temperature(prob, ts, gs, criterion == "nll", pool)
        if criterion == "nll":
            out.extend((-v.mean(-1)).cpu() for v in vals)
            continue
        conf = prob.expand(torch.cat(vals).add_(1).reciprocal_())
        binning = "mass" if criterion == "ece_mass" else "width"
        halves = conf.chunk(2) if pool is not None else (conf,)
        s = torch.cat(_map(pool, lambda c: calibration_error(c, prob.correct, n_bins=n_bins, binning=binning),
                           list(halves))).cpu()
        out.extend(s.split([len(g) for g in gs]))
    return out


def grid_scores(prob: Problem, temps: torch.Tensor, gammas: torch.Tensor, criterion: str, n_bins: int,
                pool: ThreadPoolExecutor | None) -> torch.Tensor:
    """The whole ``(len(gammas), len(temps))`` score grid, exactly (``method="exact"``)."""
    gl = [float(g) for g in gammas]
    cols = exact_scores(prob, [float(t) for t in temps], [gl] * len(temps), criterion, n_bins, pool)
    return torch.stack(cols, dim=1)


def select(scores: np.ndarray, gammas: np.ndarray, temps: np.ndarray) -> int:
    """Index of the best (smallest) score, ties broken towards the identity map (posthoc docs)."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    if not np.isfinite(s).all():  # pragma: no cover - the scores are finite by construction
        raise RuntimeError("non-finite calibration score in the grid; please report this input")
    best = s.min()
    tied = np.flatnonzero(s <= best + TIE_RTOL * max(1.0, abs(best)))
    g = np.abs(np.asarray(gammas, dtype=np.float64).ravel()[tied])
    lt = np.abs(np.log(np.asarray(temps, dtype=np.float64).ravel()[tied]))
    return int(tied[np.lexsort((tied, lt, g))[0]])


# ============================================================================================
# lower bounds over boxes of (gamma, T)
# ============================================================================================

def group_sums(prob: Problem, temps: Sequence[float], pool: ThreadPoolExecutor | None) -> list[torch.Tensor]:
    """``w_j`` summed over each group of classes, ``(rows, groups)`` per temperature (the one pass
    over all classes that a bound needs)."""
    out = [torch.empty(prob.rows, len(prob.starts), dtype=torch.float64, device=prob.device) for _ in temps]
    first, last = (torch.tensor(c, device=prob.device) for c in (prob.starts, prob.ends))

    def part(b0: int, b1: int) -> None:
        for blk in range(b0, b1):
            sl = prob.block(blk)
            dd = prob.dd[sl]
            for t, o in zip(temps, out):
                cum = torch.exp(torch.mul(dd, -1.0 / t).clamp_(min=_MIN_U)).cumsum(-1)
                cum = torch.cat([torch.zeros_like(cum[:, :1]), cum], -1)
                # differences of a running sum: off by at most a rounding of the row's whole sum,
                # far inside the search's margin (_MARGIN); never negative
                o[sl] = (cum[:, last] - cum[:, first]).clamp_(min=0)

    _run_parts(pool, part, prob.n_blocks)
    return out


@dataclass
class Terms:
    """Per-row quantities at one temperature: ``beta``, ``-beta delta_1``, ``log(1+E)``,
    ``log(1 - q_t)``, ``r_t`` and the sums of ``w_j`` over the groups of classes."""

    beta: float
    c1: torch.Tensor
    sp: torch.Tensor
    lu: torch.Tensor
    r: torch.Tensor
    ws: torch.Tensor    # (rows, groups)

    @classmethod
    def at(cls, prob: Problem, t: float, ws: torch.Tensor) -> Terms:
        beta = 1.0 / t
        c1 = prob.d1 * -beta
        log_e = torch.log(ws.sum(-1)) + c1
        sp = softplus(log_e)
        return cls(beta, c1, sp, log_e - sp, 1 - one_minus_r(torch.exp(log_e.clamp(min=_MIN_EXP))), ws)


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
    den_max = 1 + gh * (f_hi if gh >= 0 else f_lo)
    return den_max.reciprocal_() if gl == 0 else torch.exp(-gl * (l1_lo if gl > 0 else l1_hi)).div_(den_max)


def _g_max(ends: list[torch.Tensor], gl: float, gh: float) -> torch.Tensor:
    """Upper end of ``h^gamma(q)/q`` over a box (see :func:`_g_min`)."""
    l1_lo, f_lo, l1_hi, f_hi = ends
    den_min = 1 + gl * (f_lo if gl >= 0 else f_hi)
    return den_min.reciprocal_() if gh == 0 else torch.exp(-gh * (l1_hi if gh > 0 else l1_lo)).div_(den_min)


def row_bounds(prob: Problem, a: Terms, b: Terms, g_lo: torch.Tensor, g_hi: torch.Tensor,
               criterion: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row and box ``[g_lo, g_hi] x [T_a, T_b]``, shape ``(M, rows)``: bounds of ``log rho``
    (ECE criteria), or a lower bound of ``-log p_y`` and ``+inf`` (NLL).

    ``a`` holds the terms at the lower temperature ``T_a`` (larger beta), ``b`` at ``T_b``. The
    non-top classes are bounded in groups of adjacent gaps (:func:`group_starts`), one by one for
    the first few.
    """
    # each group's q lie between its last class's at T_a and its first class's at T_b
    lo = a.c1.unsqueeze(-1) + torch.mul(prob.dd_last, -a.beta).clamp_(min=_MIN_U) - b.sp.unsqueeze(-1)
    hi = b.c1.unsqueeze(-1) + torch.mul(prob.dd_first, -b.beta).clamp_(min=_MIN_U) - a.sp.unsqueeze(-1)
    ends = _q_ends(lo, hi)
    nll = criterion == "nll"
    if nll:
        # -log p_y >= log(1 + rho_lo) - [y != t] log(h(q_y) / h(q_t))_hi, with
        # log(h(q_y) / h(q_t)) = -beta delta_y + log(row factor) + log(h(q_y) / q_y)
        uy_a, uy_b = prob.ddy * -a.beta, prob.ddy * -b.beta
        ends_y = _q_ends(a.c1 + uy_a - b.sp, b.c1 + uy_b - a.sp)
        miss = ~prob.correct
    out_lo, out_hi = [], []
    for gl, gh in zip(g_lo.tolist(), g_hi.tolist()):
        # row factor (1 - q_t)^gamma (1 + gamma r_t): log(1 - q_t) increases, r_t decreases with T
        row_lo = a.c1 + gh * (a.lu if gh >= 0 else b.lu) + torch.log(1 + gl * (b.r if gl >= 0 else a.r))
        row_hi = b.c1 + gl * (b.lu if gl >= 0 else a.lu) + torch.log(1 + gh * (a.r if gh >= 0 else b.r))
        lr_lo = row_lo + torch.log((_g_min(ends, gl, gh) * a.ws).sum(-1))
        if nll:
            lry_hi = row_hi + uy_b + torch.log(_g_max(ends_y, gl, gh))
            out_lo.append(softplus(lr_lo) - torch.where(miss, lry_hi, torch.zeros_like(lry_hi)))
        else:
            out_lo.append(lr_lo)
            out_hi.append(row_hi + torch.log((_g_max(ends, gl, gh) * b.ws).sum(-1)))
    lo_all = torch.stack(out_lo)
    return lo_all, (torch.full_like(lo_all, math.inf) if nll else torch.stack(out_hi))


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


def box_bounds(prob: Problem, a: Terms, b: Terms, g_lo: torch.Tensor, g_hi: torch.Tensor,
               criterion: str, n_bins: int = 15, cut: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Lower bound of the score over each box ``[g_lo, g_hi] x [T_a, T_b]`` and an estimate, ``(M,)``.

    The binned l1 calibration errors are bounded by the 1-bin error ``|mean(conf) - accuracy|``,
    raised to :func:`binned_lower_bound` for the boxes whose 1-bin bound is at most ``cut`` (all
    when ``cut`` is None; the search skips the boxes it would discard anyway). The NLL is bounded
    row by row (:func:`row_bounds`).
    """
    lo, hi = row_bounds(prob, a, b, g_lo, g_hi, criterion)
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
        cuts = np.array([_cut(self.best[self.paths[s].group]) if i == j else -np.inf for s, i, j in boxes])
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
        for s, path in enumerate(self.paths):
            last = len(path.temps) - 1
            cuts = sorted(set(range(0, last, _FIRST_STEP)) | {last})
            boxes += [(s, a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b - a >= 2]
            self.point_bounds([(s, i) for i in cuts])
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
