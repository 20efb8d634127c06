r"""The focal calibration map and the scalar functions of the focal-loss theory.

Notation shared by every function of this module (and by the book):

* ``q`` is a *predicted* probability (a classifier's softmax output, or the focal-risk minimiser),
  ``p`` the probability after the focal calibration map (the recovered class posterior).
* The focal loss term of the true class is :math:`\ell_\gamma(q) = -(1-q)^\gamma\log q`
  (:func:`focal_loss_term`) and :math:`\ell'_\gamma(q)` its derivative (:func:`focal_loss_term_grad`).
* Charoenphakdee et al. (2021), Eq. (10):
  :math:`\varphi^\gamma(v) = (1-v)^\gamma - \gamma(1-v)^{\gamma-1} v\log v`, which is *the same
  function* as Mukhoti et al. (2020)'s gradient factor :math:`g(p,\gamma)` (their Prop. 1), and
  Eq. (13): :math:`h^\gamma(v) = v/\varphi^\gamma(v)`. Since
  :math:`\ell'_\gamma(q) = -\varphi^\gamma(q)/q = -1/h^\gamma(q)`, the multiclass focal calibration
  map of Komisarenko & Kull (2024), Prop. 4, Eq. (1), :math:`\hat p_j \propto 1/\ell'_\gamma(q_j)`,
  is exactly Charoenphakdee's :math:`\Psi^\gamma_j(q) = h^\gamma(q_j)/\sum_l h^\gamma(q_l)`
  (their Thm. 11, Eq. (12)).

How the map is computed
-----------------------
Everything is evaluated on the per-class *log-odds* :math:`s_j = \log q_j - \log(1-q_j)` (for logits,
:math:`s_j = z_j - \operatorname{logsumexp}_{k\neq j} z_k`), never on ``q`` itself, through

.. math::

    \log h^\gamma(\sigma(s)) = -\operatorname{softplus}(-s) + \gamma\,\operatorname{softplus}(s)
    - \log\bigl(1 + \gamma\, r(s)\bigr),\qquad r(s) = \frac{-q\log q}{1-q} = e^{s}\log(1+e^{-s}) \in (0, 1),

which is the factorisation used in the proof of K&K Prop. 3
(:math:`f_\gamma(s) = (1+\gamma r(s))/(1+\gamma r(-s))`). ``1 - r(s)`` (needed for ``gamma < 0``)
and ``r`` for large ``|s|`` are evaluated by a series, so a row whose float32 softmax maximum is
exactly ``1.0`` still has finite log-odds and a finite, argmax-preserving image.

Domain of ``gamma``
-------------------
All maps accept ``gamma >= -1``. For ``gamma < -1`` the loss derivative :math:`\ell'_\gamma` changes
sign on ``(0, 1)`` (``1 + gamma * r`` crosses zero) and :math:`1/\ell'` is no longer a positive
weight, so a ``ValueError`` is raised. ``gamma = 0`` is the identity. Limits at the vertices
(worked out exactly; ``eps = 1 - q``):

==================  ==============  ==================================================
``gamma``           ``h(0)``        ``h(1)`` (``h(1 - eps)``)
==================  ==============  ==================================================
``> 0``             0               :math:`+\infty` (:math:`\sim 1/((1+\gamma)\epsilon^\gamma)`)
``0``               0               1
``(-1, 0)``         0               0 (:math:`\sim \epsilon^{|\gamma|}/(1+\gamma)`, slower than ``eps``)
``-1``              0               2
==================  ==============  ==================================================

so an entry ``q_j = 0`` maps to ``0`` and a one-hot row maps to itself for every ``gamma >= -1``
(the limit along every path into the vertex). For ``gamma`` in ``(-1, 0)`` :math:`h` is *not*
monotone (it peaks at some ``q* > 0.7``), but the map still preserves the argmax because only one
coordinate can exceed ``1/2`` and the binary map is increasing.

Conventions: torch tensors in and out; python floats, lists and NumPy arrays are accepted and
converted (NumPy float64 stays float64). float32 and float64 are computed in their own precision
(float16/bfloat16 are computed in float32 and cast back); leading dimensions broadcast. Functions
that are naturally scalar (:func:`tau_oc`, :func:`tau_uc`, :func:`ts_bounds`, :func:`gamma_star`)
return python floats for python-number input. Bad input raises ``ValueError`` naming the argument.
"""

from __future__ import annotations

