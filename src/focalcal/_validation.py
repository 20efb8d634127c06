"""Argument checks shared by every public function.

Each check raises ``ValueError`` naming the argument and saying what is allowed, so that bad
input never turns into a silent NaN three calls later. :data:`ArrayLike` is the one type hint of
array arguments across the library.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import warnings
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias, TypeVar

import numpy as np
import torch

#: What an array argument of the library accepts: a tensor (used as is: dtype, device and autograd
#: are kept), a NumPy array (float64 stays float64), or (nested) sequences of python numbers and a
#: bare python number, converted with ``torch.as_tensor(np.asarray(x))``. Functions return tensors.
ArrayLike: TypeAlias = torch.Tensor | np.ndarray | Sequence[Any] | float

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

_T = TypeVar("_T")


def as_float_tensor(x: ArrayLike, name: str) -> torch.Tensor:
    """Return ``x`` as a floating tensor (NumPy arrays and lists accepted; float64 kept)."""
    if isinstance(x, torch.Tensor):
        t = x
    else:
        try:
            t = torch.as_tensor(np.asarray(x))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name} must be an array of numbers, got {type(x).__name__}") from err
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    return t


def check_nonempty(t: torch.Tensor, name: str, min_dim: int = 1) -> None:
    if t.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimension(s), got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); pass at least one sample")


def check_finite(t: torch.Tensor, name: str) -> None:
    if t.numel() == 0:
        return
    # aminmax propagates NaN and is one fused pass: ~10x cheaper than isfinite().all() on big inputs
    lo, hi = torch.aminmax(t.detach())
    if not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
        n_bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contains {n_bad} NaN or infinite value(s); all entries must be finite")


def check_logits(logits: ArrayLike, name: str = "logits", min_classes: int = 2) -> torch.Tensor:
    """Logits of shape ``(..., K)``: finite, floating, at least ``min_classes`` classes."""
    t = as_float_tensor(logits, name)
    check_nonempty(t, name)
    if t.shape[-1] < min_classes:
        raise ValueError(f"{name} must have at least {min_classes} classes in its last dimension, "
                         f"got shape {tuple(t.shape)}")
    check_finite(t, name)
    return t


def prob_row_tolerance(n_classes: int) -> float:
    """How far a row of ``n_classes`` probabilities may sum from 1: ``(2 + log2 K) * 2**-7``.

    The rule of every function that takes probabilities, documented in :mod:`focalcal.metrics`
    (*Probabilities in any precision*): ``2 + log2 K`` units in the last place of bfloat16 at 1
    (``2**-7``, the coarsest precision probabilities plausibly come in), whatever dtype the array
    has now. 0.023 for K = 2, 0.068 for K = 100, 0.094 for K = 1000: always below 0.5, so rows
    summing to 0.5 or 2 are refused.
    """
    return torch.finfo(torch.bfloat16).eps * (2.0 + math.log2(max(int(n_classes), 1)))


def row_sum_deviation(t: torch.Tensor) -> float:
    """``max |sum_k t_k - 1|`` over the rows of ``t``, summed in float64 (no rounding of the sum)."""
    return float((t.detach().sum(-1, dtype=torch.float64) - 1).abs().max())


def check_probs(probs: ArrayLike, name: str = "probs", atol: float | None = None,
                min_classes: int = 2, *, hint: str = "pass logits= for unnormalised scores") -> torch.Tensor:
    """Probabilities of shape ``(..., K)``: in [0, 1] and rows summing to 1 within ``atol``.

    ``atol`` defaults to :func:`prob_row_tolerance` of ``K`` (the library's one rule, the same for
    every dtype). ``hint`` ends the message for values outside [0, 1] or rows that do not sum to 1
    (what to call instead with unnormalised scores); an empty ``hint`` adds nothing.
    """
    t = as_float_tensor(probs, name)
    check_nonempty(t, name)
    if t.shape[-1] < min_classes:
        raise ValueError(f"{name} must have at least {min_classes} classes in its last dimension, "
                         f"got shape {tuple(t.shape)}")
    check_finite(t, name)
    lo, hi = (float(v) for v in torch.aminmax(t.detach()))
    if lo < 0 or hi > 1:
        raise ValueError(f"{name} must lie in [0, 1]; got values in [{lo:.4g}, {hi:.4g}]"
                         + (f". {hint[:1].upper()}{hint[1:]}" if hint else ""))
    if atol is None:
        atol = prob_row_tolerance(t.shape[-1])
    err = row_sum_deviation(t)
    if err > atol:
        raise ValueError(f"rows of {name} must sum to 1 (max deviation {err:.3g} > {atol:.3g}); "
                         f"normalise them" + (f", or {hint}" if hint else ""))
    return t


def looks_like_probabilities(t: torch.Tensor) -> bool:
    """Every entry in [0, 1] and every row summing to 1 by the rule of :func:`check_probs`."""
    if t.dim() == 0 or t.shape[-1] < 2 or t.numel() == 0:
        return False
    lo, hi = torch.aminmax(t.detach())
    return (float(lo) >= 0.0 and float(hi) <= 1.0
            and row_sum_deviation(t) <= prob_row_tolerance(t.shape[-1]))


def _user_frame() -> tuple[int, str]:
    """For ``warnings.warn`` called by this module's caller: the ``stacklevel`` of the first frame
    outside the focalcal package (the user's line, however deep the library's call chain is), and
    the name of the library function the user called (the outermost frame inside the package)."""
    frame, level, called = sys._getframe(2), 1, "focalcal"
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level, called = frame.f_back, level + 1, frame.f_code.co_name
    return level, called


def warn_if_probabilities(logits: torch.Tensor, caller: str | None = None, name: str = "logits") -> None:
    """Warn (``UserWarning``, at the user's line) when ``logits`` look like probabilities.

    :func:`looks_like_probabilities`; logits almost never do, and a metric or a temperature of
    probabilities passed as logits is silently wrong (their softmax is flattened towards uniform).
    ``caller`` names the function in the message (default: the library function the user called).
    """
    if looks_like_probabilities(logits):
        level, called = _user_frame()
        warnings.warn(f"{caller or called}: the {name} passed look like probabilities (all entries "
                      f"in [0, 1], rows summing to 1); pass the unnormalised logits, or log(probs), "
                      f"instead", UserWarning, stacklevel=level + 1)


def check_unit_interval(x: ArrayLike, name: str, open_left: bool = False, open_right: bool = False) -> torch.Tensor:
    t = as_float_tensor(x, name)
    check_finite(t, name)
    lo_bad = (t <= 0) if open_left else (t < 0)
    hi_bad = (t >= 1) if open_right else (t > 1)
    if bool(lo_bad.any()) or bool(hi_bad.any()):
        interval = ("(" if open_left else "[") + "0, 1" + (")" if open_right else "]")
        raise ValueError(f"{name} must lie in {interval}; got values in "
                         f"[{float(t.min()):.4g}, {float(t.max()):.4g}]")
    return t


def label_tensor(labels: ArrayLike, name: str = "labels") -> torch.Tensor:
    """``labels`` as a tensor of an integer dtype, any shape; the one label-dtype rule of the library.

    Floating (even whole-valued), bool and complex dtypes are refused with the same message in
    every entry point (losses, metrics, calibrators): a float array in the labels' place is almost
    always probabilities or one-hot rows passed in the wrong place.
    """
    if isinstance(labels, torch.Tensor):
        t = labels
    else:
        try:
            t = torch.as_tensor(np.asarray(labels))
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{name} must be an array of integer class indices") from err
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer class indices (an integer dtype), got dtype "
                         f"{t.dtype}; probability or one-hot targets are not supported, and "
                         f"whole-number floats need an explicit .long()")
    return t


def check_labels(labels: ArrayLike, n_classes: int | None = None, n_samples: int | None = None,
                 name: str = "labels") -> torch.Tensor:
    """Integer class labels of shape ``(N,)`` with values in ``[0, n_classes)`` (:func:`label_tensor`)."""
    t = label_tensor(labels, name).long()
    if t.dim() != 1:
        raise ValueError(f"{name} must be one-dimensional (N,), got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty; pass at least one sample")
    if n_samples is not None and t.shape[0] != n_samples:
        raise ValueError(f"{name} has {t.shape[0]} entries but the scores have {n_samples} rows; "
                         f"shapes must match")
    if bool((t < 0).any()) or (n_classes is not None and bool((t >= n_classes).any())):
        hi = "" if n_classes is None else f", {n_classes - 1}"
        raise ValueError(f"{name} must lie in [0{hi}]; got values in [{int(t.min())}, {int(t.max())}]")
    return t


def check_gamma(gamma: float | torch.Tensor, name: str = "gamma", minimum: float = -1.0,
                maximum: float | None = None) -> float:
    """A scalar focusing parameter ``gamma >= minimum`` (the focal map needs ``gamma >= -1``).

    A real number: a Python or NumPy int or float, or a one-element tensor or array; anything else
    (a string such as ``"3"``, a bool, ``None``) is a ``TypeError`` naming ``name``.
    """
    if isinstance(gamma, (torch.Tensor, np.ndarray)):
        if math.prod(gamma.shape) != 1:
            raise ValueError(f"{name} must be a scalar, got shape {tuple(gamma.shape)}")
        gamma = gamma.item()
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(gamma).__name__} {gamma!r}")
    g = float(gamma)
    if not math.isfinite(g):
        raise ValueError(f"{name} must be finite, got {g}")
    if g < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {g:g}")
    if maximum is not None and g > maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {g:g}")
    return g


def check_positive(x: float, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a positive real number, got {x!r}") from err
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite positive number, got {v}")
    return v


def check_int(x: int, name: str, minimum: int = 1) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x!r}")
    if x < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x}")
    return int(x)


def check_choice(value: _T, name: str, choices: Iterable[_T]) -> _T:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")
    return value
