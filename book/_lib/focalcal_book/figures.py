"""The figures of the theory chapters.

Each function draws one figure from the library's maps (or from arrays a chapter computed) and
returns it; the chapter's cell calls it and the inline backend shows it. The drawing lives here
so that a chapter's cells show what is computed, not how axes are labelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from focalcal import maps
from focalcal.plotting import color, gamma_colors
from focalcal_book.style import FIGURE_WIDTH_IN as WIDTH, SMALLEST_FONT_PT

F64 = torch.float64


def _legends_below(fig: Figure, axes) -> None:
    """Lay ``fig`` out, then put the legend of each of ``axes`` below its panel, off the curves:
    panels that share the page's width can leave no free corner for it. The layout comes first,
    or it would squash the panels to make room for the legends."""
    fig.tight_layout()
    for ax in axes:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), handlelength=1.6)


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
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(WIDTH, 3.6))
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
    ax.legend(ncol=2)
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
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH, 3.5))
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
    # two-line titles: three panels share the page's width
    axes[0].set(xlim=(0.5, 1), ylim=(0.5, 1), title="(a) binary:\nalways under-confident")
    axes[1].set_title(fr"(b) $K = {k}$" "\n")
    axes[2].axhline(0, color=color("identity"), lw=1, ls="--")
    axes[2].set_xscale("log")
    axes[2].set_xlabel(r"$\max_y \eta_y$ (log scale)")
    axes[2].set_ylabel(r"$\max_y q^{\gamma,*}_y - \max_y \eta_y$")
    axes[2].set_title(fr"(c) $K = {k}$:" "\n" r"over-confident where $> 0$")
    axes[0].legend(loc="upper left")
    fig.tight_layout()
    return fig, max_gap


# --------------------------------------------------------------------------------------------
# Komisarenko & Kull (2024), binary
# --------------------------------------------------------------------------------------------

def proper_part_and_binary_map(loss_gammas: Sequence[float] = (0.5, 3.0),
                               map_gammas: Sequence[float] = (-0.95, -0.5, 0.0, 0.5, 1.0, 2.0,
                                                              3.0, 5.0)) -> Figure:
    """K&K's Fig. 1: (left) the proper part ``L*(r, 1)`` of the focal loss against the focal loss
    itself and cross-entropy; (right) the binary focal calibration map for several gammas."""
    fig, (ax_l, ax_r) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    r_plot = torch.linspace(0.01, 0.99, 397, dtype=F64)
    ax_l.plot(r_plot, -torch.log(r_plot), color=color("cross-entropy"), label="cross-entropy")
    for gam, col in zip(loss_gammas, gamma_colors(list(loss_gammas))):
        ax_l.plot(r_plot, maps.focal_loss_term(r_plot, gam), color=col, ls=":",
                  label=rf"focal, $\gamma={gam:g}$")
        proper = maps.focal_loss_term(maps.binary_inverse_focal_map(r_plot, gam), gam)
        ax_l.plot(r_plot, proper, color=col, ls="-", label=rf"proper part $L^*$, $\gamma={gam:g}$")
    ax_l.set(xlabel=r"predicted probability $r$ of the true class",
             ylabel=r"loss on a positive, $L(r, 1)$", ylim=(0, 4.6),
             title="Proper part of the focal loss")
    ax_l.legend()
    q_plot = torch.linspace(0, 1, 401, dtype=F64)
    for gam, col in zip(map_gammas, gamma_colors(list(map_gammas))):
        if gam == 0:
            ax_r.plot(q_plot, q_plot, color=color("identity"), ls="--",
                      label=r"$\gamma=0$ (identity)")
        else:
            ax_r.plot(q_plot, maps.binary_focal_map(q_plot, gam), color=col,
                      label=rf"$\gamma={gam:g}$")
    ax_r.set(xlabel=r"predicted probability $q$", ylabel=r"$\hat p_\gamma(q)$",
             title="Binary focal calibration map", xlim=(0, 1), ylim=(0, 1), aspect="equal")
    ax_r.legend(loc="upper left")
    fig.tight_layout()
    return fig


def temperature_bounds(gammas, t1, t2, tight, *, paper=(0.206, 0.218)) -> Figure:
    """K&K's Fig. 3 on the scale ``1/T - gamma``: the proven temperatures ``t1, t2``, the
    tightest ones on a logit grid (``tight[:, 0]`` sharp, ``tight[:, 1]`` soft) and the paper's
    values for gamma = 4; right, the width of each band."""
    fig, (ax_l, ax_r) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    c_sharp, c_soft = color("TS"), color("focal TS")
    # plotted as 1/T - gamma: the bands shrink like 1/gamma^2 on the T scale
    ax_l.plot(gammas, 1 / t1 - gammas, color=c_sharp, label=r"theory $T_1 = 1/(\gamma+1)$")
    ax_l.plot(gammas, 1 / t2 - gammas, color=c_soft,
              label=r"theory $T_2 = 1/(\gamma+1-\frac{1}{2}\log(\gamma+1))$")
    ax_l.plot(gammas, 1 / tight[:, 0] - gammas, color=c_sharp, ls="--",
              label=r"tightest $T_{sharp}$, $s \in [-20, 20]$")
    ax_l.plot(gammas, 1 / tight[:, 1] - gammas, color=c_soft, ls="--",
              label=r"tightest $T_{soft}$, $s \in [-20, 20]$")
    ax_l.scatter([4, 4], [1 / paper[0] - 4, 1 / paper[1] - 4], marker="x", color="k", zorder=5,
                 label=r"paper's tightest, $\gamma = 4$")
    ax_l.set(xlabel=r"$\gamma$", ylabel=r"$1/T - \gamma$", title="Temperature bounds of FC")
    ax_l.legend()
    ax_r.plot(gammas, t2 - t1, color=color("identity"), label="theory")
    ax_r.plot(gammas, tight[:, 1] - tight[:, 0], color=color("identity"), ls="--",
              label=r"tightest on $s \in [-20, 20]$")
    ax_r.plot(gammas, tight[:, 1] - t1, color=color("identity"), ls=":",
              label=r"tightest over all $s$ ($T_{sharp} = T_1$)")
    ax_r.set(xlabel=r"$\gamma$", ylabel=r"width $T_{soft} - T_{sharp}$",
             title="Width of the bounds")
    ax_r.legend()
    fig.tight_layout()
    return fig


def closest_binary_ts(gammas, inv_t, err, slope: float, intercept: float,
                      shown: Sequence[float] = (0.5, 3.0)) -> Figure:
    """K&K's Fig. 2 with an error panel: the minimax ``1/T*`` (as ``1/T - gamma``) with a fitted
    and the paper's line, its worst-case probability difference, and FC beside its closest TS
    map for two gammas."""
    import numpy as np

    fig, (ax_a, ax_b, ax_c) = plt.subplots(1, 3, figsize=(WIDTH, 3.4))
    ax_a.fill_between(gammas, 1 - np.log1p(gammas) / 2, np.ones_like(gammas), color="0.85",
                      label="Prop. 3 band")
    ax_a.plot(gammas, inv_t - gammas, color=color("TS"), label=r"minimax $1/T^*$")
    ax_a.plot(gammas, (slope - 1) * gammas + intercept, color=color("focal TS"), ls="--",
              label=f"fit: {slope:.3f}$\\gamma$ + {intercept:.3f}")
    ax_a.plot(gammas, -0.05 * gammas + 0.85, color="k", ls=":",
              label=r"paper: 0.95$\gamma$ + 0.85")
    ax_a.set(xlabel=r"$\gamma$", ylabel=r"$1/T - \gamma$", title="Closest TS to FC")
    ax_b.semilogy(gammas, err, color=color("TS"), label="closest TS (per-$\\gamma$ optimum)")
    ax_b.axhline(1e-3, color="k", ls=":", lw=1, label=r"paper: $< 10^{-3}$")
    ax_b.set(xlabel=r"$\gamma$", ylabel=r"$\max_s |FC(s) - \sigma(s/T^*)|$",
             title="Worst-case difference")
    s_show = torch.linspace(-6, 6, 601, dtype=F64)
    for gm, col in zip(shown, gamma_colors(list(shown))):
        i = int(np.where(gammas == gm)[0][0])
        ax_c.plot(s_show, torch.sigmoid(maps.binary_focal_logit(s_show, gm)), color=col,
                  label=rf"FC, $\gamma={gm:g}$")
        ax_c.plot(s_show, torch.sigmoid(inv_t[i] * s_show), color=col, ls="--",
                  label=f"TS, $T={1 / inv_t[i]:.3f}$")
    ax_c.plot(s_show, torch.sigmoid(s_show), color=color("identity"), ls=":",
              label="sigmoid (T = 1)")
    ax_c.set(xlabel="logit $s$", ylabel="probability", title="FC and its closest TS")
    _legends_below(fig, (ax_a, ax_b, ax_c))
    return fig


# --------------------------------------------------------------------------------------------
# Komisarenko & Kull (2024), multiclass
# --------------------------------------------------------------------------------------------

def _simplex_frame(ax, title: str) -> None:
    from focalcal_book.style import simplex_frame

    simplex_frame(ax, title)


def risk_isolines(r_grid: torch.Tensor, risks: Mapping[str, torch.Tensor], p: torch.Tensor,
                  levels_pct: Sequence[int] = (3, 12, 20)) -> Figure:
    """K&K's Fig. 4: isolines of conditional risks over the 3-class simplex at quantiles of their
    values, with the posterior ``p`` marked."""
    import matplotlib.tri as mtri
    import numpy as np

    from focalcal_book.theory import barycentric_to_cartesian

    tri_xy = barycentric_to_cartesian(r_grid).numpy()
    triang = mtri.Triangulation(tri_xy[:, 0], tri_xy[:, 1])
    # more than three simplices in one row of the page's width would be too small to read
    ncols = len(risks) if len(risks) <= 3 else 2
    nrows = -(-len(risks) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(WIDTH if ncols == 3 else 6.4, 3.1 * nrows),
                             squeeze=False)
    axes = axes.ravel()
    for ax in axes[len(risks):]:
        ax.remove()
    p_xy = barycentric_to_cartesian(p).numpy()
    for ax, (name, risk) in zip(axes, risks.items()):
        lv = np.quantile(risk.numpy(), [x / 100 for x in levels_pct])
        cs = ax.tricontour(triang, risk.numpy(), levels=lv, colors=gamma_colors(levels_pct))
        ax.clabel(cs, fmt={lv_: f"{pc}%" for lv_, pc in zip(cs.levels, levels_pct)})
        ax.plot(*p_xy, marker="*", color=color("true posterior"), ms=10, ls="none", label="$p$")
        _simplex_frame(ax, name.replace("L*", "$L^*$").replace("gamma", r"$\gamma$"))
    axes[0].legend(loc="upper left")
    fig.tight_layout()
    return fig


def closest_multiclass_ts(fits: Mapping[int, Mapping], paper: Mapping[int, tuple]) -> Figure:
    """K&K's Fig. 6: the minimax ``1/T*`` per number of classes with its least-squares line and
    the paper's line (``paper[K] = (slope, intercept)``), and the worst-case differences."""
    fig, (ax_l, ax_r) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    cols = {3: color("TS"), 4: color("focal TS")}
    for k, fit in fits.items():
        sl, ic = fit["line"]
        ax_l.plot(fit["gamma"], fit["inv_T"], color=cols[k], marker="o", ms=3, lw=1.2,
                  label=f"K = {k}: minimax $1/T^*$")
        ax_l.plot(fit["gamma"], sl * fit["gamma"] + ic, color=cols[k], ls="--", lw=1,
                  label=f"K = {k}: fit {sl:.3f}$\\gamma$ + {ic:.3f}")
        ax_r.plot(fit["gamma"], fit["err"], color=cols[k], marker="o", ms=3, lw=1.2,
                  label=f"K = {k}")
    gam = fits[3]["gamma"]
    for k, (sl, ic) in paper.items():
        ax_l.plot(gam, sl * gam + ic, color=cols[k], ls=":", lw=1, label=f"paper, K = {k}")
    ax_l.set(xlabel=r"$\gamma$", ylabel=r"inverse temperature $1/T$",
             title="Closest TS to the focal map")
    ax_l.legend()
    ax_r.axhline(0.08, color="k", ls=":", lw=1, label="paper: 8%")
    ax_r.set(xlabel=r"$\gamma$", ylabel=r"$\max |\hat p(q) - \mathrm{TS}_T(q)|$",
             title="Worst-case difference")
    ax_r.legend()
    fig.tight_layout()
    return fig


