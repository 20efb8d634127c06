"""The focal family: cross-entropy, focal, inverse focal, FLSD / sample-dependent, scheduled,
dual focal and AdaFocal, all through the one fused autograd function of :mod:`._core`.

Numerics are described in the :mod:`focalcal.losses` docstring; where the papers and their
released code disagree, the book's errata page (``book/theory/errata.md``) shows it with executed
checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeAlias

import torch
import torch.nn.functional as F
from torch import Tensor

from .._validation import ArrayLike, check_choice, check_gamma, check_int, check_positive
from ..metrics import reliability_data
from ._core import (
    Batch,
    Phi,
    check_ignore_index,
    check_lamda,
    check_output,
    check_reduction,
    column_of_value,
    fused_loss,
    prepare,
    ratio_log_p_over_b,
    reduce_loss,
)

#: Mukhoti et al. (2020) sample-dependent schedules as ``(threshold, gamma)`` pairs: ``gamma`` of
#: the first pair with ``p_t < threshold``; the last pair covers everything above the previous
#: threshold, ``p_t = 1`` included.
FLSD53: tuple[tuple[float, float], ...] = ((0.2, 5.0), (1.0, 3.0))
FLSD532: tuple[tuple[float, float], ...] = ((0.2, 5.0), (0.5, 3.0), (1.0, 2.0))

DUAL_VARIANTS = ("paper", "released")

# the public losses; the check_* helpers, focal_family and the AdaFocal helpers are shared with
# the modules of .modules, not API
__all__ = [
    "FLSD53",
    "FLSD532",
    "adafocal_loss",
    "cross_entropy_loss",
    "dual_focal_loss",
    "flsd_loss",
    "focal_gamma_at_epoch",
    "focal_loss",
    "inverse_focal_gamma_threshold",
    "inverse_focal_loss",
    "prop2_schedule",
    "sample_dependent_focal_loss",
    "scheduled_focal_loss",
]

#: per-sample ``gamma`` from the detached ``log p_t``: a tensor, or ``(|gamma|, (s, is_inverse))``
GammaFn: TypeAlias = Callable[[Tensor], "Tensor | tuple[Tensor, tuple[Tensor, Tensor]]"]


# --------------------------------------------------------------------------------------------
# the per-sample loss phi(log p_t) of the focal family
# --------------------------------------------------------------------------------------------

def _phi_focal(gamma: float | Tensor, sign: float | tuple[Tensor, Tensor], positive: bool = False
               ) -> Phi:
    """phi for ``-(1 + s p)^gamma log p`` with ``s = -1`` (focal) or ``s = +1`` (inverse focal).

    ``dphi/du = -b^gamma (1 + gamma s p u / b)`` with ``b = 1 + s p``. ``sign`` is ``-1.0``,
    ``+1.0`` or, per sample, ``(s, is_inverse)`` tensors; ``positive`` says that a per-sample
    ``gamma`` is > 0 everywhere.
    """

    def phi(u2: Tensor, aux: Tensor | None = None) -> tuple[Tensor, Tensor]:
        u = u2.squeeze(1)
        p = torch.exp(u)
        if isinstance(sign, tuple):
            s, inv = sign
            b = torch.where(inv, p + 1.0, torch.expm1(u).neg_())
        elif sign > 0:
            s, b = 1.0, p + 1.0
        else:
            s, b = -1.0, torch.expm1(u).neg_()
        if isinstance(gamma, Tensor):
            # exp(gamma log b) is vectorised (pow with a tensor exponent is not) and gives 0 at
            # b = 0 for gamma > 0; a gamma of 0 needs pow's 0**0 = 1
            bg = torch.exp(gamma * torch.log(b)) if positive else torch.pow(b, gamma)
            q = bg * p * (gamma * s)
            dphi = torch.addcmul(bg, q, ratio_log_p_over_b(u, b))
        elif gamma == 0.0:
            bg, dphi = torch.ones_like(u), torch.ones_like(u)
        else:
            bg = b * b if gamma == 2.0 else torch.pow(b, gamma)
            dphi = torch.addcmul(bg, bg * p, ratio_log_p_over_b(u, b), value=gamma * s)
        return (bg * u).neg_(), dphi.neg_().unsqueeze(1)

    return phi


def _phi_focal_smoothed(gamma: float, label_smoothing: float, k: int) -> Phi:
    """phi for ``sum_j s_j (-(1 - p_j)^gamma log p_j)`` over the ``K`` columns of ``u`` (M, K), the
    labelled class first: ``s = 1 - label_smoothing`` there and ``label_smoothing / (K - 1)`` at
    every other class. Per column as :func:`_phi_focal` (``s = -1``)."""
    weights = [1.0 - label_smoothing] + [label_smoothing / (k - 1)] * (k - 1)

    def phi(u: Tensor, aux: Tensor | None = None) -> tuple[Tensor, Tensor]:
        w = torch.tensor(weights, dtype=u.dtype, device=u.device)
        if gamma == 0.0:
            return (u * w).sum(1).neg_(), w.neg().expand_as(u)
        p = torch.exp(u)
        b = torch.expm1(u).neg_()
        bg = b * b if gamma == 2.0 else torch.pow(b, gamma)
        dphi = torch.addcmul(bg, bg * p, ratio_log_p_over_b(u, b), value=-gamma)
        return (bg * u * w).sum(1).neg_(), dphi.mul_(w).neg_()

    return phi


def _labelled_first(t: Tensor, k: int) -> Tensor:
    """Per row, the ``K`` column indices with the labelled class ``t`` first (the labelled class and
    column 0 swap places)."""
    idx = torch.arange(k, device=t.device).repeat(t.shape[0], 1)
    idx.scatter_(1, t.unsqueeze(1), 0)
    idx[:, 0] = t
    return idx


def focal_family(batch: Batch, gamma: float | GammaFn, inverse: bool,
                  reduction: str) -> Tensor:
    """Focal (``inverse=False``) or inverse focal loss; ``gamma`` may be a function of the
    detached ``log p_t`` returning per-sample ``gamma`` or ``(|gamma|, (s, is_inverse))``."""
    if callable(gamma):
        positive = bool(getattr(gamma, "positive", False))

        def phi(u2: Tensor, aux: Tensor | None = None) -> tuple[Tensor, Tensor]:
            g = gamma(u2.squeeze(1))
            if isinstance(g, tuple):
                return _phi_focal(g[0], g[1], positive)(u2)
            return _phi_focal(g, 1.0 if inverse else -1.0, positive)(u2)
        fn = phi
    else:
        fn = _phi_focal(gamma, 1.0 if inverse else -1.0)
    return fused_loss(batch, batch.t.unsqueeze(1), fn, reduction)


# --------------------------------------------------------------------------------------------
# cross-entropy, focal, inverse focal
# --------------------------------------------------------------------------------------------

def cross_entropy_loss(logits: ArrayLike, labels: ArrayLike, *, reduction: str = "mean",
                       ignore_index: int = -100) -> Tensor:
    """Cross-entropy ``-log p_t`` (the reference); ``F.cross_entropy`` after input checks.

    Parameters
    ----------
    logits : Tensor, shape (N, K), (N, K, d1, ...) or (K,)
    labels : Tensor of int, shape (N,), (N, d1, ...) or ()
    reduction : {"mean", "sum", "none"}
    ignore_index : int
        Labels with this value are skipped, as in :class:`torch.nn.CrossEntropyLoss`.

    Returns
    -------
    Tensor
        Scalar, or the shape of ``labels`` for ``reduction="none"``.

    Examples
    --------
    >>> from focalcal.losses import cross_entropy_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> cross_entropy_loss(logits, labels)
    tensor(0.5447)
    >>> bool(torch.allclose(cross_entropy_loss(logits, labels), torch.nn.functional.cross_entropy(logits, labels)))
    True
    """
    reduction = check_reduction(reduction)
    ignore_index = check_ignore_index(ignore_index)
    batch = prepare(logits, labels, ignore_index, reduction)
    if batch.valid is None and reduction != "none":
        return check_output(F.cross_entropy(batch.x, batch.t, reduction=reduction), batch)
    out = F.cross_entropy(batch.x, batch.t, reduction="none")
    if batch.valid is not None:
        out = torch.where(batch.valid, out, torch.zeros_like(out))
    return reduce_loss(out, batch, reduction)


def focal_loss(logits: ArrayLike, labels: ArrayLike, gamma: float = 3.0, *, label_smoothing: float = 0.0,
               reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Focal loss ``-(1 - p_t)^gamma log p_t`` (Lin et al. 2017; Mukhoti et al. 2020).

    ``gamma = 0`` is the cross-entropy. Shapes, ``reduction`` and ``ignore_index`` as in
    :func:`cross_entropy_loss`.

    Parameters
    ----------
    gamma : float, >= 0
        Focusing parameter (Mukhoti's best fixed value, 3, by default).
    label_smoothing : float in [0, (K-1)/K]
        With ``a > 0`` the loss is ``sum_j s_j (-(1 - p_j)^gamma log p_j)`` against the smoothed
        target ``s``: ``1 - a`` at the labelled class and ``a / (K - 1)`` at every other class, the
        convention of :func:`~focalcal.losses.label_smoothing_loss` (which is the case ``gamma = 0``;
        :func:`torch.nn.functional.cross_entropy`'s ``label_smoothing=a'`` spreads ``a' / K`` over
        all classes instead). Charoenphakdee et al. (2021, Sec. 6.1) train focal loss this way
        (their "LS" paradigm).

    Examples
    --------
    >>> from focalcal.losses import focal_loss, cross_entropy_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> focal_loss(logits, labels, gamma=3.0)
    tensor(0.1655)
    >>> focal_loss(logits, labels, gamma=3.0, reduction='none')
    tensor([0.0006, 0.4952, 0.0006])
    >>> bool(focal_loss(logits, labels, gamma=0.0) == cross_entropy_loss(logits, labels))
    True
    >>> focal_loss(logits, labels, gamma=3.0, label_smoothing=0.1)
    tensor(0.3025)
    """
    gamma = check_gamma(gamma, "gamma", minimum=0.0)
    label_smoothing = check_gamma(label_smoothing, "label_smoothing", minimum=0.0, maximum=1.0)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction)
    if label_smoothing == 0.0:
        return focal_family(batch, gamma, False, reduction)
    k = batch.k
    if label_smoothing > (k - 1) / k:
        raise ValueError(f"label_smoothing must be <= (K-1)/K = {(k - 1) / k:.4g} for K = {k} classes, "
                         f"got {label_smoothing}")
    return fused_loss(batch, _labelled_first(batch.t, k), _phi_focal_smoothed(gamma, label_smoothing, k),
                      reduction)