import functools
import math
from numbers import Real
from typing import Any

import numpy as np
import torch
from scipy.optimize import brentq
from scipy.optimize import elementwise as _sp_elementwise

from ._validation import (
    as_float_tensor,
    check_finite,
    check_gamma,
    check_logits,
    check_nonempty,
    check_positive,
    check_probs,
    check_unit_interval,
)

__all__ = [
    "focal_loss_term",
    "focal_loss_term_grad",
    "focal_map",
    "focal_map_from_logits",
    "log_focal_map_from_logits",
    "binary_focal_map",
    "binary_focal_logit",
    "inverse_focal_map",
    "binary_inverse_focal_map",
    "binary_inverse_focal_logit",
    "gradient_factor",
    "gamma_star",
    "lambertw",
    "phi",
    "h",
    "tau_oc",
    "tau_uc",
    "ts_bounds",
]

_LOG2 = math.log(2.0)
_INV_E = math.exp(-1.0)
_SERIES_SWITCH = 0.25  # below this t = exp(-|s|) the series for c(t) is used (cancellation-free)

GammaLike = Any  # python float, numpy scalar, or a 0-dim tensor (may require grad)


# ============================================================================================
# input handling
# ============================================================================================

def _work_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _gamma_arg(gamma: GammaLike, name: str = "gamma", minimum: float = -1.0) -> tuple[float, Any]:
    """Validate ``gamma``; return its value and the object to compute with.

    A 0-dim tensor that requires grad is kept as a tensor so that the log-space maps are
    differentiable in ``gamma`` (useful when a post-hoc calibrator fits it by gradient).
    """
    gv = check_gamma(gamma.detach() if isinstance(gamma, torch.Tensor) else gamma, name=name, minimum=minimum)
    if isinstance(gamma, torch.Tensor) and gamma.requires_grad:
        return gv, gamma.reshape(())
    return gv, gv


def _g_like(g: Any, s: torch.Tensor) -> Any:
    return g.to(s.dtype) if isinstance(g, torch.Tensor) else g


def _is_const(g: Any, value: float) -> bool:
    return not isinstance(g, torch.Tensor) and g == value


def _elementwise_unit(x: Any, name: str) -> torch.Tensor:
    t = as_float_tensor(x, name)
    check_nonempty(t, name, min_dim=0)
    return check_unit_interval(t, name)


def _elementwise_real(x: Any, name: str) -> torch.Tensor:
    t = as_float_tensor(x, name)
    check_nonempty(t, name, min_dim=0)
    check_finite(t, name)
    return t


def _is_python_scalar(x: Any) -> bool:
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


def _log1p_gamma_r(s: torch.Tensor, g: Any, gv: float,
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


def _ell(s: torch.Tensor, g: Any, gv: float) -> torch.Tensor:
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


def _ell_ext(s: torch.Tensor, g: Any, gv: float) -> torch.Tensor:
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


def _log_map_from_log_odds(s: torch.Tensor, g: Any, gv: float) -> torch.Tensor:
    """Log of the focal map from per-class log-odds (``+-inf`` allowed)."""
    plus_inf = s == math.inf
    onehot_row = plus_inf.any(-1, keepdim=True)
    s_safe = torch.where(onehot_row, torch.zeros_like(s), s)
    log_p = torch.log_softmax(_ell_ext(s_safe, g, gv), dim=-1)
    vertex = torch.where(plus_inf, torch.zeros_like(s), torch.full_like(s, -math.inf))
    return torch.where(onehot_row, vertex, log_p)


def _check_temperature(temperature: Any, like: torch.Tensor) -> Any:
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
        try:
            fits = torch.broadcast_shapes(t.shape, like.shape) == like.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"temperature of shape {tuple(t.shape)} does not broadcast to logits of "
                             f"shape {tuple(like.shape)}; use a scalar or shape (..., 1)")
        return t.to(device=like.device, dtype=like.dtype)
    return check_positive(temperature, "temperature")


# ============================================================================================
# focal loss term
# ============================================================================================