def focal_and_ts_arrows(temperatures: Mapping[float, float], n: int = 12) -> Figure:
    """K&K's Fig. 5: arrows from predictions ``q`` on the 3-class simplex to their images under
    the focal map (top row) and under the closest TS map (bottom row), one column per gamma
    (``temperatures[gamma] = T``)."""
    from focalcal_book.theory import barycentric_to_cartesian, simplex_grid

    arrow_q = simplex_grid(n, 3, interior=True)
    arrow_xy = barycentric_to_cartesian(arrow_q).numpy()
    fig, axes = plt.subplots(2, len(temperatures), figsize=(WIDTH, 7.6))
    for col, (gm, t) in enumerate(temperatures.items()):
        targets = {f"focal map, $\\gamma = {gm:g}$": maps.focal_map(arrow_q, gm),
                   f"TS, $T = {t:.3f}$ (closest to $\\gamma = {gm:g}$)":
                       torch.softmax(torch.log(arrow_q) / t, -1)}
        for row, (title, target) in enumerate(targets.items()):
            ax = axes[row, col]
            end = barycentric_to_cartesian(target).numpy()
            ax.quiver(arrow_xy[:, 0], arrow_xy[:, 1], end[:, 0] - arrow_xy[:, 0],
                      end[:, 1] - arrow_xy[:, 1], angles="xy", scale_units="xy", scale=1,
                      width=0.004, color=color("focal TS") if row == 0 else color("TS"))
            _simplex_frame(ax, title)
    fig.tight_layout()
    return fig


