"""Helpers of ``book/experiments/zhou_fmnist.md``: Zhou et al.'s (2025) Table 1/2 losses trained on
Fashion-MNIST, their post-hoc quantities per seed, the two claims' verdicts and the figures.

- :data:`ZHOU_TABLE_LOSSES` / :data:`LABELS`: the seven training losses of Zhou et al.'s Table 1,
  taken from the sweep's constants (:mod:`focalcal.lab.sweep`), in the paper's column order;
- :func:`select_runs` picks those runs of a sweep, :func:`per_seed` computes one
  :func:`focalcal.lab.results.released.zhou_row` per run (``T`` fitted on the validation logits,
  everything measured on the test logits), :func:`spread_table` shows mean and seed range;
- :func:`competitive` and :func:`lower_than` decide the claims from the per-seed values (the
  verdicts, the range rule and the rule that joins several verdicts,
  :func:`focalcal_book.verdicts.combine`, are :mod:`focalcal_book.verdicts`'s);
  :func:`calibration_claim` and :func:`aurc_claim` write them as Markdown lists;
- :data:`CSF_LABELS` and :func:`csf_sensitivity`: their loss under the three CSFs (their Fig. 2);
- :func:`target_facts`, :func:`training_progress`, :func:`confidence_direction` and
  :func:`near_uniform_share`: how well the selective-risk networks learned, and which way each
  loss is miscalibrated (:func:`fig3_table`: against Zhou et al.'s reading of their Fig. 3);
- the mechanism: :func:`gradient_decomposition` splits the selective-risk loss's gradient with
  respect to the logits into its cross-entropy part and its weight part, on the logits of
  :func:`initial_network_state` (a freshly initialised network of the cpu profile's run) or of
  any network;
- figures: :func:`aurc_ece_plot` (AURC and E-AURC against ECE, seed ranges as bars) and
  :func:`reliability_figures` (Zhou et al.'s Fig. 3: one reliability diagram per loss);
- their App. E's cross-validation: :func:`selection_table`, :func:`selected`, :func:`plot_selection`.

All quantities stay fractions here; the page multiplies by 100 where it shows percentages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from focalcal.lab import profiles, runfolder, spec, template
from focalcal_book.verdicts import (DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_RUN, NOT_TRAINED, TRAINED_FRACTION, combine,
                                    compare_ranges, gate, majority, paired, spread_text, untrained)

__all__ = ["RULES", "ZHOU_TABLE_LOSSES", "VARIANT_LABELS", "LABELS", "TARGET", "TARGETS", "BASELINES", "DUAL",
           "failed_losses", "versus_baselines", "good_calibration", "best_cwece", "ts_improves",
           "BASELINE", "CLIPPED_LABELS", "loss_parameters", "select_runs", "per_seed", "near_uniform_share", "CSF_LABELS", "csf_sensitivity",
           "spread_table", "competitive", "lower_than", "confidence_direction",
           "training_progress", "target_facts", "FIG3_READING", "fig3_table", "DIRECTION_WORDS", "calibration_claim", "aurc_claim", "aurc_ece_plot",
           "reliability_figures", "gradient_decomposition", "initial_network_state", "mechanism_table",
           "PAPER_SELECTED", "SELECTED_PARAMETER", "selection_table", "selected", "large_gamma_underperforms", "plot_selection"]


# Zhou et al.'s Table 1 columns: XE, FL-53, Inv. FL, Dual, KDE-XE, AURC, AU_{P_X_tau}; the sweep
# defines each loss once (with its label and parameters), so the page reads the same runs as the
# other Fashion-MNIST pages.
_ZHOU_ORDER = ("ce", "flsd53", "inverse_focal", "dual_focal", "kde_xe", "aurc", "selective_risk")


def _zhou_losses() -> tuple[spec.Loss, ...]:
    by_name = {lo.name: lo for lo in (*profiles.TABLE1_LOSSES, *profiles.ZHOU_LOSSES, *profiles.CLIPPED_LOSSES)}
    return tuple(by_name[n] for n in _ZHOU_ORDER)


#: the seven losses of Zhou et al.'s Table 1, as the sweep defines them
ZHOU_TABLE_LOSSES: tuple[spec.Loss, ...] = _zhou_losses()
#: the selective-risk loss as the authors' code computes it, and with its weights detached
VARIANT_LABELS: tuple[str, ...] = tuple(lo.display for lo in profiles.SELECTIVE_VARIANT_LOSSES)
#: the display labels (the ``loss_label`` column of a sweep's results): Table 1's, then the variants
LABELS: tuple[str, ...] = tuple(lo.display for lo in ZHOU_TABLE_LOSSES) + VARIANT_LABELS
#: Zhou et al.'s own loss as printed and the reference of the AURC claim
TARGET, BASELINE = LABELS[len(ZHOU_TABLE_LOSSES) - 1], LABELS[0]
#: every variant of their loss the page judges, the printed one first
TARGETS: tuple[str, ...] = (TARGET, *VARIANT_LABELS)
#: the six losses Zhou et al. compare their loss with (Table 1)
BASELINES: tuple[str, ...] = LABELS[:len(ZHOU_TABLE_LOSSES) - 1]
#: the dual focal loss of the comparison
DUAL = LABELS[3]
#: Zhou et al.'s Fig. 2, their loss under each CSF of their App. Table 1 (score -> loss label): the
#: detached variant, whose MSP runs are the comparison's and the other two the "ablation" role's
CSF_LABELS: dict[str, str] = {"msp": VARIANT_LABELS[1],
                              **{dict(lo.params)["score"]: lo.display for lo in profiles.CSF_LOSSES}}
#: losses the cpu profile trains with the gradient norm clipped (:data:`focalcal.lab.sweep.CLIPPED_LOSSES`)
CLIPPED_LABELS: frozenset[str] = frozenset(lo.display for lo in profiles.CLIPPED_LOSSES)


def loss_parameters(name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every parameter a loss of :data:`focalcal.losses.LOSSES` trains with: its defaults, updated
    by ``params`` (a run's ``loss_params``); ``reduction`` and ``ignore_index`` left out (the same
    for every loss). A module's ``repr`` does not show the defaults, so the page reads them here.

    Raises
    ------
    ValueError
        ``name`` is not a loss of the registry.
    """
    import inspect

    from focalcal.losses import LOSSES

    if name not in LOSSES:
        raise ValueError(f"name must be a loss of focalcal.losses.LOSSES; got {name!r}")
    sig = inspect.signature(LOSSES[name])
    out = {k: p.default for k, p in sig.parameters.items()
           if k not in {"reduction", "ignore_index"} and p.default is not inspect.Parameter.empty}
    out |= dict(params or {})
    # a default of None that the loss resolves (the selective-risk loss's nu, by variant): its value
    module = LOSSES[name](**dict(params or {}))
    return {k: getattr(module, k, v) if v is None else v for k, v in out.items()}