def focal_loss_term(q: Any, gamma: GammaLike) -> torch.Tensor:
    r"""Focal loss of the true class, :math:`\ell_\gamma(q) = -(1-q)^\gamma \log q`.

    K&K (2024) Sec. 2; Charoenphakdee et al. (2021) Eq. (5) with a one-hot ``v``.

    Parameters
    ----------
    q : tensor-like, any shape
        Predicted probability of the true class, in ``[0, 1]``.
    gamma : float, ``>= -1``
        Focusing parameter (``0`` is cross-entropy; negative values give the inverse focal loss).

    Returns
    -------
    torch.Tensor, same shape as ``q``
        ``+inf`` at ``q = 0``; at ``q = 1`` it is ``0`` except for ``gamma = -1`` where the limit is
        ``1``. Evaluated as ``exp(-gamma softplus(s) + log softplus(-s))`` with ``s = logit(q)``.
    """
    t = _elementwise_unit(q, "q")
    gv, g = _gamma_arg(gamma)
    x = t.to(_work_dtype(t))
    s = _logit_elementwise(x)
    fin = torch.isfinite(s)
    s0 = torch.where(fin, s, torch.zeros_like(s))
    u, tt, c, r, _ = _r_parts(s0)
    # log(-log q) = log softplus(-s): for s > 0, softplus(-s) = t * r(s) with r = log1p(t)/t
    log_neg_log_q = torch.where(s0 > 0, -u + torch.log(r), torch.log(u + torch.log1p(tt)))
    out = torch.exp(-_g_like(g, s0) * _softplus(s0) + log_neg_log_q)
    out = torch.where(s == -math.inf, torch.full_like(out, math.inf), out)
    at_one = 1.0 if gv == -1 else 0.0
    out = torch.where(s == math.inf, torch.full_like(out, at_one), out)
    return out.to(t.dtype)


def focal_loss_term_grad(q: Any, gamma: GammaLike) -> torch.Tensor:
    r"""Derivative :math:`\ell'_\gamma(q) = \gamma(1-q)^{\gamma-1}\log q - (1-q)^\gamma/q`.

    K&K (2024) Prop. 1 proof (first derivative) and Prop. 4; equal to
    :math:`-\varphi^\gamma(q)/q = -1/h^\gamma(q)` (Charoenphakdee Eq. (13)).

    Parameters
    ----------
    q : tensor-like, any shape, values in ``[0, 1]``
    gamma : float, ``>= -1``

    Returns
    -------
    torch.Tensor, same shape as ``q``
        Negative everywhere on ``(0, 1)`` for ``gamma >= -1``. Limits: ``-inf`` at ``q = 0``; at
        ``q = 1``: ``0`` (``gamma > 0``), ``-1`` (``gamma = 0``), ``-inf`` (``-1 < gamma < 0``),
        ``-1/2`` (``gamma = -1``).
    """
    t = _elementwise_unit(q, "q")
    gv, g = _gamma_arg(gamma)
    x = t.to(_work_dtype(t))
    return (-torch.exp(-_ell_ext(_logit_elementwise(x), g, gv))).to(t.dtype)


# ============================================================================================
# Charoenphakdee's phi and h, Mukhoti's g
# ============================================================================================

def _log_phi_ext(s: torch.Tensor, g: Any, gv: float) -> torch.Tensor:
    fin = torch.isfinite(s)
    s0 = torch.where(fin, s, torch.zeros_like(s))
    if _is_const(g, 0.0):
        val = torch.zeros_like(s0)
    else:
        val = -_g_like(g, s0) * _softplus(s0) + _log1p_gamma_r(s0, g, gv)
    at_one = -math.inf if gv > 0 else (0.0 if gv == 0 else (math.inf if gv > -1 else -_LOG2))
    val = torch.where(s == -math.inf, torch.zeros_like(val), val)
    return torch.where(s == math.inf, torch.full_like(val, at_one), val)


def phi(v: Any, gamma: GammaLike) -> torch.Tensor:
    r"""Charoenphakdee et al. (2021) Eq. (10): :math:`\varphi^\gamma(v) = (1-v)^\gamma - \gamma(1-v)^{\gamma-1}v\log v`.

    Identical to Mukhoti et al. (2020)'s gradient factor :math:`g(v, \gamma)` (Prop. 1, Eq. (7)),
    and to :math:`-v\,\ell'_\gamma(v)`.

    Parameters
    ----------
    v : tensor-like, any shape, values in ``[0, 1]``
    gamma : float, ``>= -1``

    Returns
    -------
    torch.Tensor, same shape as ``v``
        Computed as ``(1 - v)^gamma (1 + gamma r(v))``. Limits: ``phi(0) = 1``; ``phi(1) = 0``
        (``gamma > 0``), ``1`` (``gamma = 0``), ``+inf`` (``-1 < gamma < 0``), ``1/2`` (``gamma = -1``).
    """
    t = _elementwise_unit(v, "v")
    gv, g = _gamma_arg(gamma)
    x = t.to(_work_dtype(t))
    return torch.exp(_log_phi_ext(_logit_elementwise(x), g, gv)).to(t.dtype)


