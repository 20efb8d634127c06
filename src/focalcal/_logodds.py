r"""The numerical kernels of the focal maps, all in per-class log-odds (internal).

Shared by :mod:`focalcal.maps` (the forward maps), :mod:`focalcal._inverse` (their inverses) and
:mod:`focalcal._thresholds`; the maths is explained in the docstring of :mod:`focalcal.maps`.
Every function takes validated tensors (the public functions validate once, at the boundary); ``g``
is the ``gamma`` to compute with (a python float, or a 0-dim tensor that requires grad) and ``gv``
its value as a float.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np
import torch

from ._validation import (
    ArrayLike,
    as_float_tensor,
    check_finite,
    check_gamma,
    check_nonempty,
    check_positive,
    check_unit_interval,
)

_LOG2 = math.log(2.0)
_INV_E = math.exp(-1.0)
_SERIES_SWITCH = 0.25  # below this t = exp(-|s|) the series for c(t) is used (cancellation-free)


# ============================================================================================
# input handling
# ============================================================================================

def _work_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _gamma_arg(gamma: float | torch.Tensor, name: str = "gamma",
               minimum: float = -1.0) -> tuple[float, float | torch.Tensor]:
    """Validate ``gamma``; return its value and the object to compute with.

    A 0-dim tensor that requires grad is kept as a tensor so that the log-space maps are
    differentiable in ``gamma`` (useful when a post-hoc calibrator fits it by gradient).
    """
    gv = check_gamma(gamma.detach() if isinstance(gamma, torch.Tensor) else gamma, name=name, minimum=minimum)
    if isinstance(gamma, torch.Tensor) and gamma.requires_grad:
        return gv, gamma.reshape(())
    return gv, gv


def _g_like(g: float | torch.Tensor, s: torch.Tensor) -> float | torch.Tensor:
    return g.to(s.dtype) if isinstance(g, torch.Tensor) else g


def _is_const(g: float | torch.Tensor, value: float) -> bool:
    return not isinstance(g, torch.Tensor) and g == value


def _elementwise_unit(x: ArrayLike, name: str) -> torch.Tensor:
    t = as_float_tensor(x, name)
    check_nonempty(t, name, min_dim=0)
    return check_unit_interval(t, name)


def _elementwise_real(x: ArrayLike, name: str) -> torch.Tensor:
    t = as_float_tensor(x, name)
    check_nonempty(t, name, min_dim=0)
    check_finite(t, name)
    return t


def _is_python_scalar(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool) or isinstance(x, np.floating)


# ============================================================================================
# numerically stable building blocks (all in log-odds s)
# ============================================================================================

def _softplus(x: torch.Tensor) -> torch.Tensor:
    # torch's softplus switches to the identity above a threshold, which is off by exp(-20) ~ 2e-9:
    # too coarse for the float64 accuracy promised here. Each branch gets an argument on which it
    # is finite (no NaN gradient leaks through where), and x = 0 takes the branch whose autograd
    # derivative is right there (relu/abs would give 0 instead of 1/2).
    pos = x > 0
    xp = torch.where(pos, x, torch.zeros_like(x))
    xn = torch.where(pos, torch.zeros_like(x), x)
    return torch.where(pos, xp + torch.log1p(torch.exp(-xp)), torch.log1p(torch.exp(xn)))


def _c_of_t(t: torch.Tensor) -> torch.Tensor:
    r"""``c(t) = (t - log1p(t)) / t**2`` on ``[0, 1]``; ``c(0) = 1/2``, ``c(1) = 1 - log 2``.

    For small ``t`` the direct formula cancels catastrophically, so the alternating series
    :math:`\sum_{n\ge0} (-1)^n t^n/(n+2)` is used there.
    """
    small = t < _SERIES_SWITCH
    ts = torch.where(small, t, torch.zeros_like(t))
    n_terms = 30 if t.dtype == torch.float64 else 14
    acc = torch.zeros_like(t)
    for n in range(n_terms - 1, -1, -1):
        acc = ((-1.0) ** n) / (n + 2) + ts * acc
    tb = torch.where(small, torch.full_like(t, 0.5), t)
    direct = (tb - torch.log1p(tb)) / (tb * tb)
    return torch.where(small, acc, direct)


def _r_parts(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Return ``(u, t, c, r, log1mr)`` for finite ``s``.

    ``u = |s|``, ``t = exp(-u)``, ``c = c(t)``, ``r = r(s) = e^s log(1 + e^{-s})`` and
    ``log1mr = log(1 - r(s))``. For ``s > 0``: ``r = 1 - t c(t)`` and ``1 - r = t c(t)``;
    for ``s <= 0``: ``r = t (u + log1p(t))``. Every branch is finite for every finite ``s``
    (so ``torch.where`` never routes a NaN gradient).
    """
    pos = s > 0
    u = torch.where(pos, s, -s)  # |s| with the derivative of the branch used at s = 0
    t = torch.exp(-u)
    c = _c_of_t(t)
    r_pos = 1 - t * c
    r_neg = t * (u + torch.log1p(t))
    r = torch.where(pos, r_pos, r_neg)
    log1mr = torch.where(pos, -u + torch.log(c), torch.log1p(-r_neg))
    return u, t, c, r, log1mr


