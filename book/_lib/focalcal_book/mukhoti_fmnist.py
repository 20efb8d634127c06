"""Mukhoti et al. (2020) on Fashion-MNIST: ``book/experiments/mukhoti_fmnist.md``.

The sweep's runs of Mukhoti et al.'s losses (:data:`LOSSES`) turned into their tables, their
mechanism figures and the verdicts on their qualitative claims:

- :func:`select_runs`, :func:`missing_losses`: the runs of :data:`LOSSES` in a results table;
- :func:`protocol_table`, :func:`range_cells` (of :func:`focalcal_book.verdicts.seed_summary`):
  their Tables 1-2, 4-7 and 9-12 quantities with their temperature protocol
  (:func:`focalcal.lab.results.released.mukhoti_row`) beside K&K's temperatures of ``results.csv``;
- :func:`prefix_histories`: per-epoch records on one evaluation subset at every epoch, and the
  per-seed numbers behind each verdict (:func:`nll_rise`, :func:`rise`, :func:`final_stat`, ...);
- :func:`failed_losses`: the failed-experiment rule (:func:`focalcal_book.verdicts.untrained`) on a
  :func:`protocol_table`; every claim helper below takes its list as ``failed`` and answers
  :data:`~focalcal_book.verdicts.NOT_TRAINED` for a part about such a loss, without computing it;
- :func:`compare_seeds`, :func:`against_baseline`, :func:`every_epoch`, :func:`ordered`,
  :func:`lowest_cases`, :func:`near_one_verdict`, :func:`at_least_verdict`,
  :func:`rise_after_drop`: the verdicts, each with its evidence as a table (the rules are
  :mod:`focalcal_book.verdicts`'s);
- :func:`label_smoothing_table`, :func:`label_smoothing_choice`: their choice of label smoothing
  0.05 over 0.1 (Sec. 5.1), from the "ablation" role's runs;
- :data:`RULES`, :func:`claims`: every claim of the page, its rule, verdict and evidence; and the
  figures (``plot_*``: Figs. 1-4 and 10).

Seeds are paired by number: two runs with the same seed start from the same weights and see the
same training images in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from focalcal.lab import profiles, runfolder
from focalcal_book.verdicts import (DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_RUN, NOT_TRAINED, TRAINED_FRACTION,
                                    combine, compare_ranges, every_step, gate, majority, paired, spread_text,
                                    untested, untrained)

__all__ = ["LOSSES", "FIG3", "CE", "FL3", "FLSD53", "TABLE1_COLUMNS", "NEAR_ONE", "BASELINE_T_LOW",
           "TRAIN_BINS", "select_runs", "missing_losses", "protocol_table",
           "range_cells", "failed_losses",
           "prefix_histories", "late_epochs", "nll_rise", "rise", "late_mean", "final_stat", "grad_norm_medians",
           "compare_seeds", "against_baseline", "LS_005", "LS_01", "label_smoothing_table", "label_smoothing_choice", "every_epoch", "ordered", "lowest_cases", "near_one_verdict",
           "at_least_verdict", "rise_after_drop", "scaled_epochs", "plot_split_curves", "plot_band_curves",
           "plot_grad_norm_hists", "plot_train_reliability", "RULES", "ECE_CASES", "claims"]


def _find(name: str, gamma: float | None = None) -> str:
    """The label of the loss ``name`` (with focal ``gamma``) in :data:`focalcal.lab.sweep.FMNIST_LOSSES`."""
    for lo in profiles.FMNIST_LOSSES:
        if lo.name == name and (gamma is None or dict(lo.params).get("gamma") == gamma):
            return lo.display
    raise ValueError(f"no loss {name!r} (gamma={gamma}) in profiles.FMNIST_LOSSES")


#: cross-entropy, focal loss with gamma = 3 and FLSD-53, as the sweep labels them
CE, FL3, FLSD53 = _find("ce"), _find("focal", 3.0), _find("flsd53")
#: Mukhoti et al.'s Fig. 3 losses: cross-entropy and focal loss with gamma = 1, 2, 3
FIG3: tuple[str, ...] = tuple(lo.display for lo in profiles.FIG3_LOSSES)
#: the columns of Mukhoti et al.'s Tables 1-2 (cross-entropy, Brier, MMCE, LS-0.05, FLSD-53)
TABLE1_COLUMNS: tuple[str, ...] = (CE, _find("brier"), _find("mmce"), _find("label_smoothing"), FLSD53)
#: label smoothing as Mukhoti et al. report it (alpha = 0.05) and the other value they tried (0.1)
LS_005, LS_01 = _find("label_smoothing"), profiles.LABEL_SMOOTHING_01.display
#: Mukhoti et al.'s losses in the order of their tables: the baselines, the focal losses of their
#: Tables 4-7 (with FL-5, which the book's other pages compare), then dual focal loss
LOSSES: tuple[str, ...] = (TABLE1_COLUMNS[:4] + FIG3[1:]
                           + (_find("focal", 5.0), _find("flsc531"), FLSD53, _find("flsd532"), _find("dual_focal")))

#: a temperature is "near 1" when |T - 1| <= NEAR_ONE: Mukhoti et al.'s own band for FLSD-53 ("mostly
#: lying between 0.9 and 1.1", one step of their 0.1 grid either side)
NEAR_ONE = 0.1
#: Mukhoti et al.'s optimal temperatures of cross-entropy and MMCE lie "between 2.0 to 2.8" (Sec. 5.1):
#: a temperature is as high as theirs from this lower end on (the paper's threshold)
BASELINE_T_LOW = 2.0
#: confidence bins of Mukhoti et al.'s Fig. 1 (training-set reliability diagrams)
TRAIN_BINS = 25


# --------------------------------------------------------------------------------------------
# runs and tables
# --------------------------------------------------------------------------------------------

def select_runs(results, losses: Sequence[str] = LOSSES):
    """The rows of ``results`` of the runs of ``losses`` (by label); ``results`` holds one data set
    and network, e.g. ``focalcal.lab.results.runs_for(out, "comparison", setting="first")``."""
    return results[results["loss_label"].isin(list(losses))]


def missing_losses(results, losses: Sequence[str] = LOSSES) -> list[str]:
    """The labels of ``losses`` with no run in ``results`` (already :func:`select_runs`-ed or not)."""
    present = set(select_runs(results, losses)["loss_label"])
    return [lo for lo in losses if lo not in present]


def protocol_table(out: str | Path, results):
    """One row per run of ``results``: Mukhoti et al.'s quantities and K&K's temperatures.

    Columns: ``run``, ``loss_label``, ``seed``; every key of
    :func:`focalcal.lab.results.released.mukhoti_row` (fractions; ``temperature`` on the grid
    0.1, ..., 10 by the validation ECE with 15 equal-width bins, then the test set); and from the
    run's ``results.csv`` rows (K&K's protocol): ``kk_t_nll`` and ``kk_t_ece`` (the "TS (NLL)" and
    "TS (ECE)" temperatures) and ``kk_ece`` (test ECE, 15 equal-mass bins, after "TS (ECE)").
    """
    import pandas as pd

    from focalcal.lab.results import load_run
    from focalcal.lab.results.released import FitEval, mukhoti_row

    rows = []
    by_method = results.set_index(["run", "method"])
    for run_id, r in results.drop_duplicates("run").set_index("run").iterrows():
        run = load_run(runfolder.run_path(out, run_id))
        row = mukhoti_row(FitEval(run.val_logits, run.val_labels, run.test_logits, run.test_labels,
                                  "validation / test"))
        rows.append({"run": run_id, "loss_label": r["loss_label"], "seed": int(r["seed"]), **row,
                     "kk_t_nll": float(by_method.loc[(run_id, "TS (NLL)"), "temperature"]),
                     "kk_t_ece": float(by_method.loc[(run_id, "TS (ECE)"), "temperature"]),
                     "kk_ece": float(by_method.loc[(run_id, "TS (ECE)"), "ece_mass"])})
    return pd.DataFrame(rows)


def range_cells(summary, columns: Mapping[str, tuple[float, int]]):
    """``summary`` (:func:`focalcal_book.verdicts.seed_summary`) as HTML cells: the mean over seeds,
    and below it in small print the least and the largest seed (nothing below with one seed).

    ``columns``: column -> ``(scale, decimals)`` (``100, 2`` for a percentage). Returns a DataFrame
    indexed by ``loss_label`` with one text column per entry of ``columns``.
    """
    import pandas as pd

    def cell(r, c: str, scale: float, digits: int) -> str:
        m, lo, hi = (scale * r[f"{c}_{s}"] for s in ("mean", "min", "max"))
        if np.isnan(m):
            return "&ndash;"
        below = "" if r["seeds"] < 2 else (
            f'<br><span style="font-size:0.8em;color:#57606a;white-space:nowrap">'
            f"{lo:.{digits}f}&ndash;{hi:.{digits}f}</span>")
        return f"{m:.{digits}f}{below}"

    return pd.DataFrame({c: [cell(r, c, s, d) for _, r in summary.iterrows()] for c, (s, d) in columns.items()},
                        index=summary.index)


# --------------------------------------------------------------------------------------------
# per-epoch records
# --------------------------------------------------------------------------------------------

_STATS = ("nll", "nll_correct", "nll_incorrect", "entropy", "entropy_correct", "entropy_incorrect",
          "accuracy", "error", "confidence", "ece", "n")


def prefix_histories(out: str | Path, histories):
    """``histories`` (:func:`focalcal.lab.results.load_histories`) with the validation and test
    records of every epoch on the same images.

    A run with ``record_subset`` evaluates validation and test on their first ``record_subset``
    images at most epochs, but on all of them at the epochs whose logits it saves (the last one,
    and ``logits_epochs``). Mixing the two would put a step into every curve, so at those epochs
    the ``val_*`` and ``test_*`` statistics (:func:`focalcal.lab.records.prediction_stats`) are
    recomputed from the saved logits on the first ``record_subset`` images, the subset of the other
    epochs (the evaluation loaders are not shuffled). ``feature_norm`` stays as recorded (the
    features were not saved). Adds a column ``recomputed`` (bool).
    """
    from focalcal.lab.records import prediction_stats

    h = histories.copy()
    h["recomputed"] = False
    for run_id, rows in h.groupby("run", sort=False):
        run_dir = runfolder.run_path(out, run_id)
        config = runfolder.read_config(run_dir)["config"]
        subset = int(config.get("record_subset") or 0)
        last = int(rows["epoch"].max())
        for i, r in rows.iterrows():
            if not subset or r["test_n"] <= subset:
                continue
            blob = runfolder.logits_after(run_dir, int(r["epoch"]), last)
            if blob is None:
                continue
            for split in ("val", "test"):
                stats = prediction_stats(blob[f"{split}_logits"][:subset], blob[f"{split}_labels"][:subset])
                for k in _STATS:
                    h.loc[i, f"{split}_{k}"] = np.nan if stats[k] is None else stats[k]
            h.loc[i, "recomputed"] = True
    return h


def late_epochs(history) -> list[int]:
    """The epochs of one run's ``history`` (rows of one run) trained at its final learning rate
    (after the schedule's last drop; all epochs for a constant rate)."""
    lr = history["lr"].to_numpy()
    return [int(e) for e, v in zip(history["epoch"], lr) if np.isclose(v, lr[-1], rtol=1e-6)]


def nll_rise(histories, split: str = "test"):
    """Per run: the rise of ``split``'s NLL from its least value to the final epoch
    (:func:`focalcal.lab.results.nll_overfitting`); columns ``loss_label``, ``seed``, ``nll_rise``,
    ``best_epoch``."""
    from focalcal.lab.results import nll_overfitting

    return nll_overfitting(histories, split=split)[["loss_label", "seed", "nll_rise", "best_epoch"]]


def late_mean(histories, column: str):
    """Per run: the mean of ``column`` over its :func:`late_epochs`; columns ``loss_label``,
    ``seed``, ``column``."""
    import pandas as pd

    rows = []
    for _, h in histories.groupby("run", sort=False):
        h = h.sort_values("epoch")
        late = h[h["epoch"].isin(late_epochs(h))]
        rows.append({"loss_label": h["loss_label"].iloc[0], "seed": int(h["seed"].iloc[0]),
                     column: float(late[column].mean())})
    return pd.DataFrame(rows, columns=["loss_label", "seed", column])


def final_stat(out: str | Path, results, stat: str, split: str = "test"):
    """Per run of ``results``: ``stat`` of :func:`focalcal.lab.records.prediction_stats` on the
    run's final ``split`` logits (all of them); columns ``loss_label``, ``seed``, ``stat``."""
    import pandas as pd

    from focalcal.lab.records import prediction_stats

    rows = []
    for _, r in results.drop_duplicates("run").iterrows():
        blob = runfolder.read_logits(runfolder.run_path(out, r["run"]))
        v = prediction_stats(blob[f"{split}_logits"], blob[f"{split}_labels"])[stat]
        rows.append({"loss_label": r["loss_label"], "seed": int(r["seed"]),
                     stat: np.nan if v is None else float(v)})
    return pd.DataFrame(rows, columns=["loss_label", "seed", stat])


# --------------------------------------------------------------------------------------------
# verdicts
# --------------------------------------------------------------------------------------------

def compare_seeds(values, column: str, lower: str, higher: str) -> dict[str, Any]:
    """Whether ``column`` is lower for the loss ``lower`` than for ``higher``, seed by seed.

    ``values``: rows ``loss_label``, ``seed``, ``column``. Seeds are paired by number; the verdict
    is :func:`focalcal_book.verdicts.paired`'s (:data:`NOT_RUN` without a shared seed). Returns
    ``verdict``, ``agree`` and ``pairs`` (counts), ``lower_range`` and ``higher_range`` (least and
    largest seed) and ``separate`` (the two ranges do not overlap).
    """
    def per_seed(label: str):
        return values[values["loss_label"] == label].set_index("seed")[column]

    a, b = per_seed(lower), per_seed(higher)
    seeds = sorted(set(a.index) & set(b.index))
    if not seeds:
        return {"verdict": NOT_RUN, "agree": 0, "pairs": 0, "lower_range": (np.nan, np.nan),
                "higher_range": (np.nan, np.nan), "separate": False}
    a, b = a.loc[seeds].to_numpy(dtype=float), b.loc[seeds].to_numpy(dtype=float)
    ra, rb = (float(a.min()), float(a.max())), (float(b.min()), float(b.max()))
    # strictly apart either way; min_seeds=1: a description of the ranges, not a verdict
    separate = HOLDS in (compare_ranges(a, b, min_seeds=1), compare_ranges(b, a, min_seeds=1))
    return {"verdict": paired(a - b), "agree": int(np.sum(a < b)), "pairs": len(seeds), "lower_range": ra,
            "higher_range": rb, "separate": separate}


def failed_losses(table, n_classes: int, *, fraction: float = TRAINED_FRACTION) -> list[str]:
    """The losses of ``table`` (:func:`protocol_table`: ``loss_label``, ``error``) whose networks
    did not train: :func:`focalcal_book.verdicts.untrained` on each seed's test accuracy."""
    accuracy = (1.0 - table["error"]).groupby(table["loss_label"], sort=False).apply(list).to_dict()
    return untrained(accuracy, n_classes, fraction=fraction)


def _range(values, column: str, label: str, digits: int) -> str:
    v = values.loc[values["loss_label"] == label, column].dropna()
    return spread_text(v, digits=digits, mean=False) if len(v) else "–"


def _evidence(rows: list[dict[str, Any]]):
    import pandas as pd

    return pd.DataFrame(rows, columns=["part", "values", "against", "agree", "verdict"])


def _untested(loss: str, present: set[str], failed: Sequence[str], baseline: str = CE) -> str | None:
    """The verdict of a part comparing ``loss`` with ``baseline`` that cannot be computed:
    :data:`NOT_RUN` without the runs of either, :data:`NOT_TRAINED` when either did not train;
    ``None`` when the part can be judged."""
    if loss not in present or baseline not in present:
        return NOT_RUN
    if {loss, baseline} & set(failed):
        return NOT_TRAINED
    return None


def against_baseline(values, column: str, losses: Sequence[str], *, higher: bool = False,
                     failed: Sequence[str] = (), digits: int = 3, baseline: str = CE):
    """Mukhoti et al.'s "focal loss has a lower (``higher=True``: higher) ``column`` than
    cross-entropy" (the default ``baseline``; or than another), one part per loss of ``losses``,
    seeds paired by number (:func:`compare_seeds`).

    A part is :data:`NOT_RUN` when the loss or cross-entropy has no row and :data:`NOT_TRAINED`
    (not computed) when either is in ``failed``; the parts are joined by
    :func:`focalcal_book.verdicts.combine`. Returns ``(verdict, evidence)``: ``evidence`` has one
    row per part, ``part`` (the loss), ``values`` and ``against`` (the seed ranges of the loss and
    of cross-entropy), ``agree`` (seeds agreeing with the claim, of the pairs) and ``verdict``.
    """
    present = set(values["loss_label"])
    rows, parts = [], []
    for lo in losses:
        v, agree = _untested(lo, present, failed, baseline), "–"
        if v is None:
            c = (compare_seeds(values, column, baseline, lo) if higher
                 else compare_seeds(values, column, lo, baseline))
            v, agree = c["verdict"], f"{c['agree']} of {c['pairs']}"
        parts.append(v)
        rows.append({"part": lo if baseline == CE else f"{lo} vs {baseline}", "values": _range(values, column, lo, digits),
                     "against": _range(values, column, baseline, digits), "agree": agree, "verdict": v})
    return combine(parts) if parts else NOT_RUN, _evidence(rows)


def label_smoothing_table(out: str | Path, table, ablation):
    """:func:`protocol_table` rows of label smoothing 0.05 (from the comparison's ``table``) and 0.1
    (computed for the runs of ``ablation``, e.g. ``runs_for(out, "ablation", setting="first")``)."""
    import pandas as pd

    others = select_runs(ablation, [LS_01])
    parts = [table[table["loss_label"] == LS_005]] + ([protocol_table(out, others)] if len(others) else [])
    return pd.concat(parts, ignore_index=True)


def label_smoothing_choice(table, failed: Sequence[str] = ()):
    """Mukhoti et al.'s "we train models using alpha = 0.05 and alpha = 0.1 but find alpha = 0.05
    to perform better" (Sec. 5.1), in the measure of their tables: label smoothing 0.05 has a lower
    test ECE (15 equal-width bins) than 0.1, before and after their temperature, seeds paired
    (:func:`against_baseline` with 0.1 as the baseline). ``table``: :func:`label_smoothing_table`.
    Returns ``(verdict, evidence)``, one evidence row per half, joined by
    :func:`~focalcal_book.verdicts.combine`."""
    import pandas as pd

    parts, rows = [], []
    for column, when in (("ece_pre", "before T"), ("ece_post", "after T")):
        v, ev = against_baseline(table, column, [LS_005], failed=failed, baseline=LS_01)
        parts.append(v)
        rows.append(ev.assign(part=f"ECE {when}"))
    return combine(parts), pd.concat(rows, ignore_index=True)


def every_epoch(histories, column: str, losses: Sequence[str], *, higher: bool = False,
                failed: Sequence[str] = ()):
    """Mukhoti et al.'s "consistently ... throughout training": :func:`against_baseline` at every epoch
    of ``histories``, each epoch judged alone and joined by
    :func:`focalcal_book.verdicts.every_step` per loss, the losses by
    :func:`~focalcal_book.verdicts.combine`. Returns ``(verdict, evidence)``; ``agree`` counts the
    epochs at which the part holds."""
    present = set(histories["loss_label"])
    epochs = sorted(histories["epoch"].unique())
    rows, parts = [], []
    for lo in losses:
        v, agree = _untested(lo, present, failed), "–"
        if v is None:
            steps = [against_baseline(histories[histories["epoch"] == e], column, [lo], higher=higher)[0]
                     for e in epochs]
            v, agree = every_step(steps), f"{steps.count(HOLDS)} of {len(steps)} epochs"
        parts.append(v)
        rows.append({"part": lo, "values": "", "against": "", "agree": agree, "verdict": v})
    return combine(parts) if parts else NOT_RUN, _evidence(rows)


def ordered(values, column: str, losses: Sequence[str], *, failed: Sequence[str] = (), digits: int = 3):
    """The claim that ``column`` falls at every step along ``losses`` (e.g. focal loss with gamma 1,
    2, 3: "gamma = 3 outperforms gamma = 2, which in turn outperforms gamma = 1"): each step by
    paired seeds (:func:`compare_seeds`), joined by :func:`focalcal_book.verdicts.every_step`.
    :data:`NOT_TRAINED` when a loss is in ``failed``, :data:`NOT_RUN` when one has no row."""
    present = set(values["loss_label"])
    if set(losses) & set(failed):
        return NOT_TRAINED, _evidence([])
    if not set(losses) <= present:
        return NOT_RUN, _evidence([])
    rows = []
    for a, b in zip(losses, losses[1:]):
        c = compare_seeds(values, column, b, a)
        rows.append({"part": f"{b} below {a}", "values": _range(values, column, b, digits),
                     "against": _range(values, column, a, digits), "agree": f"{c['agree']} of {c['pairs']}",
                     "verdict": c["verdict"]})
    return every_step([r["verdict"] for r in rows]), _evidence(rows)


def lowest_cases(table, best: str, others: Sequence[str], columns: Sequence[str], *,
                 failed: Sequence[str] = (), digits: int = 4):
    """Mukhoti et al.'s "``best`` broadly produces the lowest" of ``columns`` (e.g. ECE and AdaECE
    before and after temperature scaling), a majority rule over the cases ``columns``.

    In each case ``best`` is the lowest when it is lower than every other trained loss of
    ``others`` on every seed (:func:`compare_seeds`), and decidedly not when some other loss is
    lower on every seed; otherwise the case is undecided. The verdict is
    :func:`focalcal_book.verdicts.majority` over the cases (undecided cases count against
    "holds"). :data:`NOT_TRAINED` when ``best`` is in ``failed``; a loss of ``others`` that did not
    train or was not run is left out of the comparison and makes the claim at most
    :data:`~focalcal_book.verdicts.PARTLY_TESTED` (:func:`~focalcal_book.verdicts.combine`).
    Returns ``(verdict, evidence)``: per case, ``values`` (``best``'s seed range), ``against`` the
    losses it is not lower than on every seed, ``agree`` the losses it is below on every seed.
    """
    present = set(table["loss_label"])
    if best in failed:
        return NOT_TRAINED, _evidence([])
    compared = [lo for lo in others if lo != best and lo in present and lo not in failed]
    if best not in present or not compared:
        return NOT_RUN, _evidence([])
    rows, hits, decided = [], [], []
    for col in columns:
        c = {lo: compare_seeds(table, col, best, lo)["verdict"] for lo in compared}
        below = [lo for lo, v in c.items() if v == HOLDS]
        beaten = [lo for lo, v in c.items() if v == DOES_NOT_HOLD]
        hits.append(len(below) == len(compared))
        decided.append(hits[-1] or bool(beaten))
        rows.append({"part": col, "values": _range(table, col, best, digits),
                     "against": ", ".join(lo for lo in compared if lo not in below) or "–",
                     "agree": f"{len(below)} of {len(compared)}",
                     "verdict": HOLDS if hits[-1] else DOES_NOT_HOLD if beaten else NOT_RESOLVED})
    verdict = majority(hits, decided=decided) if len(columns) else NOT_RUN
    left_out = [NOT_TRAINED if lo in failed else NOT_RUN for lo in others if lo != best and lo not in compared]
    return combine([verdict, *left_out]), _evidence(rows)


def near_one_verdict(temperatures: Sequence[float], *, near: float = NEAR_ONE) -> str:
    """Mukhoti et al.'s optimal temperatures "mostly lying between 0.9 and 1.1": more than half of
    the seeds have ``|T - 1| <= near`` (:func:`focalcal_book.verdicts.majority`; ``near`` is
    :data:`NEAR_ONE`, the paper's band); :data:`NOT_RUN` without a temperature."""
    t = np.asarray(temperatures, dtype=float).ravel()
    if not t.size:
        return NOT_RUN
    return majority(np.abs(t - 1.0) <= near + 1e-9)


def at_least_verdict(temperatures: Sequence[float], *, bound: float = BASELINE_T_LOW) -> str:
    """Mukhoti et al.'s baseline temperatures "between 2.0 to 2.8", from below: :data:`HOLDS` when
    every seed (at least two) has ``T >= bound`` (:data:`BASELINE_T_LOW`, the paper's lower end),
    :data:`DOES_NOT_HOLD` when every seed (at least two) is below it, :data:`NOT_RESOLVED`
    otherwise; :data:`NOT_RUN` without a temperature."""
    t = np.asarray(temperatures, dtype=float).ravel()
    if not t.size:
        return NOT_RUN
    if t.size < 2:
        return NOT_RESOLVED
    above = t >= bound - 1e-9
    return HOLDS if above.all() else DOES_NOT_HOLD if not above.any() else NOT_RESOLVED


def rise(histories, column: str):
    """Per run: the rise of ``column`` from its least value over the epochs to the last epoch
    (Mukhoti et al.'s Fig. 3c for ``test_nll_incorrect``); columns ``loss_label``, ``seed``,
    ``rise``."""
    import pandas as pd

    rows = []
    for _, h in histories.groupby("run", sort=False):
        v = h.sort_values("epoch")[column].to_numpy(dtype=float)
        rows.append({"loss_label": h["loss_label"].iloc[0], "seed": int(h["seed"].iloc[0]),
                     "rise": float(v[-1] - np.nanmin(v))})
    return pd.DataFrame(rows, columns=["loss_label", "seed", "rise"])


def rise_after_drop(histories, label: str, column: str = "test_ece", *, failed: Sequence[str] = ()):
    """Mukhoti et al.'s "after epoch 150, the test set ECE rises" (their first learning-rate drop)
    for the runs of ``label``: per run, ``column`` at the last epoch minus at the last epoch before
    the first drop of the learning rate; :func:`focalcal_book.verdicts.paired` over seeds (holds
    when it rises on every seed). Returns ``(verdict, rises, epoch)``: the per-seed rises
    (DataFrame ``loss_label``, ``seed``, ``rise``) and the epoch before the drop (``None`` when the
    rate never drops: then :data:`NOT_RUN`)."""
    import pandas as pd

    if label in failed:
        return NOT_TRAINED, pd.DataFrame(columns=["loss_label", "seed", "rise"]), None
    rows, epoch = [], None
    for _, h in histories[histories["loss_label"] == label].groupby("run", sort=False):
        h = h.sort_values("epoch")
        lr = h["lr"].to_numpy(dtype=float)
        drops = np.flatnonzero(lr[1:] < lr[:-1] * (1 - 1e-6))
        if not drops.size:
            continue
        epoch = int(h["epoch"].iloc[drops[0]])
        v = h[column].to_numpy(dtype=float)
        rows.append({"loss_label": label, "seed": int(h["seed"].iloc[0]), "rise": float(v[-1] - v[drops[0]])})
    rises = pd.DataFrame(rows, columns=["loss_label", "seed", "rise"])
    if rises.empty:
        return NOT_RUN, rises, None
    return paired(-rises["rise"].to_numpy()), rises, epoch


def falls_throughout(histories, label: str, columns: Sequence[str], *, marks: int = 4,
                     failed: Sequence[str] = ()):
    """Mukhoti et al.'s "decrease throughout training" for the runs of ``label``: per run and column,
    the value at ``marks + 1`` evenly spaced epochs (the first, then every ``1 / marks`` of training,
    the last) must fall at every step, on every seed (:func:`focalcal_book.verdicts.paired` over
    all the steps; runs of a single epoch have none: :data:`NOT_RESOLVED`). Returns ``(verdict, evidence)``, one evidence row per column."""
    if label in failed:
        return NOT_TRAINED, None
    runs = [h.sort_values("epoch") for _, h in histories[histories["loss_label"] == label].groupby("run", sort=False)]
    if not runs:
        return NOT_RUN, None
    rows, steps = [], []
    for col in columns:
        diffs = []
        for h in runs:
            v = h[col].to_numpy(dtype=float)
            at = np.unique(np.round(np.linspace(0, len(v) - 1, marks + 1)).astype(int))
            diffs += list(np.diff(v[at]))
        steps += diffs
        first_last = [f"{h[col].iloc[0]:.3f} → {h[col].iloc[-1]:.3f}" for h in runs]
        rows.append({"part": col, "values": "; ".join(first_last), "against": "",
                     "agree": f"{sum(d < 0 for d in diffs)} of {len(diffs)} steps fall",
                     "verdict": paired(diffs) if diffs else NOT_RESOLVED})
    return (paired(steps) if steps else NOT_RESOLVED), _evidence(rows)


def only_misclassified_rise(histories, label: str, *, failed: Sequence[str] = ()):
    """Mukhoti et al.'s "the increase in average test NLL is caused only by the incorrectly
    classified samples": from the last epoch before the first learning-rate drop to the last
    epoch, the test NLL of the correctly classified samples falls and that of the misclassified
    ones rises, on every seed (:func:`rise_after_drop` of each, joined). Returns ``(verdict, evidence)``."""
    parts, rows = [], []
    for col, rises_ok in (("test_nll_correct", False), ("test_nll_incorrect", True)):
        _, rises, _ = rise_after_drop(histories, label, col, failed=failed)
        if label in failed:
            v = NOT_TRAINED
        elif rises.empty:
            v = NOT_RUN
        else:
            r = rises["rise"].to_numpy()
            v = paired(-r if rises_ok else r)
        parts.append(v)
        rows.append({"part": col, "values": spread_text(rises["rise"], digits=4, mean=False) if len(rises) else "–",
                     "against": "", "agree": "rises" if rises_ok else "falls", "verdict": v})
    return combine(parts), _evidence(rows)


def confident_examples(out: str | Path, table, losses: Sequence[str], *, n: int = 4):
    """Their Fig. 9 on these runs: test images that every loss of ``losses`` classifies correctly,
    and images that every one misclassifies, with each loss's prediction and confidence.

    Uses the smallest seed with a run of every loss in ``losses`` (``table``: :func:`protocol_table`,
    whose ``temperature`` is Mukhoti et al.'s); of each group it keeps the ``n`` images on which
    the first loss (cross-entropy) is most confident. Returns ``(images, rows)``: the images
    (``(k, C, H, W)`` uint8, the dataset's own, correctly classified first) and one row per image
    and loss: ``group`` (``"correct"`` or ``"misclassified"``), ``image`` (position in ``images``),
    ``label``, ``loss_label``, ``predicted``, ``label_name`` and ``predicted_name`` (the dataset's
    class names), ``conf_pre`` and ``conf_post`` (before and after the temperature). ``(None,
    empty)`` when no seed has every loss.
    """
    import pandas as pd

    from focalcal.lab.results import load_run, test_set

    t = table[table["loss_label"].isin(losses)]
    full = t.groupby("seed")["loss_label"].nunique()
    seeds = sorted(full.index[full == len(losses)])
    if not seeds:
        return None, pd.DataFrame(columns=["group", "image", "label", "loss_label", "predicted", "label_name",
                                           "predicted_name", "conf_pre", "conf_post"])
    t = t[t["seed"] == seeds[0]].set_index("loss_label")
    runs = {lo: load_run(runfolder.run_path(out, t.loc[lo, "run"])) for lo in losses}
    y = runs[losses[0]].test_labels
    pre = {lo: torch.softmax(r.test_logits.double(), -1) for lo, r in runs.items()}
    post = {lo: torch.softmax(r.test_logits.double() / float(t.loc[lo, "temperature"]), -1)
            for lo, r in runs.items()}
    right = torch.stack([p.argmax(-1) == y for p in pre.values()]).all(0)
    wrong = torch.stack([p.argmax(-1) != y for p in pre.values()]).all(0)
    conf_first = pre[losses[0]].amax(-1)
    picks = []
    for group, mask in (("correct", right), ("misclassified", wrong)):
        idx = torch.nonzero(mask).squeeze(1)
        picks += [(group, int(i)) for i in idx[conf_first[idx].argsort(descending=True)[:n]]]
    base, where = test_set(runs[losses[0]])
    images = base.images[where[[i for _, i in picks]]]
    names = list(getattr(base, "classes", None) or range(int(y.max()) + 1))
    rows = [{"group": group, "image": k, "label": int(y[i]), "loss_label": lo, "predicted": int(pre[lo][i].argmax()),
             "label_name": str(names[int(y[i])]), "predicted_name": str(names[int(pre[lo][i].argmax())]),
             "conf_pre": float(pre[lo][i].max()), "conf_post": float(post[lo][i].max())}
            for k, (group, i) in enumerate(picks) for lo in losses]
    return images, pd.DataFrame(rows)


def examples_table(rows):
    """:func:`confident_examples`' rows as one row per image: its number, true label and, per loss,
    the predicted class with its confidence before and after the temperature."""
    import pandas as pd

    cell = rows.assign(text=[f"{p}: {a:.4f} → {b:.4f}"
                             for p, a, b in zip(rows["predicted_name"], rows["conf_pre"], rows["conf_post"])])
    wide = cell.pivot(index="image", columns="loss_label", values="text")[list(dict.fromkeys(rows["loss_label"]))]
    first = rows.drop_duplicates("image").set_index("image")
    return pd.concat([pd.DataFrame({"image": [f"#{k + 1}" for k in wide.index],
                                    "label": list(first.loc[wide.index, "label_name"])},
                                   index=wide.index), wide], axis=1).reset_index(drop=True)


def plot_examples(images, rows):
    """The images of :func:`confident_examples`, one per panel, titled with the true label, in two
    rows (correctly classified by every loss, misclassified by every loss)."""
    import matplotlib.pyplot as plt

    from focalcal.plotting import FIGURE_WIDTH_IN

    first = rows.drop_duplicates("image").set_index("image")
    groups = list(dict.fromkeys(first["group"]))
    ncols = max(int((first["group"] == g).sum()) for g in groups)
    fig, axes = plt.subplots(len(groups), ncols, figsize=(min(FIGURE_WIDTH_IN, 1.7 * ncols), 2.0 * len(groups)),
                             squeeze=False, layout="constrained")
    for ax in axes.flat:
        ax.axis("off")
    for r, g in enumerate(groups):
        for c, (k, row) in enumerate(first[first["group"] == g].iterrows()):
            ax = axes[r, c]
            img = images[k].permute(1, 2, 0).numpy()  # (C, H, W) -> (H, W, C)
            ax.imshow(img.squeeze(-1) if img.shape[-1] == 1 else img, cmap="gray_r")
            ax.set_title(f"#{k + 1}: {row['label_name']}", fontsize=9)
        axes[r, 0].text(-0.15, 0.5, g, transform=axes[r, 0].transAxes, rotation=90, va="center", ha="right",
                        fontsize=10)
    return fig


def scaled_epochs(epochs: int, paper: Sequence[int] = (10, 100, 200), paper_epochs: int = 350) -> list[int]:
    """Mukhoti et al.'s epochs ``paper`` (of ``paper_epochs``; their Fig. 4b-d) at the same fraction
    of a run of ``epochs`` epochs, at least 1, without repeats."""
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    return list(dict.fromkeys(max(1, round(epochs * e / paper_epochs)) for e in paper))


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------

def _band(ax, h, column: str, colour: str, ls: Any, label: str, scale: float = 1.0) -> None:
    # mean over seeds, and the range of the seeds shaded
    g = h.groupby("epoch")[column]
    mean, lo, hi = g.mean() * scale, g.min() * scale, g.max() * scale
    ax.plot(mean.index, mean.to_numpy(), color=colour, ls=ls, marker="o", ms=2.5, label=label)
    if h["seed"].nunique() > 1:
        ax.fill_between(mean.index, lo.to_numpy(), hi.to_numpy(), color=colour, alpha=0.15, lw=0)


def plot_split_curves(histories, labels: Sequence[str]):
    """Mukhoti et al.'s Fig. 2, one row per loss of ``labels``: the training NLL and the test NLL of
    all, correctly and incorrectly classified samples (log scale), and the training error, the test
    error and the test ECE; mean over seeds with the seeds' range shaded."""
    import matplotlib.pyplot as plt

    from focalcal.lab.results.figures import loss_styles
    from focalcal.plotting import FIGURE_WIDTH_IN

    styles = loss_styles(list(dict.fromkeys(histories["loss_label"])))
    labels = [lo for lo in labels if lo in styles]
    fig, axes = plt.subplots(len(labels), 3, figsize=(FIGURE_WIDTH_IN, 2.6 * len(labels) + 0.9),
                             squeeze=False, sharex=True)
    dashes = ("-", "--", ":")
    for row, lo in zip(axes, labels):
        h = histories[histories["loss_label"] == lo]
        colour = styles[lo][0]
        for ax, split in zip(row[:2], ("train", "test")):
            for ls, (part, name) in zip(dashes, (("nll", "all"), ("nll_correct", "correct"),
                                                 ("nll_incorrect", "misclassified"))):
                _band(ax, h, f"{split}_{part}", colour, ls, name)
            ax.set_yscale("log")
            ax.set_ylabel(f"{split} NLL (nats)")
        for ls, (col, name) in zip(dashes, (("train_error", "train error"), ("test_error", "test error"),
                                            ("test_ece", "test ECE"))):
            _band(row[2], h, col, colour, ls, name, scale=100.0)
        row[2].set_ylabel("%")
        row[0].set_title(lo, loc="left", fontsize=10)
    for ax in axes[-1]:
        ax.set_xlabel("epoch")
    for j in range(3):
        # one legend per column, below it: inside a panel it would cover a curve
        axes[-1, j].legend(*axes[0, j].get_legend_handles_labels(), loc="upper center",
                           bbox_to_anchor=(0.5, -0.3))
    fig.tight_layout()
    return fig


def plot_band_curves(histories, panels: Sequence[tuple[str, str]], labels: Sequence[str], *,
                     ncols: int = 3):
    """One panel per ``(column, y label)`` of ``panels``, one line per loss of ``labels`` (mean over
    seeds, the seeds' range shaded, the book's colours and line styles), one legend below."""
    import matplotlib.pyplot as plt

    from focalcal.lab.results.figures import loss_styles
    from focalcal.plotting import FIGURE_WIDTH_IN

    labels = [lo for lo in labels if lo in set(histories["loss_label"])]
    styles = loss_styles(labels)
    ncols = min(ncols, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(FIGURE_WIDTH_IN, 2.7 * nrows + 0.6), squeeze=False,
                             sharex=True)
    for ax, (col, ylabel) in zip(axes.flat, panels):
        for lo in labels:
            c, ls = styles[lo]
            _band(ax, histories[histories["loss_label"] == lo], col, c, ls, lo)
        ax.set_ylabel(ylabel)
    for ax in axes.flat[len(panels):]:
        ax.remove()
    for ax in axes[-1]:
        ax.set_xlabel("epoch")
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(4, len(names)))
    fig.tight_layout(rect=(0, 0.08 / nrows * (1 + (len(names) > 4)), 1, 1))
    return fig


