"""Differentiable kernel estimates of the calibration error: MMCE and the KDE-based ECE.

Unlike the binned metrics these take logits only (``logits, labels`` positionally, scores first as
everywhere and as in the training losses that add them as penalties,
:mod:`focalcal.losses.regularised`), they are differentiable in the logits, and they are defined
on one batch ``(N, K)`` (no leading dims).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .._validation import ArrayLike, check_choice, check_positive
from ._inputs import labels_for, logits_batch

__all__ = ["BANDWIDTH_GRID", "MODES", "ece_kde", "kde_bandwidth", "mmce"]

MODES = ("canonical", "top_label")
#: the authors' bandwidth grid: ``logspace(-5, -1, 15)`` and ``linspace(0.2, 1, 5)``
BANDWIDTH_GRID = tuple(np.concatenate([np.logspace(-5, -1, 15), np.linspace(0.2, 1.0, 5)]).tolist())


# --------------------------------------------------------------------------------------------
# MMCE
# --------------------------------------------------------------------------------------------

def check_mmce_params(weighted: bool, kernel_width: float) -> tuple[bool, float]:
    """``(weighted, kernel_width)`` checked (shared with :func:`focalcal.losses.mmce_loss`)."""
    return check_choice(weighted, "weighted", (True, False)), check_positive(kernel_width, "kernel_width")


def mmce_unchecked(logits: Tensor, labels: Tensor, weighted: bool, kernel_width: float) -> Tensor:
    """:func:`mmce` on validated input (for the losses, which validate once)."""
    logp = torch.log_softmax(logits, dim=1)
    top, pred = logp.max(1)
    r = torch.exp(top)
    one_minus_r = -torch.expm1(top)
    correct = pred == labels
    n = r.shape[0]
    if weighted:
        m = correct.sum().to(r.dtype)
        n_inc = n - m
        a = torch.where(correct, one_minus_r / m.clamp_min(1.0), -r / n_inc.clamp_min(1.0))
        both = (m > 0) & (n_inc > 0)
    else:
        a = torch.where(correct, one_minus_r, -r) / n
        both = None
    kern = torch.exp(-torch.abs(r.unsqueeze(1) - r.unsqueeze(0)) / kernel_width)
    sq = (a.unsqueeze(0) @ kern @ a.unsqueeze(1)).squeeze()
    val = torch.sqrt(sq.clamp_min(0.0) + 1e-10)
    if both is not None:
        val = torch.where(both, val, torch.zeros_like(val))
    return val


def mmce(logits: ArrayLike, labels: ArrayLike, *, weighted: bool = True,
         kernel_width: float = 0.4) -> Tensor:
    """Maximum mean calibration error of a batch (Kumar et al. 2018), differentiable.

    With confidence ``r_i = max_k p_ik``, correctness ``c_i``, the Laplacian kernel
    ``k(r, r') = exp(-|r - r'| / kernel_width)`` and coefficients ``a_i``,
    ``MMCE = sqrt(sum_ij a_i a_j k(r_i, r_j) + 1e-10)``:

    * unweighted (MMCE_m): ``a_i = (c_i - r_i) / N``;
    * weighted (MMCE_w): ``a_i = (1 - r_i) / m`` for the ``m`` correct and ``-r_i / n`` for the
      ``n`` incorrect samples, i.e. the RKHS distance between the weighted mean embeddings of the
      two groups. It is 0 when one group is empty (as in the released code).

    The ``1e-10`` keeps the gradient of the square root finite at 0 (released code). We follow
    Kumar's definition; Mukhoti et al.'s released ``MMCE`` returns the *square* of MMCE_m, and
    their ``MMCE_weighted`` divides each pair sum by ``m^2`` twice. ``O(N^2)`` time and memory.

    Parameters
    ----------
    logits : Tensor, shape (N, K)
    labels : Tensor of int, shape (N,)

    Returns
    -------
    Tensor, 0-d

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import mmce
    >>> logits = torch.tensor([[2.0, 0.0], [1.5, 0.0], [0.0, 1.0], [0.5, 0.0], [0.0, 2.5], [1.0, 0.0]])
    >>> labels = torch.tensor([0, 0, 1, 1, 1, 0])
    >>> mmce(logits, labels)
    tensor(0.5115)
    >>> mmce(logits, labels, weighted=False)
    tensor(0.0956)
    """
    weighted, kernel_width = check_mmce_params(weighted, kernel_width)
    x = logits_batch(logits)
    return mmce_unchecked(x, labels_for(labels, x), weighted, kernel_width)


# --------------------------------------------------------------------------------------------
# KDE-based ECE
# --------------------------------------------------------------------------------------------

def check_kde_params(bandwidth: float | str, p: float, mode: str) -> tuple[float | str, float, str]:
    """``(bandwidth, p, mode)`` checked (shared with :func:`focalcal.losses.kde_xe_loss`)."""
    if isinstance(bandwidth, str):
        check_choice(bandwidth, "bandwidth", ("auto",))
    else:
        bandwidth = check_positive(bandwidth, "bandwidth")
    try:
        p = float(p)
    except (TypeError, ValueError) as err:
        raise ValueError(f"p must be a real number >= 1, got {p!r}") from err
    if not (math.isfinite(p) and p >= 1):
        raise ValueError(f"p must be a finite number >= 1, got {p}")
    return bandwidth, p, check_choice(mode, "mode", MODES)


def _kde_log_kernel(logp: Tensor, h: float, mode: str) -> tuple[Tensor, Tensor]:
    """Log kernel matrix ``L[j, i] = log k(f_j; centre f_i)`` (diagonal -inf) and the target-free part.

    canonical: Dirichlet density with ``alpha_i = f_i / h + 1`` at ``f_j``;
    top_label: Beta density with ``(r_i / h + 1, (1 - r_i) / h + 1)`` at ``r_j``.
    Returns ``(L, f)`` where ``f`` is ``p`` (canonical) or ``r`` (top label).
    """
    n = logp.shape[0]
    if mode == "canonical":
        f = torch.exp(logp)
        am1 = f / h
        log_beta = torch.lgamma(am1 + 1.0).sum(1) - torch.lgamma((am1 + 1.0).sum(1))
        lk = logp @ am1.T - log_beta.unsqueeze(0)
        out_f = f
    else:
        top, arg = logp.max(1)
        # log(1 - r) from the other classes: finite for saturated rows
        log1m = torch.logsumexp(logp.scatter(1, arg.unsqueeze(1), float("-inf")), dim=1)
        r, one_m = torch.exp(top), torch.exp(log1m)
        a, b = r / h, one_m / h
        log_beta = torch.lgamma(a + 1.0) + torch.lgamma(b + 1.0) - torch.lgamma(a + b + 2.0)
        lk = top.unsqueeze(1) * a.unsqueeze(0) + log1m.unsqueeze(1) * b.unsqueeze(0) - log_beta.unsqueeze(0)
        out_f = r
    eye = torch.eye(n, dtype=torch.bool, device=logp.device)
    lk = lk.masked_fill(eye, float("-inf"))
    return lk, out_f


def _bandwidth(logits: Tensor, mode: str, grid: Sequence[float]) -> float:
    with torch.no_grad():
        logp = torch.log_softmax(logits.detach().to(torch.float64), dim=1)
        n = logp.shape[0]
        # one N x N kernel per candidate bandwidth (a loop over the grid, not over samples)
        ll = [float(torch.logsumexp(_kde_log_kernel(logp, h, mode)[0], dim=1).sum()) - n * math.log(n - 1)
              for h in grid]
        ll_arr = np.asarray(ll)
        ll_arr[~np.isfinite(ll_arr)] = -np.inf
    return float(grid[int(np.argmax(ll_arr))])


def kde_bandwidth(logits: ArrayLike, *, mode: str = "canonical",
                  grid: Sequence[float] | None = None) -> float:
    """Kernel bandwidth maximising the leave-one-out log-likelihood of the KDE (no gradient).

    ``sum_j log( (1/(N-1)) sum_{i != j} k_h(f_j; f_i) )`` over ``grid`` (default
    :data:`BANDWIDTH_GRID`, the authors' ``logspace(-5, -1, 15)`` and ``linspace(0.2, 1, 5)``),
    computed in float64. The released ``get_bandwidth`` subtracts an extra ``log h`` (the
    Dirichlet kernel is already a density) and starts its maximum at 0, returning -1 when every
    log-likelihood is negative; we do neither.

    Parameters
    ----------
    logits : Tensor, shape (N, K), N >= 2
    mode : {"canonical", "top_label"}
    grid : sequence of float > 0, optional

    Returns
    -------
    float
        The best bandwidth of the grid.

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import kde_bandwidth
    >>> logits = torch.tensor([[2.0, 0.0], [1.5, 0.0], [0.0, 1.0], [0.5, 0.0], [0.0, 2.5], [1.0, 0.0]])
    >>> kde_bandwidth(logits, grid=[0.01, 0.1, 1.0])
    1.0
    """
    mode = check_choice(mode, "mode", MODES)
    grid = BANDWIDTH_GRID if grid is None else tuple(check_positive(h, "grid") for h in grid)
    x = logits_batch(logits, min_samples=2)
    return _bandwidth(x, mode, grid)


def ece_kde_unchecked(logits: Tensor, labels: Tensor, bandwidth: float | str, p: float,
                      mode: str) -> Tensor:
    """:func:`ece_kde` on validated input (for the losses, which validate once)."""
    h = _bandwidth(logits, mode, BANDWIDTH_GRID) if isinstance(bandwidth, str) else bandwidth
    logp = torch.log_softmax(logits, dim=1)
    lk, f = _kde_log_kernel(logp, h, mode)
    w = torch.softmax(lk, dim=1)
    if mode == "canonical":
        y = F.one_hot(labels, logits.shape[1]).to(w.dtype)
        err = (torch.abs(w @ y - f) ** p).sum(1)
    else:
        correct = (logp.detach().argmax(1) == labels).to(w.dtype)
        err = torch.abs(w @ correct - f) ** p
    return err.mean()


def ece_kde(logits: ArrayLike, labels: ArrayLike, *, bandwidth: float | str = "auto", p: float = 1.0,
            mode: str = "canonical") -> Tensor:
    """Differentiable KDE estimate of the ``L_p`` calibration error (Popordanoska et al. 2022).

    ``mode="canonical"``: ``(1/N) sum_j || E_hat[y | f_j] - f_j ||_p^p`` with the leave-one-out
    Nadaraya-Watson estimate ``E_hat[y | f_j] = sum_{i != j} k(f_j; f_i) y_i / sum_{i != j}
    k(f_j; f_i)`` and the Dirichlet kernel ``k(f; f_i) = Dir(f | f_i / h + 1)``.
    ``mode="top_label"``: the same with the top probability ``r = max_k p_k``, the correctness
    ``1[argmax = y]`` and the Beta kernel ``Beta(r | r_i / h + 1, (1 - r_i) / h + 1)``. This is
    the estimate of ``CE_p^p`` (no ``1/p``-th root), as in the authors' ``get_ece_kde``. Kernels
    are evaluated in log space from ``log_softmax``, so saturated rows give finite values
    (``0 * log 0`` never appears); the row-normalised weights are a softmax of the log kernel.
    ``O(N^2 K)`` time, ``O(N^2)`` memory.

    Parameters
    ----------
    logits : Tensor, shape (N, K), N >= 2
    labels : Tensor of int, shape (N,)
    bandwidth : float or "auto"
        ``"auto"``: :func:`kde_bandwidth` on the detached batch.
    p : float >= 1
    mode : {"canonical", "top_label"}

    Returns
    -------
    Tensor, 0-d

    Examples
    --------
    >>> import torch
    >>> from focalcal.metrics import ece_kde
    >>> logits = torch.tensor([[2.0, 0.0], [1.5, 0.0], [0.0, 1.0], [0.5, 0.0], [0.0, 2.5], [1.0, 0.0]])
    >>> labels = torch.tensor([0, 0, 1, 1, 1, 0])
    >>> ece_kde(logits, labels, bandwidth=0.1)
    tensor(0.2592)
    >>> ece_kde(logits, labels, bandwidth=0.1, mode="top_label")
    tensor(0.1334)
    >>> z = logits.clone().requires_grad_()
    >>> ece_kde(z, labels, bandwidth=0.1).backward()  # differentiable: a training penalty
    >>> z.grad.shape
    torch.Size([6, 2])
    """
    bandwidth, p, mode = check_kde_params(bandwidth, p, mode)
    x = logits_batch(logits, min_samples=2)
    return ece_kde_unchecked(x, labels_for(labels, x), bandwidth, p, mode)