def focal_minus_ts(temperatures: Mapping[float, float], n: int = 150):
    """K&K's Fig. 7: the top-class probability of the focal map minus that of its closest TS map
    over the 3-class simplex, one panel per gamma. Returns the figure and, per gamma, the grid
    points where the largest absolute difference over classes and the largest top-class
    difference are attained."""
    import matplotlib.tri as mtri
    import numpy as np

    from focalcal_book.theory import barycentric_to_cartesian, simplex_grid

    heat_q = simplex_grid(n, 3, interior=True)
    heat_xy = barycentric_to_cartesian(heat_q).numpy()
    heat_tri = mtri.Triangulation(heat_xy[:, 0], heat_xy[:, 1])
    top_h = heat_q.argmax(-1, keepdim=True)
    fig, axes = plt.subplots(1, len(temperatures), figsize=(WIDTH, 3.8))
    argmax_top = {}
    for ax, (gm, t) in zip(axes, temperatures.items()):
        diff = maps.focal_map(heat_q, gm) - torch.softmax(torch.log(heat_q) / t, -1)
        top_diff = diff.gather(-1, top_h).squeeze(-1).numpy()
        argmax_top[gm] = (heat_q[diff.abs().amax(-1).argmax()], heat_q[np.abs(top_diff).argmax()])
        lim = np.abs(top_diff).max()
        tpc = ax.tripcolor(heat_tri, top_diff, cmap="RdBu_r", vmin=-lim, vmax=lim,
                           shading="gouraud")
        fig.colorbar(tpc, ax=ax, shrink=0.8, label="focal map $-$ TS, top-class probability")
        _simplex_frame(ax, f"$\\gamma = {gm:g}$, $T = {t:.3f}$")
    fig.tight_layout()
    return fig, argmax_top


