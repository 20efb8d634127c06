"""When does focal loss help? The training-length sweep of ``book/experiments/when_focal_helps.md``.

The sweep's ``when_focal_helps`` runs save their validation and test logits after chosen epochs
(``logits_epoch_<n>.pt``, :class:`focalcal.lab.train.TrainSettings` ``logits_epochs``). This
module turns them into one row per run and saved epoch, and into the page's figures and verdicts:

- :func:`sweep_runs`: the runs of a sweep folder that saved logits at chosen epochs;
- :func:`epoch_table`: per run and saved epoch, the TS temperature fitted on the validation
  logits, the test ECE before and after TS, and the temperature that the focal calibration map
  implies on the same logits (the TS map closest to it in the worst case, K&K's criterion);
- :func:`map_predictions`: the temperatures K&K predict for a training ``gamma`` without data
  (Prop. 3's two bounds, their fitted lines of Sec. 3.3);
- :func:`regimes`, :func:`crossing_epochs`, :func:`best_loss_by_epoch`: what the verdicts say;
- :func:`plot_ece_and_temperature`, :func:`plot_temperature_vs_map`: the figures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from focalcal import maps
from focalcal.lab import runfolder
from focalcal.metrics import ece
from focalcal.posthoc import TemperatureScaling
from focalcal_book.verdicts import HOLDS, paired

__all__ = ["PAPER_LINES", "CALIBRATED", "sweep_runs", "map_temperature", "epoch_table", "map_predictions",
           "SUMMARISED", "regimes", "crossing_epochs", "best_loss_by_epoch", "segments",
           "plot_ece_and_temperature", "plot_temperature_vs_map",
           "per_seed_mean", "regime_choice", "in_interval", "cross_entropy_regimes", "focal_early", "regime_choices", "segment_table"]

#: K&K (2024) Sec. 3.3: the least-squares lines ``1/T = a gamma + b`` of the TS map closest to the
#: focal calibration map, as printed, for K = 3 and K = 4 classes (the book's theory chapter
#: ``kk_multiclass`` recomputes them)
PAPER_LINES: dict[int, tuple[float, float]] = {3: (0.64, 0.91), 4: (0.47, 0.85)}

#: a network counts as close to calibrated when its TS temperature lies in this interval
#: (within 20 % of T = 1 on the log scale, both ways)
CALIBRATED: tuple[float, float] = (0.8, 1.25)


def sweep_runs(out: str | Path, results) -> Any:
    """One row per run of ``results`` whose training saved logits at chosen epochs: ``run``,
    ``loss_label``, ``gamma`` (the focal ``gamma``, 0 for other losses), ``seed`` and
    ``logits_epochs`` (a tuple). ``results`` are the rows of the sweep's ``length`` role
    (``focalcal.lab.results.runs_for(out, "length", setting="first")``): the role, not a loss
    label, keeps Mukhoti et al.'s runs out, which save logits at chosen epochs too (their Fig. 1)."""
    import pandas as pd

    from focalcal.lab.results import training_gamma

    rows = []
    for _, r in results.drop_duplicates("run").iterrows():
        config = runfolder.read_config(runfolder.run_path(out, r["run"]))["config"]
        if not config.get("logits_epochs"):
            continue
        gamma = training_gamma(config["loss"], json.loads(config["loss_params"]))
        rows.append({"run": r["run"], "loss_label": r["loss_label"], "gamma": gamma,
                     "seed": int(r["seed"]), "logits_epochs": tuple(config["logits_epochs"])})
    return pd.DataFrame(rows, columns=["run", "loss_label", "gamma", "seed", "logits_epochs"])


def map_temperature(logits: torch.Tensor, gamma: float) -> float:
    """The temperature of the TS map closest, in the worst case over ``logits`` and classes, to
    the focal calibration map with ``gamma`` (K&K's criterion of Sec. 3.3, on these logits)."""
    from focalcal_book.theory import minimax_inverse_temperature

    z = logits.to(torch.float64)
    b, _ = minimax_inverse_temperature(z, maps.focal_map_from_logits(z, gamma),
                                       bounds=(0.5, gamma + 1.5), n_scan=32)
    return 1.0 / b