def _grad_hists(out: str | Path, run_id: str) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    # the run's histogram edges and, per epoch, the percentage of training samples in each bin
    run_dir = runfolder.run_path(out, run_id)
    hists = {int(r["epoch"]): 100.0 * np.asarray(r["grad_norm_hist"], float) / max(sum(r["grad_norm_hist"]), 1)
             for r in runfolder.read_history(run_dir) if r.get("grad_norm_hist")}
    return np.asarray(runfolder.grad_norm_edges(run_dir), float), hists


def grad_norm_medians(out: str | Path, results, epochs: Sequence[int]):
    """Per run of ``results`` and epoch of ``epochs``: the median per-sample gradient norm of the last
    layer over that epoch's training pass (the trainer's ``grad_norm_quantiles``); columns
    ``loss_label``, ``seed``, ``epoch``, ``median``."""
    import pandas as pd

    rows = []
    for _, r in results.drop_duplicates("run").iterrows():
        records = runfolder.read_history(runfolder.run_path(out, r["run"]))
        for rec in records:
            if rec["epoch"] in epochs and rec.get("grad_norm_quantiles"):
                rows.append({"loss_label": r["loss_label"], "seed": int(r["seed"]), "epoch": int(rec["epoch"]),
                             "median": float(rec["grad_norm_quantiles"]["50"])})
    return pd.DataFrame(rows, columns=["loss_label", "seed", "epoch", "median"])