def inverse_focal_loss(logits: ArrayLike, labels: ArrayLike, gamma: float = 2.0, *,
                       reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Inverse focal loss ``-(1 + p_t)^gamma log p_t`` (Wang et al. 2021; Zhou et al. 2025, Def. 3.2).

    Up-weights confident samples. ``dl/dp_t = -(1+p)^(gamma-1) (gamma log p + (1+p)/p)`` becomes
    positive somewhere in ``(0, 1)`` iff ``gamma`` exceeds :func:`inverse_focal_gamma_threshold`
    (``1/W(1/e)``, about 3.59); above it the loss pushes some correct-class
    probabilities down. Default ``gamma = 2`` (Zhou et al., Table 2, CIFAR-10 ResNet-50).
    Shapes, ``reduction`` and ``ignore_index`` as in :func:`cross_entropy_loss`.

    Examples
    --------
    >>> from focalcal.losses import inverse_focal_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> inverse_focal_loss(logits, labels, gamma=2.0)
    tensor(1.0853)
    """
    gamma = check_gamma(gamma, "gamma", minimum=0.0)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction)
    return focal_family(batch, gamma, True, reduction)


def inverse_focal_gamma_threshold() -> tuple[float, float]:
    """Smallest ``gamma`` for which the inverse focal loss has a positive ``dl/dp_t`` somewhere.

    ``dl/dp = -(1+p)^(gamma-1) * (gamma log p + (1+p)/p)`` is positive iff
    ``gamma > (1+p) / (-p log p)``; the threshold is the minimum of the right-hand side over
    ``p in (0, 1)``, found with :func:`scipy.optimize.minimize_scalar`.

    Returns
    -------
    (gamma_threshold, p_at_minimum) : (float, float)
        ``(3.5911..., 0.2785...)`` = ``(1/W(1/e), W(1/e))`` with Lambert's ``W`` (at the minimum
        ``-p log p = p (1 + p)``, i.e. ``log p = -(1 + p)``). What Zhou et al. (2025) state is
        on the book's errata page (``book/theory/errata.md``).

    Examples
    --------
    >>> from focalcal.losses import inverse_focal_gamma_threshold
    >>> gamma, p = inverse_focal_gamma_threshold()
    >>> round(gamma, 4), round(p, 4)
    (3.5911, 0.2785)
    """
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(lambda p: (1.0 + p) / (-p * math.log(p)), bounds=(1e-9, 1 - 1e-9),
                          method="bounded", options={"xatol": 1e-12})
    return float(res.fun), float(res.x)


# --------------------------------------------------------------------------------------------
# sample-dependent gamma (FLSD) and epoch-scheduled gamma (FLSc)
# --------------------------------------------------------------------------------------------

def check_schedule(schedule: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """The ``(threshold, gamma)`` pairs of a sample-dependent schedule, checked and as floats."""
    try:
        pairs = tuple((float(th), float(g)) for th, g in schedule)
    except (TypeError, ValueError) as err:
        raise ValueError("schedule must be a sequence of (threshold, gamma) pairs, e.g. "
                         "[(0.2, 5.0), (1.0, 3.0)]") from err
    if not pairs:
        raise ValueError("schedule must contain at least one (threshold, gamma) pair")
    ths = [th for th, _ in pairs]
    if any(not math.isfinite(th) or th <= 0 for th in ths):
        raise ValueError(f"schedule thresholds must be finite and > 0, got {ths}")
    if any(b <= a for a, b in zip(ths, ths[1:])):
        raise ValueError(f"schedule thresholds must be strictly increasing, got {ths}")
    if ths[-1] < 1.0:
        raise ValueError(f"the last schedule threshold must be >= 1 so that every p_t in [0, 1] gets "
                         f"a gamma, got {ths[-1]}")
    for _, g in pairs:
        check_gamma(g, "schedule gamma", minimum=0.0)
    return pairs


def _schedule_gamma_fn(pairs: tuple[tuple[float, float], ...]) -> Callable[[Tensor], Tensor]:
    # gamma(p_t) = gamma_last + sum_k (gamma_k - gamma_{k+1}) [log p_t < log th_k]: comparisons of
    # log p_t with log thresholds (no exp, exact for p_t that round to 1), written into a float
    # buffer (bool outputs and bucketize are several times slower on the CPU)
    log_edges = [math.log(th) for th, _ in pairs[:-1]]
    gammas = [g for _, g in pairs]
    steps = [gammas[i] - gammas[i + 1] for i in range(len(log_edges))]

    cache: dict[tuple[torch.dtype, torch.device], tuple[Tensor, Tensor]] = {}

    def gamma_of(u: Tensor) -> Tensor:
        if not log_edges:
            return torch.full_like(u, gammas[-1])
        if len(log_edges) == 1:
            return torch.where(u < log_edges[0], gammas[0], gammas[1]).to(u.dtype)
        key = (u.dtype, u.device)
        if key not in cache:
            cache[key] = (torch.tensor(log_edges, dtype=u.dtype, device=u.device),
                          torch.tensor(steps, dtype=u.dtype, device=u.device))
        edges, d = cache[key]
        hit = torch.empty((u.shape[0], len(log_edges)), dtype=u.dtype, device=u.device)
        torch.lt(u.unsqueeze(1), edges, out=hit)
        return torch.addmv(torch.full_like(u, gammas[-1]), hit, d)

    gamma_of.positive = min(gammas) > 0  # type: ignore[attr-defined]
    return gamma_of


def sample_dependent_focal_loss(logits: ArrayLike, labels: ArrayLike,
                                schedule: Sequence[tuple[float, float]],
                                *, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Focal loss whose ``gamma`` depends on the sample's ``p_t`` (Mukhoti et al. 2020, §4).

    Shapes, ``reduction`` and ``ignore_index`` as in :func:`cross_entropy_loss`.

    Parameters
    ----------
    schedule : sequence of (threshold, gamma)
        Increasing thresholds; a sample gets the ``gamma`` of the first pair with
        ``p_t < threshold``. The last threshold must be ``>= 1`` and covers ``p_t = 1`` too.
        :data:`FLSD53` = ``((0.2, 5), (1, 3))``, :data:`FLSD532` = ``((0.2, 5), (0.5, 3), (1, 2))``;
        :func:`prop2_schedule` derives one from Mukhoti's Prop. 2. ``gamma`` is chosen from the
        detached ``p_t``, so no gradient flows through the choice.

    Examples
    --------
    >>> from focalcal.losses import sample_dependent_focal_loss, FLSD53
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> FLSD53
    ((0.2, 5.0), (1.0, 3.0))
    >>> sample_dependent_focal_loss(logits, labels, FLSD53)
    tensor(0.1655)
    """
    pairs = check_schedule(schedule)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction)
    return focal_family(batch, _schedule_gamma_fn(pairs), False, reduction)