# --------------------------------------------------------------------------------------------
# Kimura & Naganuma (2024): focal loss as curvature reduction
# --------------------------------------------------------------------------------------------

def lemma1_bernoulli(gammas: Sequence[float] = (0.5, 3.0)) -> Figure:
    """Lemma 1 for K = 2 and a one-hot target: the focal loss, the Bernoulli step of the printed
    proof and the bound ``L_CE - gamma H``, one panel per gamma."""
    import numpy as np

    fig, axes = plt.subplots(1, len(gammas), figsize=(WIDTH, 3.5), sharey=True)
    pp = np.linspace(0.005, 0.995, 500)
    for ax, gv in zip(axes, gammas):
        ce = -np.log(pp)
        fl = maps.focal_loss_term(torch.tensor(pp), gv).numpy()
        h2 = -pp * np.log(pp) - (1 - pp) * np.log1p(-pp)
        ax.plot(pp, fl, color=color("focal"), label=r"focal loss $L_{FL}$")
        ax.plot(pp, -(1 - gv * pp) * np.log(pp), "--", color=color("Psi"),
                label=r"Bernoulli step $-(1-\gamma p)\ln p$")
        ax.plot(pp, ce - gv * h2, ":", color=color("cross-entropy"),
                label=r"bound $L_{CE} - \gamma H(\hat p)$")
        ax.set(title=rf"$\gamma = {gv:g}$", ylim=(-1.5, 4))
    # one x label for the row: two would run into each other at the page's width
    fig.supxlabel(r"predicted probability of the true class $\hat p_y$ ($k = 2$, one-hot $q$)",
                  fontsize=mpl.rcParams["axes.labelsize"])
    axes[0].set_ylabel("loss (nats)")
    axes[0].legend()
    fig.tight_layout()
    return fig


def gibbs_entropy_and_beta(p3, entropy, gibbs, minimum, beta, mu, phi, delta: float) -> Figure:
    """Theorem 1 in the discrete analogue: (left) the entropy along the feasible segment with the
    Gibbs maximum ``gibbs = (p3, H)`` and the minimum ``minimum = (p3, H)``; (right) the Gibbs
    mean ``mu(beta)`` and the printed ``Phi(beta)`` against the constraint ``delta``."""
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.5))
    axes[0].plot(p3, entropy, color=color("cross-entropy"), label=r"$H(p)$ on the feasible set")
    axes[0].plot([gibbs[0]], [gibbs[1]], "o", color=color("focal"),
                 label="Gibbs distribution (maximum)")
    axes[0].plot([minimum[0]], [minimum[1]], "s", color=color("Psi"),
                 label=r"minimum, $p = (0, 5/6, 1/6)$")
    axes[0].set(xlabel=r"$p_3$ (the rest fixed by $\sum p_i = 1$, $\sum p_i L_i = 5/2$)",
                ylabel="entropy (nats)", title=r"$L = (1, 2, 5)$, $\delta = 5/2$")
    axes[0].legend(loc="lower center")
    axes[1].plot(beta, mu, color=color("cross-entropy"),
                 label=r"Gibbs mean $\mu(\beta)$ (the constraint)")
    axes[1].plot(beta, phi, "--", color=color("focal"), label=r"printed $\Phi(\beta)$ (eq. 15-16)")
    axes[1].axhline(delta, color=color("identity"), lw=1, label=r"$\delta = 5/2$")
    axes[1].set(xlabel=r"inverse temperature $\beta$", ylabel="value", yscale="log",
                title="equation for $\\beta$")
    axes[1].legend()
    fig.tight_layout()
    return fig


