"""The figures of the theory chapters.

Each function draws one figure from the library's maps (or from arrays a chapter computed) and
returns it; the chapter's cell calls it and the inline backend shows it. The drawing lives here
so that a chapter's cells show what is computed, not how axes are labelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from focalcal import maps
from focalcal.plotting import color, gamma_colors

F64 = torch.float64


def _gamma_label(g: float, zero: str = "cross-entropy") -> str:
    return rf"$\gamma = 0$ ({zero})" if g == 0 else rf"$\gamma = {g:g}$"


# --------------------------------------------------------------------------------------------
# Mukhoti et al. (2020)
# --------------------------------------------------------------------------------------------

def bernoulli_step_and_slack(gammas: Sequence[float] = (0.25, 0.5, 1.0, 2.0, 3.0)) -> Figure:
    """(a) App. A's Bernoulli step ``(1-p)^gamma - (1 - gamma p)`` and (b) the slack of Eq. (4),
    ``L_f - (KL - gamma H[p])``, for K = 2 and a one-hot target, against ``p``."""
    pp = torch.linspace(1e-4, 1 - 1e-4, 2000, dtype=F64)
    entropy2 = torch.special.entr(pp) + torch.special.entr(1 - pp)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for g, c in zip(gammas, gamma_colors(gammas)):
        ax1.plot(pp, (1 - pp)**g - (1 - g * pp), color=c, label=fr"$\gamma = {g:g}$")
        slack = maps.focal_loss_term(pp, g) - (-torch.log(pp) - g * entropy2)
        ax2.plot(pp, slack, color=c, label=fr"$\gamma = {g:g}$")
    for ax in (ax1, ax2):
        ax.axhline(0, color=color("identity"), lw=1, ls="--")
        ax.set_xlabel(r"predicted probability of the true class $\hat p_y$")
    ax1.set_ylabel(r"$(1-\hat p_y)^\gamma - (1 - \gamma\hat p_y)$")
    ax1.set_title("(a) App. A step 1 (Bernoulli): fails for $\\gamma < 1$")
    ax2.set_ylabel(r"$\mathcal{L}_f - (\mathrm{KL} - \gamma\,\mathbb{H}[\hat p])$")
    ax2.set_title("(b) slack of Eq. (4), $K = 2$, one-hot target")
    ax1.legend(loc="lower left")
    fig.tight_layout()
    return fig


def gradient_factor(gammas: Sequence[float] = (0.0, 1.0, 2.0, 3.0, 5.0, 7.0)) -> Figure:
    """Mukhoti's Fig. 4(a): ``g(p, gamma)`` with its threshold ``p0(gamma)`` marked, and the
    FLSD-53 schedule (gamma = 5 below p = 0.2, 3 above)."""
    pp = torch.linspace(0, 1, 1001, dtype=F64)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for g, c in zip(gammas, gamma_colors(gammas)):
        ax.plot(pp, maps.gradient_factor(pp, g), color=c, label=fr"$\gamma = {g:g}$")
        if g > 0:
            ax.plot([maps.tau_uc(g)], [1.0], "o", color=c, ms=5)
    flsd = torch.where(pp < 0.2, maps.gradient_factor(pp, 5.0), maps.gradient_factor(pp, 3.0))
    ax.plot(pp, flsd, color=color("FLSD-53"), ls=(0, (2, 1.5)), lw=3.0, zorder=5,
            label="FLSD-53 schedule")
    ax.axhline(1.0, color=color("identity"), lw=1, ls=":")
    ax.set_xlabel(r"predicted probability of the true class $p$")
    ax.set_ylabel(r"gradient factor $g(p, \gamma)$")
    ax.set_title(r"Fig. 4(a): $g(p,\gamma)$; dots mark the threshold $p_0(\gamma)$")
    ax.set(xlim=(0, 1), ylim=(0, 1.75))
    ax.legend(ncol=2)
    return fig


def binary_focal_minimiser(q: torch.Tensor, minimisers: Mapping[float, torch.Tensor]) -> Figure:
    """Mukhoti's Fig. 6: the binary focal-risk minimiser against the true probability ``q``,
    one curve per gamma (``minimisers[gamma]``)."""
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    for (g, x_star), c in zip(minimisers.items(), gamma_colors(list(minimisers))):
        ax.plot(q, x_star, color=c, label=_gamma_label(g))
    ax.set_xlabel(r"true probability of class 1, $q$")
    ax.set_ylabel(r"focal-risk minimiser $\hat p$")
    ax.set_title("Fig. 6: optimal prediction, binary")
    ax.set(aspect="equal", xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper left")
    return fig