def gradient_factor(p: Any, gamma: GammaLike) -> torch.Tensor:
    r"""Mukhoti et al. (2020) Prop. 1, Eq. (7): :math:`g(p,\gamma) = (1-p)^\gamma - \gamma p(1-p)^{\gamma-1}\log p`.

    The factor by which focal loss rescales the cross-entropy gradient of the last layer. It is the
    same function as Charoenphakdee's :math:`\varphi^\gamma` (:func:`phi`). ``p`` in ``[0, 1]``, any
    shape; returns a tensor of the same shape (``g(0) = 1``, ``g(1) = 0`` for ``gamma > 0``).
    """
    t = _elementwise_unit(p, "p")
    gv, g = _gamma_arg(gamma)
    x = t.to(_work_dtype(t))
    return torch.exp(_log_phi_ext(_logit_elementwise(x), g, gv)).to(t.dtype)


def h(v: Any, gamma: GammaLike) -> torch.Tensor:
    r"""Charoenphakdee et al. (2021) Eq. (13): :math:`h^\gamma(v) = v/\varphi^\gamma(v) = -1/\ell'_\gamma(v)`.

    The unnormalised focal calibration map: :math:`\Psi^\gamma_i(v) = h^\gamma(v_i)/\sum_l h^\gamma(v_l)`.

    Parameters
    ----------
    v : tensor-like, any shape, values in ``[0, 1]``
    gamma : float, ``>= -1``

    Returns
    -------
    torch.Tensor, same shape as ``v``
        ``h(0) = 0``; ``h(1) = +inf`` (``gamma > 0``), ``1`` (``gamma = 0``), ``0``
        (``-1 < gamma < 0``), ``2`` (``gamma = -1``). Values beyond the dtype's range overflow to
        ``inf`` (e.g. ``gamma = 10`` and ``1 - v < 1e-4`` in float32).
    """
    t = _elementwise_unit(v, "v")
    gv, g = _gamma_arg(gamma)
    x = t.to(_work_dtype(t))
    return torch.exp(_ell_ext(_logit_elementwise(x), g, gv)).to(t.dtype)


# ============================================================================================
# the multiclass focal calibration map
# ============================================================================================

def focal_map(probs: Any, gamma: GammaLike) -> torch.Tensor:
    r"""Multiclass focal calibration map, K&K (2024) Prop. 4, Eq. (1).

    .. math::

        \hat p_j(q) = \frac{1/\ell'_\gamma(q_j)}{\sum_k 1/\ell'_\gamma(q_k)}
                    = \frac{h^\gamma(q_j)}{\sum_k h^\gamma(q_k)} = \Psi^\gamma_j(q),

    i.e. Charoenphakdee et al. (2021) Thm. 11, Eqs. (12)-(13): it maps the focal-risk minimiser to
    the true class posterior.

    Parameters
    ----------
    probs : tensor-like, shape ``(..., K)``, ``K >= 2``
        Probability rows (entries in ``[0, 1]``, rows summing to 1 within 1e-4 in float32 / 1e-8 in
        float64; they are renormalised before use).
    gamma : float (or 0-dim tensor requiring grad), ``>= -1``
        ``0`` returns ``probs`` unchanged.

    Returns
    -------
    torch.Tensor, shape ``(..., K)``, dtype of ``probs``
        Rows sum to 1. Entries with ``q_j = 0`` map to 0; a one-hot row maps to itself (the limit,
        for every ``gamma >= -1``, see the module docstring). The argmax is preserved
        (Charoenphakdee Prop. 12; also for ``-1 <= gamma < 0``).

    Warnings
    --------
    K&K (2024) Prop. 5 ("for ``gamma >= 0`` the top coordinate never decreases") is false as stated:
    for ``gamma > 0`` it holds when ``max q >= tau_uc(gamma)`` (Charoenphakdee Thm. 8.3, Cor. 9) and
    in every binary row, but rows with ``max q <= tau_oc(gamma)`` (possible for ``K >= 5``) have
    their top coordinate *decreased* (Thm. 8.2), e.g. ``K = 10``, ``gamma = 2``,
    ``q = (0.101, 0.0998..., ...)`` gives ``p_top = 0.1009938``; inside the ambiguous region it
    already fails for ``K = 4``: ``gamma = 0.3``, ``q = (0.3250, 0.3249, 0.3248, 0.0253)`` gives
    ``p_top - q_top = -9.3e-5`` (no counterexample found for ``K = 3``). The proof's lemma
    "``1/l'`` is concave" fails near ``q = 0``, where ``h`` is concave.

    Notes
    -----
    Computed on the per-class log-odds with ``1 - q_top`` taken as the sum of the other entries, so a
    row such as ``(1.0, 1e-30, 0)`` is still mapped correctly. Gradients are not propagated through
    entries that are exactly 0 or rows that are exactly one-hot. For logits prefer
    :func:`focal_map_from_logits`, which never forms ``q``.
    """
    t = check_probs(probs, "probs")
    gv, g = _gamma_arg(gamma)
    if _is_const(g, 0.0):
        return t.clone()
    x = t.to(_work_dtype(t))
    x = x / x.sum(-1, keepdim=True)
    return torch.exp(_log_map_from_log_odds(_row_log_odds(x), g, gv)).to(t.dtype)