def select_runs(results: pd.DataFrame, *, dataset: str | None = None, model: str | None = None,
                labels: Sequence[str] = LABELS) -> pd.DataFrame:
    """One row per run of ``results`` (on ``dataset`` / ``model`` where given) whose loss label is
    in ``labels``.

    Columns ``run``, ``loss``, ``loss_label``, ``seed``, ``epochs``; rows in the order of
    ``labels``, then by seed. The page passes the rows of one data set and network
    (``focalcal.lab.results.runs_for(out, "comparison", setting="first")``); ``dataset`` and
    ``model`` narrow a whole results table instead.
    """
    from focalcal.lab.results import select_losses

    missing = {"run", "dataset", "model", "loss", "loss_label", "seed", "epochs"} - set(results.columns)
    if missing:
        raise ValueError(f"results must be a sweep's results table; it lacks {sorted(missing)}")
    r, order = select_losses(results if model is None else results[results["model"] == model], dataset,
                             list(labels))
    runs = r.drop_duplicates("run")[["run", "loss", "loss_label", "seed", "epochs"]]
    runs = runs.assign(_o=runs["loss_label"].map(order.index)).sort_values(["_o", "seed"], kind="stable")
    return runs.drop(columns="_o").reset_index(drop=True)


def per_seed(out: str | Path, runs: pd.DataFrame, *, n_bins: int = 15) -> pd.DataFrame:
    """Zhou et al.'s post-hoc quantities of every run in ``runs`` (:func:`select_runs`'s rows).

    Each row is :func:`focalcal.lab.results.released.zhou_row` of the run's test logits with ``T``
    selected on its validation logits (Mukhoti's grid, equal-width ECE), plus the run's ``run``,
    ``loss_label``, ``seed``, ``parameters`` (:func:`loss_parameters` of the run's loss, as text;
    ``"none"`` without any), ``clip_grad_norm`` (NaN: no clipping) and ``confidence_gap`` (test
    mean confidence minus accuracy, :func:`focalcal_book.released.confidence_gap`; > 0:
    over-confident) and ``near_uniform`` (:func:`near_uniform_share` of the test logits).
    Quantities are fractions.
    """
    from focalcal.lab.results import load_run
    from focalcal.lab.results.released import zhou_row
    from focalcal_book.released import confidence_gap

    rows = []
    for r in runs.itertuples(index=False):
        run = load_run(runfolder.run_path(out, r.run))
        clip = run.trainer.get("clip_grad_norm")
        rows.append({"run": r.run, "loss_label": r.loss_label, "seed": int(r.seed),
                     "parameters": ", ".join(f"{k}={v!r}" for k, v in
                                             loss_parameters(run.config["loss"], run.loss_params).items())
                     or "none",
                     "confidence_gap": confidence_gap(run.test_logits, run.test_labels),
                     "near_uniform": near_uniform_share(run.test_logits),
                     "clip_grad_norm": float("nan") if clip is None else float(clip),
                     **zhou_row(run.test_logits, run.test_labels, run.val_logits, run.val_labels,
                                n_bins=n_bins)})
    return pd.DataFrame(rows)


def near_uniform_share(logits: Any, factor: float = 2.0) -> float:
    """The fraction of rows of ``logits`` (shape (N, K)) whose top-class probability is below
    ``factor / K``: predictions close to uniform (``1 / K``), where the network has given up."""
    import torch

    z = torch.as_tensor(logits, dtype=torch.float64)
    if z.ndim != 2 or z.shape[0] == 0:
        raise ValueError(f"logits must have shape (N, K) with N > 0; got {tuple(z.shape)}")
    if factor < 1:
        raise ValueError(f"factor must be at least 1 (1 / K is the least top-class probability); got {factor}")
    conf = torch.softmax(z, dim=1).max(dim=1).values
    return float((conf < factor / z.shape[1]).double().mean())


def spread_table(table: pd.DataFrame, columns: Mapping[str, str], *, scale: Mapping[str, float] | None = None,
                 digits: Mapping[str, int] | None = None) -> pd.DataFrame:
    """One row per loss of ``table`` (:func:`per_seed`): ``training loss``, ``seeds`` and, per
    column of ``columns`` (field -> header), :func:`focalcal_book.verdicts.spread_text` of its
    per-seed values.

    ``scale`` (default 100: percentages) and ``digits`` (default 2) per field.
    """
    scale, digits = dict(scale or {}), dict(digits or {})
    rows = []
    for label, g in table.groupby("loss_label", sort=False):
        row = {"training loss": label, "seeds": len(g)}
        for field, header in columns.items():
            row[header] = spread_text(g[field].to_numpy(), scale=scale.get(field, 100.0),
                                      digits=digits.get(field, 2))
        rows.append(row)
    return pd.DataFrame(rows)


