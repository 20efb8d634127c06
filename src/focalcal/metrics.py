"""Calibration and selective-prediction metrics.

Every metric takes the labels first and then exactly one of ``probs=`` or ``logits=`` by keyword:
the library never guesses from the value range whether a score is a probability or a logit.

Shapes
------
``probs`` / ``logits`` have shape ``(..., N, K)`` (``N`` samples, ``K`` classes, any leading batch
dimensions, e.g. a grid of temperatures) and ``labels`` has shape ``(N,)``. Scalar metrics return a
python ``float`` for un-batched input ``(N, K)`` and a tensor of shape ``(...)`` otherwise.
All values are fractions, never percentages.

Binning conventions
-------------------
Shared by :func:`calibration_error`, :func:`ece`, :func:`mce`, :func:`classwise_ece` and
:func:`reliability_data`.

``binning="width"``
    ``n_bins`` equal-width bins ``(lo, hi]`` with edges ``b / n_bins`` (the float64 numbers nearest
    to them), as in Mukhoti et al. (2020, eq. 1). A confidence of exactly 0 goes into the first bin
    and a confidence of exactly 1 into the last, so every sample is counted once.
``binning="mass"``
    equal-mass (adaptive) bins, Mukhoti's AdaECE. The ``N`` confidences are sorted and the sample at
    sorted position ``i`` (0-based) goes into bin ``floor(i * n_bins / N)``: contiguous groups whose
    sizes differ by at most one, every sample in exactly one bin. Tied confidences always share a
    bin: a group of ties takes the bin of its *last* sorted position, i.e. a sample with confidence
    ``c`` goes into bin ``floor(n_bins * (#{conf <= c} - 1) / N)``. The bins are therefore
    half-open intervals ``[lo, hi)`` of confidence. When ``N`` is a multiple of ``n_bins`` this is
    exactly the binning of ``netcal.metrics.ECE(equal_intervals=False)`` (quantile edges).

Empty bins contribute nothing; ``N < n_bins`` is allowed. With per-bin sample count ``n_b``, mean
confidence ``C_b`` and accuracy ``A_b``:

- ``norm="l1"``: ``sum_b n_b / N * |A_b - C_b|`` (the ECE);
- ``norm="l2"``: ``sqrt(sum_b n_b / N * (A_b - C_b)**2)`` (root of the weighted mean squared gap);
- ``norm="max"``: ``max_b |A_b - C_b|`` over non-empty bins (the MCE).

All bin statistics are accumulated in float64 whatever the input dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ._validation import (
    check_choice,
    check_int,
    check_labels,
    check_logits,
    check_nonempty,
    check_probs,
    check_unit_interval,
)

__all__ = [
    "BINNINGS",
    "NORMS",
    "SCORES",
    "Confident",
    "ReliabilityData",
    "accuracy",
    "aurc",
    "brier",
    "calibration_error",
    "classwise_ece",
    "confidence_score",
    "eaurc",
    "ece",
    "frac_confident",
    "kl_to_posterior",
    "mce",
    "nll",
    "reliability_data",
]

BINNINGS = ("width", "mass")
NORMS = ("l1", "l2", "max")
#: confidence-score functions (CSFs) of Zhou et al. (2025), Table 1
SCORES = ("msp", "neg_entropy", "margin")


# --------------------------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------------------------

def _one_of(probs: Any, logits: Any) -> None:
    if (probs is None) == (logits is None):
        given = "both" if probs is not None else "neither"
        raise ValueError(f"pass exactly one of probs= or logits= (got {given})")



def _log_probs(probs: Any, logits: Any) -> torch.Tensor:
    """Log-probabilities from exactly one of ``probs=`` / ``logits=`` (a zero probability is
    clamped to the dtype's smallest normal number, so its log is large but finite)."""
    _one_of(probs, logits)
    if logits is not None:
        return torch.log_softmax(check_logits(logits, "logits"), dim=-1)
    p = check_probs(probs, "probs")
    return torch.log(p.clamp(min=torch.finfo(p.dtype).tiny))

def _as_probs(probs: Any, logits: Any) -> torch.Tensor:
    """Validated probabilities ``(..., N, K)`` (softmax of ``logits`` in their own dtype)."""
    _one_of(probs, logits)
    if probs is not None:
        p = check_probs(probs, "probs")
    else:
        p = torch.softmax(check_logits(logits, "logits"), dim=-1)
    if p.dim() < 2:
        name = "probs" if probs is not None else "logits"
        raise ValueError(f"{name} must have shape (..., N, K), got shape {tuple(p.shape)}")
    return p


def _as_log_probs(probs: Any, logits: Any) -> torch.Tensor:
    """Validated log-probabilities ``(..., N, K)``, accurate also for saturated rows.

    ``log p_max`` is computed as ``-log1p(sum_{j != argmax} exp(z_j - z_max))`` so that a row
    whose top probability rounds to 1 keeps a distinct (tiny, negative) log-confidence; zero
    probabilities give ``-inf``.
    """
    _one_of(probs, logits)
    if probs is not None:
        z = torch.log(check_probs(probs, "probs"))
        name = "probs"
    else:
        z = check_logits(logits, "logits")
        name = "logits"
    if z.dim() < 2:
        raise ValueError(f"{name} must have shape (..., N, K), got shape {tuple(z.shape)}")
    zmax, imax = z.max(dim=-1, keepdim=True)
    shifted = z - zmax
    # the arg-max term is exactly exp(0) = 1; dropping it lets log1p keep the tiny remainder
    rest = shifted.exp().scatter(-1, imax, 0.0).sum(-1, keepdim=True)
    return shifted - torch.log1p(rest)


def _labels_for(labels: Any, scores: torch.Tensor) -> torch.Tensor:
    return check_labels(labels, n_classes=scores.shape[-1], n_samples=scores.shape[-2])


def _scalar(t: torch.Tensor) -> float | torch.Tensor:
    return float(t) if t.dim() == 0 else t


# --------------------------------------------------------------------------------------------
# the batched binned core
# --------------------------------------------------------------------------------------------

def _width_index(x: torch.Tensor, n_bins: int, out_int32: bool = False) -> torch.Tensor:
    """Equal-width bin ``(lo, hi]`` of every value of ``x`` (any shape), in ``[0, n_bins)``."""
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()  # float16 / bfloat16 values are exact in float32
    interior = torch.arange(1, n_bins, dtype=torch.float64, device=x.device) / n_bins
    edges = interior.to(x.dtype)
    if x.dtype != torch.float64:
        # round the float64 edges *down* into x's dtype: then x <= edge in x's dtype exactly when
        # x <= edge in float64, so float32 input is binned as if it were converted to float64
        up = edges.double() > interior
        edges = torch.where(up, torch.nextafter(edges, torch.full_like(edges, -math.inf)), edges)
    # right=False over the interior edges: e[i-1] < x <= e[i] -> i; x = 0 -> bin 0, x = 1 -> last
    return torch.bucketize(x.contiguous(), edges, right=False, out_int32=out_int32)


def _mass_index(x: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Equal-mass bin of every value along the last dim of ``x`` (..., N), int64 in ``[0, n_bins)``."""
    n = x.shape[-1]
    x = x.contiguous()
    srt = torch.sort(x, dim=-1).values
    # number of values <= x: one past the sorted position of the last member of x's tie group
    n_le = torch.searchsorted(srt, x, right=True)
    return (n_le - 1) * n_bins // n


def _bin_index(conf: torch.Tensor, n_bins: int, binning: str) -> torch.Tensor:
    """Bin of every confidence, shape of ``conf`` ``(..., N)``, values in ``[0, n_bins)``."""
    return _width_index(conf, n_bins) if binning == "width" else _mass_index(conf, n_bins)


def _binned_sums(delta: torch.Tensor, idx: torch.Tensor, n_bins: int,
                 counts: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-bin sums of ``delta`` (and bin counts) over the last dim: ``(..., N) -> (..., n_bins)``."""
    lead = delta.shape[:-1]
    groups = math.prod(lead)
    offset = torch.arange(groups, device=idx.device).view(*lead, 1) * n_bins
    flat = (idx + offset).reshape(-1)
    sums = torch.zeros(groups * n_bins, dtype=delta.dtype, device=delta.device)
    sums.index_add_(0, flat, delta.reshape(-1))
    cnt = None
    if counts:
        cnt = torch.bincount(flat, minlength=groups * n_bins).view(*lead, n_bins)
    return sums.view(*lead, n_bins), cnt


def _reduce_bins(sums: torch.Tensor, cnt: torch.Tensor | None, n: int, norm: str) -> torch.Tensor:
    # sums[b] = n_b * (C_b - A_b): the l1 ECE needs no division and empty bins are exact zeros
    if norm == "l1":
        return sums.abs().sum(-1) / n
    cnt = cnt.to(sums.dtype).clamp_(min=1)
    if norm == "l2":
        return torch.sqrt((sums.square() / cnt).sum(-1) / n)
    return (sums.abs() / cnt).amax(-1)


def _check_bins(n_bins: Any, binning: Any, norm: Any) -> int:
    n_bins = check_int(n_bins, "n_bins", minimum=1)
    check_choice(binning, "binning", BINNINGS)
    check_choice(norm, "norm", NORMS)
    return n_bins


def calibration_error(confidences: Any, correct: Any, *, n_bins: int = 15, binning: str = "width",
                      norm: str = "l1") -> torch.Tensor:
    """Binned calibration error of confidences against 0/1 outcomes, batched over leading dims.

    The fast core behind :func:`ece`, :func:`mce` and :func:`classwise_ece`, made for grid
    searches: one call evaluates a whole ``(n_gamma, n_T, N)`` grid of confidences.

    Parameters
    ----------
    confidences : Tensor, shape (..., N)
        Confidences in [0, 1] (e.g. the top-class probability).
    correct : Tensor, shape (N,) or broadcastable to (..., N)
        Outcomes: bool, or numbers in [0, 1] (1 = correct).
    n_bins : int
        Number of bins (>= 1; ``N < n_bins`` is fine, empty bins contribute nothing).
    binning : {"width", "mass"}
        Equal-width bins ``(lo, hi]`` or equal-mass bins (see the module docstring for the rules).
    norm : {"l1", "l2", "max"}
        ECE, root weighted mean squared gap, or MCE over non-empty bins.

    Returns
    -------
    Tensor, shape (...)
        A fraction in [0, 1], in the floating dtype of ``confidences`` (accumulated in float64).

    Notes
    -----
    Vectorised: one ``bucketize`` (or sort + ``searchsorted``) and one ``index_add_`` over all
    samples of all batch entries; no Python loop over bins, samples or batch entries.
    """
    n_bins = _check_bins(n_bins, binning, norm)
    conf = check_unit_interval(confidences, "confidences")
    check_nonempty(conf, "confidences")
    out_dtype = conf.dtype
    if isinstance(correct, torch.Tensor) and correct.dtype == torch.bool:
        corr = correct
    else:
        corr = check_unit_interval(correct, "correct")
    if corr.dim() == 0 or corr.shape[-1] != conf.shape[-1]:
        raise ValueError(f"correct must have shape (N,) or (..., N) with N = {conf.shape[-1]} "
                         f"(the last dim of confidences), got shape {tuple(corr.shape)}")
    try:
        shape = torch.broadcast_shapes(conf.shape, corr.shape)
    except RuntimeError as err:
        raise ValueError(f"correct of shape {tuple(corr.shape)} does not broadcast against "
                         f"confidences of shape {tuple(conf.shape)}") from err
    conf = conf.to(torch.float64).expand(shape)
    delta = conf - corr.to(torch.float64)
    idx = _bin_index(conf, n_bins, binning)
    sums, cnt = _binned_sums(delta, idx, n_bins, counts=norm != "l1")
    return _reduce_bins(sums, cnt, shape[-1], norm).to(out_dtype)


# --------------------------------------------------------------------------------------------
# top-label and class-wise calibration
# --------------------------------------------------------------------------------------------

def _top_label(labels: Any, probs: Any, logits: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-class probability and correctness, both (..., N); ties go to the lowest class index."""
    _one_of(probs, logits)
    if probs is not None:
        scores = check_probs(probs, "probs")
    else:
        scores = check_logits(logits, "logits")
    if scores.dim() < 2:
        name = "probs" if probs is not None else "logits"
        raise ValueError(f"{name} must have shape (..., N, K), got shape {tuple(scores.shape)}")
    lab = _labels_for(labels, scores)
    top, pred = scores.max(dim=-1)
    if probs is not None:
        return top, pred == lab
    # max softmax probability without the full softmax: 1 / sum_k exp(z_k - z_max)
    conf = (scores - top.unsqueeze(-1)).exp_().sum(-1).reciprocal_()
    return conf, pred == lab


def ece(labels: Any, *, probs: Any = None, logits: Any = None, n_bins: int = 15,
        binning: str = "width", norm: str = "l1") -> float | torch.Tensor:
    """Top-label expected calibration error (Naeini et al. 2015; Mukhoti et al. 2020, eq. 1, 3).

    ``binning="mass"`` gives Mukhoti's AdaECE, ``norm="max"`` the MCE (see :func:`mce`).

    Parameters
    ----------
    labels : Tensor, shape (N,)
        Integer class labels in ``[0, K)``.
    probs, logits : Tensor, shape (..., N, K)
        Exactly one of them: probabilities (rows summing to 1) or unnormalised scores.
    n_bins, binning, norm
        See :func:`calibration_error` and the module docstring for the exact conventions.

    Returns
    -------
    float, or Tensor of shape (...) for batched input
        A fraction in [0, 1] (not a percentage).
    """
    n_bins = _check_bins(n_bins, binning, norm)
    conf, correct = _top_label(labels, probs, logits)
    return _scalar(calibration_error(conf, correct, n_bins=n_bins, binning=binning, norm=norm))


def mce(labels: Any, *, probs: Any = None, logits: Any = None, n_bins: int = 15,
        binning: str = "width") -> float | torch.Tensor:
    """Maximum calibration error (Mukhoti et al. 2020, eq. 2): ``max_b |A_b - C_b|`` over non-empty bins.

    Same as ``ece(..., norm="max")``; shapes and conventions as in :func:`ece`.
    """
    return ece(labels, probs=probs, logits=logits, n_bins=n_bins, binning=binning, norm="max")


def classwise_ece(labels: Any, *, probs: Any = None, logits: Any = None, n_bins: int = 15,
                  binning: str = "width", norm: str = "l1") -> float | torch.Tensor:
    """Class-wise calibration error cwECE (Kull et al. 2019; Zhou et al. 2025, Def. 3.7 and A.1).

    For every class ``c`` the probabilities ``p_c`` of all ``N`` samples are binned (each class
    has its own bins; for ``binning="mass"`` its own equal-mass bins) against the outcomes
    ``1[y = c]``, giving a per-class error ``e_c`` with the chosen ``norm``. They are combined as
    in Zhou et al.'s ``cwECE_rho``:

    - ``"l1"``: ``mean_c e_c`` (their eq. 18);
    - ``"l2"``: ``sqrt(mean_c e_c**2)``;
    - ``"max"``: ``max_c e_c``.

    Shapes and the other conventions as in :func:`ece`. Vectorised over classes: the ``K`` columns
    are binned in one call of :func:`calibration_error`'s core.
    """
    n_bins = _check_bins(n_bins, binning, norm)
    p = _as_probs(probs, logits)
    lab = _labels_for(labels, p)
    n, k = p.shape[-2], p.shape[-1]
    lead = p.shape[:-2]
    p64 = p.to(torch.float64)
    groups = math.prod(lead)
    # one flat id per (batch entry, bin, class); int32 ids halve the memory traffic of the N*K pass
    small = groups * n_bins * k < 2**31
    itype = torch.int32 if small else torch.int64
    if binning == "width":
        flat = _width_index(p, n_bins, out_int32=small)
    else:  # equal-mass bins are per class: sort each class's N probabilities
        flat = _mass_index(p64.transpose(-1, -2), n_bins).transpose(-1, -2).to(itype)
    flat = flat.mul_(k).add_(torch.arange(k, dtype=itype, device=p.device))
    if groups > 1:
        flat += torch.arange(groups, dtype=itype, device=p.device).view(*lead, 1, 1) * (n_bins * k)
    flat = flat.contiguous()
    size = groups * n_bins * k
    # per (bin, class) sums of p_ic - 1[y_i = c] without a dense one-hot: the probabilities are
    # added directly and the outcomes counted from the N true-class entries
    sums = torch.zeros(size, dtype=torch.float64, device=p.device)
    sums.index_add_(0, flat.view(-1), p64.reshape(-1))
    hit = flat.gather(-1, lab.expand(*lead, n).unsqueeze(-1).to(torch.int64))
    sums -= torch.bincount(hit.reshape(-1), minlength=size).to(torch.float64)
    sums = sums.view(*lead, n_bins, k)
    cnt = None
    if norm != "l1":
        cnt = torch.bincount(flat.view(-1), minlength=size).view(*lead, n_bins, k)
    # per-class errors: bins on dim -2, so move classes before bins for _reduce_bins
    per_class = _reduce_bins(sums.transpose(-1, -2), None if cnt is None else cnt.transpose(-1, -2),
                             n, norm)
    if norm == "l1":
        out = per_class.mean(-1)
    elif norm == "l2":
        out = per_class.square().mean(-1).sqrt()
    else:
        out = per_class.amax(-1)
    return _scalar(out.to(p.dtype))


# --------------------------------------------------------------------------------------------
# proper scores and accuracy
# --------------------------------------------------------------------------------------------

def nll(labels: Any, *, probs: Any = None, logits: Any = None) -> float | torch.Tensor:
    """Mean negative log-likelihood ``-mean_i log p_{i, y_i}`` (nats).

    From ``logits`` it is computed with ``log_softmax`` (finite for any finite logits). From
    ``probs`` a zero probability of the true class is clamped to the smallest normal number of
    the dtype (``-log`` of it is about 87.3 in float32, 708.4 in float64) instead of giving
    ``inf``; pass ``logits=`` for exact values.

    Shapes as in :func:`ece`; returns a float (or a tensor of shape ``(...)``).
    """
    logp = _log_probs(probs, logits)
    if logp.dim() < 2:
        raise ValueError(f"scores must have shape (..., N, K), got shape {tuple(logp.shape)}")
    lab = _labels_for(labels, logp)
    idx = lab.expand(*logp.shape[:-1]).unsqueeze(-1)
    return _scalar(-logp.gather(-1, idx).squeeze(-1).mean(-1))


def brier(labels: Any, *, probs: Any = None, logits: Any = None) -> float | torch.Tensor:
    """Brier score ``mean_i sum_k (p_{ik} - 1[y_i = k])**2`` (Zhou et al. 2025, Def. A.2), in [0, 2].

    The multi-class sum over classes, not divided by ``K``. Shapes as in :func:`ece`.
    """
    p = _as_probs(probs, logits)
    lab = _labels_for(labels, p)
    onehot = torch.zeros_like(p).scatter_(-1, lab.expand(*p.shape[:-1]).unsqueeze(-1), 1.0)
    return _scalar((p - onehot).square().sum(-1).mean(-1))


def accuracy(labels: Any, *, probs: Any = None, logits: Any = None, top_k: int = 1
             ) -> float | torch.Tensor:
    """Fraction of samples whose label is among the ``top_k`` highest scores.

    ``top_k=1`` breaks ties towards the lowest class index (as :func:`ece` does); for
    ``top_k > 1`` ties at the cut are broken by ``torch.topk``. Shapes as in :func:`ece`.
    """
    _one_of(probs, logits)
    scores = check_probs(probs, "probs") if probs is not None else check_logits(logits, "logits")
    if scores.dim() < 2:
        raise ValueError(f"scores must have shape (..., N, K), got shape {tuple(scores.shape)}")
    k = scores.shape[-1]
    top_k = check_int(top_k, "top_k", minimum=1)
    if top_k > k:
        raise ValueError(f"top_k must be <= the number of classes {k}, got {top_k}")
    lab = _labels_for(labels, scores)
    if top_k == 1:
        hit = scores.argmax(-1) == lab
    else:
        hit = (scores.topk(top_k, dim=-1).indices == lab.unsqueeze(-1)).any(-1)
    return _scalar(hit.to(torch.float64).mean(-1).to(scores.dtype))


def kl_to_posterior(true_probs: Any, probs: Any = None, *, logits: Any = None
                    ) -> float | torch.Tensor:
    """Mean KL divergence ``mean_i KL(true_i || p_i) = mean_i sum_k t_ik log(t_ik / p_ik)`` (nats).

    For synthetic tasks whose posterior ``true_probs`` is known. Terms with ``t_ik = 0`` are 0;
    with ``probs=``, a zero ``p_ik`` where ``t_ik > 0`` is clamped to the smallest normal number
    of the dtype (pass ``logits=`` for exact values).

    Parameters
    ----------
    true_probs : Tensor, shape (..., N, K)
        The true posterior of every sample (rows summing to 1); broadcast against the model's.
    probs, logits : Tensor, shape (..., N, K)
        Exactly one of them: the model's probabilities or logits.

    Returns
    -------
    float, or Tensor of shape (...) for batched input
    """
    t = check_probs(true_probs, "true_probs")
    logp = _log_probs(probs, logits)
    if t.dim() < 2 or logp.dim() < 2 or t.shape[-2:] != logp.shape[-2:]:
        raise ValueError(f"true_probs and the model's scores must both have shape (..., N, K) with "
                         f"the same N and K, got {tuple(t.shape)} and {tuple(logp.shape)}")
    kl = (torch.xlogy(t, t) - torch.where(t > 0, t * logp, torch.zeros_like(logp))).sum(-1)
    # rounding can make a KL of ~0 slightly negative
    return _scalar(kl.mean(-1).clamp(min=0))


class Confident(NamedTuple):
    """Mukhoti et al.'s ``|S99|``: the samples predicted with confidence above a threshold."""

    fraction: float
    """fraction of samples with top-class probability > threshold"""
    accuracy: float
    """accuracy on those samples (``nan`` when there are none: undefined)"""
    count: int
    """how many samples"""


def frac_confident(labels: Any, *, probs: Any = None, logits: Any = None,
                   threshold: float = 0.99) -> Confident:
    """Fraction of samples predicted with confidence ``> threshold`` and their accuracy.

    With ``threshold=0.99`` this is ``|S99|`` of Mukhoti et al. (2020, Appendix F, Table 13),
    reported there in percent; here as fractions.

    Parameters
    ----------
    labels : Tensor, shape (N,)
    probs, logits : Tensor, shape (N, K)
        Exactly one of them (no batch dims).
    threshold : float in [0, 1)
        Strict threshold on the top-class probability.

    Returns
    -------
    Confident
        ``(fraction, accuracy, count)``; ``accuracy`` is ``nan`` when ``count == 0``.
    """
    thr = float(check_unit_interval(torch.tensor(float(threshold)), "threshold", open_right=True))
    conf, correct = _top_label(labels, probs, logits)
    if conf.dim() != 1:
        raise ValueError(f"frac_confident takes scores of shape (N, K), got batch dims "
                         f"{tuple(conf.shape[:-1])}")
    sel = conf > thr
    count = int(sel.sum())
    acc = float(correct[sel].double().mean()) if count else math.nan
    return Confident(count / conf.shape[-1], acc, count)


# --------------------------------------------------------------------------------------------
# selective prediction: AURC and E-AURC
# --------------------------------------------------------------------------------------------

def _score_parts(logp: torch.Tensor, score: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(natural score, monotone ranking key) of shape (..., N) from accurate log-probs."""
    if score == "msp":
        top = logp.max(-1).values
        return top.exp(), top
    if score == "neg_entropy":
        p = logp.exp()
        ne = torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1)
        return ne, ne
    top2 = logp.topk(2, dim=-1).values
    l1, l2 = top2[..., 0], top2[..., 1]
    # p1 - p2 = p1 * (1 - exp(l2 - l1)); its log ranks saturated rows that p1 - p2 would tie at 1
    rel = -torch.expm1(l2 - l1)
    return l1.exp() * rel, l1 + torch.log(rel)


def confidence_score(*, probs: Any = None, logits: Any = None, score: str = "msp") -> torch.Tensor:
    """Confidence-score function (CSF) of every sample (Zhou et al. 2025, Table 1).

    Parameters
    ----------
    probs, logits : Tensor, shape (..., N, K)
        Exactly one of them.
    score : {"msp", "neg_entropy", "margin"}
        ``"msp"``: max softmax probability ``max_k p_k``; ``"neg_entropy"``: ``sum_k p_k log p_k``
        (Zhou et al.'s table writes ``z_k log z_k`` with the logits ``z``; the entropy of the
        probabilities is what is meant and used here); ``"margin"``: ``p_(1) - p_(2)``, the gap
        between the two largest probabilities.

    Returns
    -------
    Tensor, shape (..., N)
        Larger means more confident.
    """
    check_choice(score, "score", SCORES)
    return _score_parts(_as_log_probs(probs, logits), score)[0]


def _aurc_from_key(key: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
    """Empirical AURC ``(1/N) sum_{k=1}^N risk(top-k)`` with ties averaged; (..., N) -> (...)."""
    n = key.shape[-1]
    key, order = torch.sort(key, dim=-1, descending=True, stable=True)
    loss = loss.expand(key.shape).gather(-1, order)
    # the sample at descending position r (1-based) is in the accepted set of the k >= r most
    # confident ones, so it carries weight (1/N) sum_{k=r}^N 1/k
    inv = 1.0 / torch.arange(1, n + 1, dtype=torch.float64, device=key.device)
    w = inv.flip(0).cumsum(0).flip(0) / n
    # tied scores: average the weight over the tie group = mean over all orders of the ties
    new = torch.ones_like(key, dtype=torch.bool)
    new[..., 1:] = key[..., 1:] != key[..., :-1]
    gid = new.cumsum(-1) - 1
    w = w.expand(key.shape)
    gsum = torch.zeros_like(w).scatter_add_(-1, gid, w)
    gcnt = torch.zeros_like(w).scatter_add_(-1, gid, torch.ones_like(w))
    w_tied = (gsum / gcnt.clamp(min=1)).gather(-1, gid)
    return (w_tied * loss).sum(-1)


def _aurc_inputs(labels: Any, probs: Any, logits: Any, score: str
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.dtype]:
    check_choice(score, "score", SCORES)
    logp = _as_log_probs(probs, logits)
    lab = _labels_for(labels, logp)
    err = (logp.argmax(-1) != lab).to(torch.float64)
    key = _score_parts(logp.to(torch.float64), score)[1]
    return key, err, logp.dtype


def aurc(labels: Any, *, probs: Any = None, logits: Any = None, score: str = "msp"
         ) -> float | torch.Tensor:
    """Area under the risk-coverage curve with the 0/1 loss (Geifman et al. 2019).

    Samples are ranked by the confidence score ``score`` (see :func:`confidence_score`); with
    ``risk(k)`` the error rate of the ``k`` most confident samples,
    ``AURC = (1/N) sum_{k=1}^N risk(k)``, the empirical version of Zhou et al.'s (2025, Def. 3.3)
    ``-E[ln(1 - G(x)) l(f(x), y)]``. Tied scores are handled by averaging over all orders of the
    ties (each tied sample gets the mean weight of its group's positions), so the result does not
    depend on the order of the samples. The ranking uses log-space scores, so rows whose top
    probability rounds to 1 are still ranked by their logits.

    Shapes as in :func:`ece`; returns a fraction in [0, 1].
    """
    key, err, dtype = _aurc_inputs(labels, probs, logits, score)
    return _scalar(_aurc_from_key(key, err).to(dtype))


def eaurc(labels: Any, *, probs: Any = None, logits: Any = None, score: str = "msp",
          optimum: str = "asymptotic") -> float | torch.Tensor:
    """Excess AURC: :func:`aurc` minus the AURC of the optimal ranking (all errors ranked last).

    Other arguments as in :func:`aurc`.

    Parameters
    ----------
    optimum : {"asymptotic", "exact"}
        ``"asymptotic"`` (Geifman et al. 2019): with error rate ``r``,
        ``AURC* = r + (1 - r) log(1 - r)``. ``"exact"``: the finite-sample optimum
        ``(E - (N - E)(H_N - H_{N-E})) / N`` for ``E`` errors (``H`` harmonic numbers), which
        is slightly larger, so that the exact E-AURC is never negative. They differ by ``O(1/N)``.

    """
    check_choice(optimum, "optimum", ("asymptotic", "exact"))
    key, err, dtype = _aurc_inputs(labels, probs, logits, score)
    n = err.shape[-1]
    if optimum == "asymptotic":
        r = err.mean(-1)
        best = r + torch.xlogy(1 - r, 1 - r)
    else:
        e = err.sum(-1)
        harm = torch.special.digamma(torch.tensor(n + 1.0, dtype=torch.float64)) \
            - torch.special.digamma(n - e + 1)
        best = (e - (n - e) * harm) / n
    return _scalar((_aurc_from_key(key, err) - best).to(dtype))


# --------------------------------------------------------------------------------------------
# reliability diagrams
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReliabilityData:
    """Per-bin statistics of a reliability diagram (top-label confidence).

    Attributes
    ----------
    edges : Tensor, shape (n_bins + 1,)
        Bin edges in confidence. ``binning="width"``: ``b / n_bins``, bins ``(lo, hi]``.
        ``binning="mass"``: 0, the smallest confidence in each of bins 1..n_bins-1, then 1; bins
        ``[lo, hi)`` (an empty bin gets the edge of the next non-empty one, i.e. zero width).
    counts : Tensor, shape (n_bins,), int64
        Samples per bin (they sum to N).
    accuracy : Tensor, shape (n_bins,)
        Fraction correct in each bin; ``nan`` for empty bins.
    confidence : Tensor, shape (n_bins,)
        Mean confidence in each bin; ``nan`` for empty bins.
    binning : str
        ``"width"`` or ``"mass"``.
    """

    edges: torch.Tensor
    counts: torch.Tensor
    accuracy: torch.Tensor
    confidence: torch.Tensor
    binning: str

    @property
    def n_samples(self) -> int:
        return int(self.counts.sum())

    @property
    def gap(self) -> torch.Tensor:
        """``confidence - accuracy`` per bin (> 0: over-confident); ``nan`` for empty bins."""
        return self.confidence - self.accuracy

    def ece(self) -> float:
        """The l1 ECE of these bins (equals :func:`ece` with the same binning)."""
        full = self.counts > 0
        w = self.counts[full].double() / self.n_samples
        return float((w * self.gap[full].abs()).sum())


def reliability_data(labels: Any, *, probs: Any = None, logits: Any = None, n_bins: int = 15,
                     binning: str = "width") -> ReliabilityData:
    """Bin edges, counts, accuracy and mean confidence per bin, for a reliability diagram.

    Parameters
    ----------
    labels : Tensor, shape (N,)
    probs, logits : Tensor, shape (N, K)
        Exactly one of them (no batch dims).
    n_bins : int
    binning : {"width", "mass"}
        Same bins as :func:`ece`.

    Returns
    -------
    ReliabilityData
        float64 tensors (counts int64).
    """
    n_bins = _check_bins(n_bins, binning, "l1")
    conf, correct = _top_label(labels, probs, logits)
    if conf.dim() != 1:
        raise ValueError(f"reliability_data takes scores of shape (N, K), got batch dims "
                         f"{tuple(conf.shape[:-1])}")
    conf = conf.to(torch.float64)
    idx = _bin_index(conf, n_bins, binning)
    counts = torch.bincount(idx, minlength=n_bins)
    denom = counts.to(torch.float64)
    empty = counts == 0
    acc = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, idx, correct.double()) / denom
    mean_conf = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, idx, conf) / denom
    acc[empty] = math.nan
    mean_conf[empty] = math.nan
    if binning == "width":
        edges = torch.arange(n_bins + 1, dtype=torch.float64) / n_bins
    else:
        lo = torch.full((n_bins,), 1.0, dtype=torch.float64).scatter_reduce_(
            0, idx, conf, reduce="amin", include_self=True)
        # an empty bin takes the edge of the next non-empty one (reverse running minimum)
        lo = lo.flip(0).cummin(0).values.flip(0)
        edges = torch.cat([torch.zeros(1, dtype=torch.float64), lo[1:],
                           torch.ones(1, dtype=torch.float64)])
    return ReliabilityData(edges, counts, acc, mean_conf, binning)