def _log1p_gamma_r(s: torch.Tensor, g: float | torch.Tensor, gv: float,
                   parts: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
    r"""``L(s) = log(1 + gamma * r(s))`` for ``gamma >= -1``, finite for finite ``s``.

    For ``gamma < 0`` it is written as ``log((1 + gamma) + |gamma| (1 - r))``, a sum of two
    non-negative terms, so ``gamma -> -1`` and ``s -> +inf`` lose nothing to cancellation.
    """
    if parts is None:
        parts = _r_parts(s)
    _, _, _, r, log1mr = parts
    g = _g_like(g, s)
    if gv >= 0:
        return torch.log1p(g * r)
    if _is_const(g, -1.0):
        return log1mr
    if isinstance(g, torch.Tensor):
        return torch.logaddexp(torch.log1p(g).expand_as(log1mr), torch.log(-g) + log1mr)
    return torch.logaddexp(torch.full_like(log1mr, math.log1p(g)), math.log(-g) + log1mr)


def _ell(s: torch.Tensor, g: float | torch.Tensor, gv: float) -> torch.Tensor:
    r"""``log h^gamma(sigmoid(s))`` for finite ``s`` (Charoenphakdee Eq. (13) in log-odds)."""
    sp_neg = _softplus(-s)  # -log q
    if _is_const(g, 0.0):
        return -sp_neg
    sp_pos = _softplus(s)  # -log(1 - q)
    return -sp_neg + _g_like(g, s) * sp_pos - _log1p_gamma_r(s, g, gv)


def _ell_at_one(gv: float) -> float:
    """``log h(1)`` (the limit q -> 1)."""
    if gv > 0:
        return math.inf
    if gv == 0:
        return 0.0
    if gv > -1:
        return -math.inf
    return _LOG2


def _ell_ext(s: torch.Tensor, g: float | torch.Tensor, gv: float) -> torch.Tensor:
    """:func:`_ell` extended to ``s = +-inf`` by its limits (``q`` exactly 0 or 1)."""
    fin = torch.isfinite(s)
    val = _ell(torch.where(fin, s, torch.zeros_like(s)), g, gv)
    val = torch.where(s == -math.inf, torch.full_like(val, -math.inf), val)
    return torch.where(s == math.inf, torch.full_like(val, _ell_at_one(gv)), val)


def _logit_elementwise(v: torch.Tensor) -> torch.Tensor:
    """``log v - log(1 - v)``, exact for ``v`` near 0 and 1; ``-inf`` at 0 and ``+inf`` at 1."""
    pos = v > 0
    lt1 = v < 1
    lv = torch.log(torch.where(pos, v, torch.ones_like(v)))
    l1v = torch.log1p(-torch.where(lt1, v, torch.zeros_like(v)))
    s = lv - l1v
    s = torch.where(pos, s, torch.full_like(s, -math.inf))
    return torch.where(lt1, s, torch.full_like(s, math.inf))


def _row_log_odds(q: torch.Tensor) -> torch.Tensor:
    r"""Per-class log-odds of probability rows ``(..., K)`` (rows already normalised).

    ``1 - q_j`` is taken as :math:`\sum_{k\ne j} q_k` for the top class, so a row like
    ``(1.0, 1e-30, 0)`` keeps its information; ``q_j = 0`` gives ``-inf`` and a one-hot row
    gives ``+inf`` at its vertex.
    """
    top = q.argmax(-1, keepdim=True)
    is_top = torch.zeros_like(q, dtype=torch.bool).scatter_(-1, top, True)
    rest_top = q.masked_fill(is_top, 0.0).sum(-1, keepdim=True)
    rest = torch.where(is_top, rest_top.expand_as(q), 1 - q)
    pos_q = q > 0
    pos_r = rest > 0
    lq = torch.log(torch.where(pos_q, q, torch.ones_like(q)))
    lr = torch.log(torch.where(pos_r, rest, torch.ones_like(rest)))
    s = lq - lr
    s = torch.where(pos_q, s, torch.full_like(s, -math.inf))
    return torch.where(pos_r, s, torch.full_like(s, math.inf))


def _log_map_from_log_odds(s: torch.Tensor, g: float | torch.Tensor, gv: float) -> torch.Tensor:
    """Log of the focal map from per-class log-odds (``+-inf`` allowed)."""
    plus_inf = s == math.inf
    onehot_row = plus_inf.any(-1, keepdim=True)
    s_safe = torch.where(onehot_row, torch.zeros_like(s), s)
    log_p = torch.log_softmax(_ell_ext(s_safe, g, gv), dim=-1)
    vertex = torch.where(plus_inf, torch.zeros_like(s), torch.full_like(s, -math.inf))
    return torch.where(onehot_row, vertex, log_p)


def _check_temperature(temperature: float | torch.Tensor | np.ndarray,
                       like: torch.Tensor) -> float | torch.Tensor:
    """A positive float, or a positive tensor broadcastable to ``like`` (in its dtype and device)."""
    if isinstance(temperature, (torch.Tensor, np.ndarray)):
        t = torch.as_tensor(temperature)
        if not t.is_floating_point():
            t = t.to(like.dtype)
        td = t.detach()
        if td.numel() == 0:
            raise ValueError("temperature is empty; pass a positive number")
        if not bool(torch.isfinite(td).all()) or not bool((td > 0).all()):
            raise ValueError(f"temperature must be finite and > 0, got values in "
                             f"[{float(td.min()):.4g}, {float(td.max()):.4g}]")
        try:  # numpy's: torch.broadcast_shapes imports torch._refs on first use (~0.5 s)
            fits = np.broadcast_shapes(t.shape, like.shape) == tuple(like.shape)
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"temperature of shape {tuple(t.shape)} does not broadcast to logits of "
                             f"shape {tuple(like.shape)}; use a scalar or shape (..., 1)")
        return t.to(device=like.device, dtype=like.dtype)
    return check_positive(temperature, "temperature")