def epoch_table(out: str | Path, runs, *, n_bins: int = 15) -> Any:
    """One row per run of ``runs`` (:func:`sweep_runs`) and saved epoch.

    Columns: those of ``runs`` but ``logits_epochs``; ``epoch``; ``train_accuracy`` (on the
    epoch's training batches, from the run's history); ``test_accuracy``; ``temperature`` (TS
    fitted by NLL on the validation logits, :class:`focalcal.posthoc.TemperatureScaling`);
    ``test_ece`` and ``test_ece_ts`` (``n_bins`` equal-width bins, before and after that TS);
    ``map_temperature`` (:func:`map_temperature` of the validation logits with the run's
    ``gamma``; NaN for ``gamma = 0``).
    """
    import pandas as pd

    rows = []
    for _, r in runs.iterrows():
        run_dir = runfolder.run_path(out, r["run"])
        history = {h["epoch"]: h for h in runfolder.read_history(run_dir)}
        for epoch in r["logits_epochs"]:
            blob = runfolder.read_logits(run_dir, epoch)
            ts = TemperatureScaling().fit(blob["val_logits"], blob["val_labels"])
            z, y = blob["test_logits"], blob["test_labels"]
            rows.append({
                "run": r["run"], "loss_label": r["loss_label"], "gamma": r["gamma"], "seed": r["seed"],
                "epoch": int(epoch), "train_accuracy": float(history[epoch]["train_accuracy"]),
                "test_accuracy": float((z.argmax(-1) == y).float().mean()),
                "temperature": float(ts.temperature_),
                "test_ece": float(ece(logits=z, labels=y, n_bins=n_bins)),
                "test_ece_ts": float(ece(probs=ts.predict_proba(z), labels=y, n_bins=n_bins)),
                "map_temperature": (map_temperature(blob["val_logits"], r["gamma"]) if r["gamma"] > 0
                                    else math.nan)})
    return pd.DataFrame(rows)


def map_predictions(gammas: Sequence[float]) -> Any:
    """Per training ``gamma``: Prop. 3's temperatures ``T1 = 1/(gamma+1)`` and
    ``T2 = 1/(gamma+1-log(gamma+1)/2)`` (:func:`focalcal.maps.ts_bounds`) and the temperatures of
    K&K's fitted lines (:data:`PAPER_LINES`) as columns ``T_K3``, ``T_K4``; indexed by gamma."""
    import pandas as pd

    rows = []
    for g in gammas:
        t1, t2 = maps.ts_bounds(float(g))
        rows.append({"gamma": float(g), "T1": t1, "T2": t2,
                     **{f"T_K{k}": 1.0 / (a * g + b) for k, (a, b) in PAPER_LINES.items()}})
    return pd.DataFrame(rows).set_index("gamma")


#: the columns the page summarises over seeds, per loss and saved epoch
SUMMARISED = ("temperature", "test_ece", "test_ece_ts", "map_temperature")


def regimes(table, *, early_below: float = 0.9, late_from: float = 0.99) -> dict[str, Any]:
    """Which saved epochs count as short and as long training, read off cross-entropy.

    Short: the saved epochs at which cross-entropy's mean training accuracy (over seeds, on the
    epoch's training batches) is below ``early_below`` (at least the first saved epoch); long:
    those at which it reaches ``late_from`` (the last saved epoch if it never does; then
    ``"late_reached"`` is false). Returns ``early`` and ``late`` (lists of epochs),
    ``late_reached`` and the accuracies ``acc`` (a Series indexed by epoch).
    """
    ce = table[table["gamma"] == 0]
    acc = ce.groupby("epoch")["train_accuracy"].mean().sort_index()
    epochs = list(acc.index)
    early = [e for e in epochs if acc[e] < early_below] or epochs[:1]
    late = [e for e in epochs if acc[e] >= late_from]
    reached = bool(late)
    return {"early": early, "late": late if reached else epochs[-1:], "late_reached": reached,
            "acc": acc}


