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


# --------------------------------------------------------------------------------------------
# Charoenphakdee et al. (2021)
# --------------------------------------------------------------------------------------------

def phi_regions(gammas: Sequence[float] = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0), *,
                regions_gamma: float = 3.0) -> Figure:
    """Charoenphakdee's Fig. 1: ``phi^gamma`` with the over-confident, ambiguous and
    under-confident regions of Thm. 8 for one gamma shaded."""
    vv = torch.linspace(0, 1, 1001, dtype=F64)
    toc, tuc = maps.tau_oc(regions_gamma), maps.tau_uc(regions_gamma)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    g_txt = f"$\\gamma = {regions_gamma:g}$"
    ax.axvspan(0, toc, color=color("focal"), alpha=0.15, lw=0,
               label=rf"$\eta$OC region ({g_txt})")
    ax.axvspan(toc, tuc, color=color("identity"), alpha=0.15, lw=0, label="ambiguous region")
    ax.axvspan(tuc, 1, color=color("cross-entropy"), alpha=0.10, lw=0,
               label=rf"$\eta$UC region ({g_txt})")
    for g, c in zip(gammas, gamma_colors(gammas)):
        ax.plot(vv, maps.phi(vv, g), color=c, label=fr"$\gamma = {g:g}$")
    ax.axhline(1, color=color("identity"), lw=1, ls=":")
    ax.set_xlabel(r"largest predicted probability $\max_y q^{\gamma,*}_y$ (argument $v$)")
    ax.set_ylabel(r"$\varphi^\gamma(v)$")
    ax.set_title(r"Fig. 1: $\varphi^\gamma$ and the regions of Thm. 8")
    ax.set(xlim=(0, 1), ylim=(0, 1.6))
    ax.legend(ncol=2, fontsize=8)
    return fig


def top_probability_maps(gammas: Sequence[float] = (0.0, 1.0, 2.0, 3.0, 5.0), *,
                         k: int = 1000) -> tuple[Figure, dict[float, float]]:
    """Charoenphakdee's Fig. 2: the minimiser's top probability against the posterior's, (a)
    binary, (b) for ``k`` classes with the rest spread uniformly, (c) their difference; returns
    the figure and, per gamma, the largest over-confidence of panel (c)."""
    import math

    m_big = torch.cat([torch.logspace(math.log10(1 / k) + 1e-6, -1, 200, dtype=F64),
                       torch.linspace(0.1, 0.999, 200, dtype=F64)[1:]])
    q_big = torch.cat([m_big[:, None], ((1 - m_big) / (k - 1))[:, None].expand(-1, k - 1)], 1)
    t_half = torch.linspace(0.5, 1, 501, dtype=F64)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.0))
    max_gap = {}
    for g, c in zip(gammas, gamma_colors(gammas)):
        lab = _gamma_label(g)
        axes[0].plot(t_half, maps.binary_inverse_focal_map(t_half, g), color=c, label=lab)
        eta_top = maps.focal_map(q_big, g).amax(-1) if g > 0 else m_big
        axes[1].plot(eta_top, m_big, color=c, label=lab)
        axes[2].plot(eta_top, m_big - eta_top, color=c, label=lab)
        max_gap[g] = float((m_big - eta_top).max())
    for ax in axes[:2]:
        ax.plot([0, 1], [0, 1], color=color("identity"), lw=1, ls="--")
        ax.set_xlabel(r"$\max_y \eta_y$")
        ax.set_ylabel(r"$\max_y q^{\gamma,*}_y$")
    axes[0].set(xlim=(0.5, 1), ylim=(0.5, 1), title="(a) binary: always under-confident")
    axes[1].set_title(fr"(b) $K = {k}$")
    axes[2].axhline(0, color=color("identity"), lw=1, ls="--")
    axes[2].set_xscale("log")
    axes[2].set_xlabel(r"$\max_y \eta_y$ (log scale)")
    axes[2].set_ylabel(r"$\max_y q^{\gamma,*}_y - \max_y \eta_y$")
    axes[2].set_title(fr"(c) $K = {k}$: over-confident where $> 0$")
    axes[0].legend(loc="upper left")
    fig.tight_layout()
    return fig, max_gap
