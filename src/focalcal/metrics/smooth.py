r"""The smooth ECE of Błasiok & Nakkiran (2023), top-label: a calibration error without bins.

With confidences ``f_i`` and correctness ``y_i`` (``1`` if the top class is the label), the
residuals ``r_i = y_i - f_i`` are smoothed by the Gaussian kernel reflected at 0 and 1,
:math:`\hat K_\sigma(t, f)`, and

.. math::

    \mathrm{smECE}_\sigma = \int_0^1 \Big|\frac1N\sum_i \hat K_\sigma(t, f_i)\, r_i\Big|\,dt ,

whose bandwidth is the fixed point :math:`\sigma^* = \mathrm{smECE}_{\sigma^*}` (unique: the
left side increases and the right decreases in :math:`\sigma`); the smooth ECE is
:math:`\mathrm{smECE}_{\sigma^*}`. It is consistent (zero exactly for a perfectly calibrated
predictor in the limit) and, unlike the binned ECE, does not jump when a confidence crosses a
bin edge, so a choice of bins cannot decide a close comparison.

Numerics: the residuals (and the ones, for the density) are deposited on a grid of 10001 points
of ``[0, 1]`` by linear interpolation, reflected once at each end and convolved with the
Gaussian by FFT (:func:`scipy.signal.fftconvolve`), in float64. Images beyond the first
reflection are dropped (relative weight below ``exp(-1 / (2 sigma^2))``, under ``4e-6`` for
``sigma <= 0.2``). The integral is the trapezoid rule on that grid, divided by the same rule
applied to the smoothed density (which integrates to 1 exactly), so the discretisation of the
kernel cancels. The fixed point is found by Brent's method on ``sigma`` in ``[1e-3, 1]``; below
``1e-3`` (about ``1e6`` perfectly calibrated samples) ``smECE_{1e-3}`` is returned. ``relplot``
(Błasiok & Nakkiran's package) computes the same quantity on a coarser grid (about 1000 points,
then 200 evaluation points) with a 10-step bisection for ``sigma`` (resolution ``2**-10``); the two
agree within ``1e-3`` while the smooth ECE is below about 0.2. Above, they differ, for two reasons
in ``relplot``'s discretisation: its Gaussian is cut at distance 0.5 (at ``sigma`` near 0.3 that
drops tails of relative weight ``exp(-0.5**2 / (2 * 0.3**2)) = 0.25``), and its reflection counts a
mass on an end point of the grid (a confidence that rounds to 1) once where the reflected kernel
counts it twice. Both make it smooth less and read higher (by about 0.007 at a smooth ECE of 0.29,
0.026 at 0.41). This module follows the definition (``tests/test_smooth_ece.py`` checks it against
a direct sum of the reflected kernel and shows the difference).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from .._validation import ArrayLike
from ._inputs import top_label

__all__ = ["smooth_ece"]

_GRID = 10001
_SIGMA_MIN = 1e-3


def _deposit(f: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weights ``w`` at positions ``f`` in [0, 1] spread linearly onto the grid's two nearest points."""
    pos = np.clip(f, 0.0, 1.0) * (_GRID - 1)
    i = np.minimum(pos.astype(np.int64), _GRID - 2)
    frac = pos - i
    return (np.bincount(i, (1 - frac) * w, minlength=_GRID)
            + np.bincount(i + 1, frac * w, minlength=_GRID))


def _smooth(v: np.ndarray, sigma: float) -> np.ndarray:
    """``v`` on the grid convolved with the Gaussian of width ``sigma`` reflected at 0 and 1."""
    x = np.arange(-(_GRID - 1), _GRID) / (_GRID - 1)
    ker = np.exp(-0.5 * (x / sigma) ** 2)
    # positions -1 .. 2, mirrored at 0 and 1; a mass on an end point is its own mirror image, so
    # it counts twice (the reflected kernel of f = 0 is 2 phi(t))
    mid = v.copy()
    mid[[0, -1]] *= 2
    ext = np.concatenate([v[:0:-1], mid, v[-2::-1]])
    # imported here: scipy.signal costs about 0.6 s to import, a third of `import focalcal`
    from scipy.signal import fftconvolve

    return fftconvolve(ext, ker, mode="valid")


def _trapezoid(s: np.ndarray) -> float:
    return float(s.sum() - 0.5 * (s[0] + s[-1]))


def smooth_ece(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
               logits: ArrayLike | None = None) -> float:
    r"""Smooth ECE (Błasiok & Nakkiran 2023) of the top-label confidence, a fraction in [0, 1].

    The kernel-smoothed calibration error at its own fixed-point bandwidth (module docstring): no
    bins to choose. Reported beside the binned :func:`focalcal.metrics.ece`; on the same scores it
    is usually of the same size but moves continuously with them.

    Parameters
    ----------
    probs : Tensor, shape (N, K), optional
        Probabilities (rows summing to 1). Exactly one of ``probs`` and ``logits`` is required.
    labels : Tensor of int, shape (N,)
        Integer class labels in ``[0, K)``.
    logits : Tensor, shape (N, K), optional, keyword-only
        Unnormalised scores, instead of ``probs``.

    Returns
    -------
    float

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import ece, smooth_ece
    >>> g = torch.Generator().manual_seed(0)
    >>> z = 2 * torch.randn(5000, 3, generator=g, dtype=torch.float64)
    >>> labels = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    >>> round(smooth_ece(logits=z, labels=labels), 3)  # calibrated: small
    0.012
    >>> round(smooth_ece(logits=3 * z, labels=labels), 3), round(ece(logits=3 * z, labels=labels), 3)
    (0.158, 0.158)
    """
    conf, correct = top_label(probs, labels, logits)
    if conf.dim() != 1:
        name = "probs" if probs is not None else "logits"
        raise ValueError(f"smooth_ece takes one model's {name} of shape (N, K), got "
                         f"{conf.dim() + 1}-dimensional {name}; call it once per model")
    f = conf.detach().double().cpu().numpy()
    r = correct.detach().cpu().numpy().astype(np.float64) - f
    dep_r, dep_1 = _deposit(f, r), _deposit(f, np.ones_like(f))

    def smece(sigma: float) -> float:
        return _trapezoid(np.abs(_smooth(dep_r, sigma))) / _trapezoid(_smooth(dep_1, sigma))

    if smece(_SIGMA_MIN) <= _SIGMA_MIN:
        return smece(_SIGMA_MIN)
    if smece(1.0) >= 1.0:
        return smece(1.0)
    sigma = brentq(lambda s: smece(s) - s, _SIGMA_MIN, 1.0, xtol=1e-9, rtol=1e-10)
    return smece(sigma)