def flsd_loss(logits: ArrayLike, labels: ArrayLike, gamma_high: float = 3.0, *,
              reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """FLSD-53 (``gamma_high = 3``) and FLSD-532 (``gamma_high = 2``) of Mukhoti et al. (2020).

    ``gamma = 5`` for ``p_t < 0.2``, ``3`` for ``0.2 <= p_t < 0.5`` and ``gamma_high`` for
    ``p_t >= 0.5``. This is the released code's form (``FocalLossAdaptive(gamma=gamma_high)``);
    with ``gamma_high = 3`` it is the paper's FLSD-53 "5 if ``p_t in [0, 0.2)``, else 3" (§5.1),
    and with ``gamma_high = 2`` the FLSD-532 of App. E.

    Examples
    --------
    >>> from focalcal.losses import flsd_loss, sample_dependent_focal_loss, FLSD532
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> flsd_loss(logits, labels)
    tensor(0.1655)
    >>> bool(flsd_loss(logits, labels, gamma_high=2.0) == sample_dependent_focal_loss(logits, labels, FLSD532))
    True
    """
    gamma_high = check_gamma(gamma_high, "gamma_high", minimum=0.0)
    return sample_dependent_focal_loss(logits, labels, ((0.2, 5.0), (0.5, 3.0), (1.0, gamma_high)),
                                       reduction=reduction, ignore_index=ignore_index)


def prop2_schedule(thresholds: Sequence[float]) -> tuple[tuple[float, float], ...]:
    """A sample-dependent schedule from Mukhoti et al.'s Prop. 2.

    For increasing ``p_0`` values ``a_1 < ... < a_m`` in (0, 0.5), bucket ``k`` (``p_t`` in
    ``[a_{k-1}, a_k)``, the last one extended to 1) gets ``gamma*(a_k)`` from
    :func:`focalcal.maps.gamma_star`, so that ``g(p, gamma) >= 1`` (a larger gradient than the
    cross-entropy) for ``p_t <= a_k`` within the bucket and ``g < 1`` above ``a_m``.
    ``prop2_schedule([0.2, 0.25])`` is the schedule that FLSD-53 rounds to ``((0.2, 5), (1, 3))``
    (the values are on the book's errata page, ``book/theory/errata.md``).

    Returns
    -------
    tuple of (threshold, gamma)
        Usable as ``schedule`` of :func:`sample_dependent_focal_loss`.

    Examples
    --------
    >>> from focalcal.losses import prop2_schedule
    >>> [(th, round(g, 2)) for th, g in prop2_schedule([0.2, 0.25])]
    [(0.2, 4.85), (1.0, 3.07)]
    """
    from ..maps import gamma_star

    try:
        a = [float(v) for v in thresholds]
    except (TypeError, ValueError) as err:
        raise ValueError("thresholds must be a sequence of numbers in (0, 0.5)") from err
    if not a:
        raise ValueError("thresholds must contain at least one p_0")
    if any(not (0.0 < v < 0.5) for v in a):
        raise ValueError(f"thresholds must lie in (0, 0.5) (Prop. 2 has a real gamma* there), got {a}")
    if any(b <= c for c, b in zip(a, a[1:])):
        raise ValueError(f"thresholds must be strictly increasing, got {a}")
    gammas = [float(gamma_star(v)) for v in a]
    return tuple(zip(a[:-1] + [1.0], gammas))


def focal_gamma_at_epoch(epoch: int, gammas: Sequence[float] = (5.0, 3.0, 1.0),
                         milestones: Sequence[int] = (100, 250)) -> float:
    """``gamma`` of an epoch-scheduled focal loss (Mukhoti et al. 2020, App. E).

    ``gammas[k]`` for the 0-based ``epoch`` with ``k = #{m in milestones : m <= epoch}``;
    FLSc-531 is ``gammas=(5, 3, 1), milestones=(100, 250)`` (gamma 5 for the first 100 epochs,
    3 for the next 150, 1 for the last 100 of 350), FLSc-532 ends with 2.

    Examples
    --------
    >>> from focalcal.losses import focal_gamma_at_epoch
    >>> [focal_gamma_at_epoch(e) for e in (0, 99, 100, 249, 250)]
    [5.0, 5.0, 3.0, 3.0, 1.0]
    """
    epoch = check_int(epoch, "epoch", minimum=0)
    k = sum(1 for m in milestones if m <= epoch)
    return float(gammas[k])


def check_epoch_schedule(gammas: Sequence[float], milestones: Sequence[int]
                         ) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """``(gammas, milestones)`` of an epoch schedule, checked."""
    try:
        g = tuple(check_gamma(v, "gammas", minimum=0.0) for v in gammas)
        m = tuple(check_int(v, "milestones", minimum=1) for v in milestones)
    except TypeError as err:
        raise ValueError("gammas and milestones must be sequences") from err
    if len(g) != len(m) + 1:
        raise ValueError(f"gammas must have one entry more than milestones, got {len(g)} gammas and "
                         f"{len(m)} milestones")
    if any(b <= a for a, b in zip(m, m[1:])):
        raise ValueError(f"milestones must be strictly increasing, got {m}")
    return g, m


def scheduled_focal_loss(logits: ArrayLike, labels: ArrayLike, epoch: int,
                         gammas: Sequence[float] = (5.0, 3.0, 1.0),
                         milestones: Sequence[int] = (100, 250), *, reduction: str = "mean",
                         ignore_index: int = -100) -> Tensor:
    """Focal loss with ``gamma = focal_gamma_at_epoch(epoch, gammas, milestones)`` (FLSc).

    Examples
    --------
    >>> from focalcal.losses import scheduled_focal_loss, focal_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> bool(scheduled_focal_loss(logits, labels, epoch=120) == focal_loss(logits, labels, gamma=3.0))
    True
    """
    g, m = check_epoch_schedule(gammas, milestones)
    return focal_loss(logits, labels, focal_gamma_at_epoch(epoch, g, m), reduction=reduction,
                      ignore_index=ignore_index)


# --------------------------------------------------------------------------------------------
# dual focal
# --------------------------------------------------------------------------------------------

def _phi_dual(gamma: float) -> Phi:
    """phi for ``-(1 - p_t + p_j)^gamma log p_t`` on ``u = (log p_t, log p_j)``; ``aux`` = has_j."""

    def phi(u: Tensor, has_j: Tensor | None) -> tuple[Tensor, Tensor]:
        ut, uj = u[:, 0], u[:, 1]
        pt = torch.exp(ut)
        pj = torch.exp(uj)
        if has_j is not None:
            pj = torch.where(has_j, pj, torch.zeros_like(pj))
        b = torch.expm1(ut).neg_().add_(pj)
        bg = torch.pow(b, gamma)
        gbr = bg * ratio_log_p_over_b(ut, b) * gamma
        # d/du_t = -b^g + g b^g (u_t / b) p_t,  d/du_j = -g b^g (u_t / b) p_j
        d_t = torch.addcmul(bg.neg(), gbr, pt)
        d_j = (gbr * pj).neg_()
        return (bg * ut).neg_(), torch.stack((d_t, d_j), dim=1)

    return phi


def _competitor_paper(t: Tensor) -> Callable[[Tensor], tuple[Tensor, None, Tensor]]:
    """Index (t, j) with ``j = argmax_{k != t} log p_k``."""

    def index(logp: Tensor) -> tuple[Tensor, None, Tensor]:
        # mask the labelled column in place (and restore it): no copy of the (M, K) log-probabilities;
        # index_fill_/index_copy_ on the flat view are faster than scatter_ on the CPU
        flat = logp.view(-1)
        pos = torch.arange(logp.shape[0], device=logp.device) * logp.shape[1] + t
        ut = flat.take(pos)
        flat.index_fill_(0, pos, float("-inf"))
        hit = torch.empty_like(logp)
        j = column_of_value(hit, logp, logp.amax(1, keepdim=True))
        flat.index_copy_(0, pos, ut)
        return torch.stack((t, j), dim=1), None, hit

    return index


def _competitor_released(t: Tensor) -> Callable[[Tensor], tuple[Tensor, Tensor, Tensor]]:
    """Index (t, j) with ``j`` the largest ``log p_k`` strictly below ``log p_t``, and has_j."""

    def index(logp: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        d = logp - logp.gather(1, t.unsqueeze(1))
        # 1/d is negative exactly where log p_k < log p_t and most negative for the largest such
        # entry; ties (d = +0) become +inf and are excluded, as the released strict "<" does
        d.reciprocal_()
        v = d.amin(1, keepdim=True)
        j = column_of_value(d, d, v)
        return torch.stack((t, j), dim=1), v.squeeze(1) < 0, d

    return index


def dual_focal_loss(logits: ArrayLike, labels: ArrayLike, gamma: float = 5.0, *,
                    variant: str = "paper", reduction: str = "mean", ignore_index: int = -100
                    ) -> Tensor:
    """Dual focal loss ``-(1 - p_t + p_j)^gamma log p_t`` (Tao et al. 2023).

    Shapes, ``reduction`` and ``ignore_index`` as in :func:`cross_entropy_loss`.

    Parameters
    ----------
    gamma : float, >= 0
        Default 5 (Zhou et al. 2025, Table 2, CIFAR-10 ResNet-50).
    variant : {"paper", "released"}
        ``"paper"``: ``p_j = max_{k != t} p_k``, the strongest competitor (Tao et al., eq. 24 of
        Zhou et al.). ``"released"``: ``p_j`` = the largest probability strictly below ``p_t`` and 0
        if there is none (``DualFocalLoss`` of github.com/Linwei94/ICML2023-DualFocalLoss). Both
        agree when the labelled class is the unique argmax. For a misclassified sample the released form
        replaces the competitor by a smaller probability, so it down-weights hard samples
        (Zhou et al., App. C.3), and it jumps wherever ``p_t`` crosses another probability (the
        paper form is continuous). The competitor is chosen by comparing log-probabilities (the
        released code compares probabilities, which can tie where log-probabilities do not;
        among exact ties we take the highest class index); the gradient flows through both
        ``p_t`` and ``p_j``.

    Examples
    --------
    >>> from focalcal.losses import dual_focal_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> dual_focal_loss(logits, labels, gamma=5.0)
    tensor(0.9780)
    >>> dual_focal_loss(logits, labels, gamma=5.0, variant='released')
    tensor(0.0871)
    """
    gamma = check_gamma(gamma, "gamma", minimum=0.0)
    variant = check_choice(variant, "variant", DUAL_VARIANTS)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction)
    pick = _competitor_paper(batch.t) if variant == "paper" else _competitor_released(batch.t)
    return fused_loss(batch, pick, _phi_dual(gamma), reduction)


# --------------------------------------------------------------------------------------------
# AdaFocal
# --------------------------------------------------------------------------------------------

def adafocal_gamma_fn(log_inner: Tensor, gammas: Tensor
                      ) -> Callable[[Tensor], tuple[Tensor, tuple[Tensor, Tensor]]]:
    """Per-sample ``(|gamma|, (s, is_inverse))`` from the bin of ``log p_t``.

    ``log_inner`` are the logs of the inner bin edges (log 0 = -inf is a valid boundary) and
    ``gammas`` the signed per-bin values, both already in the dtype/device of the logits.
    """

    def gamma_of(u: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        g = torch.take(gammas, torch.bucketize(u, log_inner, right=True))
        # s = -1 (focal) for gamma > 0, +1 (inverse focal) for gamma < 0
        return g.abs(), (torch.sign(g).neg_(), g < 0)

    gamma_of.positive = bool((gammas != 0).all())  # type: ignore[attr-defined]
    return gamma_of


def adafocal_tables(bin_edges: Tensor, gammas: Tensor, dtype: torch.dtype, device: torch.device
                    ) -> tuple[Tensor, Tensor]:
    """``(log of the inner edges, gammas)`` in the dtype and device of the logits."""
    return (torch.log(bin_edges[1:-1].to(torch.float64)).to(device, dtype), gammas.to(device, dtype))


def check_adafocal_state(bin_edges: ArrayLike, gammas: ArrayLike) -> tuple[Tensor, Tensor]:
    """Per-bin state ``(bin_edges (M+1,), gammas (M,))`` of AdaFocal, checked, as tensors."""
    edges = bin_edges if isinstance(bin_edges, Tensor) else torch.as_tensor(bin_edges, dtype=torch.float64)
    g = gammas if isinstance(gammas, Tensor) else torch.as_tensor(gammas, dtype=torch.float64)
    if edges.dim() != 1 or g.dim() != 1 or edges.numel() != g.numel() + 1 or g.numel() < 1:
        raise ValueError(f"bin_edges must have shape (M+1,) and gammas (M,), got "
                         f"{tuple(edges.shape)} and {tuple(g.shape)}")
    if not bool(torch.isfinite(edges).all()) or not bool(torch.isfinite(g).all()):
        raise ValueError("bin_edges and gammas must be finite")
    if bool((edges[1:] < edges[:-1]).any()):
        raise ValueError("bin_edges must be non-decreasing")
    return edges, g


def adafocal_loss(logits: ArrayLike, labels: ArrayLike, bin_edges: ArrayLike, gammas: ArrayLike, *,
                  reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """AdaFocal loss for given per-bin ``gamma`` (Ghosh et al. 2022); state in :class:`AdaFocalLoss`.

    A sample falls into bin ``b`` by its ``p_t`` (the first bin takes everything below
    ``bin_edges[1]``, the last everything from ``bin_edges[-2]`` on, otherwise
    ``edges[b] <= p_t < edges[b+1]``, as in the released code). With ``gamma_b >= 0`` its loss is
    the focal loss ``-(1 - p_t)^gamma_b log p_t``, with ``gamma_b < 0`` the inverse focal loss
    ``-(1 + p_t)^|gamma_b| log p_t``.

    Parameters
    ----------
    bin_edges : Tensor, shape (M + 1,)
        Non-decreasing bin edges in [0, 1] (from the validation set's equal-mass bins).
    gammas : Tensor, shape (M,)
        Signed per-bin ``gamma``.

    Examples
    --------
    >>> from focalcal.losses import adafocal_loss, focal_loss
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.5, 0.0], [1.0, 3.0, 0.0]])
    >>> labels = torch.tensor([0, 2, 1])
    >>> edges, gammas = torch.tensor([0.0, 0.5, 1.0]), torch.tensor([3.0, -1.0])
    >>> adafocal_loss(logits, labels, edges, gammas)
    tensor(0.3738)
    >>> bool(adafocal_loss(logits, labels, edges, torch.tensor([3.0, 3.0])) == focal_loss(logits, labels, 3.0))
    True
    """
    edges, g = check_adafocal_state(bin_edges, gammas)
    reduction = check_reduction(reduction)
    batch = prepare(logits, labels, check_ignore_index(ignore_index), reduction)
    tables = adafocal_tables(edges, g, batch.x.dtype, batch.x.device)
    return focal_family(batch, adafocal_gamma_fn(*tables), False, reduction)



def check_adafocal_params(n_bins: int, lamda: float, gamma_initial: float, gamma_max: float,
                          gamma_min: float | None, switch_pt: float
                          ) -> tuple[int, float, float, float, float, float]:
    """``(n_bins, lamda, gamma_initial, gamma_max, gamma_min, switch_pt)`` of AdaFocal, checked;
    ``gamma_min=None`` becomes ``-gamma_max``."""
    n_bins = check_int(n_bins, "n_bins")
    lamda = check_lamda(lamda)
    gamma_max = check_positive(gamma_max, "gamma_max")
    gmin = -gamma_max if gamma_min is None else float(gamma_min)
    if not (math.isfinite(gmin) and gmin < 0):
        raise ValueError(f"gamma_min must be a finite negative number, got {gamma_min}")
    switch_pt = check_positive(switch_pt, "switch_pt")
    g0 = float(gamma_initial)
    if not (math.isfinite(g0) and abs(g0) >= switch_pt and gmin <= g0 <= gamma_max):
        raise ValueError(f"gamma_initial must satisfy |gamma| >= switch_pt={switch_pt} and "
                         f"lie in [{gmin}, {gamma_max}], got {gamma_initial}")
    return n_bins, lamda, g0, gamma_max, gmin, switch_pt


@torch.no_grad()
def adafocal_update(gammas: Tensor, val_logits: ArrayLike, val_labels: ArrayLike, *, lamda: float,
                    gamma_min: float, gamma_max: float, switch_pt: float, ignore_index: int = -100
                    ) -> tuple[Tensor, Tensor, Tensor]:
    """One AdaFocal update of the signed per-bin ``gammas`` (M,) from validation data.

    The validation top-label confidences are split into ``M`` equal-mass bins, the binning of
    :func:`focalcal.metrics.reliability_data` (``binning="mass"``); each bin's gap
    ``E_b = C_b - A_b`` (mean confidence minus accuracy, 0 for an empty bin) updates ``gamma_b``
    as described in :class:`focalcal.losses.AdaFocalLoss`, and the new bin edges are the
    validation bins' edges (edge ``b`` is the smallest confidence of bin ``b``), so that training
    samples are looked up with the same boundaries.

    Returns
    -------
    (gammas, bin_edges, gaps) : Tensor (M,), Tensor (M+1,), Tensor (M,)
        float64 on the CPU.
    """
    batch = prepare(val_logits, val_labels, ignore_index, "mean", min_samples=1)
    x, t = batch.selected()
    m = gammas.numel()
    rd = reliability_data(logits=x.detach().to(torch.float64).cpu(), labels=t.cpu(), n_bins=m, binning="mass")
    gap = torch.where(rd.counts > 0, rd.gap, torch.zeros_like(rd.gap))
    g = gammas.detach().to(torch.float64).cpu()
    nxt = torch.where(g > 0, g * torch.exp(lamda * gap), g * torch.exp(-lamda * gap))
    small = nxt.abs() < switch_pt
    nxt = torch.where(small, torch.where(nxt > 0, -switch_pt, switch_pt).to(nxt.dtype), nxt)
    return nxt.clamp(gamma_min, gamma_max), rd.edges, gap