def plot_grad_norm_hists(out: str | Path, results, labels: Sequence[str], epochs: Sequence[int]):
    """Mukhoti et al.'s Fig. 4b-d: per epoch of ``epochs``, the histogram of the per-sample gradient
    norms of the last linear layer over the training set (the trainer's ``grad_norm_hist``,
    log-spaced bins) for each loss of ``labels``: the mean percentage per bin over seeds, the
    seeds' range shaded. Returns ``(figure, medians)``: ``medians[label][epoch]`` is the mean over
    seeds of the recorded median gradient norm."""
    import matplotlib.pyplot as plt

    from focalcal.lab.results.figures import loss_styles
    from focalcal.plotting import FIGURE_WIDTH_IN

    runs = results.drop_duplicates("run")
    labels = [lo for lo in labels if lo in set(runs["loss_label"])]
    styles = loss_styles(labels)
    fig, axes = plt.subplots(1, len(epochs), figsize=(FIGURE_WIDTH_IN, 3.3), squeeze=False, sharey=True)
    medians: dict[str, dict[int, float]] = {}
    for lo in labels:
        ids = runs.loc[runs["loss_label"] == lo, "run"]
        data = [_grad_hists(out, r) for r in ids]
        c, ls = styles[lo]
        edges = data[0][0]
        for ax, e in zip(axes[0], epochs):
            h = np.stack([d[1][e] for d in data if e in d[1]])
            ax.stairs(h.mean(0), edges, color=c, ls=ls, lw=1.6, label=lo)
            if len(h) > 1:
                ax.stairs(h.max(0), edges, baseline=h.min(0), fill=True, color=c, alpha=0.15, lw=0)
        med = grad_norm_medians(out, runs[runs["loss_label"] == lo], epochs).groupby("epoch")["median"].mean()
        medians[lo] = {e: float(med.get(e, np.nan)) for e in epochs}
    for ax, e in zip(axes[0], epochs):
        ax.set_xscale("log")
        ax.set_title(f"epoch {e}")
        ax.set_xlabel("gradient norm, last layer")
    axes[0, 0].set_ylabel("% of training samples")
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(names))
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig, medians