def _values(table: pd.DataFrame, label: str, column: str) -> np.ndarray:
    return table.loc[table["loss_label"] == label].sort_values("seed")[column].to_numpy(dtype=float)


def competitive(table: pd.DataFrame, column: str, *, target: str = TARGET) -> dict[str, Any]:
    """Whether ``target``'s ``column`` (lower is better, e.g. ECE) is competitive with the other losses.

    The best other loss is the one with the lowest mean over seeds. The claim **holds** when every
    seed of ``target`` is at most the worst seed of that loss (``target``'s range lies within the
    best loss's range or below it), **does not hold** when every seed of ``target`` is above every
    seed of that loss (the ranges separate), and is **not resolved** otherwise, or with fewer than
    two seeds on either side. Without ``target``'s runs, or without another loss, it is
    :data:`NOT_RUN`.

    Returns
    -------
    dict
        ``verdict``, ``best`` (label or None), ``target_values`` and ``best_values`` (per seed,
        ordered by seed), ``below_baseline`` and ``n_paired``: on how many of the seeds shared
        with :data:`BASELINE` ``target`` is lower (0 and 0 without the baseline's runs).
    """
    if column not in table.columns:
        raise ValueError(f"column must be a column of table; got {column!r}")
    labels = list(dict.fromkeys(table["loss_label"]))
    others = [lab for lab in labels if lab != target]
    out: dict[str, Any] = {"verdict": NOT_RUN, "best": None, "target_values": _values(table, target, column),
                           "best_values": np.array([]), "below_baseline": 0, "n_paired": 0}
    if target not in labels or not others:
        return out
    best = min(others, key=lambda lab: float(_values(table, lab, column).mean()))
    t, b = out["target_values"], _values(table, best, column)
    out.update(best=best, best_values=b)
    if BASELINE in labels and target != BASELINE:
        paired = table.pivot_table(index="seed", columns="loss_label", values=column)[[target, BASELINE]].dropna()
        out.update(below_baseline=int((paired[target] < paired[BASELINE]).sum()), n_paired=len(paired))
    if min(t.size, b.size) < 2:
        out["verdict"] = NOT_RESOLVED
    elif t.max() <= b.max():
        out["verdict"] = HOLDS
    elif t.min() > b.max():
        out["verdict"] = DOES_NOT_HOLD
    else:
        out["verdict"] = NOT_RESOLVED
    return out


def lower_than(table: pd.DataFrame, column: str, *, target: str = TARGET,
               baseline: str = BASELINE) -> dict[str, Any]:
    """Whether ``target``'s ``column`` is lower than ``baseline``'s (e.g. a lower AURC), from the seed ranges.

    The verdict is :func:`focalcal_book.verdicts.compare_ranges`' (``target`` below ``baseline``);
    :data:`NOT_RUN` without the runs of either loss.

    Returns
    -------
    dict
        ``verdict``, ``target_values``, ``baseline_values`` (per seed, ordered by seed),
        ``lower_paired`` and ``n_paired``: on how many of the shared seeds ``target`` is lower.
    """
    if column not in table.columns:
        raise ValueError(f"column must be a column of table; got {column!r}")
    t, b = _values(table, target, column), _values(table, baseline, column)
    out: dict[str, Any] = {"verdict": NOT_RUN, "target_values": t, "baseline_values": b,
                           "lower_paired": 0, "n_paired": 0}
    if t.size == 0 or b.size == 0:
        return out
    paired = table.pivot_table(index="seed", columns="loss_label", values=column)[[target, baseline]].dropna()
    out.update(lower_paired=int((paired[target] < paired[baseline]).sum()), n_paired=len(paired))
    out["verdict"] = compare_ranges(t, b)
    return out


def confidence_direction(table: pd.DataFrame) -> dict[str, list[str]]:
    """The losses of ``table`` (:func:`per_seed`) whose test ``confidence_gap`` is positive on every
    seed (``"over"``: over-confident), negative on every seed (``"under"``) or neither (``"mixed"``)."""
    out: dict[str, list[str]] = {"over": [], "under": [], "mixed": []}
    for label, g in table.groupby("loss_label", sort=False):
        gap = g["confidence_gap"].to_numpy(dtype=float)
        out["over" if (gap > 0).all() else "under" if (gap < 0).all() else "mixed"].append(str(label))
    return out


#: Zhou et al.'s reading of their Fig. 3 (Sec. 5): "focal loss tends to produce overconfident
#: predictions on samples, whereas inverse focal loss and AURC exhibit underconfidence"
FIG3_READING: dict[str, str] = {LABELS[1]: "over", LABELS[2]: "under", LABELS[5]: "under"}


#: how :func:`fig3_table` words a loss's confidence direction over its seeds
DIRECTION_WORDS: dict[str, str] = {"over": "over-confident on every seed", "under": "under-confident on every seed",
                                   "mixed": "over-confident on some seeds, under-confident on others"}


def fig3_table(direction: Mapping[str, Sequence[str]], reading: Mapping[str, str] = FIG3_READING) -> pd.DataFrame:
    """Zhou et al.'s reading of their Fig. 3 against :func:`confidence_direction`'s ``direction``:
    one row per loss of ``reading`` (label -> ``"over"`` / ``"under"``) with ``loss_label``,
    ``theirs`` and ``here`` (:data:`DIRECTION_WORDS`, or :data:`NOT_RUN` for a loss without runs)
    and ``agrees`` (the same direction on every seed).

    Raises
    ------
    ValueError
        ``reading`` holds a direction other than ``"over"`` and ``"under"``.
    """
    if set(reading.values()) - {"over", "under"}:
        raise ValueError(f"reading must map labels to 'over' or 'under'; got {dict(reading)}")
    found = {lab: d for d, labs in direction.items() for lab in labs}
    return pd.DataFrame([{"loss_label": lab, "theirs": DIRECTION_WORDS[expected].removesuffix(" on every seed"),
                          "here": DIRECTION_WORDS[found[lab]] if lab in found else NOT_RUN,
                          "agrees": found.get(lab) == expected} for lab, expected in reading.items()],
                        columns=["loss_label", "theirs", "here", "agrees"])


