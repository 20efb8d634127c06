r"""The papers' protocols on the released networks (:data:`focalcal.lab.data.RELEASED`).

Three protocols, one cached table row per network each (splits: :func:`fit_eval_split`):

Mukhoti et al. (2020), Sec. 5 (:func:`mukhoti_row`)
    ``T`` on their grid ``0.1, 0.2, ..., 10`` minimising the validation ECE (15 equal-width bins),
    then on the test set: error, ECE, AdaECE, NLL and MCE before and after ``T``, and ``|S99|``
    (samples with confidence above 0.99) with its accuracy. The AdaECE is computed twice: with the
    library's equal-mass bins (:mod:`focalcal.metrics`) and as Mukhoti et al.'s released code
    computes it (:func:`code_ece`: bin edges interpolated between sorted float32 confidences,
    bins ``(lo, hi]``), which is what their tables print. :func:`code_temperature` repeats their
    grid search as their code does it (float32, ``T += 0.1``, the first strict minimum).
Komisarenko & Kull (2024), Sec. 5.1 (:func:`kk_fit`, :func:`kk_rows`)
    TS selected by NLL and by 15-bin equal-mass ECE on the grid ``0.01, ..., 5``; focal TS on the
    full ``(gamma_ev, T)`` grid and by the "3m" line search, both selected by the equal-mass ECE;
    Psi with the training ``gamma`` where the training loss has one (:data:`PSI_GAMMA`). Test
    metrics as :func:`focalcal.lab.results.metric_row`. The paired bootstrap of
    ``ECE(focal TS) - ECE(TS)`` (:func:`focalcal.lab.results.bootstrap.ece_differences`) compares the
    two ECE-selected calibrators, fitted once.
Zhou et al. (2025) (:func:`zhou_row`)
    Class-wise ECE, (equal-width) ECE and adaptive ECE before and after TS, and the AURC and E-AURC
    under the three confidence scores of :data:`focalcal.scores.SCORES`. Zhou et al. select ``T`` by
    minimising the ECE *on the training set* (their Table 2); we use Mukhoti's grid and criterion
    on the fitting split, and on the training split where one is published.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ... import metrics
from ...posthoc import KK_GAMMAS, KK_TEMPERATURES, MUKHOTI_TEMPERATURES, FocalTemperatureScaling, TemperatureScaling
from ...scores import SCORES
from ..data.released import RELEASED, released_logits, released_network
from ..io import atomic_write_json, source_digest
from .bootstrap import ece_differences
from .protocol import apply_calibration, fit_on_grid, metric_row

__all__ = ["HALF_SPLIT_SEED", "PSI_GAMMA", "KK_METHODS", "N_RESAMPLES", "FitEval", "fit_eval_split",
           "code_ece", "code_temperature", "mukhoti_row", "kk_fit", "kk_log_probs", "kk_rows", "kk_network",
           "zhou_row", "code_digest", "cached", "mukhoti_table", "kk_tables", "zhou_table", "zhou_paper_protocol"]

#: seed of the fixed random half of the test logits that fits the ResNet-50 runs' calibrators
HALF_SPLIT_SEED = 0
#: training ``gamma`` of Psi by training loss; FLSD-53 switches between 5 (p_t < 0.2) and 3 per sample,
#: and at the end of training nearly every sample has p_t >= 0.2, so its Psi uses 3. Losses without
#: a focal link have no Psi (it would be the identity).
PSI_GAMMA: dict[str, float] = {"FLSD-53": 3.0}
#: the post-hoc methods of :func:`kk_fit`, in the order of their rows
KK_METHODS = ("uncalibrated", "TS (NLL)", "TS (ECE)", "focal TS (NLL)", "focal TS (ECE)", "focal TS (ECE, 3m line)",
              "Psi")
#: bootstrap resamples of the focal TS vs TS comparison
N_RESAMPLES = 1000


# --------------------------------------------------------------------------------------------
# splits
# --------------------------------------------------------------------------------------------

@dataclass
class FitEval:
    """Logits and labels that fit a calibrator and logits and labels that evaluate it."""

    fit_logits: torch.Tensor
    fit_labels: torch.Tensor
    eval_logits: torch.Tensor
    eval_labels: torch.Tensor
    protocol: str  #: ``"validation / test"`` or ``"test halves"``


def fit_eval_split(name: str, **load: Any) -> FitEval:
    """The fitting and evaluation sets of a released network.

    Mukhoti et al.'s networks have validation (5 000) and test (10 000) logits; the five ResNet-50
    runs have no validation split, so a fixed random half of the test logits (``torch.randperm``
    with seed :data:`HALF_SPLIT_SEED`, the split of the CIFAR-10 logits chapter) fits and the other
    half evaluates.

    ``load`` goes to :func:`focalcal.lab.data.released_logits` (``root``, ``download``).
    """
    net = released_network(name)
    if "val" in net.splits:
        zv, yv = released_logits(name, "val", **load)
        zt, yt = released_logits(name, "test", **load)
        return FitEval(zv, yv, zt, yt, "validation / test")
    z, y = released_logits(name, "test", **load)
    perm = torch.randperm(z.shape[0], generator=torch.Generator().manual_seed(HALF_SPLIT_SEED))
    fit, ev = perm[: z.shape[0] // 2], perm[z.shape[0] // 2:]
    return FitEval(z[fit], y[fit], z[ev], y[ev], "test halves")


# --------------------------------------------------------------------------------------------
# Mukhoti et al.'s protocol, and their released code's conventions
# --------------------------------------------------------------------------------------------

def code_ece(logits: Any, labels: Any, *, adaptive: bool = False, n_bins: int = 15) -> float:
    """ECE or AdaECE as Mukhoti et al.'s released code computes them (``ECELoss``, ``AdaptiveECELoss``).

    Softmax in float32; equal-width edges ``torch.linspace(0, 1, n_bins + 1)`` (float32) or, for
    ``adaptive``, ``np.interp(linspace(0, N, n_bins + 1), arange(N), sort(conf))`` (interpolated
    between sorted confidences, so bins hold about N / n_bins samples each); a sample is in bin
    ``(lo, hi]`` (so with ``adaptive`` the least confident sample, equal to the first edge, is in no
    bin). Vectorised (one ``bucketize``); the bin sums are accumulated in float64.
    """
    z = torch.as_tensor(logits).to(torch.float32)
    y = torch.as_tensor(labels)
    conf, pred = torch.softmax(z, dim=1).max(dim=1)
    hit = (pred == y).to(torch.float64)
    if adaptive:
        x = conf.numpy()
        edges = np.interp(np.linspace(0, len(x), n_bins + 1), np.arange(len(x)), np.sort(x))
        edges = torch.from_numpy(edges).to(torch.float32)  # compared in float32, as conf.gt(float)
    else:
        edges = torch.linspace(0, 1, n_bins + 1)
    idx = torch.bucketize(conf, edges, right=False)  # edges[i-1] < c <= edges[i] -> i
    inside = (idx >= 1) & (idx <= n_bins)
    b = idx[inside] - 1
    n = float(conf.shape[0])
    cnt = torch.bincount(b, minlength=n_bins).to(torch.float64)
    s_conf = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, b, conf[inside].double())
    s_hit = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, b, hit[inside])
    full = cnt > 0
    return float(((s_conf[full] - s_hit[full]).abs() / cnt[full] * (cnt[full] / n)).sum())


def code_temperature(logits: Any, labels: Any, *, n_bins: int = 15) -> float:
    """``T`` as Mukhoti et al.'s ``set_temperature`` selects it: ``T = 0.1`` then ``T += 0.1`` a hundred
    times (floating-point accumulation), float32 ECE (:func:`code_ece`), the first strict minimum."""
    z = torch.as_tensor(logits).to(torch.float32)
    best, t_opt, t = 1e7, 1.0, 0.1
    for _ in range(100):
        e = code_ece(z / t, labels, n_bins=n_bins)
        if best > e:
            t_opt, best = t, e
        t += 0.1
    return t_opt


def mukhoti_row(split: FitEval, *, n_bins: int = 15) -> dict[str, float]:
    """Mukhoti et al.'s quantities of one network (fractions; ``temperature`` as selected).

    Keys: ``temperature`` (the library's :class:`~focalcal.posthoc.TemperatureScaling` with
    ``criterion="ece"`` on :data:`~focalcal.posthoc.MUKHOTI_TEMPERATURES`), ``temperature_code``
    (:func:`code_temperature`), ``error``, ``top1`` and ``top5`` (accuracies), and ``<q>_pre`` /
    ``<q>_post`` for ``q`` in ``ece``, ``adaece`` (library), ``adaece_code`` (:func:`code_ece`), ``nll``, ``mce``, ``s99`` (fraction
    with confidence > 0.99) and ``s99_acc`` (accuracy on them), on the evaluation split.
    """
    ts = fit_on_grid(TemperatureScaling("ece", grid=MUKHOTI_TEMPERATURES, n_bins=n_bins), split.fit_logits,
                     split.fit_labels)
    t = ts.temperature_
    y = split.eval_labels
    row: dict[str, float] = {"temperature": t,
                             "temperature_code": code_temperature(split.fit_logits, split.fit_labels, n_bins=n_bins),
                             "error": 1.0 - metrics.accuracy(logits=split.eval_logits, labels=y),
                             "top1": metrics.accuracy(logits=split.eval_logits, labels=y),
                             "top5": metrics.accuracy(logits=split.eval_logits, labels=y, top_k=5)}
    for when, z in (("pre", split.eval_logits), ("post", split.eval_logits / t)):
        conf = metrics.frac_confident(logits=z, labels=y, threshold=0.99)
        row.update({f"ece_{when}": metrics.ece(logits=z, labels=y, n_bins=n_bins),
                    f"adaece_{when}": metrics.ece(logits=z, labels=y, n_bins=n_bins, binning="mass"),
                    f"adaece_code_{when}": code_ece(z, y, adaptive=True, n_bins=n_bins),
                    f"nll_{when}": metrics.nll(logits=z, labels=y),
                    f"mce_{when}": metrics.mce(logits=z, labels=y, n_bins=n_bins),
                    f"s99_{when}": conf.fraction, f"s99_acc_{when}": conf.accuracy})
    return row


# --------------------------------------------------------------------------------------------
# Komisarenko & Kull's protocol
# --------------------------------------------------------------------------------------------

def _calibrators(n_bins: int) -> dict[str, Any]:
    temps = KK_TEMPERATURES
    out: dict[str, Any] = {
        "TS (NLL)": TemperatureScaling("nll", grid=temps, n_bins=n_bins),
        "TS (ECE)": TemperatureScaling("ece_mass", grid=temps, n_bins=n_bins),
        "focal TS (NLL)": FocalTemperatureScaling(KK_GAMMAS, temps, criterion="nll", n_bins=n_bins),
        "focal TS (ECE)": FocalTemperatureScaling(KK_GAMMAS, temps, criterion="ece_mass", n_bins=n_bins),
        "focal TS (ECE, 3m line)": FocalTemperatureScaling(KK_GAMMAS, temps, criterion="ece_mass", search="line",
                                                           n_bins=n_bins),
    }
    return out


def kk_fit(fit_logits: Any, fit_labels: Any, *, psi_gamma: float | None = None,
           n_bins: int = 15) -> dict[str, dict[str, float]]:
    """Fit the calibrators of :data:`KK_METHODS` once; their parameters by method.

    Returns
    -------
    dict
        method -> ``{"temperature", "gamma_ev", "val_score", "seconds"}`` (``val_score``: the
        criterion on the fitting set; ``seconds``: the time the fit took). "Psi" is present only with
        a ``psi_gamma`` (``T = 1``, ``gamma_ev = psi_gamma``); "uncalibrated" is ``T = 1``,
        ``gamma_ev = 0``.
    """
    z = torch.as_tensor(fit_logits).to(torch.float64)
    params: dict[str, dict[str, float]] = {
        "uncalibrated": {"temperature": 1.0, "gamma_ev": 0.0, "val_score": float("nan"), "seconds": 0.0}}
    for method, cal in _calibrators(n_bins).items():
        start = time.perf_counter()
        fit_on_grid(cal, z, fit_labels)
        params[method] = {"temperature": float(cal.temperature_), "gamma_ev": float(getattr(cal, "gamma_ev_", 0.0)),
                          "val_score": float(cal.best_score_), "seconds": time.perf_counter() - start}
    if psi_gamma is not None:
        params["Psi"] = {"temperature": 1.0, "gamma_ev": float(psi_gamma), "val_score": float("nan"), "seconds": 0.0}
    return params


def kk_log_probs(params: dict[str, dict[str, float]], logits: Any) -> dict[str, torch.Tensor]:
    """Log-probabilities of every fitted method (:func:`focalcal.lab.results.apply_calibration`)."""
    return {m: apply_calibration(p, logits) for m, p in params.items()}


def kk_rows(params: dict[str, dict[str, float]], eval_logits: Any, eval_labels: Any, *,
            n_bins: int = 15, log_probs: dict[str, torch.Tensor] | None = None) -> list[dict[str, Any]]:
    """One row per fitted method: its parameters and the test metrics of :func:`metric_row`
    (``log_probs``: :func:`kk_log_probs` of ``eval_logits`` when already computed)."""
    lps = kk_log_probs(params, eval_logits) if log_probs is None else log_probs
    return [{"method": m, **params[m], **metric_row(lp, eval_labels, n_bins=n_bins)} for m, lp in lps.items()]


def kk_network(name: str, *, n_resamples: int = N_RESAMPLES, seed: int = 0, n_bins: int = 15,
               **load: Any) -> dict[str, Any]:
    """K&K's protocol on one released network: fitted parameters, test rows and the bootstrap.

    Returns
    -------
    dict
        ``rows`` (:func:`kk_rows`), ``interval`` (the :class:`~focalcal.lab.results.bootstrap.BootstrapInterval`
        of ``ECE(focal TS (ECE)) - ECE(TS (ECE))``, 15 equal-mass bins, as a dict), ``interval_line``
        (the same for the line search), ``n_fit``, ``n_eval``, ``protocol``.
    """
    net = released_network(name)
    split = fit_eval_split(name, **load)
    params = kk_fit(split.fit_logits, split.fit_labels, psi_gamma=PSI_GAMMA.get(net.loss), n_bins=n_bins)
    lps = kk_log_probs(params, split.eval_logits)
    y = split.eval_labels
    compared = {"interval": lps["focal TS (ECE)"], "interval_line": lps["focal TS (ECE, 3m line)"]}
    boot = {key: iv.as_dict() for key, iv in ece_differences(compared, lps["TS (ECE)"], y, n_bins=n_bins,
                                                             n_resamples=n_resamples, seed=seed).items()}
    rows = kk_rows(params, split.eval_logits, y, n_bins=n_bins, log_probs=lps)
    return {"rows": rows, **boot, "n_fit": int(split.fit_labels.shape[0]), "n_eval": int(y.shape[0]),
            "protocol": split.protocol}


# --------------------------------------------------------------------------------------------
# Zhou et al.'s post-hoc quantities
# --------------------------------------------------------------------------------------------

def zhou_row(eval_logits: Any, eval_labels: Any, fit_logits: Any, fit_labels: Any, *,
             n_bins: int = 15) -> dict[str, float]:
    """Zhou et al.'s post-hoc quantities of one network (fractions).

    ``T`` minimises the equal-width ECE of ``fit_logits`` on Mukhoti's grid. Keys: ``temperature``,
    ``accuracy``; ``ece_<w>``, ``adaece_<w>`` (15 equal-mass bins) and ``cwece_<w>`` (class-wise,
    15 equal-width bins per class) for ``w`` in ``raw``, ``ts``; ``aurc_<s>`` and ``eaurc_<s>``
    (asymptotic optimum; ties averaged) of the raw predictions for every score ``s`` of
    :data:`focalcal.scores.SCORES`.
    """
    ts = fit_on_grid(TemperatureScaling("ece", grid=MUKHOTI_TEMPERATURES, n_bins=n_bins), fit_logits, fit_labels)
    z = torch.as_tensor(eval_logits).to(torch.float64)
    y = eval_labels
    row: dict[str, float] = {"temperature": ts.temperature_, "accuracy": metrics.accuracy(logits=z, labels=y)}
    for when, zz in (("raw", z), ("ts", z / ts.temperature_)):
        row[f"ece_{when}"] = metrics.ece(logits=zz, labels=y, n_bins=n_bins)
        row[f"adaece_{when}"] = metrics.ece(logits=zz, labels=y, n_bins=n_bins, binning="mass")
        row[f"cwece_{when}"] = metrics.classwise_ece(logits=zz, labels=y, n_bins=n_bins)
    for s in SCORES:
        row[f"aurc_{s}"] = metrics.aurc(logits=z, labels=y, score=s)
        row[f"eaurc_{s}"] = metrics.eaurc(logits=z, labels=y, score=s)
    return row


def zhou_paper_protocol(name: str, *, n_bins: int = 15, **load: Any) -> dict[str, float]:
    """:func:`zhou_row` as Zhou et al. evaluate: the whole test set, ``T`` fitted on the training set
    (for the AURC run, which has no published training logits, the ``temperature`` and the ``_ts``
    entries are NaN)."""
    net = released_network(name)
    zt, yt = released_logits(name, "test", **load)
    if "train" not in net.splits:
        row = zhou_row(zt, yt, zt, yt, n_bins=n_bins)
        return {k: (float("nan") if k == "temperature" or k.endswith("_ts") else v) for k, v in row.items()}
    zr, yr = released_logits(name, "train", **load)
    return zhou_row(zt, yt, zr, yr, n_bins=n_bins)


# --------------------------------------------------------------------------------------------
# caching and the tables of all networks
# --------------------------------------------------------------------------------------------

_CODE_FILES = ("lab/results/released.py", "lab/results/bootstrap.py", "lab/results/protocol.py",
               "lab/data/released.py", "lab/data/published.py")


def code_digest() -> str:
    """Digest of the code a cached row depends on (:func:`focalcal.lab.io.source_digest`): the library's modules
    (not the losses, the plots or the lab) and the lab modules of the protocols."""
    base = Path(__file__).resolve().parents[2]  # .../focalcal
    skip = ("lab", "losses")
    files = sorted(p for p in base.rglob("*.py")
                   if p.relative_to(base).parts[0] not in skip and p.name != "plotting.py")
    return source_digest(files + [base / f for f in _CODE_FILES], base)


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and value != value:
        return None  # NaN -> null (JSON has no NaN)
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return float("nan") if value is None else value


def cached(kind: str, name: str, compute: Callable[[], dict[str, Any]], *, cache: str | Path | None,
           params: dict[str, Any] | None = None) -> dict[str, Any]:
    """``compute()``, or its stored result from ``cache`` when the data, the code and ``params`` are unchanged.

    The key is the sha256 of: ``kind``, ``name``, the sha256 of every file of the network
    (:data:`focalcal.lab.data.RELEASED`), :func:`code_digest` and ``params``. ``cache=None``
    always computes. NaN values are stored as JSON ``null`` and read back as NaN.

    A row depends only on the data files and the code, so it is stored as JSON under ``cache``
    keyed by the files' sha256, a digest of the code of the library and of these modules
    (:func:`code_digest`; documentation excluded) and the protocol's parameters; any change of
    either recomputes it.
    """
    if cache is None:
        return compute()
    net = released_network(name)
    key = json.dumps({"kind": kind, "name": name, "code": code_digest(), "params": params or {},
                      "files": sorted(f.sha256 for fs in net.files.values() for f in fs)}, sort_keys=True)
    path = Path(cache) / f"{kind}-{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    if path.is_file():
        return _from_json(json.loads(path.read_text()))
    result = compute()
    atomic_write_json(path, _json_safe(result))
    return result


def _names(names: Iterable[str] | None, source: str | None = None) -> list[str]:
    if names is not None:
        return [released_network(n).name for n in names]
    return [n for n, net in RELEASED.items() if source is None or net.source == source]


def _describe(name: str) -> dict[str, str]:
    net = RELEASED[name]
    return {"network": name, "dataset": net.dataset, "architecture": net.network, "loss": net.loss,
            "source": net.source}


def mukhoti_table(names: Iterable[str] | None = None, *, cache: str | Path | None = None, **load: Any):
    """:func:`mukhoti_row` of every network (default: Mukhoti et al.'s 12), one row each (a DataFrame)."""
    import pandas as pd

    rows = [{**_describe(n), **cached("mukhoti", n, lambda n=n: mukhoti_row(fit_eval_split(n, **load)),
                                      cache=cache)} for n in _names(names, "mukhoti2020")]
    return pd.DataFrame(rows)


def kk_tables(names: Iterable[str] | None = None, *, cache: str | Path | None = None,
              n_resamples: int = N_RESAMPLES, seed: int = 0, **load: Any):
    """:func:`kk_network` of every network (default: all 17).

    Returns
    -------
    rows : DataFrame
        One row per network and method (:func:`kk_rows`'s columns and the network's description).
    intervals : DataFrame
        One row per network: the bootstrap interval of ``ECE(focal TS) - ECE(TS)`` (``estimate``,
        ``low``, ``high``, ``verdict``, ...), the line search's (``line_*`` columns), ``n_fit``,
        ``n_eval`` and ``protocol``.
    """
    import pandas as pd

    rows, intervals = [], []
    for n in _names(names):
        res = cached("kk", n, lambda n=n: kk_network(n, n_resamples=n_resamples, seed=seed, **load), cache=cache,
                     params={"n_resamples": n_resamples, "seed": seed})
        rows += [{**_describe(n), **r} for r in res["rows"]]
        intervals.append({**_describe(n), **res["interval"],
                          **{f"line_{k}": v for k, v in res["interval_line"].items()},
                          "n_fit": res["n_fit"], "n_eval": res["n_eval"], "protocol": res["protocol"]})
    return pd.DataFrame(rows), pd.DataFrame(intervals)


def zhou_table(names: Iterable[str] | None = None, *, cache: str | Path | None = None, paper_protocol: bool = False,
               **load: Any):
    """:func:`zhou_row` of every network (default: all 17) on its fitting/evaluation splits, or with
    ``paper_protocol`` :func:`zhou_paper_protocol` (the ResNet-50 runs by default), one row each."""
    import pandas as pd

    def compute(n: str) -> dict[str, float]:
        if paper_protocol:
            return zhou_paper_protocol(n, **load)
        s = fit_eval_split(n, **load)
        return zhou_row(s.eval_logits, s.eval_labels, s.fit_logits, s.fit_labels)

    kind = "zhou-paper" if paper_protocol else "zhou"
    default = _names(None, "zhou2025") if paper_protocol else _names(None)
    rows = [{**_describe(n), **cached(kind, n, lambda n=n: compute(n), cache=cache)}
            for n in (default if names is None else _names(names))]
    return pd.DataFrame(rows)
