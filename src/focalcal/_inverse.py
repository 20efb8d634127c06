r"""Inverses of the focal maps: the focal-risk minimisers (public through :mod:`focalcal.maps`).

The multiclass inverse solves the KKT conditions of the focal risk by nested, vectorised,
safeguarded Newton iterations in float64; the binary inverses solve ``logit FC(s) = t`` directly.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from scipy.optimize import brentq

from ._logodds import (
    _LOG2,
    _binary_logit,
    _ell,
    _ell_prime,
    _elementwise_real,
    _elementwise_unit,
    _L_prime,
    _logit_elementwise,
    _softplus,
)
from ._validation import ArrayLike, check_gamma, check_probs

__all__ = ["inverse_focal_map", "binary_inverse_focal_map", "binary_inverse_focal_logit"]


def _solve_bracketed(fun: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
                     lo: torch.Tensor, hi: torch.Tensor, x0: torch.Tensor,
                     rtol: float = 4 * 2.0 ** -52, maxiter: int = 200) -> torch.Tensor:
    """Vectorised safeguarded Newton ("rtsafe": Newton inside the bracket, bisection otherwise).

    ``fun(x) -> (f, f')`` with ``f(lo) <= 0 <= f(hi)`` elementwise. A Newton step is taken only if
    it lands strictly inside the current bracket and is less than half the step before last;
    otherwise the bracket is bisected, so it converges for any continuous ``f``. An element stops
    when its step is below ``rtol`` (relative), when its bracket is that narrow, or when Newton
    steps below ``1e4 rtol`` stop halving (the rounding floor of ``f``); stopped elements are frozen.
    """
    x = torch.minimum(torch.maximum(x0, lo), hi)
    active = torch.ones_like(x, dtype=torch.bool)
    prev = torch.full_like(x, math.inf)
    dx_old = hi - lo
    for _ in range(maxiter):
        f, df = fun(x)
        lo = torch.where(active & (f <= 0), x, lo)
        hi = torch.where(active & (f >= 0), x, hi)
        newton_step = f / df
        newton = x - newton_step
        scale = 1 + x.abs()
        tiny = newton_step.abs() <= rtol * scale  # at the root to rounding: accept even on an end
        ok = torch.isfinite(newton) & (((newton > lo) & (newton < hi)
                                        & (2 * newton_step.abs() <= dx_old.abs())) | tiny)
        xn = torch.where(ok, newton, 0.5 * (lo + hi))
        xn = torch.where(f == 0, x, xn)
        step = (xn - x).abs()
        conv = ((step <= rtol * scale) | ((hi - lo) <= rtol * scale)
                | (ok & (step <= 1e4 * rtol * scale) & (step >= 0.5 * prev)))
        dx_old = torch.where(active, prev, dx_old)
        x = torch.where(active, xn, x)
        prev = torch.where(active, step, prev)
        active = active & ~conv
        if not bool(active.any()):
            break
    return x


@functools.lru_cache(maxsize=256)
def _ell_peak(gv: float) -> float:
    """Log-odds ``s*`` where ``h`` peaks (``-1 < gamma < 0``); ``+inf`` where ``h`` is increasing."""
    if gv >= 0 or gv == -1:
        return math.inf

    def d(s: float) -> float:
        return float(_ell_prime(torch.tensor([s], dtype=torch.float64), gv)[0])

    hi = 8.0
    while d(hi) > 0 and hi < 1e4:
        hi *= 2
    return brentq(d, 0.0, hi, xtol=1e-14, rtol=8.9e-16, maxiter=500)


def _ell_inverse(y: torch.Tensor, gv: float, x0: torch.Tensor | None = None) -> torch.Tensor:
    """Solve ``log h(sigmoid(s)) = y`` for ``s`` (float64), on the increasing branch ``s <= s*``."""
    B = abs(gv - 1) * _LOG2 + abs(math.log1p(gv * _LOG2))  # |ell(s) - s| <= B for s <= 0
    s_star = _ell_peak(gv)
    lo = torch.clamp(y - B, max=0.0)
    if gv > 0:
        hi_pos = torch.clamp((y + abs(gv - 1) * _LOG2 + math.log1p(gv)) / gv, min=0.0)
    elif gv == -1:
        gap = torch.clamp(_LOG2 - y, min=1e-300)
        hi_pos = torch.clamp(-torch.log(6.0 / 11.0 * gap), min=0.0, max=1e4)
    else:
        hi_pos = torch.full_like(y, s_star)
    hi = torch.where(y + B <= 0, y + B, hi_pos)
    if x0 is None:
        x0 = torch.where(y + B <= 0, y, 0.5 * (lo + hi))

    def fun(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _ell(s, gv, gv) - y, _ell_prime(s, gv)

    return _solve_bracketed(fun, lo, hi, x0)


def inverse_focal_map(p: ArrayLike, gamma: float) -> torch.Tensor:
    r"""Focal-risk minimiser for a true posterior: the inverse of :func:`focal_map`.

    Returns :math:`q^{\gamma,*} = \arg\min_{q\in\Delta^K}\sum_j p_j\,\ell_\gamma(q_j)`
    (Charoenphakdee et al. (2021) Thm. 11 read backwards; K&K (2024) Prop. 4 proof). Its KKT
    conditions are :math:`p_j\,\ell'_\gamma(q_j) = \lambda`, i.e. :math:`h^\gamma(q_j) = p_j/\mu`.
    Writing :math:`s_j` for the log-odds of :math:`q_j` and taking the top class's log-odds
    :math:`s_{top}` as the unknown, every other :math:`s_k` solves the monotone scalar equation
    :math:`\log h(\sigma(s_k)) = \log h(\sigma(s_{top})) + \log(p_k/p_{top})`, and :math:`s_{top}` is
    the root of :math:`G(s_{top}) = \log\sum_{k\ne top}\sigma(s_k) - \log(1-\sigma(s_{top}))`. Both
    levels are solved by vectorised safeguarded Newton/bisection in float64 (no loop over rows).

    Parameters
    ----------
    p : ArrayLike, shape ``(..., K)``, ``K >= 2``
        Posterior rows in any precision (validated like :func:`focal_map`'s ``probs``, by the
        rule of :ref:`probs-tolerance` in :mod:`focalcal.metrics`).
    gamma : float, ``>= -1``
        ``0`` returns ``p`` unchanged. For ``-1 < gamma < 0`` only the top class can sit on the
        decreasing branch of ``h``, which is why it is the outer unknown.

    Returns
    -------
    torch.Tensor, shape ``(..., K)``, dtype of ``p`` (not differentiable)
        ``focal_map(inverse_focal_map(p, g), g) == p`` to ~1e-15 in float64. Zero entries stay 0 and
        one-hot rows map to themselves.

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import focal_map, inverse_focal_map
    >>> p = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)  # a posterior
    >>> inverse_focal_map(p, gamma=3.0)  # what a focal-loss model predicts for it: less confident
    tensor([0.4587, 0.3540, 0.1873], dtype=torch.float64)
    >>> inverse_focal_map(focal_map(p, 3.0), 3.0)  # the inverse of focal_map
    tensor([0.6000, 0.3000, 0.1000], dtype=torch.float64)
    """
    t = check_probs(p, "p", hint="")
    gv = check_gamma(gamma)
    if gv == 0:
        return t.clone()
    with torch.no_grad():
        x = t.detach().to(torch.float64)
        x = x / x.sum(-1, keepdim=True)
        shape = x.shape
        K = shape[-1]
        x = x.reshape(-1, K)
        out = x.clone()
        top = x.argmax(-1, keepdim=True)
        is_top = torch.zeros_like(x, dtype=torch.bool).scatter_(-1, top, True)
        rest_top = x.masked_fill(is_top, 0.0).sum(-1)
        solve_rows = rest_top > 0  # one-hot rows are fixed points
        if bool(solve_rows.any()):
            xs = x[solve_rows]
            it = is_top[solve_rows]
            active = (xs > 0) & ~it
            logx = torch.log(torch.where(xs > 0, xs, torch.ones_like(xs)))
            log_ptop = logx.masked_fill(~it, 0.0).sum(-1, keepdim=True)
            delta = torch.where(active, logx - log_ptop, torch.full_like(xs, -1.0))
            neg_inf = torch.full_like(xs, -math.inf)
            state: dict[str, torch.Tensor | None] = {"s": None}

            def inner(s_top: torch.Tensor) -> torch.Tensor:
                y = _ell(s_top, gv, gv) + delta
                s = _ell_inverse(y, gv, state["s"])
                state["s"] = s
                return s

            def G(s_top: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                s = inner(s_top)
                logq = torch.where(active, torch.nn.functional.logsigmoid(s), neg_inf)
                lse = torch.logsumexp(logq, -1, keepdim=True)
                g_val = lse + _softplus(s_top)
                w = torch.exp(logq - lse)
                ratio = torch.where(active, torch.sigmoid(-s) / _ell_prime(s, gv), torch.zeros_like(s))
                dg = _ell_prime(s_top, gv) * (w * ratio).sum(-1, keepdim=True) + torch.sigmoid(s_top)
                return g_val, dg

            # bracket: q_top >= 1/K gives G <= 0; expand the upper end until G >= 0
            lo = torch.full_like(log_ptop, -math.log(K - 1))
            logit_ptop = log_ptop - torch.log(rest_top[solve_rows]).unsqueeze(-1)
            hi = torch.maximum(lo, logit_ptop) + 1.0
            width = hi - lo
            for _ in range(80):
                g_hi, _ = G(hi)
                need = g_hi < 0
                if not bool(need.any()):
                    break
                lo = torch.where(need, hi, lo)
                width = torch.where(need, 2 * width, width)
                hi = torch.where(need, hi + width, hi)
            s_top = _solve_bracketed(G, lo, hi, 0.5 * (lo + hi))
            s = inner(s_top)
            logq = torch.where(active, torch.nn.functional.logsigmoid(s), neg_inf)
            logq = torch.where(it, torch.nn.functional.logsigmoid(s_top).expand_as(logq), logq)
            out[solve_rows] = torch.softmax(logq, dim=-1)
        return out.reshape(shape).to(t.dtype)


def _binary_inverse_logit(y: torch.Tensor, gv: float) -> torch.Tensor:
    """Solve ``logit FC(s) = y`` for finite float64 ``y`` (safeguarded Newton)."""
    if gv == -1:
        lo, hi = y - 2.5, y + 2.5
    else:
        bnd = abs(math.log1p(gv)) + 1.0
        lo, hi = (y - bnd) / (1 + gv), (y + bnd) / (1 + gv)

    def fun(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _binary_logit(s, gv, gv) - y, (1 + gv) - _L_prime(s, gv) - _L_prime(-s, gv)

    return _solve_bracketed(fun, lo, hi, 0.5 * (lo + hi))


def binary_inverse_focal_logit(t: ArrayLike, gamma: float) -> torch.Tensor:
    r"""Inverse of :func:`binary_focal_logit`: the ``s`` with :math:`\operatorname{logit} FC(s) = t`.

    The log-odds of the binary focal-risk minimiser for a posterior with log-odds ``t``; unlike
    :func:`binary_inverse_focal_map` it cannot saturate (for ``gamma`` near ``-1`` the minimiser
    is astronomically confident: ``gamma = -0.999``, ``t = 7.66`` gives ``s ~ 760``).

    Parameters
    ----------
    t : ArrayLike, any shape, finite
    gamma : float, ``>= -1``

    Returns
    -------
    torch.Tensor, same shape and dtype as ``t`` (solved in float64; not differentiable)

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import binary_focal_logit, binary_inverse_focal_logit
    >>> binary_inverse_focal_logit(binary_focal_logit(torch.tensor([-2.0, 0.0, 2.0]), 3.0), 3.0)
    tensor([-2.0000,  0.0000,  2.0000])
    """
    x = _elementwise_real(t, "t")
    gv = check_gamma(gamma)
    if gv == 0:
        return x.clone()
    with torch.no_grad():
        return _binary_inverse_logit(x.detach().to(torch.float64), gv).to(x.dtype)


def binary_inverse_focal_map(p: ArrayLike, gamma: float) -> torch.Tensor:
    r"""Inverse of :func:`binary_focal_map`, elementwise: the binary focal-risk minimiser.

    Solves :math:`\operatorname{logit} FC(s) = \operatorname{logit}(p)` (K&K (2024) Prop. 3 form,
    increasing in ``s`` for every ``gamma >= -1``) by vectorised safeguarded Newton in float64,
    with the bracket :math:`|\operatorname{logit} FC(s) - (1+\gamma)s| \le |\log(1+\gamma)|`
    (``|logit FC(s) - s| <= 1.2`` at ``gamma = -1``).

    Parameters
    ----------
    p : ArrayLike, any shape, values in ``[0, 1]``
        True probability of the positive class.
    gamma : float, ``>= -1``

    Returns
    -------
    torch.Tensor, same shape and dtype as ``p`` (not differentiable)
        E.g. ``binary_inverse_focal_map(0.8, 2) ~ 0.6266`` (the example of K&K Sec. 3.1);
        ``0 -> 0``, ``1 -> 1``. The result can round to exactly 0 or 1 while ``p`` does not (the
        minimiser's log-odds exceed the dtype's range, typically for ``gamma`` near ``-1``); use
        :func:`binary_inverse_focal_logit` when that matters.

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import binary_inverse_focal_map
    >>> binary_inverse_focal_map(torch.tensor([0.5, 0.9]), gamma=3.0)
    tensor([0.5000, 0.6471])
    """
    t = _elementwise_unit(p, "p")
    gv = check_gamma(gamma)
    if gv == 0:
        return t.clone()
    with torch.no_grad():
        x = t.detach().to(torch.float64)
        y = _logit_elementwise(x)
        fin = torch.isfinite(y)
        s = _binary_inverse_logit(torch.where(fin, y, torch.zeros_like(y)), gv)
        q = torch.sigmoid(s)
        q = torch.where(y == math.inf, torch.ones_like(q), q)
        q = torch.where(y == -math.inf, torch.zeros_like(q), q)
        return q.to(t.dtype)

