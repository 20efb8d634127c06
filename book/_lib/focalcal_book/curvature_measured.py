"""Kimura & Naganuma (2024) measured: ``book/experiments/curvature_measured.md``.

The sweep's curvature runs (focal loss by ``gamma`` and cross-entropy plus the trace penalty by
``tau``) as one table (:func:`curvature_table`), their figures (:func:`plot_fig2`,
:func:`plot_fig3`, :func:`plot_fig4`) and the numbers behind the page's verdicts:
:func:`trend_row` (a quantity falling at every step, :func:`focalcal_book.verdicts.falling_steps`),
:func:`ece_minimum` (the least ECE at an inner ``gamma``) and :func:`rank_correlations` (Tr(H)
against ECE within each seed). :data:`RULES` states each claim's test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from focalcal.lab import runfolder
from focalcal.plotting import FIGURE_WIDTH_IN, color, gamma_colors
from focalcal_book.verdicts import (DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_RUN, combine, compare_ranges, every_step,
                                    falling_steps, seed_summary)

__all__ = ["RULES", "TREND_COLUMNS", "curvature_table", "spread", "trend_row", "ece_minimum", "rank_correlations",
           "plot_fig2", "plot_fig3", "plot_fig4"]

#: the rule each of the page's claims is tested by (Markdown, shown beside its verdict)
RULES: dict[str, str] = {
    "kimura_lambda_monotone": "$\\lambda_{\\max}$ of the training loss on held-out images falls between every two "
                              "neighbouring $\\gamma$: every seed at the larger $\\gamma$ below every seed at the "
                              "smaller one",
    "kimura_ece_minimum": "the least mean test ECE at an inner $\\gamma$, every seed there below every seed at both "
                          "ends (against the claim: the least at an end, below the runner-up beyond the seed spread)",
    "kimura_tau_lowers": "$\\mathrm{Tr}(H)$ of the cross-entropy and the test ECE both fall at every step between "
                         "neighbouring $\\tau$ (each step as for Fig. 2)",
}
#: the headers of a table of :func:`trend_row` rows
TREND_COLUMNS = {"quantity": "quantity", "first": "mean at the first value", "last": "mean at the last value",
                 "falls": "steps that fall", "rises": "steps that rise", "unresolved": "steps not resolved",
                 "verdict": "falls at every step"}


def curvature_table(out: str | Path, results) -> pd.DataFrame:
    """One row per uncalibrated run of ``results`` with a measured Hessian (``curvature.json``):
    ``run``, ``loss``, ``seed``, ``gamma``, ``tau`` (the trace penalty's, 0 for focal loss),
    ``ece``, ``accuracy``, the measurement's ``n_samples``, ``n_iter``, ``n_probes`` and, for the
    training loss and the cross-entropy, ``<loss|cross_entropy>_<lambda_max|trace|trace_se>``."""
    rows = []
    for rec in results[results["method"] == "uncalibrated"].to_dict("records"):
        cur = runfolder.read_curvature(runfolder.run_path(out, rec["run"]))
        if cur is None:
            continue
        tau = rec.get("param_lamda") if rec["loss"] == "hessian_trace" else 0.0
        rows.append({"run": rec["run"], "loss": rec["loss"], "seed": int(rec["seed"]), "gamma": cur["gamma"],
                     "tau": float(tau), "ece": rec["ece_width"], "accuracy": rec["accuracy"],
                     "n_samples": cur["n_samples"], "n_iter": cur["n_iter"], "n_probes": cur["n_probes"],
                     **{f"{k}_{m}": cur[k][m] for k in ("loss", "cross_entropy")
                        for m in ("lambda_max", "trace", "trace_se")}})
    return pd.DataFrame(rows)


def spread(frame: pd.DataFrame, by: str, column: str) -> pd.DataFrame:
    """:func:`focalcal_book.verdicts.seed_summary` of ``column`` per value of ``by`` (ascending),
    with the columns ``mean``, ``low``, ``high`` and ``n`` (the seeds)."""
    s = seed_summary(frame, [column], by=(by,), order=sorted(frame[by].unique()))
    return s.rename(columns={f"{column}_mean": "mean", f"{column}_min": "low", f"{column}_max": "high",
                             "seeds": "n"})[["mean", "low", "high", "n"]]


def trend_row(frame: pd.DataFrame, by: str, column: str, name: str) -> dict[str, Any]:
    """One row of a trend table: the means at the first and last value of ``by``, how many steps
    between neighbouring values fall, rise or stay within the seed spread, and the verdict that
    ``column`` falls at every step (:func:`focalcal_book.verdicts.every_step`)."""
    s = spread(frame, by, column)
    row = {"quantity": name, "first": s["mean"].iloc[0], "last": s["mean"].iloc[-1]}
    if len(s) < 2:
        return {**row, "falls": 0, "rises": 0, "unresolved": 0, "verdict": NOT_RUN}
    steps = falling_steps([g.to_numpy() for _, g in frame.sort_values(by).groupby(by)[column]])
    return {**row, "falls": steps.count(HOLDS), "rises": steps.count(DOES_NOT_HOLD),
            "unresolved": steps.count(NOT_RESOLVED), "verdict": every_step(steps)}


def ece_minimum(focal: pd.DataFrame) -> tuple[str, float]:
    """The paper's "the ECE is lowest at an intermediate gamma": ``(verdict, gamma of the least
    mean ECE)``. With the least at an inner ``gamma`` it holds when every seed there is below
    every seed at both ends (:func:`focalcal_book.verdicts.compare_ranges`); at an end, it does not
    hold when that end is below the runner-up beyond the seed spread; fewer than three ``gamma``:
    :data:`NOT_RUN`."""
    ece = spread(focal, "gamma", "ece")
    best = float(ece["mean"].idxmin())
    by_gamma = {g: v.to_numpy() for g, v in focal.groupby("gamma")["ece"]}
    if len(ece) < 3:
        return NOT_RUN, best
    if best not in (ece.index[0], ece.index[-1]):
        return combine([compare_ranges(by_gamma[best], by_gamma[ece.index[0]]),
                        compare_ranges(by_gamma[best], by_gamma[ece.index[-1]])]), best
    runner_up = ece.drop(best)["mean"].idxmin()
    beats = compare_ranges(by_gamma[best], by_gamma[runner_up])
    return (DOES_NOT_HOLD if beats == HOLDS else NOT_RESOLVED), best


def rank_correlations(focal: pd.DataFrame) -> pd.DataFrame:
    """Spearman's correlation of Tr(H) and ECE over ``gamma`` within each seed (with at least three
    ``gamma``), for the training loss's and the cross-entropy's trace: one row each with
    ``curvature``, ``seeds``, ``low`` and ``high`` (the range over seeds, NaN without seeds) and
    ``sign``: ``"positive"`` / ``"negative"`` when every seed agrees (at least two seeds),
    otherwise :data:`~focalcal_book.verdicts.NOT_RESOLVED`."""
    rows = []
    for key, name in (("loss", "training loss"), ("cross_entropy", "cross-entropy")):
        rhos = [stats.spearmanr(sel[f"{key}_trace"], sel["ece"]).statistic
                for _, sel in focal.groupby("seed") if sel["gamma"].nunique() >= 3]
        lo, hi = (min(rhos), max(rhos)) if rhos else (np.nan, np.nan)
        sign = ("positive" if lo > 0 else "negative" if hi < 0 else NOT_RESOLVED) if len(rhos) >= 2 else NOT_RESOLVED
        rows.append({"curvature": name, "seeds": len(rhos), "low": lo, "high": hi, "sign": sign})
    return pd.DataFrame(rows)


def _seed_dots(ax, frame: pd.DataFrame, by: str, column: str, colour: str, style: str = "-", label=None) -> None:
    s = spread(frame, by, column)
    ax.plot(s.index, s["mean"], style, color=colour, label=label)
    ax.scatter(frame[by], frame[column], s=12, color=colour, alpha=0.6)


def plot_fig2(focal: pd.DataFrame):
    """Their Fig. 2: lambda_max and Tr(H) of the training loss (solid) and the cross-entropy
    (dashed) against ``gamma``, and the test ECE; one dot per seed, a line through the means."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(FIGURE_WIDTH_IN, 2.9))
    for ax, (m, label) in zip(axes, (("lambda_max", r"$\lambda_{\max}(H_{val})$"), ("trace", r"$\mathrm{Tr}(H_{val})$"))):
        for key, style, name in (("loss", "-", "training loss"), ("cross_entropy", "--", "cross-entropy")):
            _seed_dots(ax, focal, "gamma", f"{key}_{m}", color("focal" if key == "loss" else "cross-entropy"),
                       style, name)
        ax.set_yscale("log")
        ax.set_xlabel(r"training $\gamma$")
        ax.set_ylabel(label)
    axes[0].legend()
    _seed_dots(axes[2], focal, "gamma", "ece", color("focal"))
    axes[2].set_xlabel(r"training $\gamma$")
    axes[2].set_ylabel("test ECE")
    fig.tight_layout()
    return fig