def plot_train_reliability(out: str | Path, run_id: str, label: str, *, n_bins: int = TRAIN_BINS):
    """Mukhoti et al.'s Fig. 1 for one run: reliability diagrams of the training set (``n_bins``
    equal-width bins, the % of samples per bin below) at every epoch whose training logits the run
    saved (``logits_epoch_<n>.pt`` with ``train_logits``). Returns ``(figure, rows)`` with one row
    per epoch: ``epoch``, ``accuracy``, ``confidence`` (mean top probability) and ``top_bin`` (%
    of samples in the most confident bin); ``(None, [])`` when no training logits were saved."""
    import matplotlib.pyplot as plt

    from focalcal.lab.results import plot_reliability_panel

    run_dir = runfolder.run_path(out, run_id)
    logits, labels, rows = {}, {}, []
    for e in runfolder.saved_epochs(run_dir):
        blob = runfolder.read_logits(run_dir, e)
        if "train_logits" not in blob:
            continue
        z, y = blob["train_logits"].to(torch.float64), blob["train_labels"]
        conf, pred = z.softmax(-1).max(-1)
        logits[f"epoch {e}"], labels[f"epoch {e}"] = z, y
        rows.append({"epoch": e, "accuracy": float((pred == y).double().mean()),
                     "confidence": float(conf.mean()),
                     "top_bin": float(100 * (conf > (n_bins - 1) / n_bins).double().mean())})
    if not rows:
        return None, []
    n_images = len(next(iter(labels.values())))
    fig, axes = plot_reliability_panel(logits, labels, n_bins=n_bins, binning="width",
                                       colors={k: label for k in logits},
                                       title=f"{label}: training set ({n_images:,} images)")
    for ax in axes[0]:
        ax.title.set_fontsize(9)
    plt.setp(axes[1], ylim=(0, 100))
    return fig, rows


