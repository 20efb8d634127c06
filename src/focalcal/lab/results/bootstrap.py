"""The paired bootstrap over test samples: is one calibrator's ECE really lower than another's?

Two calibrators, fitted once on the fitting set, give two sets of test predictions. Resampling the
*test samples* with replacement (the same indices for both methods, hence "paired") and recomputing
the difference of their calibration errors on every resample gives the spread of that difference
over test sets of the same size; the 2.5 % and 97.5 % quantiles form a 95 % percentile interval.
The calibrators are not refitted, so the interval measures the test-set noise of the comparison,
not the fitting noise.

Vectorised: a chunk of resamples is one ``(B, N)`` index matrix, turned into a ``(B, N)`` matrix of
counts (how often each test sample was drawn). The binned ECE of all ``B`` resamples then needs no
sort (:func:`resampled_ece`): the samples are sorted once by confidence; a sample's equal-mass bin in
a resample follows from the running count of draws up to it (the library's rule: bin
``floor(n_bins * (#{conf <= c} - 1) / N)``, ties together); its equal-width bin does not depend on
the resample at all. The bin sums are one ``index_add_`` over all resamples; no Python loop runs over
resamples or bins. The result equals :func:`focalcal.metrics.calibration_error` on the resampled
confidences (tested).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ... import metrics
from ..._validation import check_choice, check_int, check_labels, check_logits

__all__ = ["VERDICTS", "BootstrapInterval", "paired_bootstrap", "resample_counts", "resampled_ece",
           "ece_differences", "ece_difference", "verdict"]

#: what an interval of ``ECE(method) - ECE(baseline)`` says, by its position relative to 0
VERDICTS = ("better", "worse", "indistinguishable")


@dataclass(frozen=True)
class BootstrapInterval:
    """A bootstrap percentile interval of a difference ``method - baseline``.

    Attributes
    ----------
    estimate : float
        The difference on the test set itself.
    low, high : float
        The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles over the resamples.
    level : float
    n_resamples : int
    seed : int
    verdict : str
        :func:`verdict` of the interval: ``"better"`` (entirely below 0: the method's error is lower),
        ``"worse"`` (entirely above 0) or ``"indistinguishable"`` (contains 0).
    """

    estimate: float
    low: float
    high: float
    level: float
    n_resamples: int
    seed: int
    verdict: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict(low: float, high: float) -> str:
    """``"better"`` if ``high < 0``, ``"worse"`` if ``low > 0``, else ``"indistinguishable"``."""
    if high < 0:
        return "better"
    if low > 0:
        return "worse"
    return "indistinguishable"


def paired_bootstrap(statistic: Callable[[torch.Tensor], torch.Tensor], n: int, *, n_resamples: int = 1000,
                     seed: int = 0, chunk: int = 100) -> torch.Tensor:
    """``statistic`` on ``n_resamples`` bootstrap resamples of ``n`` samples.

    Parameters
    ----------
    statistic : callable
        Takes an int64 index matrix of shape ``(B, n)`` (each row one resample of ``0..n-1`` with
        replacement) and returns the statistic of every row, shape ``(B,)``, or ``M`` statistics
        of every row, shape ``(B, M)``. Paired comparisons index all their arrays with the same
        matrix.
    n : int
        Samples in the data set.
    n_resamples : int
    seed : int
        Seed of the index generator (``torch.Generator``): the same seed gives the same resamples.
    chunk : int
        Resamples per call of ``statistic`` (memory ``~ chunk * n``).

    Returns
    -------
    Tensor, shape (n_resamples,) or (n_resamples, M), float64
    """
    n = check_int(n, "n")
    n_resamples = check_int(n_resamples, "n_resamples")
    chunk = check_int(chunk, "chunk")
    gen = torch.Generator().manual_seed(int(seed))
    out = []
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        idx = torch.randint(n, (b, n), generator=gen)
        val = torch.as_tensor(statistic(idx), dtype=torch.float64)
        if val.dim() not in (1, 2) or val.shape[0] != b:
            raise ValueError(f"statistic must return shape ({b},) or ({b}, M) for an index matrix of shape "
                             f"({b}, {n}); got {tuple(val.shape)}")
        out.append(val)
    return torch.cat(out)


def _top(log_probs: Any, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lp = check_logits(log_probs, "log_probs").to(torch.float64)
    if lp.dim() != 2:
        raise ValueError(f"log_probs must have shape (N, K), got {tuple(lp.shape)}")
    y = check_labels(labels, lp.shape[1], lp.shape[0])
    lp = torch.log_softmax(lp, dim=-1)  # accept any logits: their softmax is the prediction
    top, pred = lp.max(dim=-1)
    return top.exp(), (pred == y).to(torch.float64)


def resample_counts(idx: torch.Tensor, n: int) -> torch.Tensor:
    """How often each of ``n`` samples occurs in each row of the index matrix ``idx`` ``(B, M)``: ``(B, n)`` float64."""
    w = torch.zeros(idx.shape[0], n, dtype=torch.float64)
    return w.scatter_add_(1, idx, torch.ones(idx.shape, dtype=torch.float64))


def resampled_ece(confidences: torch.Tensor, correct: torch.Tensor, counts: torch.Tensor, *, n_bins: int = 15,
                  binning: str = "mass") -> torch.Tensor:
    """The l1 ECE of every resample, given by its draw counts, without forming the resample.

    Parameters
    ----------
    confidences, correct : Tensor, shape (N,)
        Top-class confidence in [0, 1] and 0/1 outcome of every sample.
    counts : Tensor, shape (B, N)
        Draws of each sample in each resample (:func:`resample_counts`); every row sums to the
        resample size ``M``.
    n_bins : int
    binning : {"mass", "width"}
        The bins of :func:`focalcal.metrics.calibration_error` (equal-mass bins of the *resample*).

    Returns
    -------
    Tensor, shape (B,), float64
        Equal to ``calibration_error(confidences[idx], correct[idx])`` row by row.
    """
    conf = confidences.to(torch.float64)
    delta = conf - correct.to(torch.float64)
    b, n = counts.shape
    m = int(counts[0].sum())
    if binning == "width":
        # bins (lo, hi] with edges k / n_bins; 0 in the first, 1 in the last (the library's rule)
        edges = torch.arange(1, n_bins, dtype=torch.float64) / n_bins
        bins = torch.bucketize(conf, edges, right=False).expand(b, n)
        w, d = counts, delta.expand(b, n)
    else:
        order = torch.argsort(conf, stable=True)
        c_s = conf[order]
        # the last sorted position of each sample's tie group: ties share the count of the whole group
        last = torch.searchsorted(c_s, c_s, right=True) - 1
        w = counts[:, order]
        n_le = w.cumsum(1)[:, last]  # draws with confidence <= this sample's
        bins = ((n_le.long() - 1).clamp(min=0) * n_bins) // m
        d = delta[order].expand(b, n)
    offset = torch.arange(b).view(b, 1) * n_bins
    sums = torch.zeros(b * n_bins, dtype=torch.float64).index_add_(0, (bins + offset).reshape(-1),
                                                                   (w * d).reshape(-1))
    return sums.view(b, n_bins).abs().sum(1) / m


def ece_differences(candidates: Mapping[str, Any], baseline_log_probs: Any, labels: Any, *, n_bins: int = 15,
                    binning: str = "mass", n_resamples: int = 1000, seed: int = 0, level: float = 0.95,
                    chunk: int = 100) -> dict[str, BootstrapInterval]:
    """Paired bootstrap intervals of ``ECE(candidate) - ECE(baseline)`` for several candidates at once.

    Every candidate is compared with the baseline on the same resamples (drawn once; the baseline's
    ECE of a resample is computed once), so the result for a candidate is what
    :func:`ece_difference` gives it alone.

    Parameters
    ----------
    candidates : mapping name -> Tensor, shape (N, K)
        Calibrated predictions (log-probabilities, or logits whose softmax is the prediction).
    baseline_log_probs : Tensor, shape (N, K)
    labels : Tensor, shape (N,)
    n_bins, binning
        The ECE's bins (:func:`focalcal.metrics.ece`); default: 15 equal-mass bins, Komisarenko &
        Kull's ECE.
    n_resamples, seed, chunk
        As :func:`paired_bootstrap`.
    level : float in (0, 1)
        Coverage of the percentile interval.

    Returns
    -------
    dict
        name -> :class:`BootstrapInterval`.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    check_choice(binning, "binning", metrics.BINNINGS)
    y = torch.as_tensor(labels)
    base = _top(baseline_log_probs, y)
    tops = {name: _top(lp, y) for name, lp in candidates.items()}
    for name, (conf, _) in tops.items():
        if conf.shape != base[0].shape:
            raise ValueError(f"candidate {name!r} and baseline_log_probs must have the same N, got "
                             f"{tuple(conf.shape)} and {tuple(base[0].shape)}")
    n = base[0].shape[0]

    def diffs(idx: torch.Tensor) -> torch.Tensor:
        w = resample_counts(idx, n)
        e0 = resampled_ece(*base, w, n_bins=n_bins, binning=binning)
        return torch.stack([resampled_ece(c, h, w, n_bins=n_bins, binning=binning) - e0
                            for c, h in tops.values()], dim=1)

    e0 = metrics.calibration_error(*base, n_bins=n_bins, binning=binning)
    draws = paired_bootstrap(diffs, n, n_resamples=n_resamples, seed=seed, chunk=chunk)
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    out = {}
    for j, (name, (c, h)) in enumerate(tops.items()):
        estimate = float(metrics.calibration_error(c, h, n_bins=n_bins, binning=binning) - e0)
        low, high = (float(v) for v in torch.quantile(draws[:, j], q))
        out[name] = BootstrapInterval(estimate, low, high, float(level), int(n_resamples), int(seed),
                                      verdict(low, high))
    return out


def ece_difference(log_probs: Any, baseline_log_probs: Any, labels: Any, **kwargs: Any) -> BootstrapInterval:
    """Paired bootstrap interval of ``ECE(method) - ECE(baseline)`` over the test samples.

    ``log_probs`` and ``baseline_log_probs`` are the two calibrated predictions, shape ``(N, K)``;
    the keyword arguments (``n_bins``, ``binning``, ``n_resamples``, ``seed``, ``level``, ``chunk``)
    are those of :func:`ece_differences`.
    """
    return ece_differences({"method": log_probs}, baseline_log_probs, labels, **kwargs)["method"]