def curvature_coefficient(gammas: Sequence[float] = (0.5, 1.0, 2.0, 3.0),
                          p0s: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9)) -> Figure:
    """Eq. 28: the true curvature coefficient ``g(p0, gamma)`` against the printed
    ``(1 - p0)^gamma`` (left), and ``g(p0, gamma)`` as gamma grows (right)."""
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.5))
    pp = torch.linspace(0.001, 0.999, 500, dtype=F64)
    for gv, col in zip(gammas, gamma_colors(list(gammas))):
        axes[0].plot(pp, maps.gradient_factor(pp, gv), color=col, label=rf"$g(p_0, {gv:g})$ (true)")
        axes[0].plot(pp, (1 - pp) ** gv, "--", color=col, lw=1.2)
    axes[0].plot([], [], "--", color=color("identity"), label=r"$(1-p_0)^\gamma$ (Eq. 28)")
    axes[0].axhline(1, color=color("cross-entropy"), lw=1, label="cross-entropy")
    axes[0].set(xlabel=r"probability of the observation at the MLE, $p_0$",
                ylabel="curvature coefficient", title="coefficient of the curvature term")
    axes[0].legend()
    gl = np.linspace(0, 8, 300)
    for p0, col in zip(p0s, gamma_colors(list(p0s), cmap="cividis")):
        g_of = [float(maps.gradient_factor(torch.tensor(p0, dtype=F64), x)) for x in gl]
        axes[1].plot(gl, g_of, color=col, label=rf"$p_0 = {p0}$")
    axes[1].axhline(1, color=color("cross-entropy"), lw=1)
    axes[1].set(xlabel=r"focusing parameter $\gamma$", ylabel=r"$g(p_0, \gamma)$", yscale="log",
                title="curvature relative to cross-entropy")
    axes[1].legend()
    fig.tight_layout()
    return fig


def focal_loss_and_gradient(eq30, gammas: Sequence[float] = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0),
                            eq30_gammas: Sequence[float] = (0.25, 0.5)) -> Figure:
    """The curvature paper's Fig. 1 redrawn from the definitions: the focal loss and its
    derivative per gamma, with the printed Eq. 30 (``eq30(p, gamma)``, numpy) dotted."""
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.5))
    pp = torch.linspace(0.01, 0.9999, 600, dtype=F64)
    cols = dict(zip(gammas, gamma_colors(list(gammas))))
    for gv, col in cols.items():
        lab = _gamma_label(gv)
        axes[0].plot(pp, maps.focal_loss_term(pp, gv), color=col, label=lab)
        axes[1].plot(pp, maps.focal_loss_term_grad(pp, gv), color=col, label=lab)
    for gv in eq30_gammas:
        axes[1].plot(pp, eq30(pp.numpy(), gv), ":", color=cols[gv], lw=1.4)
    names = ", ".join(f"{g:g}" for g in eq30_gammas)
    eq30_handle, = axes[1].plot([], [], ":", color=color("identity"),
                                label=rf"Eq. 30, $\gamma = {names}$ (not the gradient)")
    axes[0].set(xlabel=r"predicted probability of the true class $p$", ylabel="loss (nats)",
                ylim=(0, 5), title="focal loss")
    axes[1].set(xlabel=r"predicted probability of the true class $p$",
                ylabel=r"$\partial\ell_\gamma/\partial p$", ylim=(-5, 3),
                title="its derivative (same colours)")
    axes[0].legend()
    axes[1].legend(handles=[eq30_handle], loc="upper center")
    fig.tight_layout()
    return fig


def hutchinson_running(matrices: Mapping[str, torch.Tensor], running: Mapping, variance,
                       names: Sequence[str] = ("positive definite", "indefinite")) -> Figure:
    """Running Hutchinson estimates (``running[name, kind]``: per-probe estimates) with bands of
    two standard errors from ``variance(matrix, kind)``, one panel per matrix."""
    import math

    import numpy as np

    fig, axes = plt.subplots(1, len(names), figsize=(WIDTH, 3.5), sharex=True)
    n_probes = len(next(iter(running.values())))
    mm = np.arange(1, n_probes + 1)
    for ax, name in zip(axes, names):
        a_m = matrices[name]
        trace = float(a_m.trace())
        for kind, col in (("Rademacher", color("Hessian trace")), ("Gaussian", color("focal"))):
            run = np.cumsum(running[name, kind].numpy()) / mm
            sd = math.sqrt(variance(a_m, kind))
            ax.plot(mm, run, color=col, label=f"{kind} probes")
            ax.fill_between(mm, trace - 2 * sd / np.sqrt(mm), trace + 2 * sd / np.sqrt(mm),
                            color=col, alpha=0.15, lw=0)
        ax.axhline(trace, color=color("true posterior"), lw=1, label="trace")
        ax.set(xscale="log", xlabel="number of probes $M$", ylabel="running Hutchinson estimate",
               title=f"{name} $30 \\times 30$ matrix")
        half = 6 * math.sqrt(variance(a_m, "Gaussian") / 10)
        ax.set_ylim(trace - half, trace + half)
    axes[0].legend()
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# the unifying chapter
# --------------------------------------------------------------------------------------------