def training_progress(out: str | Path, table: pd.DataFrame, label: str = TARGET) -> dict[str, float]:
    """How far the runs of ``label`` in ``table`` (:func:`per_seed`) got on their training set, from
    their per-epoch records (``history.json``).

    Returns
    -------
    dict
        ``best_train_accuracy``: the highest training accuracy of any run at any epoch (measured
        during the epoch's training pass); ``final_train_nll_min`` / ``_max``: the range over runs of
        the last epoch's training NLL (nats); ``epochs``: the most epochs of a run. Empty without
        runs of ``label`` or without records.
    """
    best, final, epochs = [], [], []
    for run in table.loc[table["loss_label"] == label, "run"]:
        history = runfolder.read_history(runfolder.run_path(out, run))
        if not history:
            continue
        best.append(max(float(h["train_accuracy"]) for h in history))
        final.append(float(history[-1]["train_nll"]))
        epochs.append(len(history))
    if not best:
        return {}
    return {"best_train_accuracy": max(best), "final_train_nll_min": min(final),
            "final_train_nll_max": max(final), "epochs": max(epochs)}


def target_facts(out: str | Path, table: pd.DataFrame, *, n_classes: int, target: str = TARGET) -> dict[str, Any]:
    """How well ``target``'s networks learned, to read before its verdicts (numbers only).

    ``accuracy``: its test accuracy per seed (%); ``others_lo`` / ``others_hi``: the least and
    largest mean test accuracy of the other losses (%); ``far_below``: every seed more than 5 points
    below the worst other loss's mean; :func:`training_progress`'s figures (NaN without records);
    ``uniform_nll`` (``log K``); ``near_uniform_lo`` / ``_hi``: the range over seeds of the share of
    test images whose top-class probability is below ``near_uniform_at`` (``2 / K``, %) and
    ``others_near_uniform`` (the other losses' largest, %); ``mostly_uniform``: above one half on
    every seed. ``present``: whether ``target`` has runs (then the numbers are NaN otherwise).
    """
    if n_classes < 2:
        raise ValueError(f"n_classes must be at least 2; got {n_classes}")
    mine = table["loss_label"] == target
    others = table.loc[~mine].groupby("loss_label", sort=False)["accuracy"].mean()
    acc = 100 * table.loc[mine, "accuracy"].to_numpy(dtype=float)
    share = 100 * table.loc[mine, "near_uniform"].to_numpy(dtype=float)
    nan = float("nan")
    progress = training_progress(out, table, target)
    present = bool(mine.any()) and len(others) > 0
    return {"present": present, "accuracy": acc,
            "others_lo": 100 * float(others.min()) if len(others) else nan,
            "others_hi": 100 * float(others.max()) if len(others) else nan,
            "far_below": present and bool(acc.max() < 100 * others.min() - 5),
            "best_train_accuracy": 100 * progress.get("best_train_accuracy", nan),
            "epochs": progress.get("epochs", 0), "final_train_nll_min": progress.get("final_train_nll_min", nan),
            "final_train_nll_max": progress.get("final_train_nll_max", nan), "uniform_nll": float(np.log(n_classes)),
            "near_uniform_at": 2 / n_classes, "near_uniform_lo": float(share.min()) if share.size else nan,
            "near_uniform_hi": float(share.max()) if share.size else nan,
            "others_near_uniform": 100 * float(table.loc[~mine, "near_uniform"].max()) if len(others) else nan,
            "mostly_uniform": bool(share.size) and bool(share.min() > 50)}


def _range(values: np.ndarray) -> str:
    return f"{spread_text(values, scale=100)} %"


def _missing(table: pd.DataFrame, labels: Sequence[str]) -> str:
    absent = [lab for lab in labels if lab not in set(table["loss_label"])]
    return " and ".join(absent)


def calibration_claim(table: pd.DataFrame, quantities: Mapping[str, str], *,
                      target: str = TARGET) -> tuple[str, str]:
    """Claim 1, "the selective-risk loss is competitive in calibration", from :func:`per_seed`'s rows.

    One :func:`competitive` verdict per field of ``quantities`` (field -> name, e.g.
    ``{"ece_raw": "ECE"}``), joined by :func:`focalcal_book.verdicts.combine`. Returns the verdict
    and a Markdown bulleted list with one item per quantity: the values (mean and seed range, %), the best other loss, the
    verdict in bold, and on how many seeds ``target`` is below cross-entropy.
    """
    if not quantities:
        raise ValueError("quantities must name at least one column")
    verdicts, items = [], []
    for field, name in quantities.items():
        c = competitive(table, field, target=target)
        verdicts.append(c["verdict"])
        if c["verdict"] == NOT_RUN:
            lacking = _missing(table, [target]) or "any other loss"
            items.append(f"- {name}: {NOT_RUN} (no runs of {lacking}).")
            continue
        text = (f"- {name}: {target} {_range(c['target_values'])}; the best other loss, {c['best']}, "
                f"{_range(c['best_values'])}: **{c['verdict']}**.")
        if c["n_paired"]:
            text += f" Below {BASELINE}'s {name} on {c['below_baseline']} of {c['n_paired']} seeds."
        items.append(text)
    return combine(verdicts), "\n".join(items)


