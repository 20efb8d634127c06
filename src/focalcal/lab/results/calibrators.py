"""Which post-hoc calibrator? Every method fitted on a fit split and scored on a test split, per network.

:data:`METHODS` (name -> factory) is the one place that lists the methods; the tables, ranks and
tests read it (:data:`ARGMAX_PRESERVING`: those that never change the predicted class).
:func:`evaluate` fits each on one network and scores it (top-label ECE with equal-width and
equal-mass bins, smooth ECE, classwise ECE, NLL, Brier, accuracy, fit seconds);
:func:`mean_ranks` ranks the methods per network (1 = best; ties share their mean rank) and
averages; :func:`friedman_nemenyi` gives Demšar's (2006) Friedman test over networks and the
Nemenyi critical difference of mean ranks, ``q_alpha * sqrt(k (k + 1) / (6 N))`` with ``q_alpha``
the studentized range quantile (``k`` groups, infinite degrees of freedom) over ``sqrt 2``
(:func:`nemenyi_q`, his Table 5(a)). :func:`intervals` is the paired bootstrap
(:mod:`focalcal.lab.results.bootstrap`) of every method's metric minus that of :data:`BASELINE`,
TS (NLL), the practitioner's default, for the metrics of :data:`BOOTSTRAP_METRICS` (one set of
resamples for all); :func:`nll_interval` the same for the NLL of one method.

One network's result (:func:`network_result`: the rows, the intervals, the set sizes and the fits'
warnings) is plain data, cached as JSON (:func:`cached_json`) by a digest of the data, the
parameters and the code (:func:`code_digest`): :func:`released_result` for a released network
(:func:`focalcal.lab.results.released.fit_eval_split`), :func:`run_result` for a run of a sweep
(fitted on its validation logits, evaluated on its test logits).
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

from ... import metrics
from ...posthoc import (KK_TEMPERATURES, DirichletCalibration, EnsembleTemperatureScaling, FocalTemperatureScaling,
                        HistogramBinning, IsotonicCalibration, MatrixScaling, PsiCorrection, TemperatureScaling,
                        VectorScaling)
from ..io import atomic_write_json, source_digest
from . import released
from .bootstrap import BootstrapInterval, ece_differences, paired_bootstrap, resample_counts, verdict
from .protocol import training_gamma
from .. import runfolder
from .runs import load_run

__all__ = ["METHODS", "ARGMAX_PRESERVING", "METRICS", "HIGHER_IS_BETTER", "BASELINE", "BOOTSTRAP_METRICS", "evaluate",
           "mean_ranks", "common_methods", "nemenyi_q", "friedman_nemenyi", "nll_interval", "per_sample", "intervals",
           "network_result", "code_digest", "cached_json", "released_result", "run_result"]


class _Identity:
    """The uncalibrated network: ``log_softmax`` of its logits."""

    def fit(self, logits: Any, labels: Any) -> _Identity:
        return self

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits, dim=-1)


#: name -> factory(training gamma or None) -> an unfitted calibrator, or None where it does not apply
METHODS: dict[str, Callable[[float | None], Any]] = {
    "uncalibrated": lambda g: _Identity(),
    "TS (NLL)": lambda g: TemperatureScaling("nll"),
    "TS (ECE)": lambda g: TemperatureScaling("ece_mass", grid=KK_TEMPERATURES),
    "focal TS (NLL)": lambda g: FocalTemperatureScaling(criterion="nll"),
    "focal TS (ECE)": lambda g: FocalTemperatureScaling(criterion="ece_mass"),
    "Psi": lambda g: None if not g else PsiCorrection(gamma=g),
    "histogram binning": lambda g: HistogramBinning(),
    "histogram binning (classwise)": lambda g: HistogramBinning(mode="classwise"),
    "isotonic": lambda g: IsotonicCalibration(),
    "ensemble TS": lambda g: EnsembleTemperatureScaling(),
    "vector scaling": lambda g: VectorScaling(),
    "matrix scaling": lambda g: MatrixScaling(),
    "Dirichlet": lambda g: DirichletCalibration(),
}
#: the methods that never change the argmax (so never the accuracy); the others can
ARGMAX_PRESERVING = ("uncalibrated", "TS (NLL)", "TS (ECE)", "focal TS (NLL)", "focal TS (ECE)", "Psi", "ensemble TS")

#: metric -> (function of (log-probs, labels) -> float); all smaller-is-better except accuracy
METRICS: dict[str, Callable[[torch.Tensor, torch.Tensor], float]] = {
    "ECE (width)": lambda lp, y: metrics.ece(logits=lp, labels=y),
    "ECE (mass)": lambda lp, y: metrics.ece(logits=lp, labels=y, binning="mass"),
    "smooth ECE": lambda lp, y: metrics.smooth_ece(logits=lp, labels=y),
    "classwise ECE": lambda lp, y: metrics.classwise_ece(logits=lp, labels=y),
    "NLL": lambda lp, y: metrics.nll(logits=lp, labels=y),
    "Brier": lambda lp, y: metrics.brier(logits=lp, labels=y),
    "accuracy": lambda lp, y: metrics.accuracy(logits=lp, labels=y),
}
HIGHER_IS_BETTER = ("accuracy",)
#: the method every other is compared with by the paired bootstrap: the practitioner's default
BASELINE = "TS (NLL)"
#: the metrics with a paired bootstrap interval (:func:`intervals`); smooth and classwise ECE have none
BOOTSTRAP_METRICS = ("ECE (width)", "ECE (mass)", "NLL", "Brier", "accuracy")


def evaluate(fit_logits: torch.Tensor, fit_labels: torch.Tensor, eval_logits: torch.Tensor,
             eval_labels: torch.Tensor, *, gamma: float | None = None,
             methods: Mapping[str, Callable[[float | None], Any]] = METHODS
             ) -> tuple[dict[str, dict[str, float]], dict[str, torch.Tensor]]:
    """Fit every method on the fit split and score it on the eval split.

    Returns ``(rows, log_probs)``: ``rows[method]`` maps every :data:`METRICS` name and
    ``"fit seconds"`` to a float; ``log_probs[method]`` are the test log-probabilities (float64).
    Methods whose factory returns ``None`` for this ``gamma`` (Psi without a focal training loss)
    are left out.
    """
    zf, zt = fit_logits.double(), eval_logits.double()
    rows, log_probs = {}, {}
    for name, factory in methods.items():
        cal = factory(gamma)
        if cal is None:
            continue
        t0 = time.perf_counter()
        cal.fit(zf, fit_labels)
        seconds = time.perf_counter() - t0
        with torch.no_grad():
            lp = cal(zt).double()
        rows[name] = {m: fn(lp, eval_labels) for m, fn in METRICS.items()} | {"fit seconds": seconds}
        log_probs[name] = lp
    return rows, log_probs


def nll_interval(log_probs: torch.Tensor, baseline_log_probs: torch.Tensor, labels: torch.Tensor, *,
                 n_resamples: int = 1000, seed: int = 0) -> BootstrapInterval:
    """Paired bootstrap 95 % interval of ``NLL(method) - NLL(baseline)`` over the test samples."""
    y = labels.long().view(-1, 1)
    diff = (baseline_log_probs.gather(1, y) - log_probs.gather(1, y)).squeeze(1).double()
    boot = paired_bootstrap(lambda idx: diff[idx].mean(1), diff.shape[0], n_resamples=n_resamples, seed=seed)
    lo, hi = (float(v) for v in torch.quantile(boot, torch.tensor([0.025, 0.975], dtype=torch.float64)))
    return BootstrapInterval(float(diff.mean()), lo, hi, 0.95, n_resamples, seed, verdict(lo, hi))


def mean_ranks(tables: list[Mapping[str, Mapping[str, float]]], metric: str) -> dict[str, float]:
    """Mean over networks of each method's rank in ``metric`` (1 = best, ties share the mean rank).

    Only methods present in every table are ranked.
    """
    names = common_methods(tables)
    sign = -1.0 if metric in HIGHER_IS_BETTER else 1.0
    ranks = np.array([stats.rankdata([sign * t[m][metric] for m in names]) for t in tables])
    return dict(zip(names, ranks.mean(0).tolist()))


def common_methods(tables: list[Mapping[str, Mapping[str, float]]]) -> list[str]:
    """The methods present in every table, in the order of the first (Psi is missing where the
    network was not trained with a focal loss)."""
    if not tables:
        raise ValueError("tables must hold at least one network")
    return [m for m in tables[0] if all(m in t for t in tables)]


def nemenyi_q(k: int, alpha: float = 0.05) -> float:
    """Demšar's (2006) ``q_alpha`` of the Nemenyi test for ``k`` methods: the studentized range
    quantile (``k`` groups, infinite degrees of freedom) over ``sqrt 2`` (his Table 5(a))."""
    if k < 2:
        raise ValueError(f"the Nemenyi test needs at least two methods, got {k}")
    return float(stats.studentized_range.ppf(1 - alpha, k, np.inf) / np.sqrt(2))


def friedman_nemenyi(tables: list[Mapping[str, Mapping[str, float]]], metric: str, *,
                     alpha: float = 0.05) -> dict[str, float]:
    """Friedman's test over networks and the Nemenyi critical difference of mean ranks (Demšar 2006).

    Returns ``statistic`` and ``p_value`` of :func:`scipy.stats.friedmanchisquare` (NaN when every
    network ties every method: nothing to test), ``critical_difference``
    ``q_alpha * sqrt(k (k + 1) / (6 N))`` (:func:`nemenyi_q`): two methods whose mean ranks differ
    by more are different at level ``alpha``, and ``k`` (methods) and ``n`` (networks).
    """
    names = common_methods(tables)
    k, n = len(names), len(tables)
    sign = -1.0 if metric in HIGHER_IS_BETTER else 1.0
    values = np.array([[sign * t[m][metric] for m in names] for t in tables])
    if n < 2 or k < 3 or bool(np.all(values == values[:, :1])):
        statistic, p_value = float("nan"), float("nan")
    else:
        res = stats.friedmanchisquare(*values.T)
        statistic, p_value = float(res.statistic), float(res.pvalue)
    return {"statistic": statistic, "p_value": p_value, "k": k, "n": n,
            "critical_difference": float(nemenyi_q(k, alpha) * np.sqrt(k * (k + 1) / (6 * n)))}


# --------------------------------------------------------------------------------------------
# paired bootstrap against the baseline
# --------------------------------------------------------------------------------------------

def per_sample(log_probs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """The per-sample terms of the additive metrics: ``NLL`` (``-log p_y``), ``Brier``
    (``sum_k (p_k - 1[y = k])^2``) and ``accuracy`` (0/1); their means are the metrics."""
    y = torch.as_tensor(labels).long()
    lp = torch.log_softmax(torch.as_tensor(log_probs, dtype=torch.float64), dim=-1)
    p = lp.exp()
    onehot = torch.nn.functional.one_hot(y, lp.shape[-1]).to(torch.float64)
    return {"NLL": -lp.gather(1, y.view(-1, 1)).squeeze(1), "Brier": ((p - onehot) ** 2).sum(-1),
            "accuracy": (lp.argmax(-1) == y).to(torch.float64)}


def _interval(estimate: float, draws: torch.Tensor, metric: str, n_resamples: int, seed: int,
              level: float) -> BootstrapInterval:
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    low, high = (float(v) for v in torch.quantile(draws, q))
    # "better" is a lower value, except for the accuracy
    word = verdict(-high, -low) if metric in HIGHER_IS_BETTER else verdict(low, high)
    return BootstrapInterval(float(estimate), low, high, float(level), int(n_resamples), int(seed), word)


def intervals(log_probs: Mapping[str, torch.Tensor], labels: torch.Tensor, baseline: str = BASELINE, *,
              n_resamples: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, dict[str, BootstrapInterval]]:
    """Paired bootstrap intervals of ``metric(method) - metric(baseline)`` over the test samples,
    for every method of ``log_probs`` and every metric of :data:`BOOTSTRAP_METRICS`.

    All methods and metrics share the same resamples (the same ``seed``): NLL, Brier and accuracy
    from their per-sample terms (:func:`per_sample`), the two top-label ECEs from
    :func:`focalcal.lab.results.bootstrap.ece_differences`. The interval's ``verdict`` says
    ``"better"`` when the method is better than the baseline on every resample quantile (a lower
    value; a higher accuracy), ``"worse"`` when worse, ``"indistinguishable"`` otherwise.
    """
    y = torch.as_tensor(labels).long()
    names = list(log_probs)
    terms = {m: per_sample(lp, y) for m, lp in log_probs.items()}
    additive = [k for k in BOOTSTRAP_METRICS if k in ("NLL", "Brier", "accuracy")]
    diff = torch.stack([terms[m][k] - terms[baseline][k] for k in additive for m in names])  # (metrics*methods, N)
    n = y.shape[0]
    draws = paired_bootstrap(lambda idx: resample_counts(idx, n) @ diff.T / n, n, n_resamples=n_resamples,
                             seed=seed)
    out: dict[str, dict[str, BootstrapInterval]] = {m: {} for m in names}
    for j, (k, m) in enumerate((k, m) for k in additive for m in names):
        out[m][k] = _interval(float(diff[j].mean()), draws[:, j], k, n_resamples, seed, level)
    for k, binning in (("ECE (width)", "width"), ("ECE (mass)", "mass")):
        ece = ece_differences(log_probs, log_probs[baseline], y, binning=binning, n_resamples=n_resamples,
                              seed=seed, level=level)
        for m in names:
            out[m][k] = ece[m]
    return out


# --------------------------------------------------------------------------------------------
# one network, cached
# --------------------------------------------------------------------------------------------

def network_result(fit_logits: torch.Tensor, fit_labels: torch.Tensor, eval_logits: torch.Tensor,
                   eval_labels: torch.Tensor, *, gamma: float | None = None, n_resamples: int = 1000,
                   seed: int = 0) -> dict[str, Any]:
    """:func:`evaluate` and :func:`intervals` of one network, as plain data (JSON-ready).

    Returns ``rows`` (method -> metric -> value), ``intervals`` (method -> metric -> the
    :class:`~focalcal.lab.results.bootstrap.BootstrapInterval` as a dict), ``n_fit``, ``n_eval``,
    ``n_classes`` and ``warnings`` (the distinct warnings the fits raised, e.g. a parameter at the
    edge of its search range or L-BFGS stopping at its iteration limit).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows, lps = evaluate(torch.as_tensor(fit_logits), torch.as_tensor(fit_labels),
                             torch.as_tensor(eval_logits), torch.as_tensor(eval_labels), gamma=gamma)
    ivs = intervals(lps, torch.as_tensor(eval_labels), n_resamples=n_resamples, seed=seed)
    return {"rows": rows, "intervals": {m: {k: iv.as_dict() for k, iv in d.items()} for m, d in ivs.items()},
            "n_fit": int(len(fit_labels)), "n_eval": int(len(eval_labels)), "n_classes": int(eval_logits.shape[-1]),
            "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:200]}" for w in caught})}