def gradient_factor_and_weight(schedules: Mapping[str, Sequence[tuple[float, float]]],
                               gamma_star: Mapping[float, float],
                               gammas: Sequence[float] = (1.0, 2.0, 3.0, 5.0, 7.0)) -> Figure:
    """The unifying figure. Top: Mukhoti's ``g = phi`` per gamma with the ``tau_oc`` ridge, the
    ``tau_uc`` crossings, the FLSD schedules (``schedules[name] = [(threshold, gamma), ...]``)
    and Mukhoti's ``gamma*(p0)`` (``gamma_star[p0]``). Bottom: K&K's weight ``h`` and the binary
    focal map."""
    import numpy as np

    # one panel above the other, each with its legend on its right: side by side at the page's
    # width, the two long legends would run into each other
    fig, (ax_g, ax_h) = plt.subplots(2, 1, figsize=(WIDTH, 8.2))
    cols = gamma_colors(list(gammas), cmap="cividis")   # no green: FLSD-53 is green book-wide
    pp = torch.as_tensor(np.linspace(1e-4, 1 - 1e-4, 1200), dtype=F64)
    ppn = pp.numpy()
    gam_ridge = torch.as_tensor(np.logspace(-2, 1.2, 200), dtype=F64)
    ridge_v = maps.tau_oc(gam_ridge)
    ridge_g = torch.stack([maps.phi(ridge_v[i], float(gam_ridge[i]))
                           for i in range(len(gam_ridge))])
    ax_g.plot(ridge_v, ridge_g, color=color("identity"), lw=1, ls="--",
              label=r"$\tau_{oc}$ ridge: $(\tau_{oc}, \max g)$")
    for gam, col in zip(gammas, cols):
        ax_g.plot(ppn, maps.gradient_factor(pp, gam), color=col, lw=1.4,
                  label=rf"$g = \varphi$, $\gamma = {gam:g}$")
        t_oc, t_uc = maps.tau_oc(gam), maps.tau_uc(gam)
        ax_g.plot([t_oc], [float(maps.phi(torch.as_tensor(t_oc, dtype=F64), gam))], "^",
                  color=col, ms=6)
        ax_g.plot([t_uc], [1.0], "o", color=col, ms=5)
    ax_g.axhline(1.0, color="k", lw=0.8, label=r"level 1 ($\gamma = 0$, cross-entropy)")
    for (name, sched), ls in zip(schedules.items(), ("-", ":")):
        # gamma of the first bucket with p < threshold; the released code switches at 0.2 and
        # 0.5 (gamma 5 / 3 / 3 for FLSD-53, 5 / 3 / 2 for FLSD-532): the same curves
        gam_p = np.select([ppn < th for th, _ in sched], [gm for _, gm in sched],
                          default=sched[-1][1])
        g_p = np.zeros_like(ppn)
        for gm in np.unique(gam_p):
            g_p = np.where(gam_p == gm, maps.gradient_factor(pp, float(gm)).numpy(), g_p)
        g_p[np.concatenate([np.diff(gam_p) != 0, [False]])] = np.nan  # no vertical segment
        ax_g.plot(ppn, g_p, color=color(name), lw=3.2 if name == "FLSD-53" else 2.2, ls=ls,
                  alpha=0.8, label=f"{name} ($\\gamma$ by $p$)", zorder=1)
    for p0, gs in gamma_star.items():
        ax_g.plot([p0], [1.0], "*", color="k", ms=11, zorder=5)
        ax_g.annotate(rf"$\gamma^*({p0:g}) = {gs:.2f}$", (p0, 1.0),
                      xytext=(p0 + 0.06, 0.62 + (p0 - 0.2) * 3),
                      arrowprops=dict(arrowstyle="-", lw=0.6), fontsize=SMALLEST_FONT_PT,
                      bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
    for th in (0.2, 0.5):
        ax_g.axvline(th, color=color("FLSD-53"), lw=0.8, ls=":")
    ax_g.annotate(r"$p_0 = 0.5$: $\gamma^* = 0$" "\n"
                  r"($\tau_{uc} \to \frac{1}{2}$ as $\gamma \to 0$)", (0.5, 1.0),
                  xytext=(0.6, 1.25), arrowprops=dict(arrowstyle="-", lw=0.6))
    ax_g.plot([], [], "^", color="0.3", label=r"$\tau_{oc}$ (max of $g$)")
    ax_g.plot([], [], "o", color="0.3", label=r"$\tau_{uc}$ ($g = 1$)")
    ax_g.set(xlabel=r"predicted probability of the true class $p$",
             ylabel=r"$g(p, \gamma) = \varphi^\gamma(p)$", xlim=(0, 1), ylim=(0, 1.55),
             title="Mukhoti's gradient factor = Charoenphakdee's $\\varphi$")
    ax_g.legend(loc="center left", bbox_to_anchor=(1.03, 0.5))
    for gam, col in zip(gammas, cols):
        ax_h.plot(ppn, maps.h(pp, gam), color=col, lw=1.2, ls="--")
        ax_h.plot(ppn, maps.binary_focal_map(pp, gam), color=col, lw=1.6,
                  label=rf"$\gamma = {gam:g}$")
        t_uc = maps.tau_uc(gam)
        ax_h.plot([t_uc], [t_uc], "o", color=col, ms=5)
    ax_h.plot([0, 1], [0, 1], color=color("identity"), lw=1, label="identity")
    ax_h.plot([], [], color="0.3", ls="--", label=r"$h^\gamma(q) = -1/\ell'_\gamma(q)$")
    ax_h.plot([], [], color="0.3", label=r"$h(q)/(h(q) + h(1-q))$ = binary focal map")
    ax_h.plot([], [], "o", color="0.3", label=r"$\tau_{uc}$: fixed point of $h$")
    ax_h.set(xlabel=r"predicted probability $q$", ylabel="weight / calibrated probability",
             xlim=(0, 1), ylim=(0, 1), title="K&K's weight $h$ and the normalised map")
    ax_h.legend(loc="center left", bbox_to_anchor=(1.03, 0.5))
    fig.subplots_adjust(left=0.09, right=0.55, bottom=0.07, top=0.95, hspace=0.32)
    return fig


# --------------------------------------------------------------------------------------------
# Zhou et al. (2025)
# --------------------------------------------------------------------------------------------

def aurc_weights_and_bias(sizes, bias, mc: tuple[int, float, float], n_show: int = 50) -> Figure:
    """AURC as a reweighted risk: (left) the population weight ``-ln(1 - G)`` against the exact
    finite-sample weights ``H_n - H_{n-i}``; (right) the exact bias of the finite-sample AURC
    against ``ln(n)/n`` with a Monte-Carlo point ``mc = (n, mean - 1/9, standard error)``."""
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.5))
    rank = np.arange(1, n_show + 1)
    h = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n_show + 1))])
    uu = np.linspace(0, 1, 400, endpoint=False)
    axes[0].plot(uu, -np.log1p(-uu), color=color("AURC"), label=r"population weight $-\ln(1-G)$")
    axes[0].plot(rank / n_show, h[n_show] - h[n_show - rank], "o", ms=3.5,
                 color=color("inverse focal"),
                 label=rf"exact finite-sample weight $H_n - H_{{n-i}}$ ($n = {n_show}$)")
    axes[0].set(xlabel=r"confidence rank $G(x)$ (fraction of samples at or below)",
                ylabel="weight of the sample", ylim=(0, 5), title="AURC weights")
    axes[0].legend(loc="upper left")
    axes[1].loglog(sizes, bias, "-", color=color("AURC"), label="exact bias of the finite-sample AURC")
    axes[1].loglog(sizes, np.log(sizes) / sizes, ":", color=color("identity"), label=r"$\ln(n)/n$")
    n_mc, mc_bias, mc_se = mc
    axes[1].errorbar([n_mc], [mc_bias], yerr=[2 * mc_se], fmt="s", color=color("inverse focal"),
                     label="Monte Carlo, 400 samples (±2 SE)")
    axes[1].set(xlabel="sample size $n$", ylabel=r"$\mathbb{E}[\widehat{\mathrm{AURC}}] - 1/9$",
                title=r"bias for $r(u) = (1-u)^2$")
    axes[1].legend()
    fig.tight_layout()
    return fig


