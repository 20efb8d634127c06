"""The calibrators' shared checks, misuse warnings and plain-TS scores (private to :mod:`focalcal.posthoc`).

Kept apart from :mod:`focalcal._fts_search`, which is the focal-TS search alone.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from ._fts_search import _CONF_CHUNK, Problem, grid_scores, workers
from ._validation import (
    ArrayLike,
    as_float_tensor,
    check_finite,
    check_labels,
    check_logits,
    check_positive,
    warn_if_probabilities,
)


class SearchRangeWarning(UserWarning):
    """A fitted parameter stopped at the edge of its search range (the optimum may lie outside).

    Its own category, so that code fitting on a fixed published grid (the papers' protocols) can
    filter it without silencing other warnings.

    Examples
    --------
    >>> import warnings, torch
    >>> from focalcal.posthoc import FocalTemperatureScaling, SearchRangeWarning
    >>> z = 4 * torch.randn(200, 3, generator=torch.Generator().manual_seed(0))
    >>> y = z.argmax(-1)  # labels the logits predict perfectly: the sharpest T wins
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     fts = FocalTemperatureScaling([0.0], [0.5, 1.0, 2.0]).fit(z, y)
    >>> fts.temperature_, [w.category.__name__ for w in caught]
    (0.5, ['SearchRangeWarning'])
    """


# ============================================================================================
# argument checks and warnings of the calibrators (focalcal.posthoc)
# ============================================================================================

def check_fit_args(logits: ArrayLike, labels: ArrayLike, caller: str = "fit"
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, K)`` float64 logits and ``(N,)`` int64 labels on the same device.

    ``labels`` follow the library's one rule (:func:`focalcal._validation.label_tensor`: an integer
    dtype, the same message as the metrics and the losses). Warns (``UserWarning``) when
    ``logits`` look like probabilities (:func:`focalcal._validation.looks_like_probabilities`:
    every entry in [0, 1] and every row summing to 1 by the tolerance rule of the metrics). Logits
    almost never do, and temperature scaling of probabilities fits a meaningless temperature
    (about 18 on a typical softmax output).
    """
    z = check_logits(logits, "logits")
    if z.dim() != 2:
        raise ValueError(f"logits must have shape (N, K) for fitting, got shape {tuple(z.shape)}")
    y = check_labels(labels, n_classes=z.shape[1], n_samples=z.shape[0])
    warn_if_probabilities(z, caller)
    z = z.detach().to(torch.float64)
    return z, y.to(z.device)


def warn_at_edge(caller: str, what: str, value: float, lo: float, hi: float, argument: str,
                  hint: str) -> None:
    """Warn that a fitted ``what`` stopped at the edge of its search range ``[lo, hi]``."""
    if lo < hi and (value <= lo or value >= hi):
        side = "lower" if value <= lo else "upper"
        warnings.warn(f"{caller}: the selected {what} = {value:g} is at the {side} edge of its search "
                      f"range [{lo:g}, {hi:g}]; the optimum may lie outside. Widen it with "
                      f"{argument}= ({hint})", SearchRangeWarning, stacklevel=3)


def check_grid(values: ArrayLike, name: str, *, lower: float | None = None, open_lower: bool = True,
                positive: bool = False) -> torch.Tensor:
    """A non-empty 1-D float64 grid of finite values (``> lower`` / ``>= lower``, or ``> 0``)."""
    if isinstance(values, (int, float, np.number)):
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got the scalar {values!r}")
    t = as_float_tensor(values, name).detach().to(torch.float64).cpu()
    if t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {tuple(t.shape)}")
    check_finite(t, name)
    if positive and bool((t <= 0).any()):
        raise ValueError(f"{name} must all be > 0; got minimum {float(t.min()):g}")
    if lower is not None:
        bad = (t <= lower) if open_lower else (t < lower)
        if bool(bad.any()):
            op = ">" if open_lower else ">="
            raise ValueError(f"{name} must all be {op} {lower:g}; got minimum {float(t.min()):g}")
    return t


def check_bounds(bounds: tuple[float, float]) -> tuple[float, float]:
    try:
        lo, hi = bounds
    except (TypeError, ValueError) as err:
        raise ValueError(f"bounds must be a pair (T_min, T_max), got {bounds!r}") from err
    lo, hi = check_positive(lo, "bounds[0]"), check_positive(hi, "bounds[1]")
    if not lo < hi:
        raise ValueError(f"bounds must satisfy T_min < T_max, got {bounds!r}")
    return lo, hi


# ============================================================================================
# plain TS (gamma = 0) on a grid, and the two scores of TemperatureScaling's continuous fits
# ============================================================================================

def ts_grid_scores(z: torch.Tensor, y: torch.Tensor, temps: torch.Tensor, criterion: str,
                    gamma: float, n_bins: int) -> torch.Tensor:
    """Scores of ``softmax(z / T)`` for every ``T`` in ``temps`` (shape ``(n_T,)``)."""
    if criterion in ("ece", "ece_mass", "nll"):
        prob = Problem(z, y, dedupe=criterion != "nll")
        with workers(z.device) as pool:
            return grid_scores(prob, temps, torch.zeros(1, dtype=torch.float64), criterion, n_bins,
                                    pool)[0]
    return torch.cat([focal_risk(z, y, temps[i:i + 64], gamma) for i in range(0, len(temps), 64)])


def focal_risk(z: torch.Tensor, y: torch.Tensor, temps: torch.Tensor, gamma: float) -> torch.Tensor:
    r"""Mean focal loss :math:`-(1-q_y)^\gamma\log q_y` of ``softmax(z / T)`` for each ``T``, in log space."""
    n, k = z.shape
    out = []
    tc = max(1, _CONF_CHUNK // (n * k))
    is_y = torch.zeros(n, k, dtype=torch.bool, device=z.device)
    is_y[torch.arange(n, device=z.device), y] = True
    for i in range(0, len(temps), tc):
        a = torch.log_softmax(z / temps[i:i + tc].to(z.device).view(-1, 1, 1), dim=-1)
        lq = a.gather(-1, y.view(1, -1, 1).expand(a.shape[0], -1, 1)).squeeze(-1)
        if gamma == 0:
            out.append(-lq.mean(-1))
            continue
        # log(1 - q_y) as the log-sum of the other classes: exact also when q_y rounds to 1
        l1q = torch.logsumexp(a.masked_fill(is_y, -math.inf), dim=-1)
        out.append((-torch.exp(gamma * l1q) * lq).mean(-1))
    return torch.cat(out).cpu()


def nll_at(z: torch.Tensor, y: torch.Tensor, temperature: float) -> float:
    """Mean negative log-likelihood of ``softmax(z / temperature)``, in log space."""
    a = z / temperature
    return float((torch.logsumexp(a, -1) - a.gather(-1, y.view(-1, 1)).squeeze(-1)).mean())


def nll_slope(z: torch.Tensor, y: torch.Tensor, beta: float) -> float:
    r"""``d NLL / d beta`` at inverse temperature ``beta``: ``mean(E_softmax[z] - z_y)``, increasing in beta."""
    p = torch.softmax(z * beta, dim=-1)
    return float(((p * z).sum(-1) - z.gather(-1, y.view(-1, 1)).squeeze(-1)).mean())