# --------------------------------------------------------------------------------------------
# the page's claims
# --------------------------------------------------------------------------------------------

#: the rule each of the page's claims is tested by (Markdown, shown beside its verdict)
RULES: dict[str, str] = {
    "mukhoti_flsd53_lowest": "FLSD-53 below every other trained loss of their Table 1 on every seed, in more than "
                             "half of four cases: ECE and AdaECE, before and after their temperature (\"broadly\" "
                             "as a majority; a case where no loss is below it on every seed counts against)",
    "mukhoti_nll_overfit": "rise of the test NLL from its least value to the last epoch lower than cross-entropy's, "
                           "paired seeds, for each of $\\gamma = 1, 2, 3$",
    "mukhoti_nll_correct": "test NLL of the correctly classified samples higher than cross-entropy's on every seed "
                           "at every epoch, for each of $\\gamma = 1, 2, 3$",
    "mukhoti_nll_incorrect_rise": "rise of the misclassified samples' test NLL from its least value to the last "
                                  "epoch lower than cross-entropy's, paired seeds, for each of $\\gamma = 1, 2, 3$",
    "mukhoti_entropy": "entropy of the predictions on misclassified test samples (last epoch, all test images) "
                       "higher than cross-entropy's, paired seeds, for each of $\\gamma = 1, 2, 3$",
    "mukhoti_weight_norm": "last-layer weight norm, mean over the epochs at the last learning rate, lower than "
                           "cross-entropy's, paired seeds, for each of $\\gamma = 1, 2, 3$",
    "mukhoti_feature_norm": "feature norm (the last layer's input, on the test images: the runs record no "
                            "training-set features), mean over the epochs at the last learning rate, lower than "
                            "cross-entropy's, paired seeds, for each of $\\gamma = 1, 2, 3$",
    "mukhoti_grad_norm": "median per-sample gradient norm of the last layer over the training pass lower for "
                         "$\\gamma = 3$ than for cross-entropy, paired seeds, at every later epoch of their Fig. 4",
    "mukhoti_gamma_order": "test ECE before temperature scaling lower at $\\gamma = 2$ than at 1 and at 3 than at "
                           "2, paired seeds, every step",
    "mukhoti_flsd53_t_near_one": "more than half of FLSD-53's seeds have $|T - 1| \\le 0.1$ (the paper's band "
                                 "0.9-1.1; \"mostly\" as a majority)",
    "mukhoti_baseline_t_high": "every seed of cross-entropy and of MMCE has $T \\ge 2.0$ (the paper's lower end "
                               "of \"2.0 to 2.8\")",
    "mukhoti_entropy_falls": "cross-entropy's test entropy of the correctly and of the misclassified samples lower "
                             "at each quarter of training than at the one before (first, 25 %, 50 %, 75 % and last "
                             "epoch), on every seed",
    "mukhoti_nll_only_incorrect": "from the last epoch before the first learning-rate drop to the last epoch, "
                                  "cross-entropy's test NLL of the correctly classified samples falls and that of "
                                  "the misclassified samples rises, on every seed",
    "mukhoti_s99_pre": "share of test images predicted with confidence above 0.99 before temperature scaling "
                       "lower for focal loss ($\\gamma = 3$ and FLSD-53) than for cross-entropy and than for MMCE, "
                       "paired seeds, every pair",
    "mukhoti_s99_post": "the same share after their temperature higher for focal loss ($\\gamma = 3$ and FLSD-53) "
                        "than for cross-entropy and than for MMCE, paired seeds, every pair",
    "mukhoti_ls_005": "label smoothing 0.05's test ECE (15 equal-width bins) lower than label smoothing 0.1's, "
                      "before and after their temperature, paired seeds, every pair (their tables' measure; "
                      "\"perform better\" is not defined further)",
    "mukhoti_ece_rises_late": "cross-entropy's test ECE higher at the last epoch than at the last epoch before the "
                              "first learning-rate drop (their epoch 150), on every seed",
}
#: the cases of :data:`RULES`' ``mukhoti_flsd53_lowest``: ECE and AdaECE before and after temperature
ECE_CASES = ("ece_pre", "ece_post", "adaece_pre", "adaece_post")


