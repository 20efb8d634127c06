"""Binned calibration errors: the batched core, ECE / MCE / class-wise ECE, reliability data.

The binning conventions are those of the :mod:`focalcal.metrics` docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .._validation import ArrayLike, check_choice, check_int, check_nonempty, check_unit_interval
from ._inputs import scored, top_label

__all__ = ["BINNINGS", "NORMS", "ReliabilityData", "calibration_error", "classwise_ece", "ece",
           "mce", "reliability_data"]

BINNINGS = ("width", "mass")
NORMS = ("l1", "l2", "max")


# --------------------------------------------------------------------------------------------
# the batched binned core
# --------------------------------------------------------------------------------------------

def _width_edges(n_bins: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The ``n_bins - 1`` interior equal-width edges ``b / n_bins`` in ``dtype`` (float32/float64)."""
    interior = torch.arange(1, n_bins, dtype=torch.float64, device=device) / n_bins
    edges = interior.to(dtype)
    if dtype != torch.float64:
        # round the float64 edges *down* into x's dtype: then x <= edge in x's dtype exactly when
        # x <= edge in float64, so float32 input is binned as if it were converted to float64
        up = edges.double() > interior
        edges = torch.where(up, torch.nextafter(edges, torch.full_like(edges, -math.inf)), edges)
    return edges


def _width_index(x: Tensor, n_bins: int, out_int32: bool = False) -> Tensor:
    """Equal-width bin ``(lo, hi]`` of every value of ``x`` (any shape), in ``[0, n_bins)``."""
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()  # float16 / bfloat16 values are exact in float32
    edges = _width_edges(n_bins, x.dtype, x.device)
    # right=False over the interior edges: e[i-1] < x <= e[i] -> i; x = 0 -> bin 0, x = 1 -> last
    return torch.bucketize(x.contiguous(), edges, right=False, out_int32=out_int32)