def code_digest() -> str:
    """:func:`focalcal.lab.results.released.code_digest` and this module's code (its syntax tree
    without docstrings): what a cached :func:`network_result` depends on."""
    here = Path(__file__)
    return source_digest([here], here.parent, extra=[released.code_digest()])


def cached_json(cache: str | Path | None, kind: str, name: str, key: Mapping[str, Any],
                compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``compute()``, or its result stored under ``cache`` for the same ``kind``, ``name``, ``key``
    (the data's digest and parameters) and :func:`code_digest`; ``cache=None`` always computes.
    NaN is stored as JSON ``null`` and read back as NaN."""
    if cache is None:
        return compute()
    blob = json.dumps({"kind": kind, "name": name, "code": code_digest(), **key}, sort_keys=True)
    path = Path(cache) / f"{kind}-{name}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.json"
    if path.is_file():
        return released._from_json(json.loads(path.read_text()))
    result = compute()
    atomic_write_json(path, released._json_safe(result))
    return result


def released_result(name: str, *, cache: str | Path | None = None, n_resamples: int = 1000, seed: int = 0,
                    **load: Any) -> dict[str, Any]:
    """:func:`network_result` of a released network on its fitting and evaluation splits
    (:func:`focalcal.lab.results.released.fit_eval_split`), Psi with
    :data:`~focalcal.lab.results.released.PSI_GAMMA`; cached by the files' sha256."""
    net = released.released_network(name)
    key = {"files": sorted(f.sha256 for fs in net.files.values() for f in fs), "n_resamples": n_resamples,
           "seed": seed}

    def compute() -> dict[str, Any]:
        s = released.fit_eval_split(name, **load)
        return network_result(s.fit_logits, s.fit_labels, s.eval_logits, s.eval_labels,
                              gamma=released.PSI_GAMMA.get(net.loss), n_resamples=n_resamples, seed=seed)

    return cached_json(cache, "calibrators", name, key, compute)


def run_result(run_dir: str | Path, *, cache: str | Path | None = None, n_resamples: int = 1000,
               seed: int = 0) -> dict[str, Any]:
    """:func:`network_result` of a sweep's run: fitted on its validation logits, evaluated on its
    test logits, Psi with the training ``gamma`` (:func:`focalcal.lab.results.training_gamma`);
    cached by the sha256 of its ``logits.pt`` and its configuration."""
    d = Path(run_dir)
    config = runfolder.read_config(d)["config"]
    digest = hashlib.sha256(runfolder.logits_path(d).read_bytes()).hexdigest()
    key = {"logits": digest, "config": config, "n_resamples": n_resamples, "seed": seed}

    def compute() -> dict[str, Any]:
        run = load_run(d)
        gamma = training_gamma(config["loss"], run.loss_params) or None
        return network_result(run.val_logits, run.val_labels, run.test_logits, run.test_labels, gamma=gamma,
                              n_resamples=n_resamples, seed=seed)

    return cached_json(cache, "calibrators", d.name, key, compute)