def crossing_epochs(table, *, column: str = "test_ece") -> Any:
    """Per focal ``gamma``: from which saved epoch on its ``column`` is below cross-entropy's.

    ``mean_from``: the first saved epoch from which, at it and at every later saved epoch, the
    mean over seeds is lower than cross-entropy's (NaN if not even at the last one);
    ``every_seed_from``: the same with the focal run lower than the cross-entropy run of the same
    seed for every seed. Indexed by ``loss_label``, with ``gamma``.
    """
    import pandas as pd

    ce = table[table["gamma"] == 0].set_index(["seed", "epoch"])[column]
    rows = []
    for (label, gamma), f in table[table["gamma"] > 0].groupby(["loss_label", "gamma"], sort=False):
        f = f.set_index(["seed", "epoch"])[column]
        diff = (f - ce.reindex(f.index)).unstack("seed").sort_index()
        rows.append({"loss_label": label, "gamma": gamma,
                     "mean_from": _lower_from(diff.mean(axis=1) < 0),
                     "every_seed_from": _lower_from((diff < 0).all(axis=1))})
    return pd.DataFrame(rows).set_index("loss_label")


def _lower_from(lower) -> float:
    # the first epoch of the trailing run of True values
    epochs, flags = list(lower.index), list(lower.to_numpy())
    start = math.nan
    for e, ok in zip(reversed(epochs), reversed(flags)):
        if not ok:
            break
        start = e
    return float(start)


def best_loss_by_epoch(summary, *, column: str = "test_ece_mean") -> Any:
    """Per saved epoch, the loss with the least ``column`` (a Series of labels indexed by epoch)."""
    best = summary.loc[summary.groupby("epoch")[column].idxmin()]
    return best.set_index("epoch")["loss_label"].sort_index()


def _styles(labels: Sequence[str]) -> dict[str, tuple[str, Any]]:
    # the experiment chapters' one colour per loss (focal gammas share it, with their own line style)
    from focalcal.lab.results.figures import loss_styles

    return loss_styles(labels)


def _log_axes(ax, epochs: Sequence[int], *, log_y: bool) -> None:
    # log scales labelled with plain numbers: the saved epochs on x, a few temperatures on y
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(sorted(int(e) for e in epochs)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(ScalarFormatter())
    if log_y:
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        ticks = [t for t in (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0)
                 if lo <= t <= hi]
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(ScalarFormatter())


def plot_ece_and_temperature(summary):
    """Two panels against the saved epochs: test ECE per loss (mean over seeds, with the range of
    the seeds shaded) and the TS temperature per loss (log scale, ``T = 1`` marked)."""
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(summary["loss_label"]))
    styles = _styles(labels)
    fig, (ax_e, ax_t) = plt.subplots(1, 2, figsize=(8.4, 3.4))
    for lo in labels:
        s = summary[summary["loss_label"] == lo].sort_values("epoch")
        c, ls = styles[lo]
        for ax, col, scale in ((ax_e, "test_ece", 100.0), (ax_t, "temperature", 1.0)):
            ax.plot(s["epoch"], scale * s[f"{col}_mean"], color=c, ls=ls, marker="o", ms=3, label=lo)
            ax.fill_between(s["epoch"], scale * s[f"{col}_min"], scale * s[f"{col}_max"], color=c,
                            alpha=0.12, lw=0)
    ax_t.axhline(1.0, color="k", lw=0.8, ls=":")
    ax_t.axhspan(*CALIBRATED, color="0.9", zorder=0, label="close to calibrated")
    epochs = sorted(summary["epoch"].unique())
    for ax, log_y in ((ax_e, False), (ax_t, True)):
        _log_axes(ax, epochs, log_y=log_y)
        ax.set_xlabel("training epochs")
    ax_e.set_ylabel("test ECE (%), 15 equal-width bins")
    ax_t.set_ylabel("TS temperature (validation NLL)")
    ax_e.legend()
    ax_t.legend(loc="upper left")
    fig.tight_layout()
    return fig