def log_focal_map_from_logits(logits: Any, gamma: GammaLike, temperature: Any = 1.0) -> torch.Tensor:
    r"""Log of the focal temperature-scaling map: ``log focal_map(softmax(logits / T), gamma)``.

    K&K (2024) Sec. 4.2 (focal temperature scaling: TS with ``T`` followed by Eq. (1) with
    :math:`\gamma_{ev}`), computed entirely in log space: with :math:`a = \log\operatorname{softmax}(z/T)`,
    the per-class log-odds are :math:`s_j = a_j - \log(1-q_j)` where
    :math:`\log(1 - q_{top}) = \operatorname{logsumexp}_{k\ne top} a_k` and
    :math:`\log(1-q_j) = \operatorname{log1p}(-e^{a_j})` otherwise, followed by
    :math:`\log h^\gamma(\sigma(s))` and a log-softmax. No probability is ever rounded to 1, so rows
    whose float32 softmax maximum is exactly ``1.0`` stay finite and keep their argmax.

    Parameters
    ----------
    logits : tensor-like, shape ``(..., K)``, ``K >= 2``, finite
    gamma : float (or 0-dim tensor requiring grad), ``>= -1``
    temperature : float or tensor broadcastable to ``logits`` (e.g. shape ``()`` or ``(..., 1)``), ``> 0``
        May require grad (post-hoc fitting).

    Returns
    -------
    torch.Tensor, shape ``(..., K)``, dtype of ``logits``
        Log-probabilities (usable directly in ``nll_loss``); finite with finite gradients w.r.t.
        ``logits``, ``temperature`` (and a tensor ``gamma > -1``) even for logits of ``+-1e4``.
        The class with the largest logit receives the largest output (ties up to rounding).
    """
    z = check_logits(logits, "logits")
    gv, g = _gamma_arg(gamma)
    dtype = z.dtype
    zw = z.to(_work_dtype(z))
    temp = _check_temperature(temperature, zw)
    zt = zw / temp
    if _is_const(g, 0.0):
        return torch.log_softmax(zt, dim=-1).to(dtype)
    a = torch.log_softmax(zt, dim=-1)
    top = a.argmax(-1, keepdim=True)
    is_top = torch.zeros_like(a, dtype=torch.bool).scatter_(-1, top, True)
    log_rest_top = torch.logsumexp(a.masked_fill(is_top, -math.inf), dim=-1, keepdim=True)
    # non-top classes have q <= 1/2, where log1p(-exp(a)) is accurate; the top class's entry is
    # replaced by a harmless constant so no inf/NaN enters the unselected branch of where().
    a_safe = a.masked_fill(is_top, -1.0)
    log_rest = torch.where(is_top, log_rest_top.expand_as(a), torch.log1p(-torch.exp(a_safe)))
    s = a - log_rest
    return torch.log_softmax(_ell(s, g, gv), dim=-1).to(dtype)