def aurc_claim(table: pd.DataFrame, scores: Mapping[str, str], *, prefix: str = "aurc",
               target: str = TARGET, baseline: str = BASELINE) -> tuple[str, str]:
    """Claim 2, "the selective-risk loss has a lower AURC than cross-entropy", per confidence score.

    One :func:`lower_than` verdict on the column ``f"{prefix}_{s}"`` per score ``s`` of ``scores``
    (score -> name), joined by :func:`focalcal_book.verdicts.combine`. Returns the verdict and a Markdown bulleted list:
    per score the two losses' values (mean and seed range, %), the verdict in bold and the number
    of seeds on which ``target`` is lower.
    """
    if not scores:
        raise ValueError("scores must name at least one confidence score")
    verdicts, items = [], []
    name = {"aurc": "AURC", "eaurc": "E-AURC"}.get(prefix, prefix)
    for s, score_name in scores.items():
        c = lower_than(table, f"{prefix}_{s}", target=target, baseline=baseline)
        verdicts.append(c["verdict"])
        if c["verdict"] == NOT_RUN:
            items.append(f"- {name}, {score_name}: {NOT_RUN} (no runs of {_missing(table, [target, baseline])}).")
            continue
        items.append(f"- {name}, {score_name}: {target} {_range(c['target_values'])}, {baseline} "
                     f"{_range(c['baseline_values'])}: **{c['verdict']}**; lower on {c['lower_paired']} "
                     f"of {c['n_paired']} seeds.")
    return combine(verdicts), "\n".join(items)


# --------------------------------------------------------------------------------------------
# the claims as Zhou et al. wrote them, per variant of their loss, behind the failed-experiment rule
# --------------------------------------------------------------------------------------------

def failed_losses(table: pd.DataFrame, n_classes: int, *, fraction: float = TRAINED_FRACTION) -> list[str]:
    """The losses of ``table`` (:func:`per_seed`) whose networks did not train:
    :func:`focalcal_book.verdicts.untrained` on each seed's test accuracy."""
    return untrained(table.groupby("loss_label", sort=False)["accuracy"].apply(list).to_dict(), n_classes,
                     fraction=fraction)


def csf_sensitivity(table: pd.DataFrame, failed: Sequence[str] = ()) -> str:
    """Zhou et al.'s reading of their Fig. 2, "the calibration performance of [their loss] exhibits
    noticeable sensitivity to the choice of CSF", in this one setting.

    ``table``: :func:`per_seed` rows of the losses of :data:`CSF_LABELS`. :data:`HOLDS` when the
    seed ranges of the test ECE before TS of two CSFs separate
    (:func:`~focalcal_book.verdicts.compare_ranges`); :data:`NOT_RESOLVED` when every pair overlaps
    (a few seeds cannot show that the ECE does not depend on the CSF); :data:`NOT_RUN` with fewer
    than two CSFs' runs; :data:`NOT_TRAINED` when one of them is in ``failed``.
    """
    labels = [lab for lab in CSF_LABELS.values() if lab in set(table["loss_label"])]
    if len(labels) < 2:
        return NOT_RUN

    def verdict() -> str:
        values = [_values(table, lab, "ece_raw") for lab in labels]
        apart = any(compare_ranges(a, b) != NOT_RESOLVED
                    for i, a in enumerate(values) for b in values[i + 1:])
        return HOLDS if apart else NOT_RESOLVED

    return gate(labels, failed, verdict)


def versus_baselines(table: pd.DataFrame, target: str, failed: Sequence[str] = ()) -> pd.DataFrame:
    """The rows of ``target`` and of the :data:`BASELINES` that trained: what ``target`` is
    compared with (the other variants of the selective-risk loss are not its competitors)."""
    keep = [target, *(b for b in BASELINES if b not in failed)]
    return table[table["loss_label"].isin(keep)]


def _left_out(table: pd.DataFrame, failed: Sequence[str]) -> list[str]:
    # a baseline that was run but did not train leaves the comparison incomplete: partly tested
    return [NOT_TRAINED for b in BASELINES if b in failed and b in set(table["loss_label"])]


def good_calibration(table: pd.DataFrame, target: str, failed: Sequence[str]) -> str:
    """Sec. 5's "demonstrates good calibration performance compared to baseline methods" for
    ``target``: :func:`competitive` in ECE and in cwECE before TS against the baselines that
    trained, joined by :func:`focalcal_book.verdicts.combine`; :data:`NOT_TRAINED` when ``target``
    did not train, partly tested when a baseline did not."""
    def verdict() -> str:
        sub = versus_baselines(table, target, failed)
        return combine([competitive(sub, c, target=target)["verdict"] for c in ("ece_raw", "cwece_raw")]
                       + _left_out(table, failed))
    return gate([target], failed, verdict) if target in set(table["loss_label"]) else NOT_RUN


def best_cwece(table: pd.DataFrame, target: str, failed: Sequence[str]) -> dict[str, Any]:
    """App. E.3's "achieving the best cwECE in the majority of cases" for ``target``. A case is a
    data set and network; in this table's one case ``target`` is the best when every seed's cwECE
    (before TS) is below every seed's of each trained baseline (:func:`compare_ranges`), and
    decidedly not when some baseline's seeds are all below its. The claim is a majority over cases
    (:func:`focalcal_book.verdicts.majority`), so one case never resolves it. Returns ``verdict``
    and ``case`` (the one case's verdict)."""
    if target not in set(table["loss_label"]):
        return {"verdict": NOT_RUN, "case": NOT_RUN}
    if target in failed:
        return {"verdict": NOT_TRAINED, "case": NOT_TRAINED}
    sub = versus_baselines(table, target, failed)
    t = _values(sub, target, "cwece_raw")
    per = [compare_ranges(t, _values(sub, b, "cwece_raw")) for b in BASELINES if b in set(sub["loss_label"])]
    case = HOLDS if per and all(v == HOLDS for v in per) else DOES_NOT_HOLD if DOES_NOT_HOLD in per else NOT_RESOLVED
    verdict = majority([case == HOLDS], decided=[case != NOT_RESOLVED])
    return {"verdict": combine([verdict, *_left_out(table, failed)]), "case": case}


