r"""The non-parametric calibrators: histogram binning and isotonic regression (private to :mod:`focalcal.posthoc`).

Both map the softmax probabilities ``p = softmax(z)`` of a network (computed in float64 whatever
the dtype of the logits) through step or piecewise-linear functions fitted on held-out data:

* :class:`HistogramBinning` (Zadrozny & Elkan 2001; Guo et al. 2017, Sec. 4.1): the probability
  in a bin is replaced by the fraction of positives of that bin on the fitting set, either for the
  top-label confidence (``mode="top_label"``) or for every class one-vs-rest
  (``mode="classwise"``, rows renormalised);
* :class:`IsotonicCalibration` (Zadrozny & Elkan 2002): one-vs-rest isotonic regression of
  ``1[y = k]`` on ``p_k`` for every class ``k`` (pool-adjacent-violators of
  :func:`scipy.optimize.isotonic_regression`), interpolated linearly between its knots and clipped
  outside them (as scikit-learn's ``IsotonicRegression(out_of_bounds="clip")``), rows renormalised.

Neither preserves the argmax in general: the fitted maps are monotone in each class's own
probability but differ between classes (classwise binning, isotonic regression), and top-label
binning lowers a confidence below the probability it leaves to the runner-up whenever the bin's
accuracy ``h`` and the confidence ``c`` satisfy ``h < (1 - h) p_2 / (1 - c)``. Fits flat over a
range also create ties.

A fitted probability can be exactly 0 (an empty-of-positives bin, a class absent from the
fitting labels) or exactly 1, whose logarithm is infinite. Every calibrated probability is
therefore raised to at least :data:`PROB_FLOOR` (``1e-12``) before the row is renormalised; a
row of ``K`` maps in [0, 1] sums to at most ``K``, so every log-probability returned by ``forward``
is at least ``log(1e-12 / K)`` (``-27.6`` nats for top-label binning, whose rows sum to 1, and
``-34.5`` at ``K = 1000``): finite, and a zero-probability true class costs about 28 nats of NLL
rather than infinity.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import isotonic_regression

from . import _calibrators as _cal
from ._validation import ArrayLike, check_choice, check_int
from ._estimator import _Calibrator

__all__ = ["HistogramBinning", "IsotonicCalibration", "PROB_FLOOR"]

#: smallest calibrated probability before renormalisation (module docstring)
PROB_FLOOR = 1e-12
HB_MODES = ("top_label", "classwise")
HB_BINNINGS = ("mass", "width")


def _floored_log(q: torch.Tensor) -> torch.Tensor:
    """``log`` of the rows of ``q >= 0`` raised to :data:`PROB_FLOOR` and renormalised."""
    lq = torch.log(q.clamp_min(PROB_FLOOR))
    return lq - torch.logsumexp(lq, dim=-1, keepdim=True)


def _edges(x: torch.Tensor, n_bins: int, binning: str) -> torch.Tensor:
    """Bin edges ``(..., n_bins + 1)`` of the rows of ``x`` ``(..., N)``: 0 and 1 outside."""
    q = torch.linspace(0.0, 1.0, n_bins + 1, dtype=torch.float64, device=x.device)
    if binning == "width":
        return q.expand(*x.shape[:-1], n_bins + 1).clone()
    e = torch.quantile(x, q, dim=-1).movedim(0, -1)  # numpy's 'linear' quantiles, as netcal
    e[..., 0], e[..., -1] = 0.0, 1.0
    return e


def _bin_of(x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Bin index of every ``x`` ``(R, N)`` in the rows of ``edges`` ``(R, B + 1)``: bins ``[lo, hi)``,
    the last one closed; values outside ``[0, 1]`` go to the first or last bin."""
    return torch.searchsorted(edges[:, 1:-1].contiguous(), x.contiguous(), right=True)


