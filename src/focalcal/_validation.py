"""Argument checks shared by every public function.

Each check raises ``ValueError`` naming the argument and saying what is allowed, so that bad
input never turns into a silent NaN three calls later. :data:`ArrayLike` is the one type hint of
array arguments across the library.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias, TypeVar

import numpy as np
import torch

#: What an array argument of the library accepts: a tensor (used as is: dtype, device and autograd
#: are kept), a NumPy array (float64 stays float64), or (nested) sequences of python numbers and a
#: bare python number, converted with ``torch.as_tensor(np.asarray(x))``. Functions return tensors.
ArrayLike: TypeAlias = torch.Tensor | np.ndarray | Sequence[Any] | float

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

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


def check_probs(probs: ArrayLike, name: str = "probs", atol: float | None = None,
                min_classes: int = 2, *, hint: str = "pass logits= for unnormalised scores") -> torch.Tensor:
    """Probabilities of shape ``(..., K)``: in [0, 1] and rows summing to 1 within ``atol``.

    ``hint`` ends the message for values outside [0, 1] or rows that do not sum to 1 (what to call
    instead with unnormalised scores); an empty ``hint`` adds nothing.
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
        atol = 1e-4 if t.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-8
    err = (t.sum(-1) - 1).abs().max()
    if float(err) > atol:
        raise ValueError(f"rows of {name} must sum to 1 (max deviation {float(err):.3g} > {atol:g}); "
                         f"normalise them" + (f", or {hint}" if hint else ""))
    return t


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


def check_labels(labels: ArrayLike, n_classes: int | None = None, n_samples: int | None = None,
                 name: str = "labels") -> torch.Tensor:
    """Integer class labels of shape ``(N,)`` with values in ``[0, n_classes)``."""
    if isinstance(labels, torch.Tensor):
        t = labels
    else:
        try:
            t = torch.as_tensor(np.asarray(labels))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name} must be an array of integer class indices") from err
    if t.is_floating_point():
        if not bool(torch.isfinite(t).all()) or not bool((t == t.round()).all()):
            raise ValueError(f"{name} must be integer class indices, got non-integer floats")
        t = t.long()
    elif t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must be integer class indices, got dtype {t.dtype}")
    t = t.long()
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
    """A scalar focusing parameter ``gamma >= minimum`` (the focal map needs ``gamma >= -1``)."""
    if isinstance(gamma, torch.Tensor):
        if gamma.numel() != 1:
            raise ValueError(f"{name} must be a scalar, got shape {tuple(gamma.shape)}")
        gamma = gamma.item()
    try:
        g = float(gamma)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a real number, got {gamma!r}") from err
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