def plot_temperature_vs_map(summary, predictions):
    """One panel per focal ``gamma``: the fitted TS temperature against the saved epochs (mean and
    range over seeds), the map's closest TS on the same logits (dotted), Prop. 3's two bounds
    (a band) and K&K's fitted lines (dashed, one per class count)."""
    import matplotlib.pyplot as plt

    focal = summary[summary["gamma"] > 0]
    gammas = list(dict.fromkeys(focal["gamma"]))
    if not gammas:
        return None
    styles = _styles(list(dict.fromkeys(summary["loss_label"])))
    fig, axes = plt.subplots(1, len(gammas), figsize=(min(8.4, 2.9 * len(gammas) + 0.4), 3.7),
                             sharey=True, squeeze=False)
    for ax, g in zip(axes[0], gammas):
        s = focal[focal["gamma"] == g].sort_values("epoch")
        label = s["loss_label"].iloc[0]
        c, ls = styles[label]
        p = predictions.loc[g]
        ax.axhspan(p["T1"], p["T2"], color="0.85", label="Prop. 3 bounds")
        for k, dash in zip(PAPER_LINES, ((0, (5, 2)), (0, (2, 2)))):
            ax.axhline(p[f"T_K{k}"], color="0.3", lw=1.2, ls=dash, label=f"K&K line, K = {k}")
        ax.plot(s["epoch"], s["temperature_mean"], color=c, ls=ls, marker="o", ms=3, label="fitted TS")
        ax.fill_between(s["epoch"], s["temperature_min"], s["temperature_max"], color=c, alpha=0.15, lw=0)
        ax.plot(s["epoch"], s["map_temperature_mean"], color=c, lw=1.2, marker="x", ms=5,
                label="focal map on these logits")
        ax.axhline(1.0, color="k", lw=0.8, ls=":")
        ax.set_title(label)
        ax.set_xlabel("training epochs")
    axes[0][0].set_ylabel("temperature")
    for ax in axes[0]:
        _log_axes(ax, sorted(focal["epoch"].unique()), log_y=True)
    # below the panels: a legend beside them would widen the figure past the page's column
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=3)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig


def per_seed_mean(table, label: str, epochs: Sequence[int], column: str) -> np.ndarray:
    """Per seed, the mean of ``column`` over ``epochs`` for the loss ``label``."""
    t = table[(table["loss_label"] == label) & table["epoch"].isin(list(epochs))]
    return t.groupby("seed")[column].mean().to_numpy()


def regime_choice(table, epochs: Sequence[int], column: str = "test_ece") -> dict[str, Any]:
    """Which loss has the least ``column`` averaged over ``epochs``.

    Per loss, the per-seed means over ``epochs`` (:func:`per_seed_mean`); ``best`` and
    ``runner_up`` by the mean over seeds; ``resolved``: the best is lower than the runner-up for
    every seed (seeds paired by number, :func:`focalcal_book.verdicts.paired`; false with one
    seed). Returns those plus ``values`` (label -> per-seed array, in the table's loss order).
    """
    labels = list(dict.fromkeys(table["loss_label"]))
    values = {lab: per_seed_mean(table, lab, epochs, column) for lab in labels}
    order = sorted(labels, key=lambda lab: float(values[lab].mean()))
    best = order[0]
    runner_up = order[1] if len(order) > 1 else None
    resolved = runner_up is not None and paired(values[best] - values[runner_up]) == HOLDS
    return {"best": best, "runner_up": runner_up, "resolved": resolved, "values": values}


def in_interval(values: Sequence[float] | np.ndarray, bounds: tuple[float, float]) -> bool:
    """Whether every value lies in the closed interval ``bounds``."""
    v = np.asarray(values, dtype=float)
    return bool(np.all((v >= bounds[0]) & (v <= bounds[1])))


def segments(best) -> list[tuple[str, int, int]]:
    """A Series of labels indexed by epoch (:func:`best_loss_by_epoch`) as runs of equal labels:
    ``[(label, first_epoch, last_epoch), ...]``."""
    out: list[tuple[str, int, int]] = []
    for epoch, label in best.items():
        if out and out[-1][0] == label:
            out[-1] = (label, out[-1][1], int(epoch))
        else:
            out.append((label, int(epoch), int(epoch)))
    return out


