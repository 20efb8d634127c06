r"""The focal-temperature-scaling search: the prepared fitting set and the exact float64 kernel.

Used by :mod:`focalcal.posthoc` (private; the public entry points are
:class:`~focalcal.posthoc.FocalTemperatureScaling`, :func:`~focalcal.posthoc.focal_ts_scores` and
the ECE grids of :class:`~focalcal.posthoc.TemperatureScaling`). The calibrators' argument checks,
misuse warnings and plain-TS scores are in ``focalcal._calibrators``; the fast exact selection
(its bounds and branch and bound) is in ``focalcal._fts_bounds``.

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

Both methods run their row blocks on ``torch.get_num_threads()`` worker threads with torch's own
intra-op threading off for the duration (blocks are cache-sized and independent; on a loaded
machine an OpenMP team of two threads stalls at every operation's barrier, which cost 10-40x
here, see ``bench/bench_posthoc.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cached_property

import numpy as np
import torch

from .metrics import calibration_error

TIE_RTOL = 1e-12
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
        self.dd_max = float(self.dd.max()) if self.dd.numel() else 0.0
        if not dedupe:
            self.ddy = self.dd.gather(1, self.ycol.view(-1, 1)).squeeze(1)
        self.rows = d.shape[0]
        self.nb = max(1, min(self.rows, _BLOCK // max(1, self.k1)))
        self.n_blocks = -(-self.rows // self.nb)
        # the bounds' groups of classes: the gaps of each group's first and last class
        self.starts = group_starts(self.k1)
        self.ends = self.starts[1:] + [self.k1]
        # (groups, rows), like the group sums: the bounds' sums over groups add contiguous rows
        self.dd_first = self.dd[:, self.starts].T.contiguous()
        self.dd_last = self.dd[:, [e - 1 for e in self.ends]].T.contiguous()

    @cached_property
    def dd_t(self) -> list[torch.Tensor]:
        """``dd`` per row block, transposed to ``(classes, rows)`` (for the bounds' group sums)."""
        return [self.dd[self.block(i)].T.contiguous() for i in range(self.n_blocks)]

    def log_w(self, dd: torch.Tensor, beta: float) -> torch.Tensor:
        """``u = -beta dd`` for gaps ``dd`` of this set, clamped at ``_MIN_U`` (a pass skipped when
        ``beta`` times the largest gap is below ``-_MIN_U``: rounding is monotone, so no ``u`` is then
        below ``_MIN_U`` and the clamp would change nothing)."""
        u = torch.mul(dd, -beta)
        return u if self.dd_max * beta < -_MIN_U else u.clamp_(min=_MIN_U)

    def block(self, i: int) -> slice:
        return slice(i * self.nb, min(self.rows, (i + 1) * self.nb))

    def expand(self, per_row: torch.Tensor) -> torch.Tensor:
        """Per-row values ``(..., rows)`` as per-sample values ``(..., N)``."""
        return per_row if self.inverse is None else per_row[..., self.inverse]


def _shared(prob: Problem, sl: slice, beta: float):
    """What depends on ``T`` only, for the rows ``sl``: ``u = log w``, ``w``, ``c1``, ``log E``, ``log(1+E)``."""
    u = prob.log_w(prob.dd[sl], beta)
    w = torch.exp(u)
    c1 = prob.d1[sl] * -beta
    log_e = torch.log(w.sum(-1)) + c1
    return u, w, c1, log_e, softplus(log_e)


# ============================================================================================
# the exact kernel
# ============================================================================================

def _block_exact(prob: Problem, sl: slice, beta: float, gammas: Sequence[float],
                 out_rho: torch.Tensor, out_logp: torch.Tensor | None) -> None:
    """``rho`` (and ``log p_y``) of the rows ``sl`` for every gamma, written into ``out[:, sl]``."""
    u, w, c1, log_e, sp = _shared(prob, sl, beta)
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
