r"""Komisarenko & Kull (2024) on the Fashion-MNIST runs: the verdicts on their Table 1's trends, and
their Fig. 8 from one network, the ``(gamma_ev, T)`` selection surface of focal temperature scaling
and the path of their "3m" line search over it.

Focal TS selects the pair ``(gamma_ev, T)`` of ``focal_map(softmax(z / T), gamma_ev)`` that
minimises a criterion (validation ECE or NLL). K&K search the whole grid, plot the best ``T`` for
each ``gamma_ev`` (their Fig. 8: close to a line) and propose, without testing it, a cheaper search
along that line (Sec. 5.2): ``2m`` evaluations to find the best ``T`` at two anchor gammas, then
``m`` along the line through the two anchor pairs. Both searches are
:class:`focalcal.posthoc.FocalTemperatureScaling` (``search="grid"`` and ``search="line"``); this
module only runs them on the same grid, keeps what a figure needs, and draws it.

Conventions: scores are the library's (ECE as a fraction, NLL in nats), smaller is better; a pair
is ``(gamma_ev, T, score)``. Verdicts are decided from per-seed values by the rules of
:mod:`focalcal_book.verdicts`: a step of a trend **holds** only where the seed ranges separate in
its direction, and is **not resolved at this scale** where they overlap or a loss has fewer than
two seeds; K&K's "generally" trends are a majority of steps
(:func:`focalcal_book.verdicts.majority`), never every step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from focalcal.lab.results.protocol import fit_on_grid, temperature_grid
from focalcal.posthoc import FTS_CRITERIA, KK_GAMMAS, FocalTemperatureScaling, focal_ts_scores
from focalcal_book.verdicts import (HOLDS, NOT_RESOLVED, NOT_RUN, NOT_TRAINED, compare_ranges,
                                    every_step, majority, paired, spread_text)

__all__ = ["RULES", "trend", "TREND_RULES", "seed_ranges",
           "paired_lower", "linear_fit", "SURFACE_GAMMAS", "SURFACE_TEMPERATURES", "CRITERION_TEXT",
           "CRITERION_LABELS", "SelectionSurface", "selection_surface", "OUTCOMES", "search_table", "line_tex",
           "plot_selection_surfaces", "best_t_curves", "plot_best_t_curves"]



#: how :func:`trend` joins its steps: "majority" for a claim worded "generally" (more than half of
#: the steps), "every_step" for one worded "monotonically" or "always"
TREND_RULES = ("majority", "every_step")


def trend(values: Sequence[Sequence[float]], *, decreasing: bool = True, rule: str = "every_step",
          labels: Sequence[str] | None = None, failed: Sequence[str] = ()) -> dict[str, Any]:
    """Whether a quantity moves one way along an ordered family (e.g. focal losses by ``gamma_tr``).

    Parameters
    ----------
    values : sequence of 1-D array-likes
        Per level of the family, in order, the per-seed values.
    decreasing : bool
        The claimed direction.
    rule : {"every_step", "majority"}
        How the steps are joined (:data:`TREND_RULES`): :func:`focalcal_book.verdicts.every_step`
        ("monotonically": every step must hold) or :func:`focalcal_book.verdicts.majority`
        ("generally": more than half of the steps hold; a step whose ranges overlap is undecided and
        counts against "holds").
    labels, failed : sequences of str
        The levels' names and those that did not train (:func:`focalcal_book.verdicts.untrained`):
        with a level in ``failed`` the verdict is :data:`NOT_TRAINED` and no step is judged.

    Returns
    -------
    dict
        ``verdict``: the steps joined by ``rule``, each step being the verdict of
        :func:`focalcal_book.verdicts.compare_ranges` on the claimed direction (**not resolved at
        this scale** at a step with a level of fewer than two seeds); :data:`NOT_RUN` with fewer
        than two levels. ``step_verdicts``: those per-step verdicts. ``steps``: per step
        ``"down"``, ``"up"`` or ``"overlap"`` (how the two ranges lie, whatever the number of
        seeds). ``ends``: the same for the first against the last level. ``means``: the mean per
        level.

    Raises
    ------
    ValueError
        A level of ``values`` is empty, ``rule`` is not in :data:`TREND_RULES`, or ``labels`` has
        another length than ``values``.
    """
    levels = [np.asarray(v, dtype=float).ravel() for v in values]
    if any(v.size == 0 for v in levels):
        raise ValueError("values must hold at least one value per level")
    if rule not in TREND_RULES:
        raise ValueError(f"rule must be one of {TREND_RULES}, got {rule!r}")
    if labels is not None and len(labels) != len(levels):
        raise ValueError(f"labels must name every level ({len(levels)}), got {len(labels)}")

    def step(a: np.ndarray, b: np.ndarray) -> str:
        """How level ``b`` lies against the earlier level ``a`` (strictly apart: down / up)."""
        return ("down" if compare_ranges(b, a, min_seeds=1) == HOLDS
                else "up" if compare_ranges(a, b, min_seeds=1) == HOLDS else "overlap")

    pairs = list(zip(levels, levels[1:]))
    out: dict[str, Any] = {"verdict": NOT_RUN, "steps": [step(a, b) for a, b in pairs], "step_verdicts": [],
                           "ends": step(levels[0], levels[-1]) if len(levels) > 1 else "overlap",
                           "means": [float(v.mean()) for v in levels]}
    if labels is not None and set(labels) & set(failed):
        out["verdict"] = NOT_TRAINED
        return out
    if pairs:
        steps = [compare_ranges(b, a) if decreasing else compare_ranges(a, b) for a, b in pairs]
        out["step_verdicts"] = steps
        out["verdict"] = (every_step(steps) if rule == "every_step" else
                          majority([v == HOLDS for v in steps], decided=[v != NOT_RESOLVED for v in steps]))
    return out


def seed_ranges(values: Sequence[Sequence[float]], gammas: Sequence[float], *, scale: float = 1.0,
                digits: int = 2) -> str:
    """``"lo–hi at $\\gamma_{tr} = g$, ..."``: the range over seeds of each level
    (:func:`focalcal_book.verdicts.spread_text` without the mean: one number where the rounded
    ends agree), ``values`` scaled by ``scale`` (100 for percentages)."""
    if len(values) != len(gammas):
        raise ValueError(f"values and gammas must have the same length, got {len(values)} and {len(gammas)}")
    return ", ".join(f"{spread_text(v, scale=scale, digits=digits, mean=False)} at $\\gamma_{{tr}} = {g:g}$"
                     for v, g in zip(values, gammas))


def paired_lower(results, method: str, baseline: str, column: str = "ece_mass"):
    """Per loss, whether ``method``'s ``column`` is below ``baseline``'s on every seed (same run).

    Parameters
    ----------
    results : DataFrame
        :func:`focalcal.lab.results.load_results`' rows (one per run x method).
    method, baseline : str
        Methods of :data:`focalcal.lab.results.METHODS`, e.g. ``"focal TS (ECE)"`` and ``"TS (ECE)"``.
    column : str
        A metric column; lower is better.

    Returns
    -------
    DataFrame
        Indexed by ``loss_label`` (order of appearance): ``seeds``, ``lower`` (seeds where
        ``method`` is lower), ``min_diff`` and ``max_diff`` (``method - baseline`` over seeds) and
        ``verdict``: :func:`focalcal_book.verdicts.paired` of the differences (**holds** when every
        seed is lower, **does not hold** when none is, **not resolved at this scale** otherwise or
        with fewer than two seeds).
    """
    import pandas as pd

    if column not in results.columns:
        raise ValueError(f"column must be a column of results; got {column!r}")
    wide = results[results["method"].isin([method, baseline])].pivot_table(
        index=["loss_label", "seed"], columns="method", values=column, sort=False)
    rows = []
    for label, g in wide.groupby(level="loss_label", sort=False):
        if method not in g or baseline not in g:
            continue
        d = (g[method] - g[baseline]).dropna().to_numpy()
        if not d.size:
            continue
        rows.append({"loss_label": label, "seeds": int(d.size), "lower": int((d < 0).sum()),
                     "min_diff": float(d.min()), "max_diff": float(d.max()), "verdict": paired(d)})
    return pd.DataFrame(rows, columns=["loss_label", "seeds", "lower", "min_diff", "max_diff", "verdict"]
                        ).set_index("loss_label")


#: the surface's gamma_ev grid: K&K's nine values (Sec. 5.1) and every multiple of 0.5 in their
#: range [-0.5, 5], so that the heat map has rows between their sparse values above 1 (17 in all;
#: a 0.25 step, 25 rows, made the exact ECE surface take half as long again)
SURFACE_GAMMAS: tuple[float, ...] = tuple(sorted(set(KK_GAMMAS) | {-0.5 + 0.5 * k for k in range(12)}))
#: the surface's temperatures: 0.05, 0.10, ..., 5 (K&K's range at a fifth of their 0.01 step, so
#: that the exact score of every cell, which the heat map needs, takes seconds on 2 cores)
SURFACE_TEMPERATURES: tuple[float, ...] = temperature_grid(100, 5.0)
#: criterion -> (name in prose, unit in prose, factor, decimals): how a score is written
CRITERION_TEXT: dict[str, tuple[str, str, float, int]] = {
    "ece_mass": ("ECE", " %", 100.0, 3), "ece": ("equal-width ECE", " %", 100.0, 3), "nll": ("NLL", " nats", 1.0, 5)}
#: criterion -> (axis label, factor applied to the scores when drawn)
CRITERION_LABELS: dict[str, tuple[str, float]] = {
    "ece_mass": ("validation ECE, 15 equal-mass bins (%)", 100.0),
    "ece": ("validation ECE, 15 equal-width bins (%)", 100.0),
    "nll": ("validation NLL (nats)", 1.0),
}


def linear_fit(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares line ``y = intercept + slope * x``: ``(intercept, slope, R^2)``; ``R^2`` is 1
    when every ``y`` is the same (the line is then exact)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(f"x and y must be 1-D of the same length >= 2, got shapes {x.shape} and {y.shape}")
    slope, intercept = np.polyfit(x, y, 1)
    resid = ((y - (intercept + slope * x)) ** 2).sum()
    total = ((y - y.mean()) ** 2).sum()
    return float(intercept), float(slope), float(1.0 - resid / total) if total > 0 else 1.0


@dataclass(frozen=True)
class SelectionSurface:
    """The grid and line searches of focal TS on one fitting set (see :func:`selection_surface`).

    Attributes
    ----------
    criterion : str
        One of :data:`focalcal.posthoc.FTS_CRITERIA`.
    gammas : ndarray, shape (G,)
    temperatures : ndarray, shape (M,)
    scores : ndarray, shape (G, M)
        The exact criterion of every grid pair, ``scores[i, j]`` at ``(gammas[i], temperatures[j])``.
    grid_pick : ndarray, shape (3,)
        ``(gamma_ev, T, score)`` selected by the full grid search.
    best_t : ndarray, shape (G,)
        For each gamma the grid temperature of least score (K&K's Fig. 8 curve).
    anchors : ndarray, shape (2, 3)
        The line search's two anchor pairs ``(g, T, score)``: the best ``T`` at each anchor gamma.
    line : (float, float)
        Intercept and slope of the line search's ``T(gamma) = intercept + slope * gamma``.
    line_pairs : ndarray, shape (M, 3)
        The ``m`` pairs evaluated along the line (``T`` clipped to the temperature range).
    line_pick : ndarray, shape (3,)
        ``(gamma_ev, T, score)`` selected by the line search (best of its ``3m`` pairs).
    seconds : float
        Wall time of both searches and the exact surface.
    cpu_seconds : float
        The process's CPU time meanwhile (all threads; unlike ``seconds``, unaffected by other
        processes competing for the cores).
    """

    criterion: str
    gammas: np.ndarray
    temperatures: np.ndarray
    scores: np.ndarray
    grid_pick: np.ndarray
    best_t: np.ndarray
    anchors: np.ndarray
    line: tuple[float, float]
    line_pairs: np.ndarray
    line_pick: np.ndarray
    seconds: float
    cpu_seconds: float

    @property
    def gap(self) -> float:
        """Line search's score minus the grid's (``> 0``: the line search missed the grid optimum;
        ``< 0`` is possible, its gammas along the line need not be grid gammas)."""
        return float(self.line_pick[2] - self.grid_pick[2])

    @property
    def same_pair(self) -> bool:
        """Whether both searches selected the same ``(gamma_ev, T)``."""
        return bool(np.allclose(self.line_pick[:2], self.grid_pick[:2], rtol=0, atol=1e-9))

    @property
    def n_grid(self) -> int:
        """Pairs of the full grid (``G * M``)."""
        return int(self.scores.size)

    @property
    def n_line(self) -> int:
        """Pairs the line search evaluates (``3m``)."""
        return 2 * len(self.temperatures) + len(self.line_pairs)

    def best_t_fit(self) -> tuple[float, float, float]:
        """:func:`linear_fit` of :attr:`best_t` against :attr:`gammas` (K&K's "close to linear")."""
        return linear_fit(self.gammas, self.best_t)


def selection_surface(logits: Any, labels: Any, *, criterion: str = "ece_mass",
                      gammas: Sequence[float] = SURFACE_GAMMAS,
                      temperatures: Sequence[float] = SURFACE_TEMPERATURES,
                      line_gammas: tuple[float, float] = (0.0, 1.0), n_bins: int = 15) -> SelectionSurface:
    """Run focal TS's full grid search and its 3m line search on the same grid.

    Parameters
    ----------
    logits : Tensor, shape (N, K)
        Logits of the fitting (validation) set.
    labels : Tensor, shape (N,)
    criterion : {"ece_mass", "ece", "nll"}
        The selection criterion (K&K's Fig. 8: ``"ece_mass"``).
    gammas, temperatures : sequence of float
        The grid (``gamma > -1``, ``T > 0``); the line search's ``m`` is ``len(temperatures)`` and
        its line gammas span ``[min(gammas), max(gammas)]``.
    line_gammas : (float, float)
        The line search's anchors (the library's default: TS, ``gamma = 0``, and ``gamma = 1``).
    n_bins : int
        Bins of the ECE criteria.

    Returns
    -------
    SelectionSurface

    Raises
    ------
    ValueError
        A bad ``criterion``, ``gammas`` or ``temperatures`` not strictly increasing, or any
        argument :class:`~focalcal.posthoc.FocalTemperatureScaling` rejects; named in the message.
    """
    if criterion not in FTS_CRITERIA:
        raise ValueError(f"criterion must be one of {', '.join(FTS_CRITERIA)}; got {criterion!r}")
    g, t = np.asarray(gammas, dtype=float), np.asarray(temperatures, dtype=float)
    for name, grid_values in (("gammas", g), ("temperatures", t)):
        # the heat map's cells need an increasing grid
        if grid_values.ndim != 1 or len(grid_values) < 2 or not (np.diff(grid_values) > 0).all():
            raise ValueError(f"{name} must be a strictly increasing 1-D sequence of at least two values")
    start, cpu_start = time.perf_counter(), time.process_time()
    # method="exact": the heat map needs every score anyway, which a fast fit would compute again
    common = {"criterion": criterion, "n_bins": n_bins, "method": "exact"}
    grid = fit_on_grid(FocalTemperatureScaling(gammas, temperatures, **common), logits, labels)
    line = fit_on_grid(FocalTemperatureScaling(gammas, temperatures, search="line", line_gammas=line_gammas,
                                               **common), logits, labels)
    scores = grid.scores_.numpy()          # exact scores of every pair of every pair
    cands = line.candidates_.numpy()       # the 2m anchor scans, then the m line pairs
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    m = len(t)
    intercept, slope = line.line_
    anchors = []
    for k, g_k in enumerate(line_gammas):
        scan = cands[k * m:(k + 1) * m]
        t_k = intercept + slope * g_k      # the anchor's best T, as the library put it on the line
        anchors.append(scan[np.abs(scan[:, 1] - t_k).argmin()])
    return SelectionSurface(
        criterion=criterion, gammas=g, temperatures=t, scores=scores,
        grid_pick=np.array([grid.gamma_ev_, grid.temperature_, grid.best_score_]),
        best_t=t[scores.argmin(axis=1)], anchors=np.stack(anchors), line=(float(intercept), float(slope)),
        line_pairs=cands[2 * m:], line_pick=np.array([line.gamma_ev_, line.temperature_, line.best_score_]),
        seconds=seconds, cpu_seconds=cpu_seconds)


def best_t_curves(fitting_sets: Mapping[str, tuple[Any, Any]], *, gammas: Sequence[float] = KK_GAMMAS,
                  temperatures: Sequence[float] = SURFACE_TEMPERATURES, criterion: str = "ece_mass",
                  n_bins: int = 15):
    """K&K's Fig. 8 for several networks: for each ``gamma_ev`` the temperature of least criterion.

    Parameters
    ----------
    fitting_sets : mapping label -> (logits (N, K), labels (N,))
        One validation set per network (e.g. per training ``gamma_tr``), in the order to draw.
    gammas, temperatures : sequence of float
        The grid (default: K&K's nine ``gamma_ev`` and :data:`SURFACE_TEMPERATURES`).
    criterion : {"ece_mass", "ece", "nll"}
    n_bins : int

    Returns
    -------
    DataFrame
        One row per label x gamma: ``label``, ``gamma_ev``, ``best_t`` (the smallest grid ``T`` of
        least score: :func:`focalcal.posthoc.focal_ts_scores`, exact) and ``score``.
    """
    import pandas as pd

    rows = []
    for label, (logits, labels) in fitting_sets.items():
        scores = focal_ts_scores(logits, labels, gammas=gammas, temperatures=temperatures, criterion=criterion,
                                 n_bins=n_bins).numpy()
        j = scores.argmin(axis=1)
        rows += [{"label": label, "gamma_ev": float(g), "best_t": float(temperatures[k]),
                  "score": float(scores[i, k])} for i, (g, k) in enumerate(zip(gammas, j))]
    return pd.DataFrame(rows, columns=["label", "gamma_ev", "best_t", "score"])


def plot_best_t_curves(curves, styles: Mapping[str, tuple[str, Any]], *, ylabel: str = "best temperature $T$"):
    """Best ``T`` against ``gamma_ev``, one line per label of :func:`best_t_curves` (K&K's Fig. 8);
    ``styles``: label -> (colour, line style), e.g. :func:`focalcal.lab.results.figures.loss_styles`."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for label, g in curves.groupby("label", sort=False):
        c, ls = styles.get(label, ("#4D4D4D", "-"))
        ax.plot(g["gamma_ev"], g["best_t"], marker="o", ms=4, color=c, linestyle=ls, label=label)
    ax.set_xlabel(r"$\gamma_{ev}$ of the focal map")
    ax.set_ylabel(ylabel)
    ax.legend(title="training loss", loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig, ax


def line_tex(intercept: float, slope: float) -> str:
    """``$T = a + b\\,\\gamma_{ev}$`` with two decimals (a minus sign for a negative slope)."""
    return f"$T = {intercept:.2f} {'-' if slope < 0 else '+'} {abs(slope):.2f}\\,\\gamma_{{ev}}$"


#: how the 3m line search's pick compares with the grid's (:func:`search_table`'s ``outcome``)
OUTCOMES = ("the grid's pair", "better than the grid", "as good as the grid", "worse than the grid")


def search_table(surfaces: Sequence[SelectionSurface]):
    """One row per surface: both searches' picks and scores and how they compare.

    Columns ``criterion`` (:data:`CRITERION_TEXT`'s name), ``grid_gamma``, ``grid_t``,
    ``grid_score``, ``line_gamma``, ``line_t``, ``line_score`` (scores times the criterion's
    factor: percent for an ECE), ``gap`` (line minus grid, same unit), ``line_pairs`` and
    ``grid_pairs`` (pairs evaluated), ``outcome`` (one of :data:`OUTCOMES`; the line's
    ``gamma_ev`` need not be grid values, so it can beat the grid) and ``line`` (:func:`line_tex`).
    """
    import pandas as pd

    rows = []
    for s in surfaces:
        name, _, scale, _ = CRITERION_TEXT[s.criterion]
        outcome = (OUTCOMES[0] if s.same_pair else OUTCOMES[1] if s.gap < 0 else OUTCOMES[2] if s.gap == 0
                   else OUTCOMES[3])
        rows.append({"criterion": name, "grid_gamma": float(s.grid_pick[0]), "grid_t": float(s.grid_pick[1]),
                     "grid_score": scale * float(s.grid_pick[2]), "line_gamma": float(s.line_pick[0]),
                     "line_t": float(s.line_pick[1]), "line_score": scale * float(s.line_pick[2]),
                     "gap": scale * s.gap, "line_pairs": s.n_line, "grid_pairs": s.n_grid, "outcome": outcome,
                     "line": line_tex(*s.line)})
    return pd.DataFrame(rows)


def _edges(centres: np.ndarray) -> np.ndarray:
    """Cell edges of a heat map with (possibly uneven) ``centres``: midpoints, ends mirrored."""
    mid = (centres[1:] + centres[:-1]) / 2
    return np.concatenate([[2 * centres[0] - mid[0]], mid, [2 * centres[-1] - mid[-1]]])


def plot_selection_surfaces(surfaces: Sequence[SelectionSurface], *, title: str = ""):
    """One heat map per surface: the criterion over ``(gamma_ev, T)`` with both searches on it.

    Drawn on each: the best ``T`` per ``gamma_ev`` (K&K's Fig. 8), the line search's two anchor
    pairs, its line and the ``m`` pairs along it, the pair it selected, and the grid's selection.
    The colour scale is logarithmic and saturates at the median score, so that the valley around
    the optimum stays visible next to the steep walls at small and large ``T``.

    Returns
    -------
    (Figure, 1-D array of Axes)
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    from focalcal.plotting import FIGURE_WIDTH_IN, color

    if not surfaces:
        raise ValueError("surfaces must name at least one SelectionSurface")
    n = len(surfaces)
    fig, axes = plt.subplots(1, n, figsize=(min(FIGURE_WIDTH_IN, 4.2 * n), 4.6), squeeze=False,
                             constrained_layout=True)
    grid_c, line_c = color("focal TS"), "#EE7733"
    for ax, s in zip(axes[0], surfaces):
        label, factor = CRITERION_LABELS[s.criterion]
        z = s.scores * factor
        positive = z[z > 0]
        lo, hi = positive.min(), max(np.quantile(positive, 0.5), 1.01 * positive.min())
        mesh = ax.pcolormesh(_edges(s.gammas), _edges(s.temperatures), np.where(z > 0, z, lo).T,
                             norm=LogNorm(vmin=lo, vmax=hi), cmap="Greys_r", shading="flat", rasterized=True)
        cbar = fig.colorbar(mesh, ax=ax, orientation="horizontal", pad=0.02, aspect=30, extend="max")
        # five round ticks instead of LogNorm's powers of ten (the range is often within one decade)
        cbar.set_ticks(np.geomspace(lo, hi, 5), labels=[f"{v:.3g}" for v in np.geomspace(lo, hi, 5)])
        cbar.ax.minorticks_off()
        cbar.set_label(label)
        ax.grid(False)
        ax.plot(s.gammas, s.best_t, "o", ms=3.5, color="#0077BB", label=r"best $T$ per $\gamma_{ev}$ (Fig. 8)")
        ax.plot(s.line_pairs[:, 0], s.line_pairs[:, 1], "-", lw=1.4, color=line_c, label="3m line and its m pairs")
        ax.plot(s.line_pairs[:, 0], s.line_pairs[:, 1], ".", ms=2.5, color=line_c)
        ax.plot(s.anchors[:, 0], s.anchors[:, 1], "s", ms=7, mfc="none", mec=line_c, mew=1.6,
                label="3m anchors (best $T$ at 2 gammas)")
        # the two selections are often a cell apart: a large hollow star around a small cross
        ax.plot(*s.grid_pick[:2], "*", ms=17, mfc="none", mec=grid_c, mew=1.8, label="grid selection")
        ax.plot(*s.line_pick[:2], "X", ms=7, color=line_c, mec="black", mew=0.6, label="3m selection")
        ax.set_xlabel(r"$\gamma_{ev}$ of the focal map")
        ax.set_ylabel(r"temperature $T$")
        ax.set_xlim(_edges(s.gammas)[[0, -1]])
        ax.set_ylim(_edges(s.temperatures)[[0, -1]])
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(3, len(labels)))
    if title:
        fig.suptitle(title)
    return fig, axes[0]


#: the rule each of the page's claims is tested by (Markdown, shown beside its verdict; ``trend``
#: for the three trends in ``gamma_tr``)
RULES: dict[str, str] = {
    "kk_fts_improves": "per loss, focal TS's test ECE (equal-mass bins, both selected by validation ECE) below TS's "
                       "on every seed; every trained loss must hold (\"among all\"), a loss that did not train "
                       "leaves it partly tested",
    "trend": "along cross-entropy and focal loss by growing $\\gamma_{tr}$, a step holds when the seed ranges of "
             "neighbouring $\\gamma_{tr}$ separate in the claimed direction (falling); \"generally\" holds when "
             "more than half of the steps hold (a step whose ranges overlap counts against)",
    "kk_choice_ece": "over the trained runs, the test ECE (equal-mass bins) of focal TS selected by validation ECE "
                     "below that of focal TS selected by validation NLL on every run (`verdicts.paired`); the size "
                     "is compared with the paper's in the text",
    "kk_choice_nll": "over the trained runs, the test NLL of focal TS selected by validation NLL below that of "
                     "focal TS selected by validation ECE on every run (`verdicts.paired`)",
}