def ts_improves(table: pd.DataFrame, target: str, failed: Sequence[str]) -> str:
    """App. E.3's "its calibration performance can be further enhanced with TS": ``target``'s
    cwECE after TS below its cwECE before, seed by seed (:func:`focalcal_book.verdicts.paired`)."""
    if target not in set(table["loss_label"]):
        return NOT_RUN
    g = table[table["loss_label"] == target]
    return gate([target], failed, lambda: paired((g["cwece_ts"] - g["cwece_raw"]).to_numpy()))


# --------------------------------------------------------------------------------------------
# the mechanism: the logit gradient split by the product rule
# --------------------------------------------------------------------------------------------

def gradient_decomposition(logits: Any, labels: Any, **loss_params: Any) -> dict[str, Any]:
    """The gradient of ``selective_risk_loss(logits, labels, **loss_params)`` (mean over the batch)
    with respect to the logits, split by the product rule into its cross-entropy part
    ``beta_i dCE_i/dz_i / N`` and its weight part ``CE_i dbeta_i/dz_i / N`` (their sum is the
    gradient), in float64.

    ``loss_params`` are :func:`focalcal.losses.selective_risk_loss`'s (``variant``, ``score``,
    ``coverage``, ``nu``, ...; the released variant's histogram is then the batch's). The CE part
    is the gradient of ``mean_i b_i CE_i`` with the weights ``b_i`` read off the loss's per-sample
    values and held fixed; the weight part is the rest.

    Returns
    -------
    dict
        ``ce_norm``, ``weight_norm``, ``total_norm`` (Frobenius norms of the ``(N, K)`` parts and
        of the gradient), ``n``, ``n_correct`` (samples whose top logit is the label's),
        ``pushed_down`` (of those, how many the gradient step pushes the true-class logit down:
        its gradient entry is positive) and ``pushed_down_fraction`` (NaN without a correct
        sample); ``ce_grad``, ``weight_grad`` (the two ``(N, K)`` parts).
    """
    import torch
    import torch.nn.functional as F

    from focalcal.losses import selective_risk_loss

    z = torch.as_tensor(logits, dtype=torch.float64)
    t = torch.as_tensor(labels)
    if z.ndim != 2 or t.shape != z.shape[:1]:
        raise ValueError(f"logits must have shape (N, K) and labels (N,); got {tuple(z.shape)} and {tuple(t.shape)}")
    for k in ("reduction", "ignore_index"):
        if k in loss_params:
            raise ValueError(f"loss_params must not set {k}: the decomposition is of the mean over the batch")
    z_tot = z.clone().requires_grad_()
    per_sample = selective_risk_loss(z_tot, t, reduction="none", **loss_params)
    per_sample.mean().backward()
    ce = F.cross_entropy(z, t, reduction="none")
    beta = torch.where(ce > 0, per_sample.detach() / ce.clamp_min(torch.finfo(z.dtype).tiny), 0.0)
    z_ce = z.clone().requires_grad_()
    (beta * F.cross_entropy(z_ce, t, reduction="none")).mean().backward()
    total, ce_part = z_tot.grad, z_ce.grad
    weight_part = total - ce_part
    correct = z.argmax(1) == t
    down = total.gather(1, t.unsqueeze(1)).squeeze(1) > 0
    n_correct = int(correct.sum())
    pushed = int((correct & down).sum())
    return {"ce_norm": float(ce_part.norm()), "weight_norm": float(weight_part.norm()),
            "total_norm": float(total.norm()), "n": int(z.shape[0]), "n_correct": n_correct,
            "pushed_down": pushed, "pushed_down_fraction": pushed / n_correct if n_correct else float("nan"),
            "ce_grad": ce_part, "weight_grad": weight_part}


def initial_network_state(*, seed: int = 0, n: int | None = None, profile: str = "cpu",
                          label: str = TARGET) -> tuple[Any, Any]:
    """Logits and labels of a freshly initialised network of ``profile``'s ``label`` run of seed
    ``seed`` (its data set, network and training subset, initialised as that run is, in training
    mode) on the first ``n`` images of a training loader shuffled with that seed (augmented as in
    training), without gradient: the state before the first step, for :func:`gradient_decomposition`.
    ``n`` defaults to the run's batch size (32 in the cpu profile: the batch whose histogram the
    loss sees in training; Zhou et al. train on 128).

    Raises
    ------
    ValueError
        ``profile`` has no run of ``label`` and ``seed`` in its comparison.
    """
    import json as _json

    import torch

    from focalcal.lab.data import make_loaders
    from focalcal.lab.models import make_model
    from focalcal.lab.profiles import get_profile

    runs = [r for r in get_profile(profile).runs_of("comparison") if r.loss.display == label and r.seed == seed]
    if not runs:
        raise ValueError(f"profile {profile!r} has no run of {label!r} with seed {seed} in its comparison")
    run = runs[0]
    train = dict(run.train)
    loaders = make_loaders(run.dataset, train["batch_size"] if n is None else n, seed=seed,
                           subset=template.subset_sizes(train.get("train_subset", 0), train.get("eval_subset", 0)))
    net = make_model(run.model, loaders.info.n_classes, loaders.info.in_channels, seed=seed,
                     **_json.loads(_json.dumps(dict(run.model_params))))
    x, y = next(iter(loaders.train))
    net.train()
    with torch.no_grad():
        return net(x).double(), y


