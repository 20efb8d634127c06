r"""Scalar functions of the focal-loss theory (public through :mod:`focalcal.maps`).

Mukhoti et al. (2020)'s threshold :math:`\gamma^*(p_0)` through the real Lambert W function,
Charoenphakdee et al. (2021)'s thresholds :math:`\tau_{oc}`, :math:`\tau_{uc}` and the two
temperatures of Komisarenko & Kull (2024), Prop. 3.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import overload

import numpy as np
import torch
from scipy.optimize import elementwise as _sp_elementwise

from ._logodds import _INV_E, _elementwise_real, _is_python_scalar, _work_dtype
from ._validation import (
    ArrayLike,
    as_float_tensor,
    check_finite,
    check_gamma,
    check_nonempty,
    check_unit_interval,
)

__all__ = ["lambertw", "gamma_star", "tau_oc", "tau_uc", "ts_bounds"]


# ============================================================================================
# Lambert W and Mukhoti's gamma*
# ============================================================================================

def _lambertw_f64(x: torch.Tensor, branch: int) -> torch.Tensor:
    """Halley iteration on ``w - x e^{-w} = 0`` (the scaled form never overflows)."""
    e = math.e
    p2 = torch.clamp(2 * (e * x + 1), min=0.0)
    near_bp = x < -0.25
    if branch == 0:
        p = torch.sqrt(p2)
        w_bp = -1 + p - p * p / 3 + 11 / 72 * p ** 3
        xl = torch.clamp(x, min=e)
        l1 = torch.log(xl)
        l2 = torch.log(l1)
        w_big = l1 - l2 + l2 / l1
        w_mid = torch.log1p(torch.clamp(x, min=-0.25))
        w = torch.where(near_bp, w_bp, torch.where(x > e, w_big, w_mid))
    else:
        p = -torch.sqrt(p2)
        w_bp = -1 + p - p * p / 3 + 11 / 72 * p ** 3
        xs = torch.clamp(x, max=-1e-300)
        l1 = torch.log(-xs)
        l2 = torch.log(-l1)
        w_tail = l1 - l2 + l2 / l1
        w = torch.where(near_bp, w_bp, w_tail)
    log_abs_x = torch.log(torch.where(x != 0, x.abs(), torch.ones_like(x)))
    sign = torch.sign(x)
    for _ in range(50):
        big_x = sign * torch.exp(log_abs_x - w)  # x e^{-w}
        f = w - big_x
        f1 = 1 + big_x
        f2 = -big_x
        step = 2 * f * f1 / (2 * f1 * f1 - f * f2)
        step = torch.where(torch.isfinite(step), step, torch.zeros_like(step))
        w = w - step
        if bool((step.abs() <= 4 * 2.0 ** -52 * (1 + w.abs())).all()):
            break
    return torch.where(x == 0, torch.zeros_like(w), w)


class _LambertW(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, branch):  # noqa: D401 - autograd signature
        w = _lambertw_f64(x.detach().to(torch.float64), branch).to(x.dtype)
        ctx.save_for_backward(w)
        return w

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad / ((1 + w) * torch.exp(w)), None


def lambertw(x: ArrayLike, branch: int = 0) -> torch.Tensor:
    r"""Real Lambert W function (inverse of :math:`w e^w`), torch, by Halley iteration.

    Corless et al. (1996), as used in Mukhoti et al. (2020) Prop. 2. Branch ``0`` is defined on
    :math:`[-1/e, \infty)` (values :math:`\ge -1`), branch ``-1`` on :math:`[-1/e, 0)` (values
    :math:`\le -1`). Initial guesses: branch-point series near :math:`-1/e`, asymptotic
    :math:`\log x - \log\log x` in the tails; then Halley on the overflow-free form
    :math:`w - x e^{-w} = 0` (computed in float64, returned in the input dtype).

    Parameters
    ----------
    x : ArrayLike, any shape, finite
        Inputs within ``4 eps`` below ``-1/e`` are treated as ``-1/e`` (rounding of ``-1/e`` itself).
    branch : {0, -1}

    Returns
    -------
    torch.Tensor, same shape and dtype as ``x``
        Differentiable: :math:`W'(x) = 1/((1+W)e^W)` (infinite at the branch point).

    Examples
    --------
    >>> import math, torch
    >>> from focalcal.maps import lambertw
    >>> lambertw(torch.tensor([0.0, 1.0, math.e]))  # W(e) = 1; W(1) is the omega constant
    tensor([0.0000, 0.5671, 1.0000])
    >>> lambertw(torch.tensor([-0.2]), branch=-1)
    tensor([-2.5426])
    """
    if branch not in (0, -1) or isinstance(branch, bool):
        raise ValueError(f"branch must be 0 or -1, got {branch!r}")
    t = _elementwise_real(x, "x")
    eps = torch.finfo(_work_dtype(t)).eps
    lower = -_INV_E * (1 + 4 * eps)
    if bool((t < lower).any()):
        raise ValueError(f"x must be >= -1/e = {-_INV_E:.17g} for the real Lambert W, got min {float(t.min()):.17g}")
    if branch == -1 and bool((t >= 0).any()):
        raise ValueError(f"x must lie in [-1/e, 0) for branch -1, got max {float(t.max()):.4g}")
    tw = t.to(_work_dtype(t))
    tw = torch.clamp(tw, min=-_INV_E)
    return _LambertW.apply(tw, branch).to(t.dtype)


@overload
def gamma_star(p0: float) -> float: ...


@overload
def gamma_star(p0: torch.Tensor | np.ndarray | Sequence[float]) -> torch.Tensor: ...


def gamma_star(p0: ArrayLike) -> float | torch.Tensor:
    r"""Mukhoti et al. (2020) Prop. 2: the focusing parameter with :math:`g(p_0, \gamma^*) = 1`.

    .. math::

        \gamma^* = \frac{a}{b} + \frac{1}{\log a} W_{-1}\Bigl(-\frac{a^{1-a/b}}{b}\log a\Bigr),
        \qquad a = 1 - p_0,\; b = p_0\log p_0.

    For ``gamma >= gamma*``, ``g(p, gamma) <= 1`` for all ``p >= p0``; equivalently
    ``tau_uc(gamma_star(p0)) == p0`` (Charoenphakdee's Thm. 8 threshold). Of the two real roots of
    ``g(p0, gamma) = 1`` one is always the trivial ``gamma = 0``: it is the ``W_0`` root for
    ``p0 < 1/2`` and the ``W_{-1}`` root for ``p0 > 1/2``, so this returns ``gamma* > 0`` for
    ``p0 < 1/2`` and ``0`` (up to rounding) for ``p0 >= 1/2``.

    Parameters
    ----------
    p0 : float or ArrayLike, values in ``(0, 1)``

    Returns
    -------
    float or torch.Tensor
        A python float for a python number, else a tensor of the shape and dtype of ``p0``. E.g. ``gamma_star(0.25) = 3.0702...``, ``gamma_star(0.2) = 4.8506...``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import gamma_star, tau_uc
    >>> round(gamma_star(0.25), 4)
    3.0702
    >>> round(tau_uc(gamma_star(0.25)), 12)  # the two thresholds are inverse to each other
    0.25
    >>> gamma_star(torch.tensor([0.2, 0.25], dtype=torch.float64))
    tensor([4.8506, 3.0702], dtype=torch.float64)
    """
    scalar = _is_python_scalar(p0)
    t = as_float_tensor(p0, "p0")
    check_nonempty(t, "p0", min_dim=0)
    t = check_unit_interval(t, "p0", open_left=True, open_right=True)
    x = t.to(torch.float64)
    log_a = torch.log1p(-x)
    a = 1 - x
    b = x * torch.log(x)
    # y = -a^{1 - a/b} log(a) / b < 0, evaluated through its logarithm
    log_neg_y = (1 - a / b) * log_a + torch.log(log_a / b)
    y = torch.clamp(-torch.exp(log_neg_y), min=-_INV_E, max=-1e-300)
    # for p0 >= 1/2 the W_{-1} root is the trivial gamma = 0; clip its rounding noise
    g = torch.clamp(a / b + lambertw(y, -1) / log_a, min=0.0)
    if scalar:
        return float(g)
    return g.to(t.dtype)


# ============================================================================================
# Charoenphakdee's thresholds, K&K's temperature bounds
# ============================================================================================

def _as_gamma_array(gamma: ArrayLike, name: str, minimum: float, open_min: bool) -> tuple[np.ndarray, bool]:
    """Validate a scalar-function argument; return it as float64 NumPy and whether it was a number."""
    scalar = _is_python_scalar(gamma)
    if scalar:
        g = check_gamma(gamma, name=name, minimum=-math.inf)
        if (g <= minimum) if open_min else (g < minimum):
            raise ValueError(f"{name} must be {'>' if open_min else '>='} {minimum:g}, got {g:g}")
        return np.asarray(g, dtype=np.float64), True
    t = as_float_tensor(gamma, name)
    check_nonempty(t, name, min_dim=0)
    check_finite(t, name)
    bad = (t <= minimum) if open_min else (t < minimum)
    if bool(bad.any()):
        op = ">" if open_min else ">="
        raise ValueError(f"{name} must be {op} {minimum:g}, got min {float(t.min()):g}")
    return t.detach().to(torch.float64).cpu().numpy(), False


def _k_mukhoti(p: np.ndarray, g: np.ndarray) -> np.ndarray:
    # Mukhoti Eq. (10): k(p, gamma) = 2(1-p)/log p + 1 - gamma p, decreasing in p; sign of phi'.
    return 2 * (1 - p) / np.log(p) + 1 - g * p


@overload
def tau_oc(gamma: float) -> float: ...


@overload
def tau_oc(gamma: torch.Tensor | np.ndarray | Sequence[float]) -> torch.Tensor: ...


def tau_oc(gamma: ArrayLike) -> float | torch.Tensor:
    r"""Charoenphakdee et al. (2021) Thm. 8: :math:`\tau^\gamma_{oc} = \arg\max_v \varphi^\gamma(v)`.

    :math:`\varphi'` has the sign of Mukhoti et al. (2020)'s :math:`k(p,\gamma) = 2(1-p)/\log p + 1
    - \gamma p` (their Eq. (10)), which decreases from 1 to :math:`-(1+\gamma)`; its unique zero is
    found with SciPy's bracketing root finder (elementwise for arrays). Inverting the stationarity
    condition gives the closed form of the inverse function, :math:`\gamma = (1 + 2(1-\tau)/\log\tau)/\tau`.

    Parameters
    ----------
    gamma : float or ArrayLike, ``> 0``

    Returns
    -------
    float or torch.Tensor
        A python float for a python number, else a float64 tensor of the shape of ``gamma``; in
        ``(0, 1/2)``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import phi, tau_oc
    >>> round(tau_oc(3.0), 4)  # phi(., 3) is largest there
    0.0855
    >>> tau_oc(torch.tensor([1.0, 3.0]))
    tensor([0.1353, 0.0855], dtype=torch.float64)
    """
    g, scalar = _as_gamma_array(gamma, "gamma", 0.0, open_min=True)
    tol = {"xatol": 1e-300, "xrtol": 4 * 2.0 ** -52}
    res = _sp_elementwise.find_root(_k_mukhoti, (np.full_like(g, 1e-300), np.full_like(g, 1 - 2.0 ** -52)),
                                    args=(g,), tolerances=tol)
    out = np.asarray(res.x, dtype=np.float64)
    return float(out) if scalar else torch.as_tensor(out)


def _log_phi_over_gamma(v: np.ndarray, g: np.ndarray) -> np.ndarray:
    # log(phi(v)) / gamma = log(1 - v) + log1p(gamma r(v)) / gamma, well conditioned as gamma -> 0
    r = -v * np.log(v) / (1 - v)
    return np.log1p(-v) + np.log1p(g * r) / g


@overload
def tau_uc(gamma: float) -> float: ...


@overload
def tau_uc(gamma: torch.Tensor | np.ndarray | Sequence[float]) -> torch.Tensor: ...


def tau_uc(gamma: ArrayLike) -> float | torch.Tensor:
    r"""Charoenphakdee et al. (2021) Thm. 8: :math:`\tau^\gamma_{uc}\in(0,1)` with :math:`\varphi^\gamma(\tau_{uc}) = 1`.

    The non-trivial root lies on the decreasing part of :math:`\varphi` (``phi(0) = 1`` is the
    trivial one), so it is bracketed by ``[tau_oc(gamma), 1)`` and found with SciPy's bracketing
    root finder (``brentq``-type; elementwise for arrays). It equals Mukhoti's threshold ``p0``:
    ``tau_uc(gamma_star(p0)) == p0``.

    Parameters
    ----------
    gamma : float or ArrayLike, ``> 0``

    Returns
    -------
    float or torch.Tensor
        A python float for a python number, else a float64 tensor of the shape of ``gamma``;
        ``tau_oc < tau_uc < 1/2``.

    Examples
    --------
    >>> from focalcal.maps import phi, tau_oc, tau_uc
    >>> t = tau_uc(3.0)
    >>> round(t, 4), round(float(phi(t, 3.0)), 12)  # phi = 1 there
    (0.2526, 1.0)
    >>> tau_oc(3.0) < t < 0.5
    True
    """
    g, scalar = _as_gamma_array(gamma, "gamma", 0.0, open_min=True)
    lo = np.asarray(tau_oc(float(g)) if scalar else tau_oc(torch.as_tensor(g)).numpy(), dtype=np.float64)
    tol = {"xatol": 1e-300, "xrtol": 4 * 2.0 ** -52}
    res = _sp_elementwise.find_root(_log_phi_over_gamma, (lo, np.full_like(g, 1 - 2.0 ** -40)),
                                    args=(g,), tolerances=tol)
    out = np.asarray(res.x, dtype=np.float64)
    return float(out) if scalar else torch.as_tensor(out)


@overload
def ts_bounds(gamma: float) -> tuple[float, float]: ...


@overload
def ts_bounds(gamma: torch.Tensor | np.ndarray | Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]: ...


def ts_bounds(gamma: ArrayLike) -> tuple[float, float] | tuple[torch.Tensor, torch.Tensor]:
    r"""The two temperatures of K&K (2024) Prop. 3: ``(1/(gamma+1), 1/(gamma+1 - log(gamma+1)/2))``.

    The sandwich that the proof of Prop. 3 establishes (the printed display differs: see the book,
    *Theory > Errata* and ``book/theory/kk_binary.md``): with :math:`T_1 = 1/(\gamma+1)` and
    :math:`T_2 = 1/(\gamma+1-\tfrac12\log(\gamma+1))`, for ``gamma >= 0`` and ``s >= 0``

    .. math:: \sigma(s/T_2) \le FC(s) \le \sigma(s/T_1),

    reversed for ``s < 0`` (``logit FC(s) = (gamma+1) s - log f_gamma(s)`` with
    ``0 <= log f_gamma(s) <= s log(gamma+1)/2``). The paper proves it for ``gamma > 0``; ``gamma`` in
    ``(-1, 0)`` is accepted (then ``T_1 > T_2``).

    Parameters
    ----------
    gamma : float or ArrayLike, ``> -1``

    Returns
    -------
    (float, float) or (torch.Tensor, torch.Tensor)
        ``(T_1, T_2)``: python floats for a python number, else two float64 tensors of the shape of
        ``gamma``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import ts_bounds
    >>> t1, t2 = ts_bounds(3.0)
    >>> round(t1, 4), round(t2, 4)
    (0.25, 0.3024)
    >>> ts_bounds(torch.tensor([1.0, 3.0]))
    (tensor([0.5000, 0.2500], dtype=torch.float64), tensor([0.6048, 0.3024], dtype=torch.float64))
    """
    g, scalar = _as_gamma_array(gamma, "gamma", -1.0, open_min=True)
    t1 = 1.0 / (g + 1.0)
    t2 = 1.0 / (g + 1.0 - np.log1p(g) / 2.0)
    if scalar:
        return float(t1), float(t2)
    return torch.as_tensor(t1), torch.as_tensor(t2)