def _log_phi_ext(s: torch.Tensor, g: float | torch.Tensor, gv: float) -> torch.Tensor:
    """``log phi^gamma(sigmoid(s))`` extended to ``s = +-inf`` by its limits."""
    fin = torch.isfinite(s)
    s0 = torch.where(fin, s, torch.zeros_like(s))
    if _is_const(g, 0.0):
        val = torch.zeros_like(s0)
    else:
        val = -_g_like(g, s0) * _softplus(s0) + _log1p_gamma_r(s0, g, gv)
    at_one = -math.inf if gv > 0 else (0.0 if gv == 0 else (math.inf if gv > -1 else -_LOG2))
    val = torch.where(s == -math.inf, torch.zeros_like(val), val)
    return torch.where(s == math.inf, torch.full_like(val, at_one), val)


# ============================================================================================
# the binary map and the derivatives the inverse solvers need
# ============================================================================================

def _binary_logit(s: torch.Tensor, g: float | torch.Tensor, gv: float) -> torch.Tensor:
    r"""Log-odds of FC(s) for finite ``s``: ``(1 + gamma) s - L(s) + L(-s)``.

    For ``|s| < 1`` the odd part ``L(s) - L(-s)`` is evaluated as
    ``log1p(gamma D / (1 + gamma r(-s)))`` with ``D = r(s) - r(-s) = 2 sinh(s) softplus(-s) - s e^{-s}``,
    so the result keeps full relative precision as ``s -> 0``.
    """
    if _is_const(g, 0.0):
        return s.clone()
    gg = _g_like(g, s)
    big = s.abs() >= 1
    far = (1 + gg) * s - _log1p_gamma_r(s, g, gv) + _log1p_gamma_r(-s, g, gv)
    xs = torch.where(big, torch.zeros_like(s), s)
    d = 2 * torch.sinh(xs) * _softplus(-xs) - xs * torch.exp(-xs)
    r_minus = _r_parts(-xs)[3]
    near = (1 + gg) * xs - torch.log1p(gg * d / (1 + gg * r_minus))
    return torch.where(big, far, near)


def _L_prime(x: torch.Tensor, gv: float) -> torch.Tensor:
    """d/dx log(1 + gamma r(x)) for float ``gamma >= -1`` (used only by the solvers)."""
    u = x.abs()
    t = torch.exp(-u)
    c = _c_of_t(t)
    pos = x > 0
    lp = torch.log1p(t)
    inv1pt = 1 / (1 + t)
    # r'(x) = r(x) - sigmoid(x), written without cancellation on each side
    rp_pos_over_t = inv1pt - c
    r_neg = t * (u + lp)
    rp_neg = t * (u + lp - inv1pt)
    if gv == -1:
        lp_pos = -rp_pos_over_t / c
        lp_neg = -rp_neg / (1 - r_neg)
    else:
        lp_pos = gv * t * rp_pos_over_t / ((1 + gv) - gv * t * c)
        lp_neg = gv * rp_neg / (1 + gv * r_neg)
    return torch.where(pos, lp_pos, lp_neg)


def _ell_prime(s: torch.Tensor, gv: float) -> torch.Tensor:
    """d/ds log h(sigmoid(s)) for float ``gamma >= -1`` (used only by the solvers)."""
    return torch.sigmoid(-s) + gv * torch.sigmoid(s) - _L_prime(s, gv)