def focal_map_from_logits(logits: Any, gamma: GammaLike, temperature: Any = 1.0) -> torch.Tensor:
    r"""Focal temperature scaling: ``focal_map(softmax(logits / T), gamma)``, evaluated in log space.

    K&K (2024) Sec. 4.2 with Prop. 4, Eq. (1). Same arguments as :func:`log_focal_map_from_logits`;
    returns ``exp`` of it: probabilities of shape ``(..., K)`` whose rows sum to 1, finite for
    saturated rows (float32 softmax max exactly 1.0) with the argmax preserved, and finite
    gradients w.r.t. logits and temperature.
    """
    return torch.exp(log_focal_map_from_logits(logits, gamma, temperature))


# ============================================================================================
# the binary map (K&K Prop. 2 and Prop. 3)
# ============================================================================================

def _binary_logit(s: torch.Tensor, g: Any, gv: float) -> torch.Tensor:
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


def binary_focal_logit(s: Any, gamma: GammaLike) -> torch.Tensor:
    r"""Log-odds of the binary focal calibration of a logit, :math:`\operatorname{logit} FC(s)`.

    K&K (2024) Prop. 3 (proof): with :math:`FC(s) = \hat p_\gamma(\sigma(s))`,

    .. math::

        \operatorname{logit} FC(s) = (\gamma + 1)s - \log f_\gamma(s),\qquad
        f_\gamma(s) = \frac{\gamma e^s\log(1+e^{-s}) + 1}{1 + \gamma e^{-s}\log(1+e^{s})}
                    = \frac{1 + \gamma r(s)}{1 + \gamma r(-s)}.

    Parameters
    ----------
    s : tensor-like, any shape, finite
    gamma : float (or 0-dim tensor requiring grad), ``>= -1``

    Returns
    -------
    torch.Tensor, same shape as ``s``
        Exact to a few ulps (relative) for ``|s|`` up to ``1e4`` and beyond, including ``s -> 0``
        and ``gamma = -1`` (where ``logit FC(s) - s -> +-log 2``). Odd in ``s``.
    """
    t = _elementwise_real(s, "s")
    gv, g = _gamma_arg(gamma)
    x = t.to(_work_dtype(t))
    return _binary_logit(x, g, gv).to(t.dtype)


def binary_focal_map(q: Any, gamma: GammaLike) -> torch.Tensor:
    r"""Binary focal calibration map, K&K (2024) Prop. 2:

    .. math::

        \hat p(q) = \Bigl(1 + \bigl(\tfrac{1-q}{q}\bigr)^\gamma
                    \frac{(1-q) - \gamma q\log q}{q - \gamma(1-q)\log(1-q)}\Bigr)^{-1}.

    Parameters
    ----------
    q : tensor-like, any shape, values in ``[0, 1]``
        Predicted probability of the positive class.
    gamma : float (or 0-dim tensor requiring grad), ``>= -1``

    Returns
    -------
    torch.Tensor, same shape as ``q``
        ``sigmoid(binary_focal_logit(logit(q)))``; ``0 -> 0``, ``1 -> 1``, ``1/2 -> 1/2``. Equals
        ``focal_map`` on the rows ``(1 - q, q)``.
    """
    t = _elementwise_unit(q, "q")
    gv, g = _gamma_arg(gamma)
    x = t.to(_work_dtype(t))
    s = _logit_elementwise(x)
    fin = torch.isfinite(s)
    p = torch.sigmoid(_binary_logit(torch.where(fin, s, torch.zeros_like(s)), g, gv))
    p = torch.where(s == math.inf, torch.ones_like(p), p)
    p = torch.where(s == -math.inf, torch.zeros_like(p), p)
    return p.to(t.dtype)


# ============================================================================================
# inverse maps (focal risk minimisers)
# ============================================================================================

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
    return torch.sigmoid(-s) + gv * torch.sigmoid(s) - _L_prime(s, gv)


