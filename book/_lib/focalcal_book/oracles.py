r"""The focal-map oracles: the papers' formulas typed as printed, in NumPy and mpmath.

The one copy of the reference formulas that :mod:`focalcal.maps` is checked against, by the tests
(``tests/test_maps.py``, ``tests/test_theory.py``) and by the theory chapters. Each function
evaluates a formula of a paper term by term, with none of the library's log-odds rewriting, and
never calls :mod:`focalcal` (not even its argument checks), so agreement with the library is
evidence rather than a tautology:

- :func:`kk_eq1`: the multiclass focal calibration map of Komisarenko & Kull (2024), Prop. 4,
  Eq. (1), :math:`\hat p_j \propto 1/\ell'_\gamma(q_j)` (NumPy);
- :func:`psi_charoenphakdee`: Charoenphakdee et al. (2021), Thm. 11, Eqs. (12)-(13), :math:`\Psi^\gamma`
  (NumPy);
- :func:`g_mukhoti`: Mukhoti et al.'s (2020) gradient factor, Prop. 1, Eq. (7) (NumPy);
- :func:`phi_mp`: :math:`\varphi^\gamma(v) = -v\,\ell'_\gamma(v)` with the derivative of the focal
  loss :math:`\ell_\gamma(v) = -(1-v)^\gamma\log v` taken numerically by mpmath (Charoenphakdee
  Eq. (10) as a definition, not as a formula);
- :func:`kk_prop2_mp`, :func:`kk_prop3_logit_mp`: K&K's binary map (Prop. 2) and its log-odds
  from the proof of Prop. 3 (mpmath);
- :func:`reference_focal_map`: K&K Eq. (1) for one probability vector at any precision (mpmath).

Conventions: the NumPy oracles take float64 arrays in ``(0, 1)``, ``(..., K)`` for the multiclass
maps, and return the same shape; the mpmath oracles take one number (or vector), read a python
float as its exact binary value (:func:`reference_focal_map`: its decimal ``repr``) and return
``mpmath.mpf``. Slow and naive on purpose (test points, not data); bad input raises ``ValueError``
naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real

import mpmath
import numpy as np

__all__ = [
    "kk_eq1",
    "psi_charoenphakdee",
    "g_mukhoti",
    "phi_mp",
    "kk_prop2_mp",
    "kk_prop3_logit_mp",
    "reference_focal_map",
]


# ------------------------------------------------------------------------------------------
# NumPy: the printed formulas in float64
# ------------------------------------------------------------------------------------------

def kk_eq1(q: np.ndarray, gamma: float) -> np.ndarray:
    r"""Komisarenko & Kull (2024), Prop. 4, Eq. (1), as printed.

    :math:`\hat p_j = \frac{1/\ell'_\gamma(q_j)}{\sum_k 1/\ell'_\gamma(q_k)}` with
    :math:`\ell'_\gamma(q) = (1-q)^\gamma\bigl(\gamma\log q/(1-q) - 1/q\bigr)`; ``q`` of shape
    ``(..., K)`` with entries in ``(0, 1)``; returns the mapped rows (same shape, float64).
    """
    q = np.asarray(q, dtype=np.float64)
    inv = 1.0 / ((1 - q) ** gamma * (gamma * np.log(q) / (1 - q) - 1 / q))
    return inv / inv.sum(-1, keepdims=True)


def psi_charoenphakdee(v: np.ndarray, gamma: float) -> np.ndarray:
    r"""Charoenphakdee et al. (2021), Thm. 11, Eqs. (12)-(13), as printed.

    :math:`\Psi^\gamma_j(v) = h^\gamma(v_j)/\sum_l h^\gamma(v_l)` with
    :math:`h^\gamma(v) = v/\bigl((1-v)^\gamma - \gamma(1-v)^{\gamma-1}v\log v\bigr)`; ``v`` of shape
    ``(..., K)`` with entries in ``(0, 1)``; returns the mapped rows (same shape, float64).
    """
    v = np.asarray(v, dtype=np.float64)
    hv = v / ((1 - v) ** gamma - gamma * (1 - v) ** (gamma - 1) * v * np.log(v))
    return hv / hv.sum(-1, keepdims=True)


def g_mukhoti(p: np.ndarray | float, gamma: float) -> np.ndarray:
    r"""Mukhoti et al. (2020), Prop. 1, Eq. (7): :math:`g(p,\gamma) = (1-p)^\gamma - \gamma p(1-p)^{\gamma-1}\log p`.

    Elementwise on ``p`` in ``(0, 1)`` (any shape); returns float64 of the same shape.
    """
    p = np.asarray(p, dtype=np.float64)
    return (1 - p) ** gamma - gamma * p * (1 - p) ** (gamma - 1) * np.log(p)


# ------------------------------------------------------------------------------------------
# mpmath: high-precision references
# ------------------------------------------------------------------------------------------

def _mp_number(x: object, name: str, *, floats: str = "binary") -> mpmath.mpf:
    """An exact mpmath number: strings and mpf as they are, ratios exactly, and floats by their
    exact binary value (``floats="binary"``: the point a float64 computation sees) or by their
    shortest decimal ``repr`` (``floats="repr"``: ``0.33`` means 33/100)."""
    if isinstance(x, (str, mpmath.mpf)):
        return mpmath.mpf(x)
    if hasattr(x, "numerator") and hasattr(x, "denominator") and not isinstance(x, float):
        return mpmath.mpf(int(x.numerator)) / int(x.denominator)
    if isinstance(x, Real) and not isinstance(x, bool):
        return mpmath.mpf(float(x)) if floats == "binary" else mpmath.mpf(repr(float(x)))
    raise ValueError(f"{name} must be a real number (float, string, ratio or mpmath number), got {x!r}")


def _check_dps(dps: int) -> int:
    if isinstance(dps, bool) or not isinstance(dps, int) or dps < 15:
        raise ValueError(f"dps must be an integer >= 15, got {dps!r}")
    return dps


def _check_gamma_mp(gamma: object, floats: str = "binary") -> mpmath.mpf:
    g = _mp_number(gamma, "gamma", floats=floats)
    if not mpmath.isfinite(g) or g < -1:
        raise ValueError(f"gamma must be a finite number >= -1, got {gamma!r}")
    return g


def phi_mp(v: object, gamma: object, *, dps: int = 40) -> mpmath.mpf:
    r""":math:`\varphi^\gamma(v) = -v\,\ell'_\gamma(v)` at ``dps`` digits, the derivative by mpmath.

    :math:`\ell_\gamma(v) = -(1-v)^\gamma\log v` is differentiated numerically (``mpmath.diff``),
    so this checks the closed form of Charoenphakdee et al. (2021), Eq. (10) (equal to Mukhoti's
    :math:`g`) from its definition. ``v`` in ``(0, 1)``; ``gamma >= -1``.
    """
    dps = _check_dps(dps)
    with mpmath.workdps(dps + 10):
        x, g = _mp_number(v, "v"), _check_gamma_mp(gamma)
        if not 0 < x < 1:
            raise ValueError(f"v must lie in the open interval (0, 1), got {v!r}")
        d = mpmath.diff(lambda t: -(1 - t) ** g * mpmath.log(t), x)
        out = -x * d
    with mpmath.workdps(dps):
        return +out


def kk_prop2_mp(q: object, gamma: object, *, dps: int = 50) -> mpmath.mpf:
    r"""K&K (2024), Prop. 2, as printed: the binary focal calibration map at ``dps`` digits.

    .. math::

        \hat p(q) = \Bigl(1 + \bigl(\tfrac{1-q}{q}\bigr)^\gamma
                    \frac{(1-q) - \gamma q\log q}{q - \gamma(1-q)\log(1-q)}\Bigr)^{-1},

    ``q`` in ``(0, 1)``.
    """
    dps = _check_dps(dps)
    with mpmath.workdps(dps):
        q, g = _mp_number(q, "q"), _check_gamma_mp(gamma)
        if not 0 < q < 1:
            raise ValueError(f"q must lie in the open interval (0, 1), got {q}")
        ratio = ((1 - q) - g * q * mpmath.log(q)) / (q - g * (1 - q) * mpmath.log(1 - q))
        return 1 / (1 + ((1 - q) / q) ** g * ratio)


def kk_prop3_logit_mp(s: object, gamma: object, *, dps: int = 50) -> mpmath.mpf:
    r"""Log-odds of the binary map :math:`FC(s)` from the proof of K&K (2024), Prop. 3.

    :math:`\operatorname{logit} FC(s) = \gamma s - \log\bigl(e^{-s} + \gamma\log(1+e^{-s})\bigr)
    + \log\bigl(1 + \gamma e^{-s}\log(1+e^{s})\bigr)`, for any finite ``s``. At ``gamma = -1`` the
    first logarithm's argument cancels to about :math:`e^{-2s}/2`, so the working precision grows
    with ``|s|`` there (about 8800 digits at ``|s| = 1e4``).
    """
    dps = _check_dps(dps)
    s_val = float(s) if not isinstance(s, (str, mpmath.mpf)) else float(mpmath.mpf(s))
    if not math.isfinite(s_val):
        raise ValueError(f"s must be finite, got {s!r}")
    g0 = _check_gamma_mp(gamma)
    extra = int(abs(s_val) * 0.87) if g0 == -1 else 0
    with mpmath.workdps(dps + extra):
        x, g = _mp_number(s, "s"), _check_gamma_mp(gamma)
        num = mpmath.exp(-x) + g * mpmath.log1p(mpmath.exp(-x))
        den = 1 + g * mpmath.exp(-x) * mpmath.log1p(mpmath.exp(x))
        return g * x - mpmath.log(num) + mpmath.log(den)


def reference_focal_map(q: Sequence[object], gamma: object, *, dps: int = 30) -> list[mpmath.mpf]:
    r"""The focal calibration map of one probability vector, in mpmath at ``dps`` digits.

    Evaluates K&K (2024) Eq. (1), :math:`\hat p_j \propto 1/\ell'_\gamma(q_j)` with
    :math:`\ell'_\gamma(q) = \gamma(1-q)^{\gamma-1}\log q - (1-q)^\gamma/q`, term by term. It is
    deliberately the direct formula (no log-odds tricks) so that it is an independent reference
    for :func:`focalcal.maps.focal_map`; use it on a handful of points, not on grids.

    Parameters
    ----------
    q : sequence of numbers, shape (K,), K >= 2
        Entries in (0, 1) summing to 1 within ``10**-(dps-5)``. Strings such as ``"0.33"``,
        integer ratios (``fractions.Fraction``, ``sympy.Rational``) and mpmath numbers are taken
        exactly; python floats are read as their shortest decimal ``repr`` (so ``0.33`` means
        33/100), which is why vectors like ``[0.8 / 99] * 99`` must be passed as fractions. A
        1-D torch tensor or NumPy array is read through ``tolist()``.
    gamma : number, >= -1
        Read like the entries of ``q`` (a float by its ``repr``).
    dps : int
        Working precision in decimal digits (>= 15).

    Returns
    -------
    list of mpmath.mpf, length K
        The mapped vector (sums to 1 at ``dps`` digits).
    """
    dps = _check_dps(dps)
    if hasattr(q, "tolist") and not isinstance(q, (list, tuple)):
        q = q.tolist()
    try:
        items = list(q)
    except TypeError as err:
        raise ValueError(f"q must be a sequence of probabilities, got {type(q).__name__}") from err
    if len(items) < 2:
        raise ValueError(f"q must have at least 2 entries, got {len(items)}")
    with mpmath.workdps(dps + 10):
        g = _check_gamma_mp(gamma, floats="repr")
        vals = [_mp_number(v, "q", floats="repr") for v in items]
        if any(not (0 < x < 1) for x in vals):
            raise ValueError("q must have every entry in the open interval (0, 1)")
        if abs(mpmath.fsum(vals) - 1) > mpmath.mpf(10) ** (-(dps - 5)):
            raise ValueError(f"q must sum to 1, got {mpmath.nstr(mpmath.fsum(vals), 12)}")
        inv = [1 / (g * (1 - x) ** (g - 1) * mpmath.log(x) - (1 - x) ** g / x) for x in vals]
        total = mpmath.fsum(inv)
        out = [w / total for w in inv]
    with mpmath.workdps(dps):
        return [+x for x in out]