def _grad_norm_claim(out, results, failed: Sequence[str], later: Sequence[int]):
    import pandas as pd

    if {CE, FL3} & set(failed):
        return NOT_TRAINED, None
    present = set(results["loss_label"])
    medians = grad_norm_medians(out, results, later)
    steps = [against_baseline(medians[medians["epoch"] == e], "median", [FL3], digits=3) for e in later]
    if not steps or CE not in present or FL3 not in present:
        return NOT_RUN, None
    evidence = pd.concat([ev.assign(part=f"epoch {e}") for e, (_, ev) in zip(later, steps)])
    return every_step([v for v, _ in steps]), evidence


def _against_both(table, column: str, failed: Sequence[str], *, higher: bool = False):
    """Their Table 13 reading: the focal losses (gamma = 3 and FLSD-53) against cross-entropy and
    against MMCE (:func:`against_baseline` with each baseline), every part joined."""
    parts = [against_baseline(table, column, [FL3, FLSD53], higher=higher, failed=failed, digits=4, baseline=b)
             for b in (CE, TABLE1_COLUMNS[2])]
    return combine([v for v, _ in parts]), _evidence([r for _, ev in parts for r in ev.to_dict("records")])


def claims(out: str | Path, results, table, histories, failed: Sequence[str], hist_epochs: Sequence[int]):
    """Every claim of :data:`RULES` on the runs ``results`` (their :func:`protocol_table` ``table``,
    their :func:`prefix_histories`): ``{key: (verdict, evidence table or None)}``, and the
    per-seed rises of cross-entropy's ECE after the first learning-rate drop with that epoch
    (:func:`rise_after_drop`) and the baselines whose temperature claim went untested."""
    focal = list(FIG3[1:])
    mmce = TABLE1_COLUMNS[2]
    t_by = table.groupby("loss_label")["temperature"].apply(list)
    ece_rise, ece_rises, drop_epoch = rise_after_drop(histories, CE, failed=failed)
    baseline_t = {lo: gate([lo], failed, lambda lo=lo: at_least_verdict(t_by.get(lo, []))) for lo in (CE, mmce)}
    evidence = {
        "mukhoti_flsd53_lowest": lowest_cases(table, FLSD53, TABLE1_COLUMNS, ECE_CASES, failed=failed),
        "mukhoti_nll_overfit": against_baseline(nll_rise(histories), "nll_rise", focal, failed=failed),
        "mukhoti_nll_correct": every_epoch(histories, "test_nll_correct", focal, higher=True, failed=failed),
        "mukhoti_nll_incorrect_rise": against_baseline(rise(histories, "test_nll_incorrect"), "rise", focal,
                                                       failed=failed),
        "mukhoti_entropy": against_baseline(final_stat(out, results, "entropy_incorrect"), "entropy_incorrect",
                                            focal, higher=True, failed=failed),
        "mukhoti_weight_norm": against_baseline(late_mean(histories, "weight_norm"), "weight_norm", focal,
                                                failed=failed, digits=2),
        "mukhoti_feature_norm": against_baseline(late_mean(histories, "feature_norm"), "feature_norm", focal,
                                                 failed=failed, digits=2),
        "mukhoti_grad_norm": _grad_norm_claim(out, results, failed, hist_epochs[1:]),
        "mukhoti_gamma_order": ordered(table, "ece_pre", focal, failed=failed, digits=4),
        "mukhoti_flsd53_t_near_one": (gate([FLSD53], failed, lambda: near_one_verdict(t_by.get(FLSD53, []))),
                                      None),
        "mukhoti_baseline_t_high": (combine(list(baseline_t.values())), None),
        "mukhoti_ece_rises_late": (ece_rise, None),
        "mukhoti_entropy_falls": falls_throughout(histories, CE, ["test_entropy_correct", "test_entropy_incorrect"],
                                                  failed=failed),
        "mukhoti_nll_only_incorrect": only_misclassified_rise(histories, CE, failed=failed),
        "mukhoti_s99_pre": _against_both(table, "s99_pre", failed),
        "mukhoti_s99_post": _against_both(table, "s99_post", failed, higher=True),
    }
    return evidence, ece_rises, drop_epoch, untested(baseline_t)