def mechanism_table(profile: str, *, shrunk: bool = False) -> pd.DataFrame:
    """:func:`gradient_decomposition` at initialisation (:func:`initial_network_state`) for every
    variant of the selective-risk loss and every seed that ``profile`` trains it with, each with
    the parameters of its run. One row per variant and seed: ``variant``, ``seed``, ``ce_norm``,
    ``weight_norm``, ``ratio`` (weight over CE part), ``n_correct``, ``pushed_down``. Empty when
    the profile trains no variant (the smoke profile) or is ``shrunk`` (the measurement is of the
    profile's own network and data)."""
    from focalcal.lab.profiles import get_profile

    specs = [] if shrunk else [r for r in get_profile(profile).runs_of("comparison") if r.loss.display in TARGETS]
    rows = []
    for run in specs:
        z, y = initial_network_state(seed=run.seed, profile=profile, label=run.loss.display)
        d = gradient_decomposition(z, y, **dict(run.loss.params))
        rows.append({"variant": run.loss.display, "seed": run.seed, "ce_norm": d["ce_norm"],
                     "weight_norm": d["weight_norm"], "ratio": d["weight_norm"] / d["ce_norm"],
                     "n_correct": d["n_correct"], "pushed_down": d["pushed_down"]})
    return pd.DataFrame(rows, columns=["variant", "seed", "ce_norm", "weight_norm", "ratio", "n_correct",
                                       "pushed_down"])


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------

def aurc_ece_plot(table: pd.DataFrame, *, score: str = "msp", score_name: str = "MSP"):
    """AURC (left) and E-AURC (right) under ``score`` (log scale) against the test ECE, in percent,
    one marker per loss at the mean over seeds with bars spanning the seeds' range on both axes.

    Colours and line styles per loss: :func:`focalcal.lab.results.figures.loss_styles`.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    from focalcal import plotting
    from focalcal.lab.results.figures import loss_styles

    for col in ("ece_raw", f"aurc_{score}", f"eaurc_{score}"):
        if col not in table.columns:
            raise ValueError(f"table must have the column {col!r} (score={score!r})")
    labels = list(dict.fromkeys(table["loss_label"]))
    styles = loss_styles(labels)
    fig, axes = plt.subplots(1, 2, figsize=(plotting.FIGURE_WIDTH_IN, 3.6), sharex=True)
    for ax, (col, name) in zip(axes, ((f"aurc_{score}", "AURC"), (f"eaurc_{score}", "E-AURC"))):
        for lab in labels:
            g = table[table["loss_label"] == lab]
            x, y = 100 * g["ece_raw"].to_numpy(), 100 * g[col].to_numpy()
            c, ls = styles[lab]
            bars = ax.errorbar(x.mean(), y.mean(), xerr=[[x.mean() - x.min()], [x.max() - x.mean()]],
                               yerr=[[y.mean() - y.min()], [y.max() - y.mean()]], fmt="o", color=c, ms=6,
                               elinewidth=1.4, capsize=3, label=lab)
            bars[-1][0].set_linestyle(ls)
            bars[-1][1].set_linestyle(ls)
        ax.set_xlabel("test ECE (%, 15 equal-width bins)")
        # log scale: a loss that did not learn (AURC near its error rate) would flatten the others
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        ticks = [t for t in (0.5, 1, 2, 3, 5, 7, 10, 20, 30, 50, 100) if lo <= t <= hi]
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(f"test {name}, {score_name} (%, log scale)")
    handles, names = axes[0].get_legend_handles_labels()
    ncol = min(4, len(names))
    fig.legend(handles, names, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, 0.0), fontsize=9)
    fig.tight_layout(rect=(0, 0.08 * -(-len(names) // ncol), 1, 1))
    return fig, axes


def reliability_figures(out: str | Path, table: pd.DataFrame, *, seed: int = 0, per_row: int = 4,
                        n_bins: int = 15) -> list[Any]:
    """Zhou et al.'s Fig. 3 for one seed: a reliability diagram of every loss's test logits (15
    equal-width bins, :func:`focalcal_book.released.reliability_row`), at most ``per_row`` panels to
    a figure (rows balanced), so that each stays readable at the book's width. Losses without a run of ``seed`` are
    left out; returns the figures (none when no loss has one).
    """
    from focalcal.lab.results import load_run
    from focalcal_book.released import reliability_row

    if per_row < 1:
        raise ValueError(f"per_row must be a positive number of panels; got {per_row}")
    rows = table[table["seed"] == seed]
    panels = []
    for r in rows.itertuples(index=False):
        run = load_run(runfolder.run_path(out, r.run))
        panels.append((run.test_logits, run.test_labels, r.loss_label, r.loss_label))
    # balanced rows (7 panels: 4 + 3, 5: 3 + 2), so that no figure is a lone narrow panel
    size = -(-len(panels) // -(-len(panels) // per_row)) if panels else per_row
    figs = []
    for i in range(0, len(panels), size):
        fig, _ = reliability_row(panels[i:i + size], n_bins=n_bins)
        figs.append(fig)
    return figs


# ------------------------------------------------------------------ App. E: cross-validation ---
#: the parameter each loss family selects by cross-validation (App. E)
SELECTED_PARAMETER: dict[str, str] = {"inverse_focal": "gamma", "dual_focal": "gamma", "selective_risk": "coverage"}
_AXIS = {"gamma": r"$\gamma$", "coverage": "low-confidence coverage"}
_NETWORKS = ("CIFAR-10 ResNet-50", "CIFAR-10 ResNet-110", "CIFAR-10 WRN", "CIFAR-10 PreResNet-56",
             "CIFAR-100 ResNet-50", "CIFAR-100 ResNet-110", "CIFAR-100 WRN", "CIFAR-100 PreResNet-56",
             "Tiny-ImageNet ViT-Small", "Tiny-ImageNet Swin-Tiny")
#: Zhou et al.'s selected values, App. E, Table 2 (gamma) and Table 3 (low-confidence coverage)
PAPER_SELECTED: dict[str, dict[str, float]] = {
    "inverse_focal": dict(zip(_NETWORKS, (2.0, 3.0, 1.5, 2.0, 1.0, 1.5, 1.0, 1.0, 1.0, 1.0))),
    "dual_focal": dict(zip(_NETWORKS, (5.0, 4.5, 2.6, 4.0, 5.0, 6.1, 3.9, 4.5, 1.0, 1.0))),
    "selective_risk": dict(zip(_NETWORKS, (0.9, 0.9, 0.8, 0.8, 0.9, 0.8, 0.8, 0.9, 0.2, 0.4)))}


def selection_table(out: str | Path, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run of ``runs`` (rows of the sweep's results of the ``selection`` role): its
    ``family`` (the loss), ``parameter`` and ``value`` (:data:`SELECTED_PARAMETER`), ``seed``, and
    its validation ``val_nll``, ``val_accuracy`` and ``val_aurc`` (MSP) and ``test_accuracy``
    (fractions), from the logits the run saved."""
    from focalcal import metrics
    from focalcal.lab.results import load_run

    rows = []
    for r in runs.drop_duplicates("run").itertuples(index=False):
        run = load_run(runfolder.run_path(out, r.run))
        family = run.config["loss"]
        name = SELECTED_PARAMETER[family]
        value = loss_parameters(family, run.loss_params)[name]
        zv, yv = run.val_logits, run.val_labels
        rows.append({"run": r.run, "loss_label": r.loss_label, "family": family, "parameter": name,
                     "value": float(value), "seed": int(r.seed), "val_nll": metrics.nll(logits=zv, labels=yv),
                     "val_accuracy": metrics.accuracy(logits=zv, labels=yv), "val_aurc": metrics.aurc(logits=zv, labels=yv),
                     "test_accuracy": metrics.accuracy(logits=run.test_logits, labels=run.test_labels)})
    return pd.DataFrame(rows).sort_values(["family", "value", "seed"], kind="stable").reset_index(drop=True)


