"""The released code's focal-temperature-scaling search, re-implemented as the peer baseline.

Komisarenko & Kull's code (github.com/slavikkom/focal_temperature_scaling, ``temperature_scaling.py``,
``Metrics/metrics.py``, ``evaluate_focal_calibration.py``) fits focal TS one gamma at a time:
``ModelWithTemperature(net, a=gamma, link="focal").set_temperature(val_logits, val_labels)`` loops
over the temperatures and, at each one, maps ``logits / T`` through ``softmax`` and the focal map
(``1 / focal_derivative``, with its clamps and its fix-up of non-finite rows), then computes the
NLL (``nn.NLLLoss`` of the log-probabilities) and the adaptive (equal-mass) ECE of
``AdaptiveECELoss``: bin edges from ``np.interp`` over the sorted confidences, ``np.histogram``,
and a loop over the 15 bins with boolean masks. A temperature is kept when it strictly improves
on the best so far (starting from ``T = 1``); the gamma is then chosen by its validation ECE.

This module reproduces that procedure operation for operation (float32 tensors on the CPU, as the
released scripts load the logits), written anew here; it is a speed baseline for
``bench_posthoc.py``. Its ECE is the released one, whose bins differ from
:func:`focalcal.metrics.ece`'s equal-mass bins at ties and at the interpolated edges, so its
selection may differ from the library's by a grid step; the benchmark reports both.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def focal_derivative(p: torch.Tensor, gamma: float) -> torch.Tensor:
    eps = 1e-12
    p = p.clamp(min=eps, max=1.0 - eps)
    one_minus_p = 1.0 - p
    term1 = gamma * torch.log(p).div(one_minus_p)
    term2 = p.reciprocal()
    return (one_minus_p ** gamma) * (term1 - term2)


def focal_map(q: torch.Tensor, gamma: float) -> torch.Tensor:
    inv = focal_derivative(q, gamma).reciprocal()
    return inv.div(inv.sum(dim=-1, keepdim=True))


def multi_focal_link(x: torch.Tensor, gamma: float) -> torch.Tensor:
    q = F.softmax(x, dim=-1)
    p = focal_map(q, gamma)
    bad = (~p.isfinite()).any(dim=1)
    if bad.any():
        rows = bad.nonzero(as_tuple=True)[0]
        top = torch.argmax(x, dim=1)[rows]
        k = p.size(1)
        tiny = 1e-5
        p[rows.unsqueeze(1), torch.arange(k)] = tiny / (k - 1)
        p[rows, top] = 1.0 - tiny
    return p


def apply_link(logits: torch.Tensor, gamma: float) -> torch.Tensor:
    return multi_focal_link(logits, gamma).clamp(min=1e-12, max=1.0)


class AdaptiveECELoss(nn.Module):
    """The released adaptive ECE: interpolated equal-count edges, then a loop over the bins."""

    def __init__(self, n_bins: int = 15) -> None:
        super().__init__()
        self.nbins = n_bins

    def histedges_equal_n(self, x: np.ndarray) -> np.ndarray:
        npt = len(x)
        return np.interp(np.linspace(0, npt, self.nbins + 1), np.arange(npt), np.sort(x))

    def forward(self, softmaxes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        confidences, predictions = torch.max(softmaxes, 1)
        accuracies = predictions.eq(labels)
        conf_np = confidences.cpu().detach()
        _, edges = np.histogram(conf_np, self.histedges_equal_n(conf_np.numpy()))
        ece = torch.zeros(1)
        for lo, hi in zip(edges[:-1], edges[1:]):
            in_bin = confidences.gt(lo.item()) * confidences.le(hi.item())
            prop = in_bin.float().mean()
            if prop.item() > 0:
                ece += torch.abs(confidences[in_bin].mean() - accuracies[in_bin].float().mean()) * prop
        return ece


def point(logits: torch.Tensor, labels: torch.Tensor, gamma: float, t: float) -> tuple[float, float]:
    """One (gamma, T) evaluation of the released loop: (NLL, adaptive ECE)."""
    probs = apply_link(logits / t, gamma)
    nll = nn.NLLLoss()(torch.log(probs), labels.long()).item()
    ece = AdaptiveECELoss()(probs, labels).item()
    return nll, ece


def set_temperature(logits: torch.Tensor, labels: torch.Tensor, gamma: float,
                    temps: list[float]) -> tuple[float, float]:
    """The released per-gamma temperature search (ECE criterion): best T and its ECE."""
    _, best = point(logits, labels, gamma, 1.0)
    t_opt = 1.0
    for t in temps:
        _, ece = point(logits, labels, gamma, t)
        if best > ece and not np.isnan(ece):
            t_opt, best = t, ece
    return t_opt, best


def search(logits: torch.Tensor, labels: torch.Tensor, gammas: list[float],
           temps: list[float]) -> tuple[float, float, float]:
    """The released focal-TS fit: per gamma the best T, then the gamma of least validation ECE."""
    z = logits.detach().to(torch.float32).cpu()
    fits = [(set_temperature(z, labels, g, temps), g) for g in gammas]
    (t, ece), g = min(fits, key=lambda f: f[0][1])
    return g, t, ece
