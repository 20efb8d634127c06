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

    \log h^\gamma(\sigma(s)) &= -\operatorname{softplus}(-s) + \gamma\,\operatorname{softplus}(s)
    - \log\bigl(1 + \gamma\, r(s)\bigr),\\
    r(s) &= \frac{-q\log q}{1-q} = e^{s}\log(1+e^{-s}) \in (0, 1),

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

Conventions
-----------
Array arguments are :data:`~focalcal._validation.ArrayLike`: torch tensors, NumPy arrays (float64
stays float64), lists or python numbers. Every array function returns a ``torch.Tensor`` of the
input's shape (``(..., K)`` for the multiclass maps) and dtype; float32 and float64 are computed in
their own precision (float16/bfloat16 in float32 and cast back); leading dimensions broadcast.
``gamma`` is a python float, or a 0-dim tensor that requires grad where a docstring says so. The
naturally scalar functions (:func:`tau_oc`, :func:`tau_uc`, :func:`ts_bounds`, :func:`gamma_star`)
return a python ``float`` for a python number and a tensor for an array (typed by overloads). Bad
input raises ``ValueError`` naming the argument.

Where the code lives: the forward maps are here; the inverse maps (focal-risk minimisers) in
``focalcal/_inverse.py``, the Lambert W function and the thresholds in ``focalcal/_thresholds.py``,
the shared log-odds kernels in ``focalcal/_logodds.py``. Import everything from this module.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._inverse import binary_inverse_focal_logit, binary_inverse_focal_map, inverse_focal_map
from ._logodds import (
    _binary_logit,
    _check_temperature,
    _elementwise_real,
    _elementwise_unit,
    _ell,
    _g_like,
    _ell_ext,
    _gamma_arg,
    _is_const,
    _log_map_from_log_odds,
    _log_phi_ext,
    _logit_elementwise,
    _r_parts,
    _row_log_odds,
    _softplus,
    _work_dtype,
)
from ._thresholds import gamma_star, lambertw, tau_oc, tau_uc, ts_bounds
from ._validation import ArrayLike, check_logits, check_probs

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

_PROBS_HINT = "for unnormalised scores (logits) use focal_map_from_logits"


# ============================================================================================
# focal loss term
# ============================================================================================

