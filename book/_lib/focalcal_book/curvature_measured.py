"""Kimura & Naganuma (2024) measured: ``book/experiments/curvature_measured.md``.

The sweep's runs with a measured Hessian (focal loss by ``gamma``, cross-entropy plus the trace
penalty by ``tau``, on each network) as one table (:func:`curvature_table`), their figures
(:func:`plot_fig2`, :func:`plot_fig3`, :func:`plot_fig4`, :func:`plot_architectures`) and the
numbers behind the page's verdicts: :func:`trend_row` (a quantity falling at every step,
:func:`focalcal_book.verdicts.falling_steps`), :func:`ece_minimum` (the least ECE at an inner
``gamma``), :func:`rank_correlations` (Tr(H) against ECE within each seed) and
:func:`architecture_rows` (both per network). :data:`RULES` states each claim's test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from focalcal.lab import runfolder
from focalcal.lab.models import MODEL_TITLES
from focalcal.plotting import FIGURE_WIDTH_IN, color, gamma_colors
from focalcal_book.verdicts import (DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_RUN, combine, compare_ranges, every_step,
                                    falling_steps, gate, seed_summary, untrained)

__all__ = ["ARCHITECTURE_COLUMNS", "RULES", "TREND_COLUMNS", "curvature_table", "spread", "trend_row", "ece_minimum",
           "rank_correlations", "gamma_sweeps", "architecture_rows", "cubic_fit", "plot_fig2", "plot_fig3", "plot_fig4",
           "plot_architectures"]

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
    training loss and the cross-entropy, ``<loss|cross_entropy>_<lambda_max|trace|trace_se>``, and
    the ``model`` trained."""
    rows = []
    for rec in results[results["method"] == "uncalibrated"].to_dict("records"):
        cur = runfolder.read_curvature(runfolder.run_path(out, rec["run"]))
        if cur is None:
            continue
        tau = rec.get("param_lamda") if rec["loss"] == "hessian_trace" else 0.0
        rows.append({"run": rec["run"], "model": rec["model"], "loss": rec["loss"], "seed": int(rec["seed"]),
                     "gamma": cur["gamma"],
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


#: the headers of a table of :func:`architecture_rows`
ARCHITECTURE_COLUMNS = {"network": "network", "gammas": "$\\gamma$ trained", "seeds": "seeds",
                        "accuracy": "test accuracy (mean)", "lambda_falls": "$\\lambda_{\\max}$ falls at every step",
                        "best_gamma": "least mean ECE at $\\gamma$", "ece_minimum": "least ECE at an inner $\\gamma$",
                        "trace_at_best": "$\\mathrm{Tr}(H)$ there (mean)"}


def gamma_sweeps(curv: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The runs of :func:`curvature_table` trained with cross-entropy or focal loss, one
    ``gamma`` sweep per network (``model``, in the order they appear; cross-entropy is
    ``gamma = 0``), each sorted by ``gamma`` and seed."""
    sweep = curv[curv["loss"].isin(["ce", "focal"])]
    return {m: sweep[sweep["model"] == m].sort_values(["gamma", "seed"]) for m in dict.fromkeys(sweep["model"])}


def architecture_rows(sweeps: dict[str, pd.DataFrame], n_classes: int) -> list[dict[str, Any]]:
    """Fig. 2's two claims on each network's sweep (:func:`gamma_sweeps`): ``lambda_falls`` (the
    training loss's lambda_max falls at every ``gamma`` step, :func:`trend_row`), ``ece_minimum``
    (:func:`ece_minimum`) with ``best_gamma``, and ``trace_at_best`` (the training loss's mean
    Tr(H) at ``best_gamma``), beside ``network`` (its title), ``gammas``, ``seeds`` (the most at
    one ``gamma``) and the mean test ``accuracy``. A network with a ``gamma`` whose runs did not
    train (:func:`focalcal_book.verdicts.untrained`, the ``gamma`` values as the losses) gets
    :data:`~focalcal_book.verdicts.NOT_TRAINED` for both claims; they are listed in ``untrained``."""
    rows = []
    for model, f in sweeps.items():
        by_gamma = {f"{g:g}": v.to_numpy() for g, v in f.groupby("gamma")["accuracy"]}
        failed = untrained(by_gamma, n_classes)
        ece_verdict, best = ece_minimum(f)
        rows.append({"model": model, "network": MODEL_TITLES.get(model, model),
                     "gammas": ", ".join(by_gamma), "seeds": int(f.groupby("gamma")["seed"].nunique().max()),
                     "accuracy": float(f["accuracy"].mean()), "untrained": failed,
                     "lambda_falls": gate(list(by_gamma), failed, lambda: trend_row(
                         f, "gamma", "loss_lambda_max", "")["verdict"]),
                     "best_gamma": best, "ece_minimum": gate(list(by_gamma), failed, lambda: ece_verdict),
                     "trace_at_best": float(f.loc[f["gamma"] == best, "loss_trace"].mean())})
    return rows


def cubic_fit(trace: np.ndarray, ece: np.ndarray, points: int = 50) -> tuple[np.ndarray, np.ndarray] | None:
    """Their Fig. 3's curve: the least-squares cubic of log ECE in log Tr(H), evaluated at
    ``points`` traces spanning the data; ``None`` with fewer than five runs or four distinct
    traces (a cubic through so few points says nothing)."""
    x, y = np.log10(np.asarray(trace, float)), np.log10(np.asarray(ece, float))
    if len(x) < 5 or len(np.unique(x)) < 4 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return None
    grid = np.linspace(x.min(), x.max(), points)
    return 10 ** grid, 10 ** np.polyval(np.polyfit(x, y, 3), grid)


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


def plot_architectures(sweeps: dict[str, pd.DataFrame]):
    """Their Fig. 3 for every network: test ECE against Tr(H) of the training loss, log-log, one
    dot per run coloured by ``gamma`` (one scale for all panels), and the cubic fit
    (:func:`cubic_fit`) where there are enough runs."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    gammas = sorted({g for f in sweeps.values() for g in f["gamma"].unique()})
    palette = dict(zip(gammas, gamma_colors(gammas)))
    fig, axes = plt.subplots(1, len(sweeps), figsize=(FIGURE_WIDTH_IN * 0.9, 3.0), squeeze=False)
    for ax, (model, f) in zip(axes[0], sweeps.items()):
        for g in sorted(f["gamma"].unique()):
            sel = f[f["gamma"] == g]
            ax.scatter(sel["loss_trace"], sel["ece"], color=palette[g], s=18, label=f"{g:g}")
        fit = cubic_fit(f["loss_trace"].to_numpy(), f["ece"].to_numpy())
        if fit is not None:
            ax.plot(*fit, color="0.4", lw=1, label="cubic fit")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # ticks at 1, 2 and 5 times a power of ten, in plain numbers
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
        ax.set_title(MODEL_TITLES.get(model, model))
        ax.set_xlabel(r"$\mathrm{Tr}(H_{val})$ of the training loss")
    axes[0][0].set_ylabel("test ECE")
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]}
    fig.legend(list(handles.values()), list(handles), title=r"$\gamma$", loc="center left",
               bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig
