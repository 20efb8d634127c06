"""Synthetic tasks: their test sets drawn again, and the distance of each calibrator to the true posterior.

The trainer stores logits only; a synthetic split is a pure function of the dataset name, the seed
and the subset sizes in the run's configuration, so the test samples and their true posterior
``eta(x)`` are regenerated here (:func:`synthetic_test_set`) and compared with the stored
predictions (:func:`posterior_kl`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

import torch

from ... import metrics
from .. import runfolder
from .protocol import FAMILIES, apply_calibration
from .runs import Run, load_results, load_run

__all__ = ["SyntheticTestSet", "synthetic_test_set", "posterior_kl", "kl_by_method", "focal_loss_rows"]

class SyntheticTestSet(NamedTuple):
    """The test split of a run on a synthetic task (:func:`synthetic_test_set`)."""

    x: torch.Tensor          #: inputs, shape (N, d)
    labels: torch.Tensor     #: shape (N,), int64
    posterior: torch.Tensor  #: the true posterior ``eta(x)``, shape (N, K), float64


def synthetic_test_set(run: Run) -> SyntheticTestSet:
    """Regenerate the test samples of a run on a synthetic task, with their true posterior.

    The trainer stores only logits; a synthetic split is a pure function of the dataset name, the
    seed and the subset sizes in the run's configuration (:func:`focalcal.lab.data.make_loaders`), so
    it is drawn again here, in the order of the stored logits.

    Raises
    ------
    ValueError
        The run's dataset is not synthetic, or the regenerated labels differ from the stored ones
        (the data code changed since the run: re-run it).
    """
    from ..data import DATASETS
    from .runs import test_set

    name = run.config["dataset"]
    if name not in DATASETS or DATASETS[name].kind != "synthetic":
        synthetic = [n for n, info in DATASETS.items() if info.kind == "synthetic"]
        raise ValueError(f"run: {run.run_dir.name} is on dataset {name!r}; only the synthetic "
                         f"tasks {synthetic} have a known posterior")
    base, idx = test_set(run)
    x, y, post = base.x[idx], base.targets[idx], base.posterior[idx]
    return SyntheticTestSet(x, y, post)


def posterior_kl(out: str | os.PathLike, results=None):
    """KL divergence to the true posterior of every synthetic run x calibration method.

    For each run on a synthetic task and each row of its ``calibration.json``, the test
    predictions are recomputed from the stored parameters (:func:`apply_calibration`) and compared
    with ``eta(x)`` (:func:`synthetic_test_set`): ``mean_i KL(eta(x_i) || p(x_i))`` in nats
    (:func:`focalcal.metrics.kl_to_posterior`). A proper loss drives this to 0 as the model
    approaches the Bayes posterior; the focal loss's minimiser stays away from it, and Psi maps it
    back (Charoenphakdee et al. 2021, Thm. 11).

    Parameters
    ----------
    out : path
        The sweep folder.
    results : DataFrame, optional
        Rows of :func:`load_results` to use (default: all of ``out``'s); runs on image datasets
        are left out.

    Returns
    -------
    DataFrame
        One row per run x method: ``run``, ``dataset``, ``loss``, ``loss_label``, ``seed``, the
        loss parameters of ``results`` (``param_<name>``), ``method``, ``family``,
        ``temperature``, ``gamma_ev``, ``kl_posterior``.
    """
    import pandas as pd

    from ..data import DATASETS

    if results is None:
        results = load_results(out)
    synthetic = {n for n, info in DATASETS.items() if info.kind == "synthetic"}
    runs = results[results["dataset"].isin(synthetic)].drop_duplicates("run")
    param_cols = [c for c in results.columns if c.startswith("param_")]  # as collect() names them
    rows = []
    for _, r in runs.iterrows():
        run = load_run(runfolder.run_path(out, r["run"]))
        truth = synthetic_test_set(run)
        for row in run.calibration or []:
            kl = metrics.kl_to_posterior(logits=apply_calibration(row, run.test_logits), true_probs=truth.posterior)
            rows.append({"run": r["run"], "dataset": r["dataset"], "loss": r["loss"],
                         "loss_label": r["loss_label"], "seed": int(r["seed"]),
                         **{c: r[c] for c in param_cols},
                         "method": row["method"], "family": FAMILIES.get(row["method"], row["method"]),
                         "temperature": row["temperature"], "gamma_ev": row["gamma_ev"],
                         "kl_posterior": float(kl)})
    return pd.DataFrame(rows, columns=["run", "dataset", "loss", "loss_label", "seed", *param_cols,
                                       "method", "family", "temperature", "gamma_ev", "kl_posterior"])


def kl_by_method(kl, methods: Sequence[str]):
    """:func:`posterior_kl`'s divergences averaged over seeds, one column per method.

    Returns
    -------
    DataFrame
        Indexed by ``dataset``, ``loss``, ``loss_label`` (in order of appearance), with the
        columns ``methods``.
    """
    return kl.pivot_table(index=["dataset", "loss", "loss_label"], columns="method", values="kl_posterior",
                          sort=False)[list(methods)]


def focal_loss_rows(kl_table, kl):
    """The plain focal loss's rows of :func:`kl_by_method`'s table, one per dataset x ``gamma``.

    Adds ``ce`` (the uncalibrated cross-entropy model's divergence on the same dataset; NaN
    without one) and ``gamma`` (the training ``gamma``; NaN if ``kl`` has no ``param_gamma``).
    """
    wide = kl_table.reset_index()
    rows = wide[wide["loss"] == "focal"].copy()
    rows["ce"] = rows["dataset"].map(wide[wide["loss"] == "ce"].set_index("dataset")["uncalibrated"])
    rows["gamma"] = rows["loss_label"].map(kl.groupby("loss_label")["param_gamma"].first()) \
        if "param_gamma" in kl else float("nan")
    return rows