def focal_loss_term(q: ArrayLike, gamma: float | torch.Tensor) -> torch.Tensor:
    r"""Focal loss of the true class, :math:`\ell_\gamma(q) = -(1-q)^\gamma \log q`.

    K&K (2024) Sec. 2; Charoenphakdee et al. (2021) Eq. (5) with a one-hot ``v``.

    Parameters
    ----------
    q : ArrayLike, any shape
        Predicted probability of the true class, in ``[0, 1]``.
    gamma : float, ``>= -1``
        Focusing parameter (``0`` is cross-entropy; negative values give the inverse focal loss).

    Returns
    -------
    torch.Tensor, same shape and dtype as ``q``
        ``+inf`` at ``q = 0``; at ``q = 1`` it is ``0`` except for ``gamma = -1`` where the limit is
        ``1``. Evaluated as ``exp(-gamma softplus(s) + log softplus(-s))`` with ``s = logit(q)``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import focal_loss_term
    >>> q = torch.tensor([0.25, 0.5, 0.9], dtype=torch.float64)
    >>> focal_loss_term(q, gamma=2.0)  # -(1 - q)**2 log q
    tensor([0.7798, 0.1733, 0.0011], dtype=torch.float64)
    >>> focal_loss_term(q, gamma=0.0)  # cross-entropy, -log q
    tensor([1.3863, 0.6931, 0.1054], dtype=torch.float64)
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


def focal_loss_term_grad(q: ArrayLike, gamma: float | torch.Tensor) -> torch.Tensor:
    r"""Derivative :math:`\ell'_\gamma(q) = \gamma(1-q)^{\gamma-1}\log q - (1-q)^\gamma/q`.

    K&K (2024) Prop. 1 proof (first derivative) and Prop. 4; equal to
    :math:`-\varphi^\gamma(q)/q = -1/h^\gamma(q)` (Charoenphakdee Eq. (13)).

    Parameters
    ----------
    q : ArrayLike, any shape, values in ``[0, 1]``
    gamma : float, ``>= -1``

    Returns
    -------
    torch.Tensor, same shape and dtype as ``q``
        Negative everywhere on ``(0, 1)`` for ``gamma >= -1``. Limits: ``-inf`` at ``q = 0``; at
        ``q = 1``: ``0`` (``gamma > 0``), ``-1`` (``gamma = 0``), ``-inf`` (``-1 < gamma < 0``),
        ``-1/2`` (``gamma = -1``).

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import focal_loss_term_grad
    >>> q = torch.tensor([0.25, 0.5, 0.9], dtype=torch.float64)
    >>> focal_loss_term_grad(q, gamma=0.0)  # -1/q
    tensor([-4.0000, -2.0000, -1.1111], dtype=torch.float64)
    >>> focal_loss_term_grad(q, gamma=2.0)
    tensor([-4.3294, -1.1931, -0.0322], dtype=torch.float64)
    """
    t = _elementwise_unit(q, "q")
    gv, g = _gamma_arg(gamma)
    x = t.to(_work_dtype(t))
    return (-torch.exp(-_ell_ext(_logit_elementwise(x), g, gv))).to(t.dtype)


# ============================================================================================
# Charoenphakdee's phi and h, Mukhoti's g
# ============================================================================================

def phi(v: ArrayLike, gamma: float | torch.Tensor) -> torch.Tensor:
    r"""Charoenphakdee et al. (2021) Eq. (10): :math:`\varphi^\gamma(v) = (1-v)^\gamma - \gamma(1-v)^{\gamma-1}v\log v`.

    Identical to Mukhoti et al. (2020)'s gradient factor :math:`g(v, \gamma)` (Prop. 1, Eq. (7)),
    and to :math:`-v\,\ell'_\gamma(v)`.

    Parameters
    ----------
    v : ArrayLike, any shape, values in ``[0, 1]``
    gamma : float, ``>= -1``

    Returns
    -------
    torch.Tensor, same shape and dtype as ``v``
        Computed as ``(1 - v)^gamma (1 + gamma r(v))``. Limits: ``phi(0) = 1``; ``phi(1) = 0``
        (``gamma > 0``), ``1`` (``gamma = 0``), ``+inf`` (``-1 < gamma < 0``), ``1/2`` (``gamma = -1``).

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import phi
    >>> v = torch.tensor([0.25, 0.5, 0.9], dtype=torch.float64)
    >>> phi(v, gamma=2.0)  # above 1 for small v, 0 at v = 1
    tensor([1.0824, 0.5966, 0.0290], dtype=torch.float64)
    >>> phi(v, gamma=0.0)
    tensor([1., 1., 1.], dtype=torch.float64)
    """
    return _phi(v, gamma, "v")


def _phi(x: ArrayLike, gamma: float | torch.Tensor, name: str) -> torch.Tensor:
    t = _elementwise_unit(x, name)
    gv, g = _gamma_arg(gamma)
    xw = t.to(_work_dtype(t))
    return torch.exp(_log_phi_ext(_logit_elementwise(xw), g, gv)).to(t.dtype)


def gradient_factor(p: ArrayLike, gamma: float | torch.Tensor) -> torch.Tensor:
    r"""Mukhoti et al. (2020) Prop. 1, Eq. (7): :math:`g(p,\gamma) = (1-p)^\gamma - \gamma p(1-p)^{\gamma-1}\log p`.

    The factor by which focal loss rescales the cross-entropy gradient of the last layer. It is the
    same function as Charoenphakdee's :math:`\varphi^\gamma` (:func:`phi`). ``p`` in ``[0, 1]``, any
    shape; returns a tensor of the same shape and dtype (``g(0) = 1``, ``g(1) = 0`` for ``gamma > 0``).

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import gradient_factor, phi
    >>> p = torch.tensor([0.0, 0.25, 1.0], dtype=torch.float64)
    >>> gradient_factor(p, gamma=2.0)
    tensor([1.0000, 1.0824, 0.0000], dtype=torch.float64)
    >>> torch.equal(gradient_factor(p, 2.0), phi(p, 2.0))  # the same function
    True
    """
    return _phi(p, gamma, "p")


def h(v: ArrayLike, gamma: float | torch.Tensor) -> torch.Tensor:
    r"""Charoenphakdee et al. (2021) Eq. (13): :math:`h^\gamma(v) = v/\varphi^\gamma(v) = -1/\ell'_\gamma(v)`.

    The unnormalised focal calibration map: :math:`\Psi^\gamma_i(v) = h^\gamma(v_i)/\sum_l h^\gamma(v_l)`.

    Parameters
    ----------
    v : ArrayLike, any shape, values in ``[0, 1]``
    gamma : float, ``>= -1``

    Returns
    -------
    torch.Tensor, same shape and dtype as ``v``
        ``h(0) = 0``; ``h(1) = +inf`` (``gamma > 0``), ``1`` (``gamma = 0``), ``0``
        (``-1 < gamma < 0``), ``2`` (``gamma = -1``). Values beyond the dtype's range overflow to
        ``inf`` (e.g. ``gamma = 10`` and ``1 - v < 1e-4`` in float32).

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import h
    >>> v = torch.tensor([0.25, 0.5, 0.9], dtype=torch.float64)
    >>> h(v, gamma=2.0)  # v / phi(v): grows without bound as v -> 1
    tensor([ 0.2310,  0.8381, 31.0721], dtype=torch.float64)
    >>> h(v, gamma=0.0)  # the identity
    tensor([0.2500, 0.5000, 0.9000], dtype=torch.float64)
    """
    t = _elementwise_unit(v, "v")
    gv, g = _gamma_arg(gamma)
    x = t.to(_work_dtype(t))
    return torch.exp(_ell_ext(_logit_elementwise(x), g, gv)).to(t.dtype)


# ============================================================================================
# the multiclass focal calibration map
# ============================================================================================

def focal_map(probs: ArrayLike, gamma: float | torch.Tensor) -> torch.Tensor:
    r"""Multiclass focal calibration map, K&K (2024) Prop. 4, Eq. (1).

    .. math::

        \hat p_j(q) = \frac{1/\ell'_\gamma(q_j)}{\sum_k 1/\ell'_\gamma(q_k)}
                    = \frac{h^\gamma(q_j)}{\sum_k h^\gamma(q_k)} = \Psi^\gamma_j(q),

    i.e. Charoenphakdee et al. (2021) Thm. 11, Eqs. (12)-(13): it maps the focal-risk minimiser to
    the true class posterior.

    Parameters
    ----------
    probs : ArrayLike, shape ``(..., K)``, ``K >= 2``
        Probability rows in any precision (entries in ``[0, 1]``, rows summing to 1 within the
        tolerance of :ref:`probs-tolerance` in :mod:`focalcal.metrics`; they are renormalised
        before use).
    gamma : float (or 0-dim tensor requiring grad), ``>= -1``
        ``0`` returns ``probs`` unchanged.

    Returns
    -------
    torch.Tensor, shape ``(..., K)``, dtype of ``probs``
        Rows sum to 1. Entries with ``q_j = 0`` map to 0; a one-hot row maps to itself (the limit,
        for every ``gamma >= -1``, see the module docstring). The argmax is preserved
        (Charoenphakdee Prop. 12; also for ``-1 <= gamma < 0``).

    Notes
    -----
    Whether the map raises the top probability (K&K Prop. 5, with its erratum): see the book,
    *Theory > Errata* and ``book/theory/kk_multiclass.md``.

    Computed on the per-class log-odds with ``1 - q_top`` taken as the sum of the other entries, so a
    row such as ``(1.0, 1e-30, 0)`` is still mapped correctly. Gradients are not propagated through
    entries that are exactly 0 or rows that are exactly one-hot. For logits prefer
    :func:`focal_map_from_logits`, which never forms ``q``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import focal_map
    >>> q = torch.tensor([0.6, 0.3, 0.1])  # a focal-loss model's probabilities
    >>> focal_map(q, gamma=3.0)  # the posterior they estimate: more confident
    tensor([0.8710, 0.1052, 0.0238])
    >>> focal_map(q, gamma=0.0)  # gamma = 0 (cross-entropy) is the identity
    tensor([0.6000, 0.3000, 0.1000])
    """
    t = check_probs(probs, "probs", hint=_PROBS_HINT)
    gv, g = _gamma_arg(gamma)
    if _is_const(g, 0.0):
        return t.clone()
    x = t.to(_work_dtype(t))
    x = x / x.sum(-1, keepdim=True)
    return torch.exp(_log_map_from_log_odds(_row_log_odds(x), g, gv)).to(t.dtype)


def log_focal_map_from_logits(logits: ArrayLike, gamma: float | torch.Tensor,
                              temperature: float | torch.Tensor | np.ndarray = 1.0) -> torch.Tensor:
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
    logits : ArrayLike, shape ``(..., K)``, ``K >= 2``, finite
    gamma : float (or 0-dim tensor requiring grad), ``>= -1``
    temperature : float or tensor broadcastable to ``logits`` (e.g. shape ``()`` or ``(..., 1)``), ``> 0``
        May require grad (post-hoc fitting).

    Returns
    -------
    torch.Tensor, shape ``(..., K)``, dtype of ``logits``
        Log-probabilities (usable directly in ``nll_loss``); finite with finite gradients w.r.t.
        ``logits``, ``temperature`` (and a tensor ``gamma > -1``) even for logits of ``+-1e4``.
        The class with the largest logit receives the largest output (ties up to rounding).

    Examples
    --------
    A row whose float32 softmax is one-hot keeps finite, ordered log-probabilities:

    >>> import torch
    >>> from focalcal.maps import log_focal_map_from_logits
    >>> log_focal_map_from_logits(torch.tensor([[200.0, 0.0, -10.0]]), gamma=3.0)
    tensor([[   0.0000, -798.6136, -808.6136]])
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


def focal_map_from_logits(logits: ArrayLike, gamma: float | torch.Tensor,
                          temperature: float | torch.Tensor | np.ndarray = 1.0) -> torch.Tensor:
    r"""Focal temperature scaling: ``focal_map(softmax(logits / T), gamma)``, evaluated in log space.

    K&K (2024) Sec. 4.2 with Prop. 4, Eq. (1). Same arguments as :func:`log_focal_map_from_logits`;
    returns ``exp`` of it: probabilities of shape ``(..., K)`` whose rows sum to 1, finite for
    saturated rows (float32 softmax max exactly 1.0) with the argmax preserved, and finite
    gradients w.r.t. logits and temperature.

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import focal_map, focal_map_from_logits
    >>> logits = torch.tensor([[2.0, 1.0, 0.0]])
    >>> focal_map_from_logits(logits, gamma=3.0)
    tensor([[0.9435, 0.0438, 0.0127]])
    >>> focal_map(torch.softmax(logits, -1), gamma=3.0)  # the same, through the probabilities
    tensor([[0.9435, 0.0438, 0.0127]])
    >>> focal_map_from_logits(logits, gamma=3.0, temperature=2.0)  # focal temperature scaling
    tensor([[0.7236, 0.1910, 0.0853]])
    """
    return torch.exp(log_focal_map_from_logits(logits, gamma, temperature))


# ============================================================================================
# the binary map (K&K Prop. 2 and Prop. 3)
# ============================================================================================


def binary_focal_logit(s: ArrayLike, gamma: float | torch.Tensor) -> torch.Tensor:
    r"""Log-odds of the binary focal calibration of a logit, :math:`\operatorname{logit} FC(s)`.

    K&K (2024) Prop. 3 (proof): with :math:`FC(s) = \hat p_\gamma(\sigma(s))`,

    .. math::

        \operatorname{logit} FC(s) &= (\gamma + 1)s - \log f_\gamma(s),\\
        f_\gamma(s) &= \frac{\gamma e^s\log(1+e^{-s}) + 1}{1 + \gamma e^{-s}\log(1+e^{s})}
                    = \frac{1 + \gamma r(s)}{1 + \gamma r(-s)}.

    Parameters
    ----------
    s : ArrayLike, any shape, finite
    gamma : float (or 0-dim tensor requiring grad), ``>= -1``

    Returns
    -------
    torch.Tensor, same shape and dtype as ``s``
        Exact to a few ulps (relative) for ``|s|`` up to ``1e4`` and beyond, including ``s -> 0``
        and ``gamma = -1`` (where ``logit FC(s) - s -> +-log 2``). Odd in ``s``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import binary_focal_logit
    >>> binary_focal_logit(torch.tensor([-2.0, 0.0, 2.0]), gamma=3.0)  # odd, increasing
    tensor([-7.2839,  0.0000,  7.2839])
    """
    t = _elementwise_real(s, "s")
    gv, g = _gamma_arg(gamma)
    x = t.to(_work_dtype(t))
    return _binary_logit(x, g, gv).to(t.dtype)


def binary_focal_map(q: ArrayLike, gamma: float | torch.Tensor) -> torch.Tensor:
    r"""Binary focal calibration map, K&K (2024) Prop. 2:

    .. math::

        \hat p(q) = \Bigl(1 + \bigl(\tfrac{1-q}{q}\bigr)^\gamma
                    \frac{(1-q) - \gamma q\log q}{q - \gamma(1-q)\log(1-q)}\Bigr)^{-1}.

    Parameters
    ----------
    q : ArrayLike, any shape, values in ``[0, 1]``
        Predicted probability of the positive class.
    gamma : float (or 0-dim tensor requiring grad), ``>= -1``

    Returns
    -------
    torch.Tensor, same shape and dtype as ``q``
        ``sigmoid(binary_focal_logit(logit(q)))``; ``0 -> 0``, ``1 -> 1``, ``1/2 -> 1/2``. Equals
        ``focal_map`` on the rows ``(1 - q, q)``.

    Examples
    --------
    >>> import torch
    >>> from focalcal.maps import binary_focal_map
    >>> binary_focal_map(torch.tensor([0.2, 0.5, 0.8]), gamma=3.0)
    tensor([0.0065, 0.5000, 0.9935])
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