def selected(table: pd.DataFrame, by: str = "val_nll") -> pd.DataFrame:
    """Per family of :func:`selection_table`: the value of least mean ``by`` over seeds, the value
    each seed selects (text), and Zhou et al.'s selections (:data:`PAPER_SELECTED`) as a range."""
    from focalcal.losses import DISPLAY_NAMES

    rows = []
    for family, t in table.groupby("family", sort=False):
        means = t.groupby("value")[by].mean()
        per_seed = t.loc[t.groupby("seed")[by].idxmin()].sort_values("seed")
        paper = sorted(PAPER_SELECTED[family].values())
        rows.append({"training loss": DISPLAY_NAMES[family], "parameter": t["parameter"].iloc[0], "grid": ", ".join(f"{v:g}" for v in means.index),
                     "selected": float(means.idxmin()), "per seed": ", ".join(f"{v:g}" for v in per_seed["value"]),
                     "Zhou et al. (Tables 2-3)": f"{paper[0]:g} to {paper[-1]:g}",
                     "Zhou et al., CIFAR-10 ResNet-50": PAPER_SELECTED[family][_NETWORKS[0]]})
    return pd.DataFrame(rows)


def large_gamma_underperforms(table: pd.DataFrame, by: str = "val_nll", *, threshold: float = 4.0) -> str:
    """Their App. E.1 reading of Fig. 4a, for inverse focal loss: on every seed the best ``gamma >=
    threshold`` has a higher validation ``by`` than the best ``gamma < threshold``
    (:func:`focalcal_book.verdicts.every_seed`); :data:`NOT_RUN` without both sides."""
    from focalcal_book.verdicts import every_seed

    t = table[table["family"] == "inverse_focal"]
    big, small = t[t["value"] >= threshold], t[t["value"] < threshold]
    seeds = sorted(set(big["seed"]) & set(small["seed"]))
    if not seeds:
        return NOT_RUN
    return every_seed([big.loc[big["seed"] == s, by].min() > small.loc[small["seed"] == s, by].min() for s in seeds])


def plot_selection(table: pd.DataFrame, columns: Mapping[str, str]):
    """One row of panels per quantity of ``columns`` (column -> axis label), one column per family:
    the quantity against the family's parameter, each seed a dot, the mean over seeds a line."""
    import matplotlib.pyplot as plt

    from focalcal.losses import DISPLAY_NAMES
    from focalcal.plotting import FIGURE_WIDTH_IN, color

    families = list(dict.fromkeys(table["family"]))
    fig, axes = plt.subplots(len(columns), len(families), figsize=(FIGURE_WIDTH_IN, 2.3 * len(columns)),
                             squeeze=False, sharex="col", layout="constrained")
    for j, family in enumerate(families):
        t = table[table["family"] == family]
        for i, (col, label) in enumerate(columns.items()):
            ax = axes[i, j]
            ax.plot(t["value"], t[col], "o", color=color(family), alpha=0.5, label="one seed")
            mean = t.groupby("value")[col].mean()
            ax.plot(mean.index, mean.values, "-", color=color(family), label="mean over seeds")
            ax.set(ylabel=label, title=DISPLAY_NAMES[family] if i == 0 else "",
                   xlabel=_AXIS[t["parameter"].iloc[0]] if i == len(columns) - 1 else "")
    axes[0, -1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return fig


#: how each of the page's claims is tested (the thresholds are the book's)
RULES: dict[str, str] = {
    "good": "ECE and cwECE before TS: every seed at most the worst seed of the best baseline that trained",
    "best": "a case is a data set and network; the variant is best in a case when its cwECE is below every "
            "trained baseline's on every seed; more than half of the cases (one here)",
    "ts": "cwECE after TS below cwECE before, on every seed",
    "dual": "claim 1's rule for dual focal loss against the other trained losses of Table 1",
    "variable": "needs several architectures and data sets; this comparison has one",
    "csf": "the detached variant under each CSF; the test ECE before TS of two CSFs apart on every seed (seed "
           "ranges separate); a majority of settings needs several, this comparison has one",
    "cv": "inverse focal loss on a grid of gamma: on every seed, the least validation NLL over gamma >= 4 above "
          "the least over gamma < 4"}
