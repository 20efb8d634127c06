r"""Experiment results: one run's logits and calibration, a sweep's table, the book's figures.

The sweep (:mod:`focalcal.lab.sweep`) executes two papermill templates per run; this module holds
everything they and the book chapter share, so that the notebooks stay thin.

A run folder (written by ``notebooks/train_classifier.md`` through :func:`focalcal.lab.train.train`
and by ``notebooks/posthoc_calibration.md``)::

    config.json        {"config": <the template's parameters>, "trainer": ..., "model": ..., ...}
    history.json       {"grad_norm_edges": [...], "records": [one dict per epoch]}
    logits.pt          val_logits (N_val, K), val_labels, test_logits (N_test, K), test_labels
    calibration.json   one row per post-hoc method (:func:`calibrate`), written atomically

Post-hoc protocol (Komisarenko & Kull 2024, Sec. 5.1)
-----------------------------------------------------
Every calibrator is fitted on the validation logits and evaluated on the test logits.
Temperatures come from one grid (default ``0.01, 0.02, ..., 5``, :func:`temperature_grid`) and
``gamma_ev`` from :data:`focalcal.posthoc.KK_GAMMAS`. K&K choose the parameters separately per
reported metric: by validation log-loss for the log-loss column and by validation ECE (15
equal-mass bins) for the ECE column, for plain TS (``T`` only) and focal TS (``gamma_ev`` and
``T`` jointly) alike. Hence the methods of :data:`METHODS`:

================  ===================================================================  ==========
method            fitted on the validation set                                         family
================  ===================================================================  ==========
uncalibrated      nothing: ``softmax(z)``                                              uncalibrated
TS (NLL)          ``T`` on the grid minimising the NLL                                 TS
TS (ECE)          ``T`` on the grid minimising the 15-bin equal-mass ECE               TS
focal TS (NLL)    ``(gamma_ev, T)`` on the grid minimising the NLL                     focal TS
focal TS (ECE)    ``(gamma_ev, T)`` on the grid minimising the equal-mass ECE          focal TS
Psi               nothing: ``Psi^gamma(softmax(z))`` with the training ``gamma``       Psi
================  ===================================================================  ==========

Psi (Charoenphakdee et al. 2021, Thm. 11) inverts the focal loss's link, so it has a ``gamma``
only for a model trained with the plain focal loss (:func:`training_gamma`); for every other loss
it is the identity (``gamma = 0``) and equals "uncalibrated".

Each row reports, on the test set: ``accuracy``, ``nll`` (nats), ``ece_mass`` (15 equal-mass
bins, K&K's ECE), ``ece_width`` (15 equal-width bins, Mukhoti's ECE), ``classwise_ece`` (15
equal-width bins per class), ``brier``; plus the selected ``temperature`` and ``gamma_ev``, the
``criterion``, the criterion's value on the validation set (``val_score``), the set sizes
(``n_val``, ``n_test``) and the temperature grid (``n_temperatures`` values from ``t_min`` to
``t_max``). All metrics are fractions (not percentages).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from .. import maps, metrics, plotting
from .._validation import check_choice, check_int, check_labels, check_logits, check_positive
from .io import torch_load
from ..posthoc import KK_GAMMAS, FocalTemperatureScaling, PsiCorrection, TemperatureScaling

__all__ = [
    "METHODS", "FAMILIES", "METRICS", "TABLE1_CALIBRATIONS", "Run", "Calibration",
    "load_run", "training_gamma", "temperature_grid", "metric_row", "calibrate", "apply_calibration",
    "load_results", "describe_runs", "table1", "format_table1", "compare_calibrations",
    "representative_runs", "load_histories", "nll_overfitting", "plot_training_curves",
    "plot_reliability_panel", "runs_dir", "SyntheticTestSet", "synthetic_test_set", "posterior_kl",
    "plot_posterior_1d", "plot_posterior_kl",
]

#: the post-hoc methods of :func:`calibrate`, in the order of their rows
METHODS: tuple[str, ...] = ("uncalibrated", "TS (NLL)", "TS (ECE)", "focal TS (NLL)", "focal TS (ECE)",
                            "Psi")
#: method -> family (the key of its book colour, :func:`focalcal.plotting.color`)
FAMILIES: dict[str, str] = {"uncalibrated": "uncalibrated", "TS (NLL)": "TS", "TS (ECE)": "TS",
                            "focal TS (NLL)": "focal TS", "focal TS (ECE)": "focal TS", "Psi": "Psi"}
#: the test-set metrics of every row
METRICS: tuple[str, ...] = ("accuracy", "nll", "ece_mass", "ece_width", "classwise_ece", "brier")
#: Table 1 rows per loss: calibration -> (method of the log-loss column, method of the ECE column)
TABLE1_CALIBRATIONS: dict[str, tuple[str, str]] = {
    "uncalibrated": ("uncalibrated", "uncalibrated"),
    "TS": ("TS (NLL)", "TS (ECE)"),
    "focal TS": ("focal TS (NLL)", "focal TS (ECE)"),
}
RUNS_ENV = "FOCALCAL_RUNS"


def runs_dir(default: str | os.PathLike | None = None) -> Path:
    """The sweep folder a book chapter reads: ``$FOCALCAL_RUNS``, else ``default``, else
    ``runs/cpu`` under the current directory (where ``make book`` runs the ``cpu`` profile)."""
    env = os.environ.get(RUNS_ENV)
    if env:
        return Path(env)
    if default is not None:
        return Path(default)
    return Path.cwd() / "runs" / "cpu"


# --------------------------------------------------------------------------------------------
# one run
# --------------------------------------------------------------------------------------------

@dataclass
class Run:
    """A finished training run as :func:`load_run` reads it.

    Attributes
    ----------
    run_dir : Path
    config : dict
        The ``train_classifier`` parameters (``dataset``, ``model``, ``loss``, ``loss_params``
        as a JSON string, ``epochs``, ``seed``, ...).
    val_logits, test_logits : Tensor, shape (N, K), float32
    val_labels, test_labels : Tensor, shape (N,), int64
    history : list of dict
        The trainer's per-epoch records (see :mod:`focalcal.lab.train`).
    calibration : list of dict or None
        The rows of ``calibration.json`` once ``posthoc_calibration`` has run.
    """

    run_dir: Path
    config: dict[str, Any]
    val_logits: torch.Tensor
    val_labels: torch.Tensor
    test_logits: torch.Tensor
    test_labels: torch.Tensor
    history: list[dict[str, Any]] = field(default_factory=list)
    calibration: list[dict[str, Any]] | None = None

    @property
    def loss_params(self) -> dict[str, Any]:
        """The loss parameters as a dict (the template receives them as a JSON string)."""
        p = self.config.get("loss_params", {})
        return json.loads(p) if isinstance(p, str) else dict(p)


def load_run(run_dir: str | os.PathLike) -> Run:
    """Read a run folder written by the ``train_classifier`` template.

    Raises
    ------
    FileNotFoundError
        ``run_dir`` has no ``logits.pt`` or ``config.json`` (training has not finished there);
        the message says which file is missing.
    ValueError
        ``logits.pt`` lacks the validation or the test logits.
    """
    d = Path(run_dir)
    for name in ("config.json", "logits.pt"):
        if not (d / name).is_file():
            raise FileNotFoundError(f"{d / name} does not exist: run_dir must be the out_dir of a "
                                    f"finished train_classifier run")
    config = json.loads((d / "config.json").read_text())["config"]
    blob = torch_load(d / "logits.pt")
    missing = [k for k in ("val_logits", "val_labels", "test_logits", "test_labels") if k not in blob]
    if missing:
        raise ValueError(f"{d / 'logits.pt'} lacks {missing}; the run was trained without a "
                         f"validation or test loader")
    history = json.loads((d / "history.json").read_text())["records"] if (d / "history.json").is_file() else []
    cal = json.loads((d / "calibration.json").read_text()) if (d / "calibration.json").is_file() else None
    return Run(d, config, blob["val_logits"], blob["val_labels"], blob["test_logits"],
               blob["test_labels"], history, cal)


def training_gamma(loss: str, loss_params: Mapping[str, Any] | None = None) -> float:
    """The ``gamma`` that Psi needs for a model trained with ``loss``: its focal ``gamma`` or 0.

    Charoenphakdee et al.'s (2021) Thm. 11 inverts the link of the focal loss with one fixed
    ``gamma``, so only ``"focal"`` has one here. Sample-dependent (FLSD), epoch-scheduled (FLSc),
    dual, inverse and adaptive focal losses have no single ``gamma`` whose ``Psi`` is the inverse
    of their link; for them, and for every proper loss, the result is ``0.0`` (Psi = identity).

    Raises
    ------
    ValueError
        Unknown loss or parameters (from :func:`focalcal.losses.make_loss`).
    """
    from ..losses import FocalLoss, make_loss

    fn = make_loss(loss, **dict(loss_params or {}))
    # exact type: InverseFocalLoss subclasses FocalLoss but has another link
    return float(fn.gamma) if type(fn) is FocalLoss else 0.0


def temperature_grid(n: int = 500, t_max: float = 5.0) -> tuple[float, ...]:
    """``n`` equally spaced temperatures ``t_max * k / n``, ``k = 1..n``.

    The default is K&K's grid ``0.01, 0.02, ..., 5.00`` (:data:`focalcal.posthoc.KK_TEMPERATURES`,
    the same floats); smaller ``n`` gives a coarser grid for quick runs.
    """
    n = check_int(n, "n")
    t_max = check_positive(t_max, "t_max")
    # rounded to 12 digits: the nearest floats to the decimal grid, as k / 100 gives them
    return tuple(round(t_max * k / n, 12) for k in range(1, n + 1))


def metric_row(labels: Any, log_probs: Any, *, n_bins: int = 15) -> dict[str, float]:
    """The test metrics of one method (:data:`METRICS`) from its log-probabilities.

    Parameters
    ----------
    labels : Tensor, shape (N,)
    log_probs : Tensor, shape (N, K)
        Log-probabilities (any logits whose softmax is the prediction work as well).
    n_bins : int
        Bins of the three calibration errors.
    """
    z = check_logits(log_probs, "log_probs")
    if z.dim() != 2:
        raise ValueError(f"log_probs must have shape (N, K), got {tuple(z.shape)}")
    y = check_labels(labels, z.shape[1], z.shape[0])
    return {
        "accuracy": float(metrics.accuracy(y, logits=z)),
        "nll": float(metrics.nll(y, logits=z)),
        "ece_mass": float(metrics.ece(y, logits=z, n_bins=n_bins, binning="mass")),
        "ece_width": float(metrics.ece(y, logits=z, n_bins=n_bins, binning="width")),
        "classwise_ece": float(metrics.classwise_ece(y, logits=z, n_bins=n_bins)),
        "brier": float(metrics.brier(y, logits=z)),
    }


@dataclass
class Calibration:
    """What :func:`calibrate` returns.

    Attributes
    ----------
    rows : list of dict
        One row per method of :data:`METHODS` (JSON-serialisable; see the module docstring).
    log_probs : dict
        method -> test log-probabilities, shape (N_test, K), float64.
    calibrators : dict
        method -> the fitted :mod:`focalcal.posthoc` calibrator (``None`` for "uncalibrated").
    """

    rows: list[dict[str, Any]]
    log_probs: dict[str, torch.Tensor]
    calibrators: dict[str, Any]

    def frame(self):
        """The rows as a :class:`pandas.DataFrame` indexed by method."""
        import pandas as pd
        return pd.DataFrame(self.rows).set_index("method")


def calibrate(val_logits: Any, val_labels: Any, test_logits: Any, test_labels: Any, *,
              train_gamma: float = 0.0, temperatures: Sequence[float] | None = None,
              gammas: Sequence[float] = KK_GAMMAS, n_bins: int = 15) -> Calibration:
    """Fit every method of :data:`METHODS` on the validation logits and evaluate it on the test logits.

    Parameters
    ----------
    val_logits : Tensor, shape (N_val, K)
    val_labels : Tensor, shape (N_val,)
    test_logits : Tensor, shape (N_test, K)
    test_labels : Tensor, shape (N_test,)
    train_gamma : float
        ``gamma >= 0`` of Psi (:func:`training_gamma`); 0 makes Psi the identity.
    temperatures : sequence of float, optional
        The temperature grid of TS and focal TS (default :func:`temperature_grid` ``()``, K&K's).
    gammas : sequence of float
        The ``gamma_ev`` grid of focal TS (default K&K's).
    n_bins : int
        Bins of the ECE criterion and of the reported calibration errors.

    Returns
    -------
    Calibration
        Logits are evaluated in float64; the selected parameters are those of the
        calibrators (ties broken as :mod:`focalcal.posthoc` documents).
    """
    zv = check_logits(val_logits, "val_logits").to(torch.float64)
    zt = check_logits(test_logits, "test_logits").to(torch.float64)
    if zv.dim() != 2 or zt.dim() != 2 or zv.shape[1] != zt.shape[1]:
        raise ValueError(f"val_logits and test_logits must have shapes (N_val, K) and (N_test, K) "
                         f"with the same K, got {tuple(zv.shape)} and {tuple(zt.shape)}")
    yv = check_labels(val_labels, zv.shape[1], zv.shape[0], name="val_labels")
    yt = check_labels(test_labels, zt.shape[1], zt.shape[0], name="test_labels")
    temps = temperature_grid() if temperatures is None else tuple(temperatures)
    n_bins = check_int(n_bins, "n_bins")
    fitted: dict[str, Any] = {
        "uncalibrated": None,
        "TS (NLL)": TemperatureScaling("nll", grid=temps, n_bins=n_bins),
        "TS (ECE)": TemperatureScaling("ece_mass", grid=temps, n_bins=n_bins),
        "focal TS (NLL)": FocalTemperatureScaling(gammas, temps, criterion="nll", n_bins=n_bins),
        "focal TS (ECE)": FocalTemperatureScaling(gammas, temps, criterion="ece_mass", n_bins=n_bins),
        "Psi": PsiCorrection(train_gamma),
    }
    criteria = {"TS (NLL)": "nll", "TS (ECE)": "ece_mass", "focal TS (NLL)": "nll",
                "focal TS (ECE)": "ece_mass"}
    rows, log_probs = [], {}
    for method, cal in fitted.items():
        if cal is None:
            lp, t, g, score = torch.log_softmax(zt, dim=-1), 1.0, 0.0, None
        else:
            cal.fit(zv, yv)
            lp = cal(zt)
            t = float(getattr(cal, "temperature_", 1.0))  # Psi has no temperature: T = 1
            if isinstance(cal, FocalTemperatureScaling):
                g = cal.gamma_
            elif isinstance(cal, PsiCorrection):
                g = cal.gamma
            else:
                g = 0.0
            score = getattr(cal, "best_score_", None)
        log_probs[method] = lp
        rows.append({"method": method, "family": FAMILIES[method], "criterion": criteria.get(method),
                     "temperature": t, "gamma_ev": g,
                     "val_score": None if score is None else float(score),
                     **metric_row(yt, lp, n_bins=n_bins),
                     "n_val": int(zv.shape[0]), "n_test": int(zt.shape[0]),
                     "n_temperatures": len(temps), "t_min": float(min(temps)),
                     "t_max": float(max(temps))})
    return Calibration(rows, log_probs, fitted)


def apply_calibration(row: Mapping[str, Any], logits: Any) -> torch.Tensor:
    """Test log-probabilities of a calibration row (from ``calibration.json`` or results.csv).

    Every method of :data:`METHODS` is ``log focal_map(softmax(z / T), gamma)`` with the row's
    ``temperature`` and ``gamma_ev`` (TS: ``gamma = 0``; Psi: ``T = 1``; uncalibrated: both
    trivial), so a stored row reproduces its predictions without refitting.

    Parameters
    ----------
    row : mapping with ``temperature`` and ``gamma_ev``
    logits : Tensor, shape (..., K)

    Returns
    -------
    Tensor, shape (..., K), float64
    """
    z = check_logits(logits, "logits").to(torch.float64)
    t, g = float(row["temperature"]), float(row["gamma_ev"])
    if g == 0.0:
        return torch.log_softmax(z / t, dim=-1)
    return maps.log_focal_map_from_logits(z, g, t)


# --------------------------------------------------------------------------------------------
# a sweep
# --------------------------------------------------------------------------------------------

def load_results(out: str | os.PathLike):
    """The sweep's ``results.csv`` (one row per run x method) as a :class:`pandas.DataFrame`.

    Raises
    ------
    FileNotFoundError
        No ``results.csv`` under ``out``; the message says how to produce it.
    """
    import pandas as pd

    path = Path(out) / "results.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run `python -m focalcal.lab.sweep --profile cpu "
                                f"--out {out}` (or `make sweep`) first")
    return pd.read_csv(path)


def describe_runs(results) -> Any:
    """Which runs a table was built from: one row per dataset x model x loss, with the seeds."""
    g = results.drop_duplicates("run").groupby(["dataset", "model", "loss_label"], sort=False)
    out = g.agg(runs=("run", "size"), seeds=("seed", lambda s: ", ".join(map(str, sorted(s)))),
                epochs=("epochs", "max"))
    return out.reset_index()


def _select(results, dataset: str | None, losses: Sequence[str] | None):
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

    r, order = _select(results, dataset, losses)
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
        ``loss_label``, ``baseline``, ``method``, ``difference`` (method - baseline) and
        ``lower`` (``difference < 0``), one row per loss that has both.
    """
    import pandas as pd

    check_choice(metric, "metric", ("ece", "nll", "accuracy"))
    col = f"{metric}_mean"
    a = table[table["calibration"] == baseline].set_index("loss_label")[col]
    b = table[table["calibration"] == method].set_index("loss_label")[col]
    both = [lo for lo in a.index if lo in b.index]
    out = pd.DataFrame({"loss_label": both, "baseline": [float(a[lo]) for lo in both],
                        "method": [float(b[lo]) for lo in both]})
    out["difference"] = out["method"] - out["baseline"]
    out["lower"] = out["difference"] < 0
    return out


def representative_runs(results, *, dataset: str | None = None,
                        losses: Sequence[str] | None = None) -> dict[str, str]:
    """loss_label -> the run id of its smallest seed (one run per loss, for figures)."""
    r, order = _select(results, dataset, losses)
    first = r.sort_values(["seed", "run"]).drop_duplicates("loss_label")
    ids = dict(zip(first["loss_label"], first["run"]))
    return {lo: ids[lo] for lo in order}


# --------------------------------------------------------------------------------------------
# training histories
# --------------------------------------------------------------------------------------------

def load_histories(out: str | os.PathLike, results=None):
    """Per-epoch training records of every run in ``results`` (default: all of ``out``'s results).

    Returns
    -------
    DataFrame
        One row per run x epoch: ``run``, ``dataset``, ``model``, ``loss_label``, ``seed`` and
        the scalar fields of the trainer's records (``epoch``, ``test_nll``, ``test_error``,
        ``train_nll``, ...; see :mod:`focalcal.lab.train`).
    """
    import pandas as pd

    if results is None:
        results = load_results(out)
    runs = results.drop_duplicates("run")
    frames = []
    for _, r in runs.iterrows():
        path = Path(out) / "runs" / r["run"] / "history.json"
        records = json.loads(path.read_text())["records"]
        scalar = [{k: v for k, v in rec.items() if not isinstance(v, (list, dict))} for rec in records]
        f = pd.DataFrame(scalar)
        for col in ("run", "dataset", "model", "loss_label", "seed"):
            f.insert(0, col, r[col])
        frames.append(f)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


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


# --------------------------------------------------------------------------------------------
# synthetic tasks: distance to the true posterior
# --------------------------------------------------------------------------------------------

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
    from torch.utils.data import Subset

    from .data import DATASETS, make_loaders
    from .sweep import subset_sizes

    name = run.config["dataset"]
    if name not in DATASETS or DATASETS[name].kind != "synthetic":
        synthetic = [n for n, info in DATASETS.items() if info.kind == "synthetic"]
        raise ValueError(f"run {run.run_dir.name} is on dataset {name!r}; only the synthetic "
                         f"tasks {synthetic} have a known posterior")
    subset = subset_sizes(run.config.get("train_subset", 0), run.config.get("eval_subset", 0))
    test = make_loaders(name, seed=int(run.config["seed"]), subset=subset).test.dataset
    idx = torch.as_tensor(test.indices) if isinstance(test, Subset) else None
    base = test.dataset if isinstance(test, Subset) else test
    x, y, post = base.x, base.targets, base.posterior
    if idx is not None:
        x, y, post = x[idx], y[idx], post[idx]
    if not torch.equal(y, run.test_labels):
        raise ValueError(f"the regenerated test labels of {run.run_dir} differ from the stored "
                         f"ones: the data code changed since the run; run it again")
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

    from .data import DATASETS

    if results is None:
        results = load_results(out)
    synthetic = {n for n, info in DATASETS.items() if info.kind == "synthetic"}
    runs = results[results["dataset"].isin(synthetic)].drop_duplicates("run")
    param_cols = [c for c in results.columns if c.startswith("param_")]  # as collect() names them
    rows = []
    for _, r in runs.iterrows():
        run = load_run(Path(out) / "runs" / r["run"])
        truth = synthetic_test_set(run)
        for row in run.calibration or []:
            kl = metrics.kl_to_posterior(truth.posterior, logits=apply_calibration(row, run.test_logits))
            rows.append({"run": r["run"], "dataset": r["dataset"], "loss": r["loss"],
                         "loss_label": r["loss_label"], "seed": int(r["seed"]),
                         **{c: r[c] for c in param_cols},
                         "method": row["method"], "family": FAMILIES.get(row["method"], row["method"]),
                         "temperature": row["temperature"], "gamma_ev": row["gamma_ev"],
                         "kl_posterior": float(kl)})
    return pd.DataFrame(rows, columns=["run", "dataset", "loss", "loss_label", "seed", *param_cols,
                                       "method", "family", "temperature", "gamma_ev", "kl_posterior"])


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------

def _loss_styles(labels: Iterable[str]) -> dict[str, tuple[str, Any]]:
    from ..plotting import LINESTYLES, color

    styles, used = {}, {}
    for lo in labels:
        try:
            c = color(lo)
        except ValueError:
            c = "#4D4D4D"
        k = used.get(c, 0)
        used[c] = k + 1
        # losses sharing a colour (focal with several gamma) get distinct line styles
        styles[lo] = (c, LINESTYLES[k % len(LINESTYLES)])
    return styles


def plot_training_curves(histories, *, split: str = "test", panels: Sequence[str] = ("nll", "error", "ece"),
                         axes: Any = None):
    """Mean over seeds of ``split``'s per-epoch metrics, one line per loss (Mukhoti Fig. 2).

    Parameters
    ----------
    histories : DataFrame
        From :func:`load_histories`.
    split : {"train", "val", "test"}
    panels : sequence of {"nll", "error", "ece", "accuracy", "entropy", "confidence", ...}
        Fields recorded by the trainer, one panel each.
    axes : sequence of matplotlib Axes, optional

    Returns
    -------
    (Figure, 1-D array of Axes, one per metric; a grid of two columns for more than three)
    """
    import matplotlib.pyplot as plt
    import numpy as np

    check_choice(split, "split", ("train", "val", "test"))
    names = {"nll": "NLL (nats)", "error": "error", "ece": "ECE (15 equal-width bins)",
             "accuracy": "accuracy", "entropy": "entropy (nats)", "confidence": "mean confidence",
             "nll_correct": "NLL of correct samples (nats)",
             "nll_incorrect": "NLL of misclassified samples (nats)",
             "entropy_incorrect": "entropy of misclassified samples (nats)"}
    if axes is None:
        ncols = len(panels) if len(panels) <= 3 else 2
        nrows = -(-len(panels) // ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.8 * ncols, 3.0 * nrows), squeeze=False)
        for ax in axes.flat[len(panels):]:
            ax.remove()
    axes = np.atleast_1d(axes).ravel()[:len(panels)]
    fig = axes[0].figure
    labels = list(dict.fromkeys(histories["loss_label"]))
    styles = _loss_styles(labels)
    for ax, m in zip(axes, panels):
        col = f"{split}_{m}"
        for lo in labels:
            h = histories[histories["loss_label"] == lo]
            mean = h.groupby("epoch")[col].mean()
            c, ls = styles[lo]
            ax.plot(mean.index, mean.to_numpy(), color=c, linestyle=ls, label=lo, marker="o",
                    markersize=2.5)
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"{split} {names.get(m, m)}")
    # one legend below the panels, where it hides no curve
    handles, names_ = axes[0].get_legend_handles_labels()
    ncol = min(3, len(names_))
    fig.legend(handles, names_, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, 0.0))
    rows = axes[0].get_gridspec().nrows if axes[0].get_subplotspec() is not None else 1
    fig.tight_layout(rect=(0, 0.07 * -(-len(names_) // ncol) / rows, 1, 1))
    return fig, axes


def plot_reliability_panel(labels: Any, log_probs: Mapping[str, Any], *, n_bins: int = 15,
                           binning: str = "mass", title: str | None = None):
    """Reliability diagrams side by side, one per method (:func:`focalcal.plotting.plot_reliability`).

    Parameters
    ----------
    labels : Tensor, shape (N,)
    log_probs : mapping method -> Tensor (N, K)
        Methods of :data:`METHODS` (coloured by their family) or any name with a book colour.
    binning : {"mass", "width"}
        ``"mass"``: K&K's equal-mass bins.
    title : str, optional
        Figure title (e.g. the run).

    Returns
    -------
    (Figure, array of Axes of shape (2, n_methods))
    """
    import matplotlib.pyplot as plt

    n = len(log_probs)
    if n == 0:
        raise ValueError("log_probs must name at least one method")
    # rows share their y axis, so only the outer panels carry tick labels and none overlaps a neighbour
    fig, axes = plt.subplots(2, n, figsize=(3.3 * n, 4.8), sharex=True, sharey="row", squeeze=False,
                             gridspec_kw={"height_ratios": (3, 1), "hspace": 0.08, "wspace": 0.08})
    for j, (method, lp) in enumerate(log_probs.items()):
        plotting.plot_reliability(labels, logits=lp, n_bins=n_bins, binning=binning,
                                 method=FAMILIES.get(method, method), title=method,
                                 axes=(axes[0, j], axes[1, j]))
        axes[0, j].title.set_fontsize(9)
        legend = axes[0, j].get_legend()
        if legend is not None:
            legend.remove()
        xlabel = axes[1, j].get_xlabel()
        axes[1, j].set_xlabel("")
        if j:
            axes[0, j].set_ylabel("")
            axes[1, j].set_ylabel("")
    # one legend and one x label for the row, below the panels, where they hide no bar
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(names), bbox_to_anchor=(0.5, 0.0))
    fig.supxlabel(xlabel, y=0.075, fontsize=10)
    fig.subplots_adjust(bottom=0.24)
    fig.align_ylabels(axes[:, 0])
    if title:
        fig.suptitle(title, fontsize=10)
        fig.subplots_adjust(top=0.84)  # room for the suptitle above the panel titles
    return fig, axes


def plot_posterior_1d(x: Any, posterior: Any, panels: Mapping[str, tuple[Any, str]], *,
                      class_names: Sequence[str] | None = None):
    """True and predicted class posteriors along a 1-D input, one panel per model.

    Parameters
    ----------
    x : Tensor, shape (N, 1) or (N,)
        The inputs (e.g. :attr:`SyntheticTestSet.x`), in any order.
    posterior : Tensor, shape (N, K)
        The true posterior ``eta(x)``, drawn in black in every panel.
    panels : mapping title -> (log_probs of shape (N, K), colour key)
        One panel per entry; the predictions are drawn in the book colour of the key
        (:func:`focalcal.plotting.color`), one line style per class.
    class_names : sequence of str, optional

    Returns
    -------
    (Figure, 1-D array of Axes)
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from ..plotting import LINESTYLES, color

    xs = torch.as_tensor(x).reshape(-1).double()
    eta = torch.as_tensor(posterior).double()
    if eta.dim() != 2 or eta.shape[0] != xs.shape[0]:
        raise ValueError(f"x and posterior must have shapes (N,) or (N, 1) and (N, K) with the same N, "
                         f"got {tuple(torch.as_tensor(x).shape)} and {tuple(eta.shape)}")
    if not panels:
        raise ValueError("panels must name at least one model")
    k = eta.shape[1]
    names = list(class_names) if class_names is not None else [f"class {j + 1}" for j in range(k)]
    order = torch.argsort(xs)
    xs, eta = xs[order].numpy(), eta[order].numpy()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (title, (log_probs, key)) in zip(axes, panels.items()):
        probs = torch.as_tensor(log_probs).double().exp()[order].numpy()
        for j in range(k):
            ls = LINESTYLES[j % len(LINESTYLES)]
            ax.plot(xs, eta[:, j], color=color("true posterior"), lw=1.0, ls=ls)
            ax.plot(xs, probs[:, j], color=color(key), lw=2.0, ls=ls, alpha=0.9)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("input x")
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("p(y | x)")
    handles = [Line2D([], [], color=color("true posterior"), lw=1.0, label="true posterior")]
    handles += [Line2D([], [], color="0.4", lw=2.0, ls=LINESTYLES[j % len(LINESTYLES)], label=names[j])
                for j in range(k)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig, axes


def plot_posterior_kl(kl, *, methods: Sequence[str] = ("uncalibrated", "TS (NLL)", "focal TS (NLL)", "Psi"),
                      losses: Sequence[str] | None = None):
    """Grouped bars of the KL divergence to the true posterior, one panel per synthetic dataset.

    Parameters
    ----------
    kl : DataFrame
        From :func:`posterior_kl` (averaged over seeds here).
    methods : sequence of str
        Methods of :data:`METHODS`, one bar each, coloured by family.
    losses : sequence of str, optional
        Training losses (``loss_label``) in the order of the groups (default: as they appear).

    Returns
    -------
    (Figure, 1-D array of Axes)
    """
    import matplotlib.pyplot as plt
    import numpy as np

    from ..plotting import color

    if not len(kl):
        raise ValueError("kl has no rows: the sweep has no finished run on a synthetic task")
    datasets = list(dict.fromkeys(kl["dataset"]))
    fig, axes = plt.subplots(1, len(datasets), figsize=(6.2 * len(datasets), 3.6), squeeze=False)
    axes = axes[0]
    hatches = ("", "//", "..", "xx")
    width = 0.8 / len(methods)
    for ax, ds in zip(axes, datasets):
        sub = kl[kl["dataset"] == ds]
        _, order = _select(sub, None, losses)
        mean = sub.groupby(["loss_label", "method"])["kl_posterior"].mean()
        pos = np.arange(len(order))
        for i, method in enumerate(methods):
            vals = [mean.get((lo, method), np.nan) for lo in order]
            ax.bar(pos + (i - (len(methods) - 1) / 2) * width, vals, width,
                   color=color(FAMILIES.get(method, method)), hatch=hatches[i % len(hatches)],
                   edgecolor="white", linewidth=0.3, label=method)
        ax.set_xticks(pos, order, rotation=25, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("KL(true posterior || p) (nats)")
        ax.set_title(ds, fontsize=10)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", ncol=len(methods), bbox_to_anchor=(0.5, 1.02))
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig, axes