def ece_lower_bounds(err, top_label: tuple, classwise: tuple, k: int) -> Figure:
    """Zhou et al.'s Sec. 4 bounds: the finest-binning ECE (left) and cwECE (right) of ``f`` and
    of the constructed ``f'`` (``top_label = (f, f')``, ``classwise = (f, f')``) against the error
    rate, with the bound ``err/k``."""
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.5))
    e = np.asarray(err)
    panels = ((top_label, r"\widehat{\mathrm{ECE}}", "Prop. 4.2", "finest-binning ECE",
               "top-label (Lemma 4.1, Prop. 4.2)"),
              (classwise, r"\widehat{\mathrm{cwECE}}", "Prop. 4.4, renormalised",
               "finest-binning cwECE", "class-wise (Props. 4.3, 4.4)"))
    for ax, ((f, f_prime), name, prop, ylabel, title) in zip(axes, panels):
        ax.plot(e, np.asarray(f), ".", ms=4, color=color("cross-entropy"),
                label=rf"$f$: $\sup_B{name}_B$")
        ax.plot(e, np.asarray(f_prime), ".", ms=4, color=color("selective-risk"),
                label=rf"$f'$ ({prop})")
        ax.plot(np.sort(e), np.sort(e) / k, "-", color=color("identity"),
                label=r"bound $\widehat{\mathrm{err}}/k$")
        ax.set(xlabel=r"error rate $\widehat{\mathrm{err}}$", ylabel=ylabel, title=title)
    axes[0].legend()
    axes[1].legend(loc="lower right")
    fig.tight_layout()
    return fig