def _bin_values(x: torch.Tensor, hit: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Fraction of ``hit`` per bin ``(R, B)``; an empty bin gets its midpoint (as netcal)."""
    n_bins = edges.shape[-1] - 1
    idx = _bin_of(x, edges)
    cnt = torch.zeros(x.shape[0], n_bins, dtype=torch.float64, device=x.device).scatter_add_(
        1, idx, torch.ones_like(x))
    pos = torch.zeros_like(cnt).scatter_add_(1, idx, hit.to(torch.float64))
    mid = 0.5 * (edges[:, :-1] + edges[:, 1:])
    return torch.where(cnt > 0, pos / cnt.clamp_min(1.0), mid)


class HistogramBinning(_Calibrator):
    r"""Histogram binning on the top-label confidence or on every class (Guo et al. 2017, Sec. 4.1).

    ``mode="top_label"``: the confidence ``c = max_k p_k`` of ``p = softmax(z)`` is binned and
    replaced by the accuracy ``h`` of its bin on the fitting set; the other classes share ``1 - h``
    in proportion to their probabilities (``p_j (1 - h) / (1 - c)``), so the calibrated vector is a
    distribution whose top-label confidence is the binned one. This calibrates the confidence
    that :func:`focalcal.metrics.ece` measures (one histogram for every predicted class, not Gupta
    & Ramdas's one per predicted class). ``mode="classwise"``: every class ``k`` has its own
    histogram of ``p_k`` fitted to ``1[y = k]`` (one-vs-rest), and the rows are renormalised.

    Bins are ``[lo, hi)`` (the last closed) with edges ``0 = e_0 < ... < e_B = 1``: equal-mass
    (``binning="mass"``, the default) puts the inner edges at the quantiles ``b / B`` of the fitting
    set's values (NumPy's linear interpolation; tied values can make bins empty); equal-width
    (``"width"``) at ``b / B``. A bin that no fitting sample falls into gets its midpoint. These are
    the definitions of ``netcal.binning.HistogramBinning``, which agrees with this class for
    ``binning="width"`` (``tests/test_binning.py``); netcal fits ``equal_intervals=False`` (equal
    mass) but refuses to predict with it, and its classwise mode leaves a class absent from the
    fitting labels at probability 0 where this class floors it (module docstring).

    Neither mode preserves the argmax in general (module docstring); accuracy can change.
    Probabilities are floored at :data:`PROB_FLOOR` before renormalising, so log-probabilities are
    finite.

    Parameters
    ----------
    n_bins : int, ``>= 1``
        Bins per histogram (15 by default, the ECE's).
    mode : {"top_label", "classwise"}
    binning : {"mass", "width"}

    Attributes
    ----------
    bin_edges_ : Tensor, shape (B + 1,) top-label or (K, B + 1) classwise, float64
    bin_values_ : Tensor, shape (B,) or (K, B), float64
        Calibrated probability of each bin.
    n_classes_ : int

    Examples
    --------
    >>> import torch
    >>> from focalcal.posthoc import HistogramBinning
    >>> g = torch.Generator().manual_seed(0)
    >>> z = 2 * torch.randn(2000, 3, generator=g, dtype=torch.float64)
    >>> labels = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    >>> hb = HistogramBinning(n_bins=5).fit(3 * z, labels)  # over-confident logits
    >>> hb.bin_values_  # accuracy per equal-mass bin of confidence
    tensor([0.4750, 0.6650, 0.7250, 0.8650, 0.9575], dtype=torch.float64)
    >>> p = hb.predict_proba(3 * z[:2])
    >>> p.max(1).values  # the bins' accuracies
    tensor([0.7250, 0.9575], dtype=torch.float64)
    >>> HistogramBinning(mode="classwise").fit(3 * z, labels).bin_values_.shape
    torch.Size([3, 15])
    """

    _fitted_names = ("bin_edges_", "bin_values_", "n_classes_")

    def __init__(self, n_bins: int = 15, *, mode: str = "top_label", binning: str = "mass") -> None:
        super().__init__()
        self.n_bins, self.mode, self.binning = n_bins, mode, binning
        self._validate_params()

    def _validate_params(self) -> None:
        self._n_bins = check_int(self.n_bins, "n_bins")
        check_choice(self.mode, "mode", HB_MODES)
        check_choice(self.binning, "binning", HB_BINNINGS)

    def extra_repr(self) -> str:
        return f"n_bins={self._n_bins}, mode={self.mode!r}, binning={self.binning!r}"

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> HistogramBinning:
        """Fit the histograms on ``logits`` ``(N, K)`` and ``labels`` ``(N,)``; return ``self``."""
        z, y = _cal.check_fit_args(logits, labels, "HistogramBinning.fit")
        p = torch.softmax(z, dim=-1)
        if self.mode == "top_label":
            conf, pred = p.max(dim=-1)
            x, hit = conf.unsqueeze(0), (pred == y).unsqueeze(0)
        else:
            x = p.T.contiguous()
            hit = y.unsqueeze(0) == torch.arange(z.shape[1], device=z.device).unsqueeze(1)
        edges = _edges(x, self._n_bins, self.binning)
        values = _bin_values(x, hit, edges)
        if self.mode == "top_label":
            edges, values = edges[0], values[0]
        self.bin_edges_, self.bin_values_ = edges, values
        self.n_classes_ = int(z.shape[1])
        self._is_fitted = True
        return self

    def forward(self, logits: ArrayLike) -> torch.Tensor:
        """Calibrated log-probabilities, shape ``(..., K)``, dtype of ``logits`` (floored, see above)."""
        self._require_fitted()
        z = self._check_predict_logits(logits)
        shape, dtype = z.shape, z.dtype
        # log-probabilities below -700 (probabilities under 1e-304, far below PROB_FLOOR) are raised
        # to -700: exp then never takes its slow subnormal path, and the floor makes the change moot
        lp = torch.log_softmax(z.reshape(-1, shape[-1]).to(torch.float64), dim=-1).clamp_min(-700.0)
        edges, values = self.bin_edges_.to(lp.device), self.bin_values_.to(lp.device)
        if self.mode == "top_label":
            top, pred = lp.max(dim=-1)
            h = values[_bin_of(top.exp().unsqueeze(0), edges.unsqueeze(0))[0]]
            is_top = torch.nn.functional.one_hot(pred, shape[-1]).bool()
            # log(1 - c) as the log-sum of the other classes: exact also when c rounds to 1
            log_rest = torch.logsumexp(lp.masked_fill(is_top, -700.0), dim=-1, keepdim=True)
            q = torch.where(is_top, h.unsqueeze(-1), (1 - h).unsqueeze(-1) * torch.exp(lp - log_rest))
        else:
            x = lp.exp().T.contiguous()
            q = values.gather(1, _bin_of(x, edges)).T
        return _floored_log(q).to(dtype).reshape(shape)


class IsotonicCalibration(_Calibrator):
    r"""One-vs-rest isotonic regression on the softmax probabilities, renormalised (Zadrozny & Elkan 2002).

    For every class ``k`` a non-decreasing function ``f_k`` minimising
    ``sum_i (f_k(p_ik) - 1[y_i = k])^2`` over the fitting set (tied values of ``p_ik`` pooled
    first, as scikit-learn does) is found by :func:`scipy.optimize.isotonic_regression`; between its
    knots it is interpolated linearly and outside them held constant. The calibrated row is
    ``f_k(p_k) / sum_l f_l(p_l)`` (floored at :data:`PROB_FLOOR` first). Each ``f_k`` is that of
    ``sklearn.isotonic.IsotonicRegression(out_of_bounds="clip")`` and the whole map that of
    ``netcal.binning.IsotonicRegression`` (``tests/test_binning.py``), except that netcal leaves
    a row whose ``f_k`` are all 0 as 0 / 0 (NaN) where this class returns the uniform row.

    Does not preserve the argmax in general (each class has its own map).

    Attributes
    ----------
    x_thresholds_, y_thresholds_ : list of K float64 Tensors
        Knots of each class's map (scikit-learn's names), redundant knots inside flat runs removed.
    n_classes_ : int

    Examples
    --------
    >>> import torch
    >>> from focalcal.posthoc import IsotonicCalibration
    >>> g = torch.Generator().manual_seed(0)
    >>> z = 2 * torch.randn(2000, 3, generator=g, dtype=torch.float64)
    >>> labels = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    >>> iso = IsotonicCalibration().fit(3 * z, labels)
    >>> bool(torch.all(iso.y_thresholds_[0].diff() >= 0))  # a non-decreasing map per class
    True
    >>> p = iso.predict_proba(3 * z)
    >>> bool(torch.allclose(p.sum(1), torch.ones(2000, dtype=torch.float64)))
    True
    >>> bool((p.argmax(1) == (3 * z).argmax(1)).all())  # the argmax can change
    False
    """

    _fitted_names = ("x_thresholds_", "y_thresholds_", "n_classes_")

    def __init__(self) -> None:
        super().__init__()

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> IsotonicCalibration:
        """Fit one isotonic map per class on ``logits`` ``(N, K)`` and ``labels`` ``(N,)``; return ``self``."""
        z, y = _cal.check_fit_args(logits, labels, "IsotonicCalibration.fit")
        p = torch.softmax(z, dim=-1).cpu().numpy()
        yy = y.cpu().numpy()
        xs, ys = [], []
        for k in range(p.shape[1]):
            x, inv, cnt = np.unique(p[:, k], return_inverse=True, return_counts=True)
            mean = np.bincount(inv, weights=(yy == k).astype(np.float64), minlength=len(x)) / cnt
            f = isotonic_regression(mean, weights=cnt.astype(np.float64), increasing=True).x
            f = np.clip(f, 0.0, 1.0)
            # keep the ends of every flat run (the interpolant is unchanged)
            keep = np.ones(len(f), dtype=bool)
            if len(f) > 2:
                keep[1:-1] = (f[1:-1] != f[:-2]) | (f[1:-1] != f[2:])
            xs.append(torch.from_numpy(x[keep]))
            ys.append(torch.from_numpy(f[keep]))
        self.x_thresholds_, self.y_thresholds_ = xs, ys
        self.n_classes_ = int(z.shape[1])
        self._is_fitted = True
        return self

    def forward(self, logits: ArrayLike) -> torch.Tensor:
        """Calibrated log-probabilities, shape ``(..., K)``, dtype of ``logits`` (floored, see above)."""
        self._require_fitted()
        z = self._check_predict_logits(logits)
        shape, dtype = z.shape, z.dtype
        x = torch.softmax(z.reshape(-1, shape[-1]).to(torch.float64), dim=-1).T.contiguous()
        m = max(2, max(len(t) for t in self.x_thresholds_) + 1)
        # knots padded with +inf: beyond the last knot the weight of the pad is 0 (clipping)
        kx = torch.full((shape[-1], m), math.inf, dtype=torch.float64, device=x.device)
        ky = torch.zeros_like(kx)
        for k, (a, b) in enumerate(zip(self.x_thresholds_, self.y_thresholds_)):
            kx[k, :len(a)], ky[k, :len(b)], ky[k, len(b):] = a, b, b[-1]
        i = torch.searchsorted(kx, x, right=True).clamp(1, m - 1)
        x0, x1 = kx.gather(1, i - 1), kx.gather(1, i)
        y0, y1 = ky.gather(1, i - 1), ky.gather(1, i)
        w = ((x - x0) / (x1 - x0)).nan_to_num(0.0).clamp(0.0, 1.0)
        q = (y0 + w * (y1 - y0)).T
        return _floored_log(q).to(dtype).reshape(shape)
