"""When does Psi help? The capacity and data-size sweep of ``book/experiments/psi_capacity.md``.

Charoenphakdee et al. (2021), Sec. 6 (Figs. 4-6), at Fashion-MNIST scale: MLPs of two capacities
trained with the focal loss at several ``gamma`` (and with label smoothing), on two training-set
sizes, and the test ECE of each network as it comes out of training ("ECE-raw") and after their
correction ``Psi^gamma`` with the training ``gamma`` ("ECE-Psi"); the same after TS_FL, the
temperature that minimises the focal loss with the training ``gamma`` on the validation set
(:class:`focalcal.posthoc.TemperatureScaling` with ``criterion="focal"``).

- :func:`psi_runs`: the sweep's runs of this chapter, selected by their configuration (the
  curvature chapter's MLPs carry the same loss labels and are left out);
- :func:`psi_table`: one row per run with the raw, Psi, TS_FL and TS_FL + Psi test ECE and the
  network's confidence gap;
- :func:`best_gammas`, :func:`share_verdict`, :func:`confidence_classes` and the ``*_claim``
  functions: what the verdicts decide (the verdicts and the seed rules are
  :mod:`focalcal_book.verdicts`'s);
- :func:`plot_ece_vs_gamma`, :func:`plot_psi_effect`: the figures.

ECE throughout: 15 equal-width bins (the ``ece_width`` column of the results; the paper uses 10),
as fractions (the page shows percent).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from focalcal.lab import profiles, runfolder
from focalcal.lab.results import apply_calibration, confidence_row, load_run, training_gamma
from focalcal.lab.results.protocol import fit_on_grid
from focalcal.metrics import ece
from focalcal.posthoc import TemperatureScaling
from focalcal_book.verdicts import (DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_RUN, combine, compare_ranges, every_step,
                                    falling_steps, majority, paired, spread_text)

__all__ = ["LOSSES", "GAMMA_CLAIM_COLUMNS", "GAMMA_CLAIM_FORMATS", "psi_runs", "setting_name", "profile_plan", "psi_table", "plot_reliability_grid",
           "settings", "roles", "best_gammas", "share_verdict", "confidence_classes",
           "best_gamma_claim", "psi_gain", "less_effective_claim", "per_seed_table", "tsfl_claim", "improves_most", "tsfl_degrades",
           "plot_ece_vs_gamma", "plot_psi_effect", "RULES", "claims"]

#: the training losses of the chapter (``config["loss"]``)
LOSSES: tuple[str, ...] = ("focal", "label_smoothing")


def setting_name(hidden: Sequence[int], n_train: int, in_features: int = 784, n_classes: int = 10) -> str:
    """``"784-64-10 MLP, 4,000 images"``: a network by its layer widths and its training-set size
    (``n_train = 0``, a profile's setting for the whole training split: "all images")."""
    widths = "-".join(str(int(w)) for w in (in_features, *hidden, n_classes))
    return f"{widths} MLP, {f'{int(n_train):,}' if n_train else 'all'} images"


def psi_runs(out: str | Path, results, *, paradigm: str = "standard") -> Any:
    """The runs of ``results`` trained with a loss of :data:`LOSSES`: the page passes the rows of
    the sweep's ``psi`` role (``focalcal.lab.results.runs_for(out, "psi")``), the MLPs of this
    chapter (the curvature chapter's share the network and the loss labels, under another role).

    ``paradigm="standard"``: one-hot labels (focal loss) and the label-smoothing networks (at
    ``gamma = 0``, a point beside the ``gamma`` axis); ``"LS"``: their LS paradigm, the focal loss
    trained against smoothed labels, with the label-smoothing networks as its ``gamma = 0``.

    Returns
    -------
    DataFrame
        One row per run: ``run``, ``loss``, ``loss_label``, ``gamma`` (the focal ``gamma`` of
        Psi and TS_FL, :func:`focalcal.lab.results.training_gamma`; 0 for label smoothing),
        ``seed``, ``hidden`` (tuple of widths), ``in_features``, ``n_train`` (training images,
        from ``config.json``'s data sizes), ``n_params`` (weights and biases of the MLP),
        ``epochs`` and ``setting`` (:func:`setting_name`).
    """
    import pandas as pd

    cols = ["run", "loss", "loss_label", "gamma", "seed", "hidden", "in_features", "n_train", "n_params",
            "epochs", "setting"]
    if paradigm not in ("standard", "LS"):
        raise ValueError(f"paradigm must be 'standard' or 'LS', got {paradigm!r}")
    r = results.drop_duplicates("run")
    r = r[r["loss"].isin(LOSSES)]
    rows = []
    for rec in r.to_dict("records"):
        blob = runfolder.read_config(runfolder.run_path(out, rec["run"]))
        config = blob["config"]
        lp = config.get("loss_params") or "{}"
        lp = json.loads(lp) if isinstance(lp, str) else dict(lp)
        if rec["loss"] == "focal" and bool(lp.get("label_smoothing")) != (paradigm == "LS"):
            continue
        mp = config.get("model_params") or "{}"
        mp = json.loads(mp) if isinstance(mp, str) else dict(mp)
        hidden = tuple(int(w) for w in mp.get("hidden", ()))
        in_features = int(mp.get("in_features", 784))
        widths = (in_features, *hidden, 10)
        n_params = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
        n_train = int(blob["data"]["train"])
        rows.append({"run": rec["run"], "loss": rec["loss"], "loss_label": rec["loss_label"],
                     "gamma": training_gamma(rec["loss"], lp), "seed": int(rec["seed"]), "hidden": hidden,
                     "in_features": in_features, "n_train": n_train, "n_params": n_params,
                     "epochs": int(config["epochs"]), "setting": setting_name(hidden, n_train, in_features)})
    out = pd.DataFrame(rows, columns=cols)
    if paradigm == "LS":  # the label-smoothing networks of the settings the paradigm trains
        out = out[out["setting"].isin(set(out.loc[out["loss"] == "focal", "setting"]))].reset_index(drop=True)
    return out


def profile_plan(profile: str = "cpu", *, shrunk: bool = False) -> dict[str, Any]:
    """What a sweep profile trains for this chapter (read from :mod:`focalcal.lab.sweep`, so the
    page can state it without hard-coding it): ``settings`` (:func:`setting_name`, in the
    profile's order), ``runs``, ``gammas`` (focal), ``ls_alpha`` (label smoothing, or ``None``),
    ``seeds`` (number) and ``epochs``: the runs of its ``psi`` role (of its
    :func:`~focalcal.lab.profiles.shrink` version with ``shrunk``) with a loss of :data:`LOSSES`,
    but the LS paradigm's, which ``ls_paradigm`` counts.

    Raises
    ------
    ValueError
        Unknown ``profile`` (the message of :func:`focalcal.lab.profiles.get_profile`), or a profile
        without such runs.
    """
    every = [r for r in profiles.get_profile(profile, shrunk=shrunk).runs_of("psi") if r.loss.name in LOSSES]
    if not every:
        raise ValueError(f"profile {profile!r} has no runs of the Psi chapter")
    runs = [r for r in every if not dict(r.loss.params).get("label_smoothing")]
    names = list(dict.fromkeys(setting_name(dict(r.model_params)["hidden"], dict(r.train)["train_subset"],
                                            dict(r.model_params).get("in_features", 784))
                               for r in runs))
    alphas = [dict(r.loss.params)["alpha"] for r in runs if r.loss.name == "label_smoothing"]
    return {"settings": names, "runs": len(runs),
            "gammas": sorted({float(dict(r.loss.params)["gamma"]) for r in runs if r.loss.name == "focal"}),
            "ls_alpha": float(alphas[0]) if alphas else None, "seeds": len({r.seed for r in runs}),
            "epochs": int(dict(runs[0].train)["epochs"]), "ls_paradigm": len(every) - len(runs)}


def _gap_se(z: torch.Tensor, y: torch.Tensor) -> float:
    """Standard error of the confidence gap: confidence minus correctness, averaged over the images."""
    per_sample = torch.softmax(z, -1).amax(-1) - (z.argmax(-1) == y).double()
    return float(per_sample.std() / math.sqrt(per_sample.numel()))


def psi_table(out: str | Path, runs, results) -> Any:
    """One row per run of ``runs`` (:func:`psi_runs`): the chapter's test-set numbers.

    Columns of ``runs`` plus, on the test set (fractions): ``accuracy``, ``confidence`` (mean top
    probability of ``softmax(z)``), ``gap`` = confidence - accuracy (negative: under-confident) and ``gap_se``
    (its standard error over the test images), ``gap_val`` and ``gap_val_se`` (the same on the
    validation images, which predict Psi's effect on the test images without seeing them),
    ``confidence_psi`` and ``gap_psi`` (the same after Psi), ``ece_raw`` and ``ece_psi`` (the
    "uncalibrated" and "Psi" rows of ``results``, 15 equal-width bins), ``t_fl`` (the TS_FL
    temperature: the focal loss with the training ``gamma`` minimised on the validation logits),
    ``ece_tsfl`` and ``ece_tsfl_psi`` (TS_FL's test ECE without and with Psi).
    """
    import pandas as pd

    rows = []
    for rec in runs.to_dict("records"):
        rr = results[results["run"] == rec["run"]].set_index("method")
        run = load_run(runfolder.run_path(out, rec["run"]))
        z, y = run.test_logits.double(), run.test_labels
        raw = confidence_row(z, y)
        gap_se = _gap_se(z, y)
        zv, yv = run.val_logits.double(), run.val_labels
        val = confidence_row(zv, yv)
        psi_lp = apply_calibration(rr.loc["Psi"], z)  # the stored row: Psi with the training gamma
        conf_psi = float(psi_lp.exp().amax(-1).mean())
        g = float(rec["gamma"])
        ts = fit_on_grid(TemperatureScaling("focal", gamma=g), run.val_logits.double(), run.val_labels)
        # the results' ECE (metric_row's ece_width): 15 equal-width bins
        tsfl = float(ece(logits=ts(z), labels=y, n_bins=15, binning="width"))
        ts.set_params(psi=True)  # same temperature, Psi after it (Charoenphakdee's ECE-Psi of TS_FL)
        tsfl_psi = float(ece(logits=ts(z), labels=y, n_bins=15, binning="width"))
        rows.append({**rec, "accuracy": raw["accuracy"], "confidence": raw["confidence"],
                     "gap": raw["confidence"] - raw["accuracy"], "gap_se": gap_se,
                     "gap_val": val["confidence"] - val["accuracy"], "gap_val_se": _gap_se(zv, yv),
                     "confidence_psi": conf_psi,
                     "gap_psi": conf_psi - raw["accuracy"],
                     "ece_raw": float(rr.loc["uncalibrated", "ece_width"]),
                     "ece_psi": float(rr.loc["Psi", "ece_width"]), "t_fl": ts.temperature_,
                     "ece_tsfl": tsfl, "ece_tsfl_psi": tsfl_psi})
    return pd.DataFrame(rows)


def settings(table) -> Any:
    """One row per setting of ``table``, ordered by training-set size then network size:
    ``setting``, ``hidden``, ``n_params``, ``n_train``, ``seeds`` (number), ``gammas`` (tuple)."""
    import pandas as pd

    focal = table[table["loss"] == "focal"]
    rows = [{"setting": s, "hidden": g["hidden"].iloc[0], "n_params": int(g["n_params"].iloc[0]),
             "n_train": int(g["n_train"].iloc[0]), "seeds": int(g["seed"].nunique()),
             "gammas": tuple(sorted(focal.loc[focal["setting"] == s, "gamma"].unique()))}
            for s, g in table.groupby("setting", sort=False)]
    cols = ["setting", "hidden", "n_params", "n_train", "seeds", "gammas"]
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values(["n_train", "n_params"], ascending=[False, True]).reset_index(drop=True)


def roles(table) -> dict[str, str | None]:
    """Which settings the two comparisons of the paper need.

    ``small`` and ``large``: the networks with the fewest and the most parameters at the largest
    training-set size (the capacity comparison); ``large_small_data``: the largest network at the
    smallest training-set size (the data comparison, against ``large``). A role is ``None`` when
    the settings of ``table`` cannot fill it (one network only, or one size only).
    """
    s = settings(table)
    if s.empty:
        return {"small": None, "large": None, "large_small_data": None}
    n_max, n_min = s["n_train"].max(), s["n_train"].min()
    top = s[s["n_train"] == n_max].sort_values("n_params")
    small = top["setting"].iloc[0] if len(top) > 1 else None
    large = top["setting"].iloc[-1]
    big = top["n_params"].iloc[-1]
    low = s[(s["n_train"] == n_min) & (s["n_params"] == big)]
    small_data = low["setting"].iloc[0] if n_min < n_max and len(low) else None
    return {"small": small, "large": large, "large_small_data": small_data}


def best_gammas(table, setting: str, column: str = "ece_raw") -> dict[int, float]:
    """Per seed, the focal ``gamma`` with the least ``column`` in ``setting`` (ties: the smaller
    ``gamma``). Only focal-loss runs count (label smoothing is no point on the ``gamma`` axis)."""
    t = table[(table["setting"] == setting) & (table["loss"] == "focal")]
    out = {}
    for seed, g in t.groupby("seed"):
        g = g.sort_values(["gamma"])
        out[int(seed)] = float(g["gamma"].iloc[int(np.argmin(g[column].to_numpy()))])
    return out


def share_verdict(hits: int, n: int) -> str:
    """:data:`HOLDS` when all of ``n >= 2`` cases agree (``hits == n``), :data:`DOES_NOT_HOLD`
    when at most half do, :data:`NOT_RESOLVED` otherwise or with fewer than two cases.

    Raises
    ------
    ValueError
        ``hits`` outside ``[0, n]``.
    """
    if not 0 <= hits <= n:
        raise ValueError(f"hits must lie in [0, n], got hits={hits}, n={n}")
    if n < 2:
        return NOT_RESOLVED
    if hits == n:
        return HOLDS
    return DOES_NOT_HOLD if hits <= n / 2 else NOT_RESOLVED


def confidence_classes(gap: Sequence[float], gap_se: Sequence[float], change: Sequence[float],
                       seeds: Sequence[int], *, z: float = 2.0) -> dict[str, Any]:
    """Does the confidence gap say whether Psi helps?

    Psi raises the top probability (it undoes the focal loss's under-confidence), so it should
    lower the ECE of an under-confident network and can raise that of one that is calibrated
    already or over-confident. A network counts as under-confident when its gap
    (confidence - accuracy) lies more than ``z`` standard errors below zero (``gap_se``: the
    standard error of the mean of confidence minus correctness over the test set), else as
    calibrated or over-confident. ``change`` is the test ECE after Psi minus before, per network;
    ``seeds`` the network's seed (with fewer than two seeds in all, no verdict is resolved: one
    seed shows no spread).

    Returns
    -------
    dict
        ``under`` (number of under-confident networks), ``under_helped`` (of them, Psi lowered
        the ECE), ``rest`` (calibrated or over-confident), ``rest_hurt`` (of them, Psi raised the
        ECE), their verdicts ``under_verdict`` and ``rest_verdict`` (:func:`share_verdict`;
        :data:`NOT_RUN` where there is no such network) and ``verdict``
        (:func:`focalcal_book.verdicts.combine` of the two).

    Raises
    ------
    ValueError
        The three sequences differ in length, or ``z <= 0``.
    """
    g, se, c, sd = (np.asarray(v, dtype=float) for v in (gap, gap_se, change, seeds))
    if not g.shape == se.shape == c.shape == sd.shape:
        raise ValueError(f"gap, gap_se, change and seeds must have the same length, got {g.size}, "
                         f"{se.size}, {c.size} and {sd.size}")
    if not z > 0:
        raise ValueError(f"z must be > 0, got {z}")
    under = g < -z * se
    out = {"under": int(under.sum()), "under_helped": int(np.sum(under & (c < 0))),
           "rest": int((~under).sum()), "rest_hurt": int(np.sum(~under & (c > 0)))}
    one_seed = np.unique(sd).size < 2

    def verdict(hits: int, n: int) -> str:
        return NOT_RUN if n == 0 else NOT_RESOLVED if one_seed else share_verdict(hits, n)

    out["under_verdict"] = verdict(out["under_helped"], out["under"])
    out["rest_verdict"] = verdict(out["rest_hurt"], out["rest"])
    out["verdict"] = combine([out["under_verdict"], out["rest_verdict"]])
    return out


def _gamma_axis(ax, gammas: Sequence[float], with_ls: bool) -> float:
    # categorical gamma axis (the paper's box plots), label smoothing one slot to the right
    ticks = list(range(len(gammas))) + ([len(gammas) + 0.3] if with_ls else [])
    labels = [f"{g:g}" for g in gammas] + (["LS"] if with_ls else [])
    ax.set_xticks(ticks, labels)
    ax.set_xlabel(r"training $\gamma$" + (" (LS: label smoothing)" if with_ls else ""))
    return len(gammas) + 0.3


def plot_ece_vs_gamma(table, order: Sequence[str], pairs: Sequence[tuple[str, str, str]], *,
                      on_axis: Sequence[str] = ("focal",)):
    """One panel per setting in ``order``: test ECE (%) against the training ``gamma``, one point
    per seed and a line through the means, for each ``(column, label, colour key)`` of ``pairs``
    (e.g. raw and Psi, their Fig. 5; TS_FL and TS_FL + Psi, their Fig. 6), of the runs whose loss
    is in ``on_axis``. Other label smoothing runs (``gamma = 0``, no Psi) are drawn at an extra
    slot "LS" with the first pair's style (their LS paradigm passes ``on_axis=("focal",
    "label_smoothing")``: label smoothing is its ``gamma = 0``).

    Returns
    -------
    Figure
    """
    import matplotlib.pyplot as plt

    from focalcal.plotting import FIGURE_WIDTH_IN, color

    n = len(order)
    fig, axes = plt.subplots(1, n, figsize=(min(FIGURE_WIDTH_IN, 2.9 * n), 3.3), squeeze=False,
                             sharey=True)
    offsets = np.linspace(-0.12, 0.12, len(pairs))
    markers = ("o", "s", "^", "D")
    for ax, s in zip(axes[0], order):
        t = table[table["setting"] == s]
        focal = t[t["loss"].isin(list(on_axis))]
        gammas = sorted(focal["gamma"].unique())
        ls = t[(t["loss"] == "label_smoothing") & ~t["loss"].isin(list(on_axis))]
        x_ls = _gamma_axis(ax, gammas, with_ls=len(ls) > 0)
        for k, (col, label, key) in enumerate(pairs):
            c = color(key)
            means = [100 * focal.loc[focal["gamma"] == g, col].mean() for g in gammas]
            ax.plot(np.arange(len(gammas)) + offsets[k], means, color=c, lw=1.2, label=label)
            for i, g in enumerate(gammas):
                v = 100 * focal.loc[focal["gamma"] == g, col].to_numpy()
                ax.scatter(np.full(v.size, i + offsets[k]), v, color=c, marker=markers[k % 4], s=22,
                           zorder=3)
            if len(ls) and k == 0:
                ax.scatter(np.full(len(ls), x_ls), 100 * ls[col].to_numpy(), color=color("label smoothing"),
                           marker="*", s=50, zorder=3, label=f"label smoothing ({label})")
        ax.set_title(s.replace(" MLP, ", " MLP\n"), fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test ECE (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    # the pairs first, label smoothing last
    keep = sorted(range(len(labels)), key=lambda i: labels[i].startswith("label smoothing"))
    handles, labels = [handles[i] for i in keep], [labels[i] for i in keep]
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def plot_psi_effect(table, order: Sequence[str]):
    """Psi's change of the test ECE (percentage points, negative: Psi helps) against the raw
    confidence gap (confidence - accuracy, percentage points), one point per focal run with
    ``gamma > 0``, one marker per setting in ``order``, coloured by ``gamma``.

    Returns
    -------
    Figure
    """
    import matplotlib.pyplot as plt

    from focalcal.plotting import FIGURE_WIDTH_IN, gamma_colors

    t = table[(table["loss"] == "focal") & (table["gamma"] > 0)]
    gammas = sorted(t["gamma"].unique())
    cols = dict(zip(gammas, gamma_colors(gammas)))
    fig, ax = plt.subplots(figsize=(min(FIGURE_WIDTH_IN, 7.2), 3.8))
    markers = ("o", "s", "^", "D", "v")
    for k, s in enumerate(order):
        ts = t[t["setting"] == s]
        ax.scatter(100 * ts["gap"], 100 * (ts["ece_psi"] - ts["ece_raw"]),
                   c=[cols[g] for g in ts["gamma"]], marker=markers[k % len(markers)], s=34,
                   edgecolors="black", linewidths=0.4)
        # the setting's legend entry: its marker alone (the colour is gamma's)
        ax.scatter([], [], marker=markers[k % len(markers)], s=34, facecolors="white",
                   edgecolors="black", linewidths=0.8, label=s)
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel(r"raw confidence $-$ accuracy (percentage points)")
    ax.set_ylabel(r"ECE after $\Psi$ $-$ raw ECE (pp)")
    for g in gammas:
        ax.scatter([], [], color=cols[g], marker="o", s=30, label=rf"$\gamma$ = {g:g}")
    ax.legend(fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_reliability_grid(out: str | Path, table, setting: str, seed: int | None = None):
    """Charoenphakdee et al.'s Fig. 4 for one ``setting``: reliability diagrams of its focal networks
    (one column per ``gamma > 0``, the run of the smallest seed unless ``seed``), trained as is
    ("Standard", top row) and after TS$_{FL}$ (bottom row), each without Psi and with it (15
    equal-width bins; accuracy against mean confidence per bin, the diagonal for reference; the
    panel's title gives both test ECEs in percent, from ``table``).

    Returns
    -------
    Figure
    """
    import matplotlib.pyplot as plt

    from focalcal.metrics import reliability_data
    from focalcal.plotting import FIGURE_WIDTH_IN, color
    from focalcal.posthoc import PsiCorrection

    t = table[(table["loss"] == "focal") & (table["gamma"] > 0) & (table["setting"] == setting)]
    seed = int(t["seed"].min()) if seed is None else seed
    t = t[t["seed"] == seed].sort_values("gamma")
    fig, axes = plt.subplots(2, len(t), figsize=(min(FIGURE_WIDTH_IN, 1.2 + 2.6 * len(t)), 5.8), squeeze=False,
                             sharex=True, sharey=True,
                             layout="constrained")
    for col, r in zip(axes.T, t.itertuples()):
        run = load_run(runfolder.run_path(out, r.run))
        z, y = run.test_logits.double(), run.test_labels
        for ax, (paradigm, zz, e_raw, e_psi) in zip(col, (("Standard", z, r.ece_raw, r.ece_psi),
                                                          ("TS$_{FL}$", z / r.t_fl, r.ece_tsfl, r.ece_tsfl_psi))):
            ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
            for name, probs, method in (("raw", torch.softmax(zz, -1), "uncalibrated"),
                                        (r"$\Psi$", PsiCorrection(r.gamma).predict_proba(zz), "Psi")):
                rd = reliability_data(probs, y, n_bins=15)
                ax.plot(rd.confidence.numpy(), rd.accuracy.numpy(), marker="o", ms=3, color=color(method), label=name)
            ax.set_title(f"{paradigm}, $\\gamma$ = {r.gamma:g}\nECE raw {100 * e_raw:.2f}, "
                         f"$\\Psi$ {100 * e_psi:.2f}", fontsize=9)
            ax.set_aspect("equal")
    for ax in axes[-1]:
        ax.set_xlabel("confidence")
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncols=2, frameon=False)
    return fig


def best_gamma_claim(table, lower: str | None, higher: str | None, column: str = "ece_raw") -> dict[str, Any]:
    """The paper's "the best ``gamma`` increases" from setting ``lower`` to setting ``higher``.

    The best ``gamma`` of each seed (:func:`best_gammas`) in both settings, decided by
    :func:`focalcal_book.verdicts.compare_ranges`. Returns ``verdict`` and the per-seed best
    ``gamma`` as ``lower`` and ``higher`` (seed -> gamma); with a setting missing (``None``, or no
    focal runs) the verdict is :data:`NOT_RUN` and both are empty.
    """
    a = best_gammas(table, lower, column) if lower is not None else {}
    b = best_gammas(table, higher, column) if higher is not None else {}
    if not a or not b:
        return {"verdict": NOT_RUN, "lower": a, "higher": b}
    return {"verdict": compare_ranges(list(a.values()), list(b.values())), "lower": a, "higher": b}


def psi_gain(table, setting: str) -> dict[int, float]:
    """Per seed, the mean over ``gamma > 0`` of raw ECE minus ECE after Psi in ``setting``
    (positive: Psi helps), in fractions."""
    t = table[(table["setting"] == setting) & (table["loss"] == "focal") & (table["gamma"] > 0)]
    return {int(s): float((g["ece_raw"] - g["ece_psi"]).mean()) for s, g in t.groupby("seed")}


def less_effective_claim(table, more: str | None, less: str | None) -> dict[str, Any]:
    """"Psi becomes less effective" from setting ``more`` to setting ``less``: Psi's gain
    (:func:`psi_gain`) of every seed in ``less`` below every seed's in ``more``
    (:func:`focalcal_book.verdicts.compare_ranges`). Returns ``verdict`` and the per-seed gains
    as ``more`` and ``less`` (empty, and :data:`NOT_RUN`, when a setting is missing)."""
    a = psi_gain(table, more) if more is not None else {}
    b = psi_gain(table, less) if less is not None else {}
    if not a or not b:
        return {"verdict": NOT_RUN, "more": a, "less": b}
    return {"verdict": compare_ranges(list(b.values()), list(a.values())), "more": a, "less": b}


def per_seed_table(values: Mapping[str, Mapping[int, float]]):
    """``{setting: {seed: value}}`` as a table: one row per setting, one column per seed
    (``seed <n>``), missing values NaN."""
    import pandas as pd

    seeds = sorted({s for v in values.values() for s in v})
    return pd.DataFrame([{"setting": k, **{f"seed {s}": v.get(s, np.nan) for s in seeds}}
                         for k, v in values.items()])


def tsfl_claim(table, setting: str, *, raw: str = "ece_tsfl", psi: str = "ece_tsfl_psi",
               losses: Sequence[str] = ("focal",)) -> dict[str, Any]:
    """Their Fig. 6 in one ``setting``: under TS_FL a larger ``gamma`` "always" worsens the raw ECE
    (``worsens``: at every step between neighbouring ``gamma``, every seed's ECE at the larger above
    every seed's at the smaller, :func:`focalcal_book.verdicts.every_step`), and Psi mitigates it
    (``mitigates``: TS_FL + Psi below TS_FL for every focal run with ``gamma > 0``,
    :func:`focalcal_book.verdicts.paired`). Their LS paradigm is the same test on the networks
    as trained: ``raw="ece_raw"``, ``psi="ece_psi"`` and ``losses=("focal", "label_smoothing")``
    on :func:`psi_runs`'s ``paradigm="LS"`` table (label smoothing is its ``gamma = 0``).

    Returns both verdicts and the numbers behind them: ``setting``, ``gamma_max``, the ranges over
    seeds of TS_FL's ECE at ``gamma = 0`` and at ``gamma_max`` (``ece_g0``, ``ece_gmax``, in %),
    ``steps`` between neighbouring ``gamma`` and ``steps_rising`` beyond the seed spread, the
    ``runs`` with ``gamma > 0``, ``psi_lower`` (runs where Psi lowers TS_FL's ECE) and the least
    and largest change Psi makes (``change_min``, ``change_max``, percentage points).
    """
    t = table[(table["setting"] == setting) & (table["loss"].isin(list(losses)))]
    gammas = sorted(t["gamma"].unique())
    row: dict[str, Any] = {"setting": setting, "worsens": NOT_RUN, "mitigates": NOT_RUN, "gamma_max": np.nan,
                           "ece_g0": "–", "ece_gmax": "–", "steps": 0, "steps_rising": 0, "runs": 0,
                           "psi_lower": 0, "change_min": np.nan, "change_max": np.nan}
    if len(gammas) < 2 or gammas[0] != 0.0:
        return row
    pos = t[t["gamma"] > 0]
    diff = (pos[psi] - pos[raw]).to_numpy()
    # "always leads to worse performance": every step between neighbouring gammas rises
    steps = falling_steps([-t.loc[t["gamma"] == g, raw].to_numpy() for g in gammas])
    row.update(worsens=every_step(steps), mitigates=paired(diff), gamma_max=float(gammas[-1]),
               ece_g0=spread_text(t.loc[t["gamma"] == 0.0, raw], scale=100, mean=False),
               ece_gmax=spread_text(t.loc[t["gamma"] == gammas[-1], raw], scale=100, mean=False),
               steps=len(steps), steps_rising=steps.count(HOLDS), runs=int(diff.size),
               psi_lower=int(np.sum(diff < 0)), change_min=100 * float(diff.min()),
               change_max=100 * float(diff.max()))
    return row


#: headers and formats of :func:`tsfl_claim`'s rows (TS_FL and the LS paradigm) on the page
GAMMA_CLAIM_COLUMNS: dict[str, str] = {
    "setting": "setting", "ece_g0": "ECE at $\\gamma = 0$ (%)", "gamma_max": "largest $\\gamma$",
    "ece_gmax": "ECE there (%)", "steps_rising": "steps rising", "steps": "steps", "worsens": "always worse",
    "psi_lower": "runs $\\Psi$ lowers", "runs": "runs", "change_min": "least change (pp)",
    "change_max": "largest change (pp)", "mitigates": "$\\Psi$ mitigates"}
GAMMA_CLAIM_FORMATS: dict[str, str] = {"gamma_max": "g", "change_min": "+.2f", "change_max": "+.2f"}


def _cases(table, column_a: str, column_b: str) -> list[str]:
    """Per (setting, focal ``gamma > 0``), the paired verdict that ``column_a`` is below ``column_b``."""
    t = table[(table["loss"] == "focal") & (table["gamma"] > 0)]
    return [paired((g[column_a] - g[column_b]).to_numpy()) for _, g in t.groupby(["setting", "gamma"], sort=False)]


def improves_most(table) -> dict[str, Any]:
    """Sec. 6.1, "Psi substantially improves ECE for most settings": a case is a setting and a
    focal ``gamma > 0``; it agrees when Psi lowers the test ECE on every seed
    (:func:`focalcal_book.verdicts.paired`), and the claim holds when more than half of the cases
    agree (:func:`focalcal_book.verdicts.majority`). Returns ``verdict``, ``agree``, ``against``
    and ``cases``; :data:`NOT_RUN` without such runs."""
    cases = _cases(table, "ece_psi", "ece_raw")
    if not cases:
        return {"verdict": NOT_RUN, "agree": 0, "against": 0, "cases": 0}
    hits = [c == HOLDS for c in cases]
    decided = [c != NOT_RESOLVED for c in cases]
    return {"verdict": majority(hits, decided=decided), "agree": sum(hits),
            "against": cases.count(DOES_NOT_HOLD), "cases": len(cases)}


def tsfl_degrades(table) -> dict[str, Any]:
    """Sec. 6.1, "in TS_FL, if Psi is not applied, ... ECE-raw degrades compared with that of
    Standard": in every case (setting, focal ``gamma > 0``) TS_FL's test ECE above the raw ECE of
    the same network on every seed (:func:`focalcal_book.verdicts.paired`, joined by
    :func:`focalcal_book.verdicts.combine`). Returns ``verdict``, ``agree``, ``against``, ``cases``."""
    cases = _cases(table, "ece_raw", "ece_tsfl")
    if not cases:
        return {"verdict": NOT_RUN, "agree": 0, "against": 0, "cases": 0}
    return {"verdict": combine(cases), "agree": cases.count(HOLDS), "against": cases.count(DOES_NOT_HOLD),
            "cases": len(cases)}


#: the rule each of the page's claims is tested by (Markdown, shown beside its verdict)
RULES: dict[str, str] = {
    "charoen_best_gamma": "the best $\\gamma$ (least test ECE) of every seed in the larger network above every seed's "
                          "in the smaller, and in the smaller training set above every seed's in the larger",
    "charoen_less_effective": "$\\Psi$'s gain (mean over $\\gamma > 0$) of every seed lower with more capacity and "
                              "with less data",
    "charoen_psi_hurts": "networks under-confident on the validation images (gap more than $z = 2$ standard errors "
                         "below zero, the book's choice) are helped on the test images, the others hurt, each on "
                         "every network with at least two seeds",
    "charoen_psi_most": "a case (setting, $\\gamma > 0$) agrees when $\\Psi$ lowers the test ECE on every seed; "
                        "more than half of the cases must agree (the paper does not quantify \"substantially\")",
    "charoen_tsfl_degrades": "in every case (setting, $\\gamma > 0$), TS$_{FL}$'s test ECE above the raw ECE on "
                             "every seed",
    "charoen_tsfl_always": "TS$_{FL}$'s ECE rises at every step between neighbouring $\\gamma$, and TS$_{FL}$ + "
                           "$\\Psi$ is below TS$_{FL}$ for every run with $\\gamma > 0$, in every setting",
    "charoen_ls_always": "their LS paradigm (focal loss with labels smoothed by 0.1; $\\gamma = 0$: label smoothing): "
                         "the ECE as trained rises at every step between neighbouring $\\gamma$, and ECE-$\\Psi$ is "
                         "below it for every run with $\\gamma > 0$",
}


def claims(table, order: Sequence[str], ls_table=None) -> dict[str, Any]:
    """Every claim of :data:`RULES` on a :func:`psi_table`, its settings in ``order``, and the LS
    paradigm's on ``ls_table`` (the :func:`psi_table` of :func:`psi_runs`'s ``paradigm="LS"``).

    Returns ``verdicts`` (key -> verdict) and the parts behind them: ``capacity`` and ``data``
    (:func:`best_gamma_claim` from the small to the large network and from the large network to
    it on less data), ``gain_capacity`` and ``gain_data`` (:func:`less_effective_claim`),
    ``confidence`` (:func:`confidence_classes` of the focal networks with ``gamma > 0``, classified
    on the validation images and judged on the test images, with ``raised``: the networks whose
    mean confidence Psi raised, and ``networks``), ``most`` (:func:`improves_most`), ``degrades``
    (:func:`tsfl_degrades`), ``tsfl`` (:func:`tsfl_claim` per setting) and ``ls`` (the same per
    setting of ``ls_table``, on the ECE as trained and after Psi).
    """
    role = roles(table)
    focal_pos = table[(table["loss"] == "focal") & (table["gamma"] > 0)]
    if len(focal_pos):
        cc = confidence_classes(focal_pos["gap_val"], focal_pos["gap_val_se"],
                                focal_pos["ece_psi"] - focal_pos["ece_raw"], focal_pos["seed"])
    else:
        cc = {"verdict": NOT_RUN, "under_verdict": NOT_RUN, "rest_verdict": NOT_RUN,
              "under": 0, "under_helped": 0, "rest": 0, "rest_hurt": 0}
    cc = {**cc, "raised": int((focal_pos["confidence_psi"] > focal_pos["confidence"]).sum()),
          "networks": len(focal_pos)}
    out = {"capacity": best_gamma_claim(table, role["small"], role["large"]),
           "data": best_gamma_claim(table, role["large"], role["large_small_data"]),
           "gain_capacity": less_effective_claim(table, role["small"], role["large"]),
           "gain_data": less_effective_claim(table, role["large"], role["large_small_data"]),
           "confidence": cc, "most": improves_most(table), "degrades": tsfl_degrades(table),
           "tsfl": [tsfl_claim(table, s) for s in order],
           "ls": [tsfl_claim(ls_table, s, raw="ece_raw", psi="ece_psi", losses=("focal", "label_smoothing"))
                  for s in (dict.fromkeys(ls_table["setting"]) if ls_table is not None and len(ls_table) else ())]}
    out["verdicts"] = {
        "charoen_best_gamma": combine([out["capacity"]["verdict"], out["data"]["verdict"]]),
        "charoen_less_effective": combine([out["gain_capacity"]["verdict"], out["gain_data"]["verdict"]]),
        "charoen_psi_hurts": cc["verdict"],
        "charoen_psi_most": out["most"]["verdict"],
        "charoen_tsfl_degrades": out["degrades"]["verdict"],
        "charoen_tsfl_always": combine([c["worsens"] for c in out["tsfl"]] + [c["mitigates"] for c in out["tsfl"]]),
        "charoen_ls_always": (combine([c["worsens"] for c in out["ls"]] + [c["mitigates"] for c in out["ls"]])
                              if out["ls"] else NOT_RUN),
    }
    return out