def plot_fig3(focal: pd.DataFrame):
    """Their Fig. 3: test ECE against Tr(H) of the training loss and of the cross-entropy, one
    dot per run coloured by ``gamma``."""
    import matplotlib.pyplot as plt

    gammas = sorted(focal["gamma"].unique())
    palette = dict(zip(gammas, gamma_colors(gammas)))
    fig, axes = plt.subplots(1, 2, figsize=(FIGURE_WIDTH_IN * 0.8, 3.0), sharey=True)
    for ax, (key, name) in zip(axes, (("loss", "training loss"), ("cross_entropy", "cross-entropy"))):
        for g in gammas:
            sel = focal[focal["gamma"] == g]
            ax.scatter(sel[f"{key}_trace"], sel["ece"], color=palette[g], s=18, label=f"{g:g}")
        ax.set_xscale("log")
        ax.set_xlabel(rf"$\mathrm{{Tr}}(H_{{val}})$ of the {name}")
    axes[0].set_ylabel("test ECE")
    axes[1].legend(title=r"$\gamma$", ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def plot_fig4(tau_runs: pd.DataFrame):
    """Their Fig. 4: Tr(H) of the cross-entropy and the test ECE against ``tau`` (log axis, 0 drawn
    at the left), one dot per seed, a line through the means."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    fig, axes = plt.subplots(1, 2, figsize=(FIGURE_WIDTH_IN * 0.75, 2.9))
    for ax, (col, label) in zip(axes, (("cross_entropy_trace", r"$\mathrm{Tr}(H_{val})$ of CE"), ("ece", "test ECE"))):
        s = spread(tau_runs, "tau", col)
        x = np.asarray(s.index, dtype=float)
        shown = np.where(x > 0, x, x[x > 0].min() / 10 if (x > 0).any() else 1e-4)
        pos = dict(zip(x, shown))
        ax.plot(shown, s["mean"], "-", color=color("Hessian trace"))
        ax.scatter([pos[t] for t in tau_runs["tau"]], tau_runs[col], s=12, color=color("Hessian trace"), alpha=0.6)
        ax.set_xscale("log")
        ax.set_xticks(shown, ["0" if t == 0 else f"{t:g}" for t in x])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(r"$\tau$ (0 drawn at the left)")
        ax.set_ylabel(label)
    axes[0].set_yscale("log")
    fig.tight_layout()
    return fig
