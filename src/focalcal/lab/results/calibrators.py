"""Which post-hoc calibrator? Every method fitted on a fit split and scored on a test split, per network.

:data:`METHODS` (name -> factory) is the one place that lists the methods; the tables, ranks and
tests read it. :func:`evaluate` fits each on one network and scores it (top-label ECE with
equal-width and equal-mass bins, smooth ECE, classwise ECE, NLL, Brier, accuracy, fit seconds);
:func:`mean_ranks` ranks the methods per network (1 = best; ties share their mean rank) and
averages; :func:`friedman_nemenyi` gives Demšar's (2006) Friedman test over networks and the
Nemenyi critical difference of mean ranks, ``q_alpha * sqrt(k (k + 1) / (6 N))`` with ``q_alpha``
the studentized range quantile (``k`` groups, infinite degrees of freedom) over ``sqrt 2``;
:func:`nll_interval` is the paired bootstrap (:mod:`focalcal.lab.results.bootstrap`) of a method's
test NLL minus that of TS (NLL), the practitioner's default.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from scipy import stats

from ... import metrics
from ...posthoc import (FocalTemperatureScaling, HistogramBinning, IsotonicCalibration, PsiCorrection,
                        TemperatureScaling)
from .bootstrap import BootstrapInterval, paired_bootstrap, verdict

__all__ = ["METHODS", "METRICS", "evaluate", "mean_ranks", "friedman_nemenyi", "nll_interval"]


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
    "TS (ECE)": lambda g: TemperatureScaling("ece_mass"),
    "focal TS (NLL)": lambda g: FocalTemperatureScaling(criterion="nll"),
    "focal TS (ECE)": lambda g: FocalTemperatureScaling(criterion="ece_mass"),
    "Psi": lambda g: None if not g else PsiCorrection(gamma=g),
    "histogram binning": lambda g: HistogramBinning(),
    "histogram binning (classwise)": lambda g: HistogramBinning(mode="classwise"),
    "isotonic": lambda g: IsotonicCalibration(),
    # TODO(issue 22, branch calibrators): add VectorScaling, MatrixScaling, DirichletCalibration and
    # EnsembleTemperatureScaling here once merged (one line each); nothing else lists methods.
}

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


def mean_ranks(tables: list[Mapping[str, Mapping[str, float]]], metric: str) -> dict[str, float]:
    """Mean over networks of each method's rank in ``metric`` (1 = best, ties share the mean rank).

    Only methods present in every table are ranked.
    """
    names = [m for m in tables[0] if all(m in t for t in tables)]
    sign = -1.0 if metric in HIGHER_IS_BETTER else 1.0
    ranks = np.array([stats.rankdata([sign * t[m][metric] for m in names]) for t in tables])
    return dict(zip(names, ranks.mean(0).tolist()))


def friedman_nemenyi(tables: list[Mapping[str, Mapping[str, float]]], metric: str, *,
                     alpha: float = 0.05) -> dict[str, float]:
    """Friedman's test over networks and the Nemenyi critical difference of mean ranks (Demšar 2006).

    Returns ``statistic`` and ``p_value`` of :func:`scipy.stats.friedmanchisquare` and
    ``critical_difference``: two methods whose mean ranks differ by more are different at level
    ``alpha``.
    """
    names = [m for m in tables[0] if all(m in t for t in tables)]
    k, n = len(names), len(tables)
    res = stats.friedmanchisquare(*[[t[m][metric] for t in tables] for m in names])
    q = stats.studentized_range.ppf(1 - alpha, k, np.inf) / np.sqrt(2)
    return {"statistic": float(res.statistic), "p_value": float(res.pvalue),
            "critical_difference": float(q * np.sqrt(k * (k + 1) / (6 * n)))}


def nll_interval(labels: torch.Tensor, log_probs: torch.Tensor, baseline_log_probs: torch.Tensor, *,
                 n_resamples: int = 1000, seed: int = 0) -> BootstrapInterval:
    """Paired bootstrap 95 % interval of ``NLL(method) - NLL(baseline)`` over the test samples."""
    y = labels.long().view(-1, 1)
    diff = (baseline_log_probs.gather(1, y) - log_probs.gather(1, y)).squeeze(1).double()
    boot = paired_bootstrap(lambda idx: diff[idx].mean(1), diff.shape[0], n_resamples=n_resamples, seed=seed)
    lo, hi = (float(v) for v in torch.quantile(boot, torch.tensor([0.025, 0.975], dtype=torch.float64)))
    return BootstrapInterval(float(diff.mean()), lo, hi, 0.95, n_resamples, seed, verdict(lo, hi))