def selective_risk_weights(scores, weights: Mapping[str, torch.Tensor], tau: float,
                           kappa: float) -> Figure:
    """Prop. 4.6: selective-risk weights against the (uniform) score: the exact empirical
    eq. (11), the corrected and the printed closed forms, and the training estimator
    (``weights`` keyed ``exact``, ``corrected``, ``printed``, ``estimator``)."""
    order = torch.argsort(scores)
    sub = order[::40]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot(scores[sub], weights["exact"][sub], ".", ms=3, color=color("true posterior"),
            label="exact eq. (11), empirical measure")
    ax.plot(scores[order], weights["corrected"][order], "-", color=color("selective-risk"),
            label=r"$-\ln(1-G)/G_\tau$ (corrected)")
    ax.plot(scores[order], weights["printed"][order], "--", color=color("AURC"),
            label=r"$-\ln(1-G)$ (eq. 12 as printed)")
    ax.plot(scores[sub], weights["estimator"][sub], ":", color=color("dual focal"),
            label=r"training estimator, 64 bins, $\nu = 0.01$")
    ax.axvline(tau, color=color("identity"), lw=1)
    ax.set(xlabel=r"confidence score $g(x)$ (uniform)", ylabel=r"weight $\beta(x)$",
           title=rf"selective-risk weights, $\kappa = P(\mathcal{{X}}_\tau) = {kappa}$")
    ax.legend(loc="center right")
    return fig


def inverse_focal_and_dual_focal(gamma_star: float, p_y, dual: Mapping[str, object],
                                 focal, gamma: float,
                                 gammas: Sequence[float] = (3.0, 3.5, 4.0, 5.0)) -> Figure:
    """(left) the gradient of the inverse focal loss per gamma, with the threshold
    ``gamma_star``; (right) the dual focal loss as the paper defines it and as released
    (``dual[variant]``: values on the probabilities ``p_y``) beside the focal loss ``focal``."""
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.5))
    pp = np.linspace(0.02, 0.98, 400)
    gam_show = sorted([*gammas, gamma_star])
    for gv, col in zip(gam_show, gamma_colors(gam_show)):
        grad = -gv * (1 + pp) ** (gv - 1) * np.log(pp) - (1 + pp) ** gv / pp
        lab = rf"$\gamma = {gv:.4g}$" + (r" $= 1/W(1/e)$" if abs(gv - gamma_star) < 1e-9 else "")
        axes[0].plot(pp, grad, color=col, label=lab)
    axes[0].axhline(0, color=color("identity"), lw=1)
    axes[0].set(xlabel=r"true-class probability $p_y$", ylabel=r"$\partial\ell/\partial p_y$",
                ylim=(-8, 3), title="inverse focal loss: gradient")
    for variant, lv in dual.items():
        lv = np.asarray(lv)
        if variant == "released":
            lv = np.where(np.isclose(p_y, 0.5), np.nan, lv)
        axes[1].plot(p_y, lv, "-" if variant == "paper" else "--",
                     color=color("dual focal") if variant == "paper" else color("focal"),
                     label=f"dual focal, {variant}")
    axes[1].plot(p_y, focal, ":", color=color("identity"), label="focal")
    axes[1].axvline(0.5, color=color("identity"), lw=0.8)
    axes[1].set(xlabel=r"true-class probability $p_y$ ($k = 2$)", ylabel="loss", yscale="log",
                title=rf"dual focal loss, $\gamma = {gamma:g}$")
    axes[1].legend()
    _legends_below(fig, axes[:1])
    return fig


def smoothed_cdf_bias(scores, smoothed: Mapping[float, torch.Tensor], grid, nus,
                      bias_curves: Mapping[tuple, object]) -> Figure:
    """Zhou et al.'s App. E: (left) the empirical CDF of ``scores`` and the smoothed CDFs
    ``smoothed[nu]`` on ``grid``; (right) the mean error of the smoothed CDF against ``nu``
    (``bias_curves[name, n_bins]``), with the bin widths and the paper's ``nu = 0.1``."""
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.5))
    n = len(scores)
    axes[0].step(np.sort(np.asarray(scores)), np.arange(1, n + 1) / n, where="post",
                 color=color("true posterior"), label=r"empirical CDF $G_n$")
    for (nu, cdf), col in zip(smoothed.items(), gamma_colors(list(range(len(smoothed))))):
        axes[0].plot(grid, cdf, color=col, label=rf"$\widehat G_\nu$, $\nu = {nu:g}$")
    axes[0].set(xlabel="MSP confidence (CIFAR-10, ResNet-50, CE)", ylabel="CDF",
                xlim=(0.3, 1.0), title="Fig. 5 of Zhou et al., 64 bins")
    axes[0].legend(loc="upper left")
    styles = {15: "--", 64: "-"}
    for (name, nb), curve in bias_curves.items():
        col = color("selective-risk") if name.startswith("CIFAR") else color("AURC")
        axes[1].loglog(nus, curve, styles[nb], color=col, label=f"{name}, {nb} bins")
    for nb in (15, 64):
        axes[1].axvline(1 / nb, color=color("identity"), ls=styles[nb], lw=0.8)
    axes[1].axvline(0.1, color=color("focal"), lw=1, label=r"paper: $\nu = 0.1$")
    axes[1].set(xlabel=r"smoothing $\nu$ (score units; grey lines: bin widths)",
                ylabel=r"mean $|\widehat G_\nu - G_n|$", title="bias of the smoothed CDF")
    _legends_below(fig, axes[1:])
    return fig