def cross_entropy_regimes(table, regime: Mapping[str, Any]) -> dict[str, Any]:
    """"Is cross-entropy close to calibrated early and over-confident late?" on an
    :func:`epoch_table` with its :func:`regimes` ``regime``.

    Per seed, cross-entropy's TS temperature averaged over the short- and over the long-training
    epochs (``early``, ``late``: arrays); ``calibrated``: every early one within
    :data:`CALIBRATED`; ``over``: every late one above its upper end; ``early_accuracy`` (the
    largest) and ``late_accuracy`` (the least) training accuracy of those epochs, in %.
    """
    ce = table.loc[table["gamma"] == 0, "loss_label"].iloc[0]
    early = per_seed_mean(table, ce, regime["early"], "temperature")
    late = per_seed_mean(table, ce, regime["late"], "temperature")
    acc = regime["acc"]
    return {"early": early, "late": late, "calibrated": in_interval(early, CALIBRATED),
            "over": bool(np.all(late > CALIBRATED[1])),
            "early_accuracy": 100 * float(acc[regime["early"]].max()),
            "late_accuracy": 100 * float(acc[regime["late"]].min())}


def focal_early(table, predictions, epochs: Sequence[int]) -> Any:
    """"Is focal loss under-confident early, by about its map's temperature?": one row per focal
    loss of an :func:`epoch_table`, from its per-seed TS temperatures averaged over ``epochs``.

    Columns ``loss_label``, ``gamma``, ``fitted`` (mean and range over seeds, as text),
    ``under`` (every seed below :data:`CALIBRATED`'s lower end), ``implied`` (the map's temperature
    on the same logits, mean over seeds), ``ratio`` (fitted over implied, of the means), ``near``
    (the ratio within :data:`CALIBRATED`), ``t1``, ``t2`` (Prop. 3's band, from ``predictions``,
    :func:`map_predictions`), ``in_band`` (the fitted mean inside it), ``line_lo``, ``line_hi``
    (K&K's two fitted lines).
    """
    import pandas as pd

    from focalcal_book.verdicts import spread_text

    rows = []
    for g in sorted(x for x in table["gamma"].unique() if x > 0):
        label = table.loc[table["gamma"] == g, "loss_label"].iloc[0]
        fitted = per_seed_mean(table, label, epochs, "temperature")
        implied = per_seed_mean(table, label, epochs, "map_temperature")
        p = predictions.loc[g]
        ratio = float(fitted.mean() / implied.mean())
        rows.append({"loss_label": label, "gamma": float(g), "fitted": spread_text(fitted),
                     "under": bool(np.all(fitted < CALIBRATED[0])), "implied": float(implied.mean()),
                     "ratio": ratio, "near": CALIBRATED[0] <= ratio <= CALIBRATED[1],
                     "t1": float(p["T1"]), "t2": float(p["T2"]),
                     "in_band": bool(p["T1"] <= fitted.mean() <= p["T2"]),
                     "line_lo": float(min(p["T_K3"], p["T_K4"])), "line_hi": float(max(p["T_K3"], p["T_K4"]))})
    return pd.DataFrame(rows)


def regime_choices(table, regime: Mapping[str, Any], column: str = "test_ece") -> Any:
    """"When to use which": per regime (short and long training, :func:`regimes`), the loss of
    least ``column`` averaged over its epochs (:func:`regime_choice`). Columns ``regime``,
    ``epochs`` (text), ``best``, ``best_value`` and ``runner_up_value`` (mean and range over
    seeds, in %), ``runner_up``, ``resolved`` (the best below the runner-up on every seed)."""
    import pandas as pd

    from focalcal_book.verdicts import spread_text

    rows = []
    for name, epochs in (("short", regime["early"]), ("long", regime["late"])):
        c = regime_choice(table, epochs, column)
        runner = c["runner_up"]
        rows.append({"regime": name, "epochs": ", ".join(str(int(e)) for e in epochs), "best": c["best"],
                     "best_value": spread_text(c["values"][c["best"]], scale=100.0),
                     "runner_up": runner or "–",
                     "runner_up_value": spread_text(c["values"][runner], scale=100.0) if runner else "–",
                     "resolved": bool(c["resolved"])})
    return pd.DataFrame(rows)


def segment_table(segs: Sequence[tuple[str, int, int]]) -> Any:
    """:func:`segments` as a table: ``loss_label``, ``first_epoch``, ``last_epoch``."""
    import pandas as pd

    return pd.DataFrame(list(segs), columns=["loss_label", "first_epoch", "last_epoch"])
