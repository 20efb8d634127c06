"""A sweep's results as tables: which runs, Komisarenko & Kull's Table 1, comparisons, NLL overfitting.

Every function takes the tidy results table (:func:`focalcal.lab.results.load_results`, one row per
run x post-hoc method) or the per-epoch histories (:func:`focalcal.lab.results.load_histories`)
and returns a :class:`pandas.DataFrame`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._validation import check_choice

__all__ = ["TABLE1_CALIBRATIONS", "RUN_COLUMNS", "describe_runs", "select_losses", "table1", "format_table1",
           "compare_calibrations", "selection_gain", "representative_runs", "nll_overfitting", "overfitting_by_loss", "styled"]

#: Table 1 rows per loss: calibration -> (method of the log-loss column, method of the ECE column)
TABLE1_CALIBRATIONS: dict[str, tuple[str, str]] = {
    "uncalibrated": ("uncalibrated", "uncalibrated"),
    "TS": ("TS (NLL)", "TS (ECE)"),
    "focal TS": ("focal TS (NLL)", "focal TS (ECE)"),
}


#: human headers of :func:`describe_runs`'s columns, for :func:`styled`
RUN_COLUMNS: dict[str, str] = {"dataset": "dataset", "model": "network", "loss_label": "training loss",
                               "runs": "runs", "seeds": "seeds", "epochs": "epochs"}


def describe_runs(results) -> Any:
    """Which runs a table was built from: one row per dataset x model x loss, with the seeds."""
    g = results.drop_duplicates("run").groupby(["dataset", "model", "loss_label"], sort=False)
    out = g.agg(runs=("run", "size"), seeds=("seed", lambda s: ", ".join(map(str, sorted(s)))),
                epochs=("epochs", "max"))
    return out.reset_index()


def select_losses(results, dataset: str | None = None, losses: Sequence[str] | None = None):
    """The rows of ``results`` on ``dataset`` whose ``loss_label`` is in ``losses``, and the loss
    labels in order (``losses``' order, or as they appear)."""
    r = results
    if dataset is not None:
        r = r[r["dataset"] == dataset]
    order = list(dict.fromkeys(r["loss_label"]))
    if losses is not None:
        order = [lo for lo in losses if lo in set(order)]
        r = r[r["loss_label"].isin(order)]
    return r, order


def _mode(values) -> float:
    # most frequent selected gamma_ev over seeds; ties -> the smallest |gamma| (closest to TS)
    counts = values.round(12).value_counts()
    top = counts[counts == counts.max()].index
    return float(sorted(top, key=lambda v: (abs(v), v))[0])


def table1(results, *, dataset: str | None = None, losses: Sequence[str] | None = None):
    """Aggregate a results table into the layout of Komisarenko & Kull (2024), Table 1.

    For each loss (``loss_label``) and calibration of :data:`TABLE1_CALIBRATIONS`, over seeds:
    accuracy, log-loss of the NLL-selected method with its mean temperature and most frequent
    ``gamma_ev``, ECE (15 equal-mass bins) of the ECE-selected method with its mean temperature
    and most frequent ``gamma_ev``; means and sample standard deviations (``ddof=1``; NaN for a
    single seed).

    Parameters
    ----------
    results : DataFrame
        As :func:`load_results` returns (or :func:`focalcal.lab.sweep.collect`).
    dataset : str, optional
        Keep one dataset.
    losses : sequence of str, optional
        ``loss_label`` values to keep, in this order (missing ones are skipped); default: all,
        in the order of the results.

    Returns
    -------
    DataFrame
        One row per loss x calibration with ``dataset``, ``model``, ``loss_label``,
        ``calibration``, ``n_seeds``, ``accuracy_mean``/``_std``, ``nll_mean``/``_std``,
        ``nll_temperature``, ``nll_gamma_ev``, ``ece_mean``/``_std``, ``ece_temperature``,
        ``ece_gamma_ev``.
    """
    import pandas as pd

    r, order = select_losses(results, dataset, losses)
    rows = []
    for label in order:
        sub = r[r["loss_label"] == label]
        for calib, (m_nll, m_ece) in TABLE1_CALIBRATIONS.items():
            a = sub[sub["method"] == m_nll].sort_values("seed")
            b = sub[sub["method"] == m_ece].sort_values("seed")
            if a.empty or b.empty:
                continue
            rows.append({
                "dataset": sub["dataset"].iloc[0], "model": sub["model"].iloc[0], "loss_label": label,
                "calibration": calib, "n_seeds": int(b["seed"].nunique()),
                "accuracy_mean": b["accuracy"].mean(), "accuracy_std": b["accuracy"].std(ddof=1),
                "nll_mean": a["nll"].mean(), "nll_std": a["nll"].std(ddof=1),
                "nll_temperature": a["temperature"].mean(), "nll_gamma_ev": _mode(a["gamma_ev"]),
                "ece_mean": b["ece_mass"].mean(), "ece_std": b["ece_mass"].std(ddof=1),
                "ece_temperature": b["temperature"].mean(), "ece_gamma_ev": _mode(b["gamma_ev"]),
            })
    return pd.DataFrame(rows)


def _pm(mean: float, std: float, digits: int, scale: float = 1.0) -> str:
    s = f"{scale * mean:.{digits}f}"
    if std == std:  # not NaN: more than one seed
        s += f" ± {scale * std:.{digits}f}"
    return s


def format_table1(table, *, percent: bool = True):
    """Table 1 as strings, as K&K print it: accuracy and ECE in % (if ``percent``), mean ± std,
    the selected temperature in brackets, the TS row named after the loss and the focal TS row
    ``+ γ_ev = g`` (the ECE-selected ``gamma_ev``)."""
    import pandas as pd

    scale = 100.0 if percent else 1.0
    unit = " (%)" if percent else ""
    rows = []
    for _, r in table.iterrows():
        if r["calibration"] == "uncalibrated":
            approach = f"{r['loss_label']}, uncalibrated"
        elif r["calibration"] == "TS":
            approach = f"{r['loss_label']} + TS"
        else:
            approach = f"  + focal TS, γ_ev = {r['ece_gamma_ev']:g}"
        t_nll = "" if r["calibration"] == "uncalibrated" else f" ({r['nll_temperature']:.2f})"
        t_ece = "" if r["calibration"] == "uncalibrated" else f" ({r['ece_temperature']:.2f})"
        rows.append({"approach": approach,
                     f"accuracy{unit}": _pm(r["accuracy_mean"], r["accuracy_std"], 2 if percent else 4, scale),
                     "log-loss (T)": _pm(r["nll_mean"], r["nll_std"], 3) + t_nll,
                     f"ECE{unit} (T)": _pm(r["ece_mean"], r["ece_std"], 2 if percent else 4, scale) + t_ece})
    return pd.DataFrame(rows)


def compare_calibrations(table, *, metric: str = "ece", method: str = "focal TS",
                         baseline: str = "TS"):
    """Per loss: ``metric`` (``"ece"``, ``"nll"`` or ``"accuracy"``, mean over seeds) of ``method``
    against ``baseline`` (calibrations of :func:`table1`).

    Returns
    -------
    DataFrame
        One row per loss that has both: ``loss_label``, ``baseline``, ``method``, ``difference``
        (method - baseline), ``lower`` (``difference < 0``), ``relative`` (difference /
        baseline), ``spread`` (the larger of the two standard deviations over seeds; NaN with a
        single seed) and ``resolved`` (``|difference| > spread``; never with a single seed).
    """
    import pandas as pd

    check_choice(metric, "metric", ("ece", "nll", "accuracy"))
    col, std = f"{metric}_mean", f"{metric}_std"
    a = table[table["calibration"] == baseline].set_index("loss_label")
    b = table[table["calibration"] == method].set_index("loss_label")
    both = [lo for lo in a.index if lo in b.index]
    out = pd.DataFrame({"loss_label": both, "baseline": [float(a.loc[lo, col]) for lo in both],
                        "method": [float(b.loc[lo, col]) for lo in both]})
    out["difference"] = out["method"] - out["baseline"]
    out["lower"] = out["difference"] < 0
    out["relative"] = out["difference"] / out["baseline"]
    spread = pd.concat([a[std], b[std]], axis=1).max(axis=1)
    out["spread"] = spread.reindex(both).to_numpy(dtype=float) if both else []
    out["resolved"] = out["difference"].abs() > out["spread"]
    return out


def selection_gain(results, by: str = "run"):
    """Focal TS selected by validation ECE against focal TS selected by validation NLL, per ``by``.

    Komisarenko & Kull (Sec. 5.2) select ``(gamma_ev, T)`` by the validation ECE for their ECE
    column and by the validation log-loss for their log-loss column, and report what the choice
    gains on the test set. ``results``: rows of ``"focal TS (ECE)"`` and ``"focal TS (NLL)"`` with
    ``ece_mass`` and ``nll`` (a sweep's :func:`load_results`, or the released networks' rows with
    ``by="network"``).

    Returns
    -------
    DataFrame
        One row per ``by`` that has both methods, in order of appearance: ``ece_by_ece``,
        ``ece_by_nll`` (test ECE, 15 equal-mass bins, of the two selections), ``nll_by_nll``,
        ``nll_by_ece`` (test NLL), ``ece_gain = 1 - ece_by_ece / ece_by_nll`` and
        ``nll_gain = 1 - nll_by_nll / nll_by_ece`` (relative; positive when each criterion
        wins on its own metric).
    """
    import pandas as pd

    if by not in results.columns:
        raise ValueError(f"by must be a column of results; got {by!r}")
    methods = {"ece": "focal TS (ECE)", "nll": "focal TS (NLL)"}
    cols = ["ece_by_ece", "ece_by_nll", "nll_by_nll", "nll_by_ece", "ece_gain", "nll_gain"]
    wide = results[results["method"].isin(methods.values())].pivot_table(
        index=by, columns="method", values=["ece_mass", "nll"], sort=False)
    need = [(c, m) for c in ("ece_mass", "nll") for m in methods.values()]
    if any(c not in wide.columns for c in need):  # a method has no row at all
        return pd.DataFrame(columns=[by, *cols])
    wide = wide[need].dropna()
    out = pd.DataFrame({"ece_by_ece": wide[("ece_mass", methods["ece"])], "ece_by_nll": wide[("ece_mass", methods["nll"])],
                        "nll_by_nll": wide[("nll", methods["nll"])], "nll_by_ece": wide[("nll", methods["ece"])]})
    out["ece_gain"] = 1 - out["ece_by_ece"] / out["ece_by_nll"]
    out["nll_gain"] = 1 - out["nll_by_nll"] / out["nll_by_ece"]
    return out.reset_index()


def representative_runs(results, *, dataset: str | None = None,
                        losses: Sequence[str] | None = None) -> dict[str, str]:
    """loss_label -> the run id of its smallest seed (one run per loss, for figures)."""
    r, order = select_losses(results, dataset, losses)
    first = r.sort_values(["seed", "run"]).drop_duplicates("loss_label")
    ids = dict(zip(first["loss_label"], first["run"]))
    return {lo: ids[lo] for lo in order}



def nll_overfitting(histories, *, split: str = "test"):
    """Mukhoti et al.'s (2020, Sec. 3, Fig. 2) NLL overfitting, per run.

    Returns
    -------
    DataFrame
        Per run: ``best_epoch`` (least ``split`` NLL), ``nll_min``, ``nll_final``,
        ``nll_rise`` = final - min (> 0: the NLL overfitted), ``error_at_best``, ``error_final``,
        ``error_drop`` = error at best - final (>= 0: the error did not rise meanwhile),
        ``ece_final`` (equal-width, as the trainer records it) and ``overfits``
        (``nll_rise > 0`` and ``error_drop >= 0``: NLL rises while the error does not).
    """
    import pandas as pd

    check_choice(split, "split", ("train", "val", "test"))
    nll_c, err_c, ece_c = f"{split}_nll", f"{split}_error", f"{split}_ece"
    rows = []
    for run, h in histories.groupby("run", sort=False):
        h = h.sort_values("epoch")
        i = h[nll_c].to_numpy().argmin()
        best, last = h.iloc[i], h.iloc[-1]
        rows.append({"run": run, "loss_label": last["loss_label"], "seed": last["seed"],
                     "best_epoch": int(best["epoch"]), "epochs": int(last["epoch"]),
                     "nll_min": float(best[nll_c]), "nll_final": float(last[nll_c]),
                     "error_at_best": float(best[err_c]), "error_final": float(last[err_c]),
                     "ece_final": float(last[ece_c])})
    out = pd.DataFrame(rows)
    if len(out):
        out["nll_rise"] = out["nll_final"] - out["nll_min"]
        out["error_drop"] = out["error_at_best"] - out["error_final"]
        out["overfits"] = (out["nll_rise"] > 0) & (out["error_drop"] >= 0)
    return out


def overfitting_by_loss(overfitting):
    """:func:`nll_overfitting`'s runs summarised per loss, in order of appearance.

    Returns
    -------
    DataFrame
        Indexed by ``loss_label``: the means over seeds of ``best_epoch``, ``nll_min``,
        ``nll_final``, ``nll_rise``, ``error_at_best`` and ``error_final``;
        ``overfitting_seeds`` (runs that overfit the NLL) and ``seeds`` (runs).
    """
    return overfitting.groupby("loss_label", sort=False).agg(
        best_epoch=("best_epoch", "mean"), nll_min=("nll_min", "mean"), nll_final=("nll_final", "mean"),
        nll_rise=("nll_rise", "mean"), error_at_best=("error_at_best", "mean"),
        error_final=("error_final", "mean"), overfitting_seeds=("overfits", "sum"), seeds=("run", "size"))


def styled(frame, columns: Mapping[str, str] | None = None,
           formats: Mapping[str, str | Callable[[Any], str]] | None = None, *, precision: int = 4):
    """``frame`` as a table for a reader: a :class:`pandas.io.formats.style.Styler` without index.

    Parameters
    ----------
    frame : DataFrame
        A named index (e.g. ``loss_label``) becomes the first column(s).
    columns : mapping field -> header, optional
        The columns to show, in this order, under these headers (default: all, as named).
    formats : mapping field -> format, optional
        A format string (``"{:.3f}"``) or a function per column; other floats get ``precision``
        decimals, integers stay integers, booleans read "yes" / "no" and missing values "–".
    precision : int
    """
    f = frame.reset_index() if any(n is not None for n in frame.index.names) else frame
    columns = dict(columns) if columns is not None else {c: c for c in f.columns}
    f = f[list(columns)].rename(columns=columns).rename_axis(columns=None)
    spec: dict[str, Any] = {columns[c]: (lambda v: "yes" if v else "no")
                            for c in columns if f[columns[c]].dtype == bool}
    spec.update({columns[c]: fmt for c, fmt in (formats or {}).items()})
    style = f.style.format(precision=precision, na_rep="–")
    if spec:
        style = style.format(spec, subset=list(spec), na_rep="–")
    # Padding and right-aligned numbers travel with the table (the book's page, JupyterLab and a
    # saved HTML alike): without them neighbouring cells run together ("fashion_mnistcnn").
    numeric = {h: [{"selector": "th, td", "props": "text-align: right"}] for h in f.columns
               if f[h].dtype.kind in "iuf"}
    style = style.set_table_styles(numeric, overwrite=False)
    style = style.set_table_styles([{"selector": "th, td", "props": "padding: 0.25em 0.65em"}], overwrite=False)
    return style.hide(axis="index")