def _mass_index(x: Tensor, n_bins: int) -> Tensor:
    """Equal-mass bin of every value along the last dim of ``x`` (..., N), int64 in ``[0, n_bins)``."""
    n = x.shape[-1]
    srt, order = torch.sort(x, dim=-1)
    # number of values <= x, minus one: the sorted position of the last member of x's tie group,
    # a reverse running minimum of the positions whose next value differs (O(N) after the sort,
    # half the time of searching every value in the sorted array)
    pos = torch.arange(n, device=x.device).expand_as(srt)
    last = torch.ones_like(srt, dtype=torch.bool)
    last[..., :-1] = srt[..., 1:] != srt[..., :-1]
    end = torch.where(last, pos, n).flip(-1).cummin(-1).values.flip(-1)
    return torch.empty_like(order).scatter_(-1, order, end * n_bins // n)


def _bin_index(conf: Tensor, n_bins: int, binning: str) -> Tensor:
    """Bin of every confidence, shape of ``conf`` ``(..., N)``, values in ``[0, n_bins)``."""
    return _width_index(conf, n_bins) if binning == "width" else _mass_index(conf, n_bins)


def _binned_sums(delta: Tensor, idx: Tensor, n_bins: int,
                 counts: bool) -> tuple[Tensor, Tensor | None]:
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


def _reduce_bins(sums: Tensor, cnt: Tensor | None, n: int, norm: str) -> Tensor:
    # sums[b] = n_b * (C_b - A_b): the l1 ECE needs no division and empty bins are exact zeros
    if norm == "l1":
        return sums.abs().sum(-1) / n
    cnt = cnt.to(sums.dtype).clamp_(min=1)
    if norm == "l2":
        return torch.sqrt((sums.square() / cnt).sum(-1) / n)
    return (sums.abs() / cnt).amax(-1)


def _check_bins(n_bins: int, binning: str, norm: str) -> int:
    n_bins = check_int(n_bins, "n_bins", minimum=1)
    check_choice(binning, "binning", BINNINGS)
    check_choice(norm, "norm", NORMS)
    return n_bins


def calibration_error(confidences: ArrayLike, correct: ArrayLike, *, n_bins: int = 15, binning: str = "width",
                      norm: str = "l1") -> Tensor:
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

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import calibration_error
    >>> conf = torch.tensor([0.95, 0.75, 0.65, 0.55])
    >>> correct = torch.tensor([True, False, True, True])
    >>> calibration_error(conf, correct, n_bins=5)  # (0.05 + 2 * 0.2 + 0.45) / 4
    tensor(0.2250)
    >>> calibration_error(conf, correct, n_bins=1)  # one bin: |0.725 - 0.75|
    tensor(0.0250)
    >>> calibration_error(torch.stack([conf, conf / 2]), correct, n_bins=5)  # a batch of two
    tensor([0.2250, 0.3875])
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
    try:  # numpy's: torch.broadcast_shapes imports torch._refs on first use (~0.5 s)
        shape = torch.Size(np.broadcast_shapes(conf.shape, corr.shape))
    except ValueError as err:
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

def ece(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
        logits: ArrayLike | None = None, n_bins: int = 15, binning: str = "width",
        norm: str = "l1") -> Tensor:
    """Top-label expected calibration error (Naeini et al. 2015; Mukhoti et al. 2020, eq. 1, 3).

    ``binning="mass"`` gives Mukhoti's AdaECE, ``norm="max"`` the MCE (see :func:`mce`).

    Parameters
    ----------
    probs : Tensor, shape (..., N, K), optional
        Probabilities (rows summing to 1, any precision: :ref:`probs-tolerance`). Exactly one
        of ``probs`` and ``logits`` is required.
    labels : Tensor of int, shape (N,)
        Integer class labels in ``[0, K)`` (required; float labels are refused).
    logits : Tensor, shape (..., N, K), optional, keyword-only
        Unnormalised scores, instead of ``probs``.
    n_bins, binning, norm
        See :func:`calibration_error` and the module docstring for the exact conventions.

    Returns
    -------
    Tensor, shape (...)
        A fraction in [0, 1] (not a percentage); 0-d for ``(N, K)`` input.

    Examples
    --------
    A grid of three temperatures in one call (:func:`focalcal.metrics.ece` returns a float for
    one model):

    >>> import torch
    >>> from focalcal.metrics import batched
    >>> logits = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]]).log()
    >>> labels = torch.tensor([0, 1, 1, 0])
    >>> temperatures = torch.tensor([0.5, 1.0, 2.0]).view(-1, 1, 1)
    >>> batched.ece(logits=logits / temperatures, labels=labels, n_bins=5)
    tensor([0.3807, 0.2250, 0.4297])
    """
    n_bins = _check_bins(n_bins, binning, norm)
    conf, correct = top_label(probs, labels, logits)
    return calibration_error(conf, correct, n_bins=n_bins, binning=binning, norm=norm)


def mce(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
        logits: ArrayLike | None = None, n_bins: int = 15, binning: str = "width") -> Tensor:
    """Maximum calibration error (Mukhoti et al. 2020, eq. 2): ``max_b |A_b - C_b|`` over non-empty bins.

    Same as ``ece(..., norm="max")``; shapes and conventions as in :func:`ece`.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import batched
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> batched.mce(probs, torch.tensor([0, 1, 1, 0]), n_bins=5)  # the bin (0.4, 0.6]
    tensor(0.4500)
    """
    return ece(probs, labels, logits=logits, n_bins=n_bins, binning=binning, norm="max")


def classwise_ece(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
                  logits: ArrayLike | None = None, n_bins: int = 15, binning: str = "width",
                  norm: str = "l1") -> Tensor:
    """Class-wise calibration error cwECE (Kull et al. 2019; Zhou et al. 2025, Def. 3.7 and A.1).

    For every class ``c`` the probabilities ``p_c`` of all ``N`` samples are binned (each class
    has its own bins; for ``binning="mass"`` its own equal-mass bins) against the outcomes
    ``1[y = c]``, giving a per-class error ``e_c`` with the chosen ``norm``. They are combined as
    in Zhou et al.'s ``cwECE_rho``:

    - ``"l1"``: ``mean_c e_c`` (their eq. 18);
    - ``"l2"``: ``sqrt(mean_c e_c**2)``;
    - ``"max"``: ``max_c e_c``.

    Shapes and the other conventions as in :func:`ece`. Vectorised over classes: the ``K`` columns
    are binned together, in chunks of rows for equal-width bins (so that the ``N * K`` pass works in
    cache-sized pieces).

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import batched
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> batched.classwise_ece(probs, torch.tensor([0, 1, 1, 0]), n_bins=5)
    tensor(0.4000)
    """
    n_bins = _check_bins(n_bins, binning, norm)
    scores, name, lab = scored(probs, labels, logits)
    n, k = scores.shape[-2], scores.shape[-1]
    lead = scores.shape[:-2]
    sums, cnt = _classwise_sums(scores, name == "logits", lab, n_bins, binning, counts=norm != "l1")
    sums = sums.view(*lead, n_bins, k)
    if cnt is not None:
        cnt = cnt.view(*lead, n_bins, k)
    # per-class errors: bins on dim -2, so move classes before bins for _reduce_bins
    per_class = _reduce_bins(sums.transpose(-1, -2), None if cnt is None else cnt.transpose(-1, -2),
                             n, norm)
    if norm == "l1":
        out = per_class.mean(-1)
    elif norm == "l2":
        out = per_class.square().mean(-1).sqrt()
    else:
        out = per_class.amax(-1)
    return out.to(scores.dtype)


# (batch entries x rows x classes) binned at a time by classwise_ece with equal-width bins: a few
# MB of temporaries, so that the N * K pass reuses cached memory instead of page-faulting fresh
# multi-megabyte buffers (which cost more than the arithmetic on 200k x 100 inputs)
_CW_CHUNK = 1 << 17


def _classwise_sums(scores: Tensor, from_logits: bool, lab: Tensor, n_bins: int, binning: str,
                    counts: bool) -> tuple[Tensor, Tensor | None]:
    """Per (batch entry, bin, class) sums of ``p_ic - 1[y_i = c]`` (and bin counts), flattened.

    The outcomes are counted from the ``N`` true-class entries (no dense one-hot). Equal-width
    bins: every probability is first counted in bin 0 through the column sums, and only the
    entries above the first edge (at most ``n_bins - 1`` per row, since a row sums to 1) are binned
    and moved to their bin; in chunks of rows. Equal-mass bins sort each class's ``N``
    probabilities, in one pass.
    """
    *lead, n, k = scores.shape
    groups = math.prod(lead)
    z = scores.reshape(groups, n, k)
    if binning == "mass":
        return _classwise_mass_sums(z, from_logits, lab, n_bins, counts)
    dev = z.device
    f64 = torch.float64
    sums = torch.zeros(groups, n_bins, k, dtype=f64, device=dev)
    hits = torch.zeros(groups * n_bins * k, dtype=torch.int64, device=dev)
    cnt = torch.zeros(groups, n_bins, k, dtype=torch.int64, device=dev) if counts else None
    g_off = (torch.arange(groups, device=dev) * n_bins).view(groups, 1)
    step = max(1, _CW_CHUNK // (groups * k))
    for r0 in range(0, n, step):
        p = z[:, r0:r0 + step]
        if from_logits:
            p = torch.softmax(p, dim=-1)
        elif p.dtype not in (torch.float32, f64):
            p = p.float()
        sums[:, 0] += p.sum(dim=1, dtype=f64)
        if cnt is not None:
            cnt[:, 0] += p.shape[1]
        y = lab[r0:r0 + step]
        p_y = p.gather(-1, y.view(1, -1, 1).expand(groups, -1, 1)).squeeze(-1)
        hits += torch.bincount(((g_off + _width_index(p_y, n_bins)) * k + y).reshape(-1),
                               minlength=hits.numel())
        if n_bins == 1:
            continue
        g, r, c = torch.nonzero(p > _width_edges(n_bins, p.dtype, dev)[0], as_tuple=True)
        p_hi = p[g, r, c]
        to = (g * n_bins + _width_index(p_hi, n_bins)) * k + c
        frm = g * (n_bins * k) + c
        p_hi = p_hi.to(f64)
        sums.view(-1).index_add_(0, to, p_hi).index_add_(0, frm, p_hi.neg_())
        if cnt is not None:
            ones = torch.ones_like(to)
            cnt.view(-1).index_add_(0, to, ones).index_add_(0, frm, ones.neg_())
    return sums.view(-1) - hits.to(f64), None if cnt is None else cnt.view(-1)


def _classwise_mass_sums(z: Tensor, from_logits: bool, lab: Tensor, n_bins: int,
                         counts: bool) -> tuple[Tensor, Tensor | None]:
    """:func:`_classwise_sums` for equal-mass bins: each class's own bins from a sort of its ``N`` values."""
    groups, n, k = z.shape
    size = groups * n_bins * k
    p = torch.softmax(z, dim=-1) if from_logits else z
    p64 = p.to(torch.float64)
    itype = torch.int32 if size < 2**31 else torch.int64
    flat = _mass_index(p64.transpose(-1, -2), n_bins).transpose(-1, -2).to(itype)
    flat = flat.mul_(k).add_(torch.arange(k, dtype=itype, device=z.device))
    flat += (torch.arange(groups, dtype=itype, device=z.device) * (n_bins * k)).view(groups, 1, 1)
    sums = torch.zeros(size, dtype=torch.float64, device=z.device)
    sums.index_add_(0, flat.reshape(-1), p64.reshape(-1))
    hit = flat.gather(-1, lab.view(1, -1, 1).expand(groups, -1, 1).to(torch.int64))
    sums -= torch.bincount(hit.reshape(-1).to(torch.int64), minlength=size).to(torch.float64)
    cnt = torch.bincount(flat.reshape(-1).to(torch.int64), minlength=size) if counts else None
    return sums, cnt


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

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import reliability_data
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> data = reliability_data(probs, torch.tensor([0, 1, 1, 0]), n_bins=5)
    >>> data.counts
    tensor([0, 0, 1, 2, 1])
    >>> data.gap[2:]  # over-confident where positive
    tensor([-0.4500,  0.2000, -0.0500], dtype=torch.float64)
    >>> round(data.ece(), 4)
    0.225
    """

    edges: Tensor
    counts: Tensor
    accuracy: Tensor
    confidence: Tensor
    binning: str

    @property
    def n_samples(self) -> int:
        return int(self.counts.sum())

    @property
    def gap(self) -> Tensor:
        """``confidence - accuracy`` per bin (> 0: over-confident); ``nan`` for empty bins."""
        return self.confidence - self.accuracy

    def ece(self) -> float:
        """The l1 ECE of these bins (equals :func:`ece` with the same binning)."""
        full = self.counts > 0
        w = self.counts[full].double() / self.n_samples
        return float((w * self.gap[full].abs()).sum())


def reliability_data(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
                     logits: ArrayLike | None = None, n_bins: int = 15,
                     binning: str = "width") -> ReliabilityData:
    """Bin edges, counts, accuracy and mean confidence per bin, for a reliability diagram.

    Parameters
    ----------
    probs : Tensor, shape (N, K), optional
        Probabilities (any precision, :ref:`probs-tolerance`); exactly one of ``probs`` and
        ``logits`` (no batch dims).
    labels : Tensor of int, shape (N,)
    logits : Tensor, shape (N, K), optional, keyword-only
    n_bins : int
    binning : {"width", "mass"}
        Same bins as :func:`ece`.

    Returns
    -------
    ReliabilityData
        float64 tensors (counts int64).

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import reliability_data
    >>> logits = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]]).log()
    >>> data = reliability_data(logits=logits, labels=torch.tensor([0, 1, 1, 0]), n_bins=5)
    >>> data.accuracy
    tensor([   nan,    nan, 1.0000, 0.5000, 1.0000], dtype=torch.float64)
    >>> data.confidence
    tensor([   nan,    nan, 0.5500, 0.7000, 0.9500], dtype=torch.float64)
    """
    n_bins = _check_bins(n_bins, binning, "l1")
    conf, correct = top_label(probs, labels, logits)
    if conf.dim() != 1:
        raise ValueError(f"reliability_data takes scores of shape (N, K), got batch dims "
                         f"{tuple(conf.shape[:-1])}")
    conf = conf.to(torch.float64)
    idx = _bin_index(conf, n_bins, binning)
    counts = torch.bincount(idx, minlength=n_bins)
    denom = counts.to(torch.float64)
    empty = counts == 0
    zeros = torch.zeros(n_bins, dtype=torch.float64, device=conf.device)
    acc = zeros.clone().index_add_(0, idx, correct.double()) / denom
    mean_conf = zeros.index_add_(0, idx, conf) / denom
    acc[empty] = math.nan
    mean_conf[empty] = math.nan
    if binning == "width":
        edges = torch.arange(n_bins + 1, dtype=torch.float64, device=conf.device) / n_bins
    else:
        lo = torch.ones(n_bins, dtype=torch.float64, device=conf.device).scatter_reduce_(
            0, idx, conf, reduce="amin", include_self=True)
        # an empty bin takes the edge of the next non-empty one (reverse running minimum)
        lo = lo.flip(0).cummin(0).values.flip(0)
        edges = torch.cat([lo.new_zeros(1), lo[1:], lo.new_ones(1)])
    return ReliabilityData(edges, counts, acc, mean_conf, binning)