def _solve_bracketed(fun, lo: torch.Tensor, hi: torch.Tensor, x0: torch.Tensor,
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

    def fun(s):
        return _ell(s, gv, gv) - y, _ell_prime(s, gv)

    return _solve_bracketed(fun, lo, hi, x0)


def inverse_focal_map(p: Any, gamma: float) -> torch.Tensor:
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
    p : tensor-like, shape ``(..., K)``, ``K >= 2``
        Posterior rows (validated like :func:`focal_map`'s ``probs``).
    gamma : float, ``>= -1``
        ``0`` returns ``p`` unchanged. For ``-1 < gamma < 0`` only the top class can sit on the
        decreasing branch of ``h``, which is why it is the outer unknown.

    Returns
    -------
    torch.Tensor, shape ``(..., K)``, dtype of ``p`` (not differentiable)
        ``focal_map(inverse_focal_map(p, g), g) == p`` to ~1e-15 in float64. Zero entries stay 0 and
        one-hot rows map to themselves.
    """
    t = check_probs(p, "p")
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
            state = {"s": None}

            def inner(s_top):
                y = _ell(s_top, gv, gv) + delta
                s = _ell_inverse(y, gv, state["s"])
                state["s"] = s
                return s

            def G(s_top):
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

    def fun(s):
        return _binary_logit(s, gv, gv) - y, (1 + gv) - _L_prime(s, gv) - _L_prime(-s, gv)

    return _solve_bracketed(fun, lo, hi, 0.5 * (lo + hi))


def binary_inverse_focal_logit(t: Any, gamma: float) -> torch.Tensor:
    r"""Inverse of :func:`binary_focal_logit`: the ``s`` with :math:`\operatorname{logit} FC(s) = t`.

    The log-odds of the binary focal-risk minimiser for a posterior with log-odds ``t``; unlike
    :func:`binary_inverse_focal_map` it cannot saturate (for ``gamma`` near ``-1`` the minimiser
    is astronomically confident: ``gamma = -0.999``, ``t = 7.66`` gives ``s ~ 760``).

    Parameters
    ----------
    t : tensor-like, any shape, finite
    gamma : float, ``>= -1``

    Returns
    -------
    torch.Tensor, same shape and dtype as ``t`` (solved in float64; not differentiable)
    """
    x = _elementwise_real(t, "t")
    gv = check_gamma(gamma)
    if gv == 0:
        return x.clone()
    with torch.no_grad():
        return _binary_inverse_logit(x.detach().to(torch.float64), gv).to(x.dtype)


def binary_inverse_focal_map(p: Any, gamma: float) -> torch.Tensor:
    r"""Inverse of :func:`binary_focal_map`, elementwise: the binary focal-risk minimiser.

    Solves :math:`\operatorname{logit} FC(s) = \operatorname{logit}(p)` (K&K (2024) Prop. 3 form,
    increasing in ``s`` for every ``gamma >= -1``) by vectorised safeguarded Newton in float64,
    with the bracket :math:`|\operatorname{logit} FC(s) - (1+\gamma)s| \le |\log(1+\gamma)|`
    (``|logit FC(s) - s| <= 1.2`` at ``gamma = -1``).

    Parameters
    ----------
    p : tensor-like, any shape, values in ``[0, 1]``
        True probability of the positive class.
    gamma : float, ``>= -1``

    Returns
    -------
    torch.Tensor, same shape and dtype as ``p`` (not differentiable)
        E.g. ``binary_inverse_focal_map(0.8, 2) ~ 0.6266`` (K&K Sec. 3.1: "around 0.62");
        ``0 -> 0``, ``1 -> 1``. The result can round to exactly 0 or 1 while ``p`` does not (the
        minimiser's log-odds exceed the dtype's range, typically for ``gamma`` near ``-1``); use
        :func:`binary_inverse_focal_logit` when that matters.
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


def lambertw(x: Any, branch: int = 0) -> torch.Tensor:
    r"""Real Lambert W function (inverse of :math:`w e^w`), torch, by Halley iteration.

    Corless et al. (1996), as used in Mukhoti et al. (2020) Prop. 2. Branch ``0`` is defined on
    :math:`[-1/e, \infty)` (values :math:`\ge -1`), branch ``-1`` on :math:`[-1/e, 0)` (values
    :math:`\le -1`). Initial guesses: branch-point series near :math:`-1/e`, asymptotic
    :math:`\log x - \log\log x` in the tails; then Halley on the overflow-free form
    :math:`w - x e^{-w} = 0` (computed in float64, returned in the input dtype).

    Parameters
    ----------
    x : tensor-like, any shape, finite
        Inputs within ``4 eps`` below ``-1/e`` are treated as ``-1/e`` (rounding of ``-1/e`` itself).
    branch : {0, -1}

    Returns
    -------
    torch.Tensor, same shape and dtype as ``x``
        Differentiable: :math:`W'(x) = 1/((1+W)e^W)` (infinite at the branch point).
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


def gamma_star(p0: Any) -> Any:
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
    p0 : float or tensor-like, values in ``(0, 1)``

    Returns
    -------
    float for python-number input, else a tensor of the shape and dtype of ``p0``.
        E.g. ``gamma_star(0.25) = 3.0702...``, ``gamma_star(0.2) = 4.8506...``.
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

def _as_gamma_array(gamma: Any, name: str, minimum: float, open_min: bool) -> tuple[np.ndarray, bool]:
    """Validate a scalar-function argument; return it as float64 NumPy and whether it was a number."""
    scalar = _is_python_scalar(gamma)
    if scalar:
        g = check_gamma(gamma, name=name, minimum=minimum)
        if open_min and g <= minimum:
            raise ValueError(f"{name} must be > {minimum:g}, got {g:g}")
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


def tau_oc(gamma: Any) -> Any:
    r"""Charoenphakdee et al. (2021) Thm. 8: :math:`\tau^\gamma_{oc} = \arg\max_v \varphi^\gamma(v)`.

    :math:`\varphi'` has the sign of Mukhoti et al. (2020)'s :math:`k(p,\gamma) = 2(1-p)/\log p + 1
    - \gamma p` (their Eq. (10)), which decreases from 1 to :math:`-(1+\gamma)`; its unique zero is
    found with SciPy's bracketing root finder (elementwise for arrays). Inverting the stationarity
    condition gives the closed form of the inverse function, :math:`\gamma = (1 + 2(1-\tau)/\log\tau)/\tau`.

    Parameters
    ----------
    gamma : float or tensor-like, ``> 0``

    Returns
    -------
    float for python-number input, else a float64 tensor of the shape of ``gamma``; in ``(0, 1/2)``.
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


def tau_uc(gamma: Any) -> Any:
    r"""Charoenphakdee et al. (2021) Thm. 8: :math:`\tau^\gamma_{uc}\in(0,1)` with :math:`\varphi^\gamma(\tau_{uc}) = 1`.

    The non-trivial root lies on the decreasing part of :math:`\varphi` (``phi(0) = 1`` is the
    trivial one), so it is bracketed by ``[tau_oc(gamma), 1)`` and found with SciPy's bracketing
    root finder (``brentq``-type; elementwise for arrays). It equals Mukhoti's threshold ``p0``:
    ``tau_uc(gamma_star(p0)) == p0``.

    Parameters
    ----------
    gamma : float or tensor-like, ``> 0``

    Returns
    -------
    float for python-number input, else a float64 tensor; ``tau_oc < tau_uc < 1/2``.
    """
    g, scalar = _as_gamma_array(gamma, "gamma", 0.0, open_min=True)
    lo = np.asarray(tau_oc(float(g)) if scalar else tau_oc(torch.as_tensor(g)).numpy(), dtype=np.float64)
    tol = {"xatol": 1e-300, "xrtol": 4 * 2.0 ** -52}
    res = _sp_elementwise.find_root(_log_phi_over_gamma, (lo, np.full_like(g, 1 - 2.0 ** -40)),
                                    args=(g,), tolerances=tol)
    out = np.asarray(res.x, dtype=np.float64)
    return float(out) if scalar else torch.as_tensor(out)


def ts_bounds(gamma: Any) -> Any:
    r"""The two temperatures of K&K (2024) Prop. 3: ``(1/(gamma+1), 1/(gamma+1 - log(gamma+1)/2))``.

    Correct reading of Prop. 3 (what its proof establishes; the printed display has the sides
    swapped, see the book): with :math:`T_1 = 1/(\gamma+1)` and
    :math:`T_2 = 1/(\gamma+1-\tfrac12\log(\gamma+1))`, for ``gamma >= 0`` and ``s >= 0``

    .. math:: \sigma(s/T_2) \le FC(s) \le \sigma(s/T_1),

    reversed for ``s < 0`` (``logit FC(s) = (gamma+1) s - log f_gamma(s)`` with
    ``0 <= log f_gamma(s) <= s log(gamma+1)/2``). The paper proves it for ``gamma > 0``; ``gamma`` in
    ``(-1, 0)`` is accepted (then ``T_1 > T_2``).

    Parameters
    ----------
    gamma : float or tensor-like, ``> -1``

    Returns
    -------
    tuple ``(T_1, T_2)``: python floats for python-number input, else two float64 tensors.
    """
    g, scalar = _as_gamma_array(gamma, "gamma", -1.0, open_min=True)
    t1 = 1.0 / (g + 1.0)
    t2 = 1.0 / (g + 1.0 - np.log1p(g) / 2.0)
    if scalar:
        return float(t1), float(t2)
    return torch.as_tensor(t1), torch.as_tensor(t2)
