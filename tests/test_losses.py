"""Training losses (focalcal.losses) against direct formulas, autograd and the papers' claims.

Oracles: literal per-sample loops of each paper's formula, torch.nn.CrossEntropyLoss (and its
``label_smoothing``), torch.autograd.gradcheck in float64, exact Hessians from
torch.autograd.functional.hessian, the exact empirical selective-risk weights of
focalcal_book.selective, and hand-computed tiny cases.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from focalcal import losses as L
from focalcal import metrics as M
from focalcal import scores
from focalcal.losses import _core
from focalcal.metrics.kernel import BANDWIDTH_GRID
from focalcal_book import selective as S


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rand_batch(n=40, k=6, seed=0, dtype=torch.float64, scale=2.0):
    x = torch.randn(n, k, generator=gen(seed), dtype=dtype) * scale
    t = torch.randint(0, k, (n,), generator=gen(seed + 1))
    return x, t


def probs(x):
    return F.softmax(x.to(torch.float64), dim=1)


def reduce_(v, reduction):
    return {"mean": v.mean(), "sum": v.sum(), "none": v}[reduction]


# --------------------------------------------------------------------------------------------
# direct (slow) formulas: one loop iteration per sample
# --------------------------------------------------------------------------------------------

def slow_focal(x, t, gamma, inverse=False):
    p = probs(x)
    sgn = 1.0 if inverse else -1.0
    return torch.stack([-(1 + sgn * p[i, t[i]]) ** gamma * torch.log(p[i, t[i]]) for i in range(len(t))])


def slow_flsd(x, t, schedule):
    p = probs(x)
    out = []
    for i in range(len(t)):
        pt = float(p[i, t[i]])
        g = next(g for th, g in schedule if pt < th) if pt < schedule[-1][0] else schedule[-1][1]
        out.append(-(1 - p[i, t[i]]) ** g * torch.log(p[i, t[i]]))
    return torch.stack(out)


def slow_dual(x, t, gamma, variant):
    p = probs(x)
    out = []
    for i in range(len(t)):
        py = p[i, t[i]]
        if variant == "paper":
            pj = max(p[i, k] for k in range(p.shape[1]) if k != t[i])
        else:
            below = [p[i, k] for k in range(p.shape[1]) if p[i, k] < py]
            pj = max(below) if below else 0.0
        out.append(-(1 - py + pj) ** gamma * torch.log(py))
    return torch.stack(out)


def slow_mmce(x, t, weighted, width=0.4):
    p = probs(x)
    r, pred = p.max(1)
    c = (pred == t).double()
    n = len(t)
    k = lambda a, b: math.exp(-abs(a - b) / width)  # noqa: E731
    if not weighted:
        s = sum((c[i] - r[i]) * (c[j] - r[j]) * k(r[i], r[j]) for i in range(n) for j in range(n)) / n**2
        return math.sqrt(float(s) + 1e-10)
    C = [i for i in range(n) if c[i] == 1]
    I = [i for i in range(n) if c[i] == 0]  # noqa: E741
    if not C or not I:
        return 0.0
    m, q = len(C), len(I)
    s = sum((1 - r[i]) * (1 - r[j]) * k(r[i], r[j]) for i in C for j in C) / m**2
    s += sum(r[i] * r[j] * k(r[i], r[j]) for i in I for j in I) / q**2
    s -= 2 * sum((1 - r[i]) * r[j] * k(r[i], r[j]) for i in C for j in I) / (m * q)
    return math.sqrt(float(s) + 1e-10)


def slow_ece_kde(x, t, h, p_norm, mode):
    pr = probs(x).numpy()
    n, kk = pr.shape
    tt = t.numpy()
    err = []
    for j in range(n):
        w, num = 0.0, np.zeros(kk) if mode == "canonical" else 0.0
        for i in range(n):
            if i == j:
                continue
            if mode == "canonical":
                kern = stats.dirichlet(pr[i] / h + 1).pdf(pr[j])
                num = num + kern * np.eye(kk)[tt[i]]
            else:
                ri = pr[i].max()
                kern = stats.beta(ri / h + 1, (1 - ri) / h + 1).pdf(pr[j].max())
                num = num + kern * float(pr[i].argmax() == tt[i])
            w += kern
        if mode == "canonical":
            err.append(np.sum(np.abs(num / w - pr[j]) ** p_norm))
        else:
            err.append(abs(num / w - pr[j].max()) ** p_norm)
    return float(np.mean(err))


# --------------------------------------------------------------------------------------------
# cross-entropy: the nn.CrossEntropyLoss conventions
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch_including_ignore_index_and_shapes(reduction):
    x, t = rand_batch(30, 5, seed=2)
    t_ign = t.clone()
    t_ign[::4] = -100
    for tt in (t, t_ign):
        ref = torch.nn.CrossEntropyLoss(reduction=reduction)(x, tt)
        torch.testing.assert_close(L.cross_entropy_loss(x, tt, reduction=reduction), ref)
        torch.testing.assert_close(L.CrossEntropyLoss(reduction=reduction)(x, tt), ref)
    # a custom ignore_index inside the class range
    ref = torch.nn.CrossEntropyLoss(reduction=reduction, ignore_index=2)(x, t)
    torch.testing.assert_close(L.cross_entropy_loss(x, t, reduction=reduction, ignore_index=2), ref)
    # (N, K, d1, d2) layout and the unbatched (K,) form
    x4 = torch.randn(3, 5, 2, 4, generator=gen(3), dtype=torch.float64)
    t4 = torch.randint(0, 5, (3, 2, 4), generator=gen(4))
    t4[0, 1, 2] = -100
    torch.testing.assert_close(L.cross_entropy_loss(x4, t4, reduction=reduction),
                               F.cross_entropy(x4, t4, reduction=reduction))
    torch.testing.assert_close(L.cross_entropy_loss(x[0], t[0], reduction=reduction),
                               F.cross_entropy(x[0], t[0], reduction=reduction))


def test_all_targets_ignored():
    x, t = rand_batch(5, 3)
    t[:] = -100
    assert float(L.cross_entropy_loss(x, t, reduction="sum")) == 0.0
    assert float(L.focal_loss(x, t, 2.0, reduction="sum")) == 0.0
    assert torch.equal(L.focal_loss(x, t, 2.0, reduction="none"), torch.zeros(5, dtype=x.dtype))
    # nn.CrossEntropyLoss returns NaN here; we refuse instead of returning a silent NaN
    with pytest.raises(ValueError, match="ignore_index"):
        L.cross_entropy_loss(x, t)
    with pytest.raises(ValueError, match="ignore_index"):
        L.focal_loss(x, t, 2.0)


@pytest.mark.parametrize("name", ["focal", "flsd53", "dual_focal", "dual_focal_released", "inverse_focal",
                                  "adafocal", "brier", "label_smoothing", "flsc531"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_per_sample_losses_ignore_index_like_cross_entropy(name, reduction):
    """Ignored targets: 0 in 'none', dropped from 'sum', and 'mean' divides by the others."""
    x, t = rand_batch(24, 5, seed=7)
    t_ign = t.clone()
    t_ign[1::3] = -100
    keep = t_ign != -100
    fn = L.make_loss(name, reduction=reduction)
    full = L.make_loss(name, reduction="none")(x, t)
    out = fn(x, t_ign)
    expected = torch.where(keep, full, torch.zeros_like(full))
    if reduction == "mean":
        expected = expected.sum() / keep.sum()
    elif reduction == "sum":
        expected = expected.sum()
    torch.testing.assert_close(out, expected)
    # the (N, K, d) layout is the flattened one
    x3 = x.reshape(4, 6, 5).transpose(1, 2)
    t3 = t_ign.reshape(4, 6)
    out3 = fn(x3, t3)
    torch.testing.assert_close(out3.reshape(-1) if reduction == "none" else out3,
                               out if reduction != "none" else out)


# --------------------------------------------------------------------------------------------
# focal family against the direct formulas
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gamma", [0.0, 0.3, 1.0, 2.0, 3.0, 5.5])
def test_focal_and_inverse_focal_match_direct_formula(dtype, gamma):
    x, t = rand_batch(50, 7, seed=11, dtype=dtype, scale=3.0)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for reduction in ("mean", "sum", "none"):
        out = L.focal_loss(x, t, gamma, reduction=reduction)
        assert out.dtype == dtype
        torch.testing.assert_close(out.double(), reduce_(slow_focal(x, t, gamma), reduction), **tol)
        torch.testing.assert_close(L.inverse_focal_loss(x, t, gamma, reduction=reduction).double(),
                                   reduce_(slow_focal(x, t, gamma, inverse=True), reduction), **tol)


def test_focal_with_gamma_zero_is_cross_entropy_values_and_gradients():
    x, t = rand_batch(64, 10, seed=5)
    for reduction in ("mean", "sum", "none"):
        torch.testing.assert_close(L.focal_loss(x, t, 0.0, reduction=reduction),
                                   F.cross_entropy(x, t, reduction=reduction), rtol=1e-14, atol=1e-14)
    a = x.clone().requires_grad_()
    b = x.clone().requires_grad_()
    L.focal_loss(a, t, 0.0).backward()
    F.cross_entropy(b, t).backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-13, atol=1e-15)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-30, 30), min_size=3, max_size=3), st.integers(0, 2),
       st.floats(0.0, 6.0), st.floats(0.0, 6.0))
def test_focal_is_below_ce_decreasing_in_gamma_and_inverse_above(z, y, g1, g2):
    x = torch.tensor([z], dtype=torch.float64)
    t = torch.tensor([y])
    ce = float(F.cross_entropy(x, t))
    lo, hi = sorted((g1, g2))
    f_lo, f_hi = float(L.focal_loss(x, t, lo)), float(L.focal_loss(x, t, hi))
    assert 0.0 <= f_hi <= f_lo * (1 + 1e-12) + 1e-300 and f_lo <= ce * (1 + 1e-12)
    assert float(L.inverse_focal_loss(x, t, lo)) >= ce * (1 - 1e-12)


def test_sample_dependent_schedules_match_loops_and_presets():
    x, t = rand_batch(200, 5, seed=13, scale=1.5)
    pt = probs(x).gather(1, t[:, None]).squeeze(1)
    # the batch covers all three FLSD-532 buckets
    assert (pt < 0.2).any() and ((pt >= 0.2) & (pt < 0.5)).any() and (pt >= 0.5).any()
    for sched in (L.FLSD53, L.FLSD532, ((0.1, 4.0), (0.3, 2.5), (0.9, 1.0), (2.0, 0.5))):
        torch.testing.assert_close(L.sample_dependent_focal_loss(x, t, sched, reduction="none"),
                                   slow_flsd(x, t, sched))
    torch.testing.assert_close(L.flsd_loss(x, t, gamma_high=3.0), L.sample_dependent_focal_loss(x, t, L.FLSD53))
    torch.testing.assert_close(L.flsd_loss(x, t, gamma_high=2.0), L.sample_dependent_focal_loss(x, t, L.FLSD532))
    torch.testing.assert_close(L.make_loss("flsd53")(x, t), L.flsd_loss(x, t, 3.0))
    torch.testing.assert_close(L.make_loss("flsd532")(x, t), L.flsd_loss(x, t, 2.0))


def test_flsd_bucket_boundaries_follow_section_5_1():
    """p_t = 0.2 exactly takes gamma = 3 ([0, 0.2) -> 5), p_t = 0.5 takes gamma_high."""
    def binary_at(p):
        return torch.tensor([[math.log(p / (1 - p)), 0.0]], dtype=torch.float64), torch.tensor([0])
    for p, g in ((0.2 - 1e-9, 5.0), (0.2, 3.0), (0.5 - 1e-9, 3.0), (0.5, 2.0), (1 - 1e-12, 2.0)):
        x, t = binary_at(p)
        pt = float(probs(x)[0, 0])
        want = torch.tensor(-(1 - pt) ** g * math.log(pt), dtype=torch.float64)
        torch.testing.assert_close(L.flsd_loss(x, t, 2.0), want)


def test_prop2_schedule_gives_mukhoti_gammas():
    sched = L.prop2_schedule([0.2, 0.25])
    assert [th for th, _ in sched] == [0.2, 1.0]
    assert sched[0][1] == pytest.approx(4.850554, abs=1e-5) and sched[1][1] == pytest.approx(3.070227, abs=1e-5)
    # each gamma makes g(p0, gamma) = 1 (Prop. 2) and FLSD-53 rounds them to (5, 3)
    g = lambda p, gam: (1 - p) ** gam - gam * p * (1 - p) ** (gam - 1) * math.log(p)  # noqa: E731
    assert g(0.2, sched[0][1]) == pytest.approx(1.0, abs=1e-9) and g(0.25, sched[1][1]) == pytest.approx(1.0, abs=1e-9)
    assert [round(v) for _, v in sched] == [g_ for _, g_ in L.FLSD53]
    x, t = rand_batch(30, 4, seed=3)
    assert torch.isfinite(L.sample_dependent_focal_loss(x, t, sched))
    for bad in ([], [0.3, 0.2], [0.6], ["a"]):
        with pytest.raises(ValueError, match="thresholds"):
            L.prop2_schedule(bad)


def test_epoch_scheduled_focal():
    assert [L.focal_gamma_at_epoch(e) for e in (0, 99, 100, 249, 250, 349)] == [5, 5, 3, 3, 1, 1]
    assert L.focal_gamma_at_epoch(300, (5.0, 3.0, 2.0)) == 2.0
    x, t = rand_batch(20, 4)
    m = L.make_loss("flsc531")
    for e, g in ((0, 5.0), (150, 3.0), (300, 1.0)):
        m.set_epoch(e)
        assert m.gamma == g
        torch.testing.assert_close(m(x, t), L.focal_loss(x, t, g))
        torch.testing.assert_close(L.scheduled_focal_loss(x, t, e), L.focal_loss(x, t, g))
    assert L.make_loss("flsc532").gammas == (5.0, 3.0, 2.0)
    short = L.make_loss("flsc531", total_epochs=35)
    assert short.milestones == (10, 25)
    with pytest.raises(ValueError, match="epoch"):
        m.set_epoch(-1)
    with pytest.raises(ValueError, match="gammas must have one entry more"):
        L.ScheduledFocalLoss(gammas=(5.0, 3.0), milestones=(1, 2))
    with pytest.raises(ValueError, match="milestones"):
        L.ScheduledFocalLoss(milestones=(250, 100))


# --------------------------------------------------------------------------------------------
# dual focal: paper vs released
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("variant", ["paper", "released"])
def test_dual_focal_matches_direct_formula(dtype, variant):
    x, t = rand_batch(60, 6, seed=17, dtype=dtype, scale=2.5)
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for gamma in (0.0, 0.5, 2.0, 5.0):
        out = L.dual_focal_loss(x, t, gamma, variant=variant, reduction="none")
        torch.testing.assert_close(out.double(), slow_dual(x, t, gamma, variant), **tol)


def test_dual_focal_variants_on_a_hand_case():
    """p = (0.5, 0.3, 0.2), target 1: paper 1.2^g, released 0.9^g, Zhou's eq. 26 would give 0.7^g."""
    x = torch.log(torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64))
    t = torch.tensor([1])
    g = 3.0
    assert float(L.dual_focal_loss(x, t, g)) == pytest.approx(-(1.2 ** g) * math.log(0.3), rel=1e-12)
    released = float(L.dual_focal_loss(x, t, g, variant="released"))
    assert released == pytest.approx(-(0.9 ** g) * math.log(0.3), rel=1e-12)
    # target is the smallest probability: the released weight is the focal one (eq. 26 holds)
    t2 = torch.tensor([2])
    torch.testing.assert_close(L.dual_focal_loss(x, t2, g, variant="released"), L.focal_loss(x, t2, g))
    # correctly classified: both variants use the runner-up
    t0 = torch.tensor([0])
    torch.testing.assert_close(L.dual_focal_loss(x, t0, g), L.dual_focal_loss(x, t0, g, variant="released"))


def test_dual_focal_binary_misclassified_is_focal_when_released():
    x, t = rand_batch(200, 2, seed=19)
    wrong = x.argmax(1) != t
    rel = L.dual_focal_loss(x, t, 4.0, variant="released", reduction="none")
    torch.testing.assert_close(rel[wrong], L.focal_loss(x, t, 4.0, reduction="none")[wrong])
    assert bool((rel[wrong] < L.dual_focal_loss(x, t, 4.0, reduction="none")[wrong]).all())


# --------------------------------------------------------------------------------------------
# AdaFocal
# --------------------------------------------------------------------------------------------

def test_adafocal_loss_with_signed_bins_matches_loop():
    x, t = rand_batch(120, 4, seed=23, scale=1.5)
    edges = torch.tensor([0.0, 0.3, 0.6, 0.8, 1.0], dtype=torch.float64)
    gammas = torch.tensor([2.0, -0.5, 1.5, -3.0], dtype=torch.float64)
    p = probs(x)
    ref = []
    for i in range(len(t)):
        pt = float(p[i, t[i]])
        b = 0 if pt < 0.3 else 1 if pt < 0.6 else 2 if pt < 0.8 else 3
        g = float(gammas[b])
        w = (1 - pt) ** g if g >= 0 else (1 + pt) ** (-g)
        ref.append(-w * math.log(pt))
    out = L.adafocal_loss(x, t, edges, gammas, reduction="none")
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)


def test_adafocal_update_rule():
    m = L.AdaFocalLoss(n_bins=3, lamda=2.0, gamma_initial=1.0, gamma_max=4.0, switch_pt=0.2)
    n = 300
    val = torch.randn(n, 5, generator=gen(29), dtype=torch.float64) * 2
    lab = torch.randint(0, 5, (n,), generator=gen(30))
    gap = m.update(val, lab)
    conf, pred = probs(val).max(1)
    acc = (pred == lab).double()
    order = torch.argsort(conf)
    # equal mass: three groups of 100 sorted confidences
    for b in range(3):
        idx = order[100 * b:100 * (b + 1)]
        assert float(gap[b]) == pytest.approx(float(conf[idx].mean() - acc[idx].mean()), abs=1e-12)
    expected = torch.clamp(torch.exp(2.0 * gap), max=4.0)
    expected = torch.where(expected.abs() < 0.2, torch.full_like(expected, -0.2), expected)
    torch.testing.assert_close(m.gammas, expected)
    srt = torch.sort(conf).values
    torch.testing.assert_close(m.bin_edges, torch.stack([torch.tensor(0.0, dtype=torch.float64), srt[100], srt[200],
                                                         torch.tensor(1.0, dtype=torch.float64)]))
    # the multiplicative rule, the switch at |gamma| < switch_pt and the clipping, by hand
    m.gammas.copy_(torch.tensor([0.25, -0.25, 3.9], dtype=torch.float64))
    m.bin_edges.copy_(torch.tensor([0.0, 0.4, 0.7, 1.0], dtype=torch.float64))
    conf_val = torch.tensor([0.55, 0.6, 0.7, 0.8, 0.9, 0.95], dtype=torch.float64)
    logits = torch.stack([torch.log(conf_val), torch.log1p(-conf_val)], 1)  # class 0 is the argmax
    labels = torch.tensor([1, 1, 0, 0, 0, 0])  # bin 0 wrong: gap = C; bins 1, 2 right: gap = C - 1
    gap = m.update(logits, labels)
    torch.testing.assert_close(gap, torch.tensor([0.575, 0.75 - 1, 0.925 - 1], dtype=torch.float64))
    g0 = 0.25 * math.exp(2 * 0.575)          # > 0: multiplicative, stays focal
    g1 = -0.25 * math.exp(-2 * (0.75 - 1))   # < 0: exp(-lamda E): under-confident -> more inverse focal
    g2 = 3.9 * math.exp(2 * (0.925 - 1))     # shrinks but stays above the switch
    torch.testing.assert_close(m.gammas, torch.tensor([g0, g1, g2], dtype=torch.float64))
    m.gammas.copy_(torch.tensor([0.21, -0.21, 3.0], dtype=torch.float64))
    m.update(logits, torch.tensor([0, 0, 1, 1, 1, 1]))  # bin 0 under-confident, bins 1-2 over-confident
    # 0.21 exp(2 (0.575 - 1)) < 0.2 -> switches to -0.2 (inverse focal); -0.21 exp(-2 * 0.75) -> +0.2;
    # 3 exp(2 * 0.925) = 19.1 is clipped to gamma_max = 4
    torch.testing.assert_close(m.gammas, torch.tensor([-0.2, 0.2, 4.0], dtype=torch.float64))
    # state lives in buffers
    sd = m.state_dict()
    m2 = L.AdaFocalLoss(n_bins=3)
    m2.load_state_dict(sd)
    torch.testing.assert_close(m2.gammas, m.gammas)
    x, t = rand_batch(40, 2)
    torch.testing.assert_close(m2(x, t), L.adafocal_loss(x, t, m.bin_edges, m.gammas))


def test_adafocal_update_uses_the_metrics_equal_mass_bins():
    """AdaFocal's validation bins are focalcal.metrics' equal-mass bins (ties share a bin),
    including ignored targets and more bins than the data fill."""
    val = torch.randn(103, 3, generator=gen(31), dtype=torch.float64).round()  # many tied confidences
    lab = torch.randint(0, 3, (103,), generator=gen(32))
    for n_bins in (4, 150):
        m = L.AdaFocalLoss(n_bins=n_bins)
        lab_ign = lab.clone()
        lab_ign[::10] = -100
        gap = m.update(val, lab_ign)
        keep = lab_ign != -100
        rd = M.reliability_data(logits=val[keep], labels=lab[keep], n_bins=n_bins, binning="mass")
        torch.testing.assert_close(m.bin_edges, rd.edges)
        torch.testing.assert_close(gap, torch.where(rd.counts > 0, rd.gap, torch.zeros_like(rd.gap)))


def test_adafocal_defaults_and_errors():
    m = L.make_loss("adafocal")
    assert m.n_bins == 15 and m.gamma_min == -20.0 and float(m.gammas[0]) == 1.0
    assert L.AdaFocalLoss(gamma_min=-2.0).gamma_min == -2.0
    x, t = rand_batch(30, 3)
    torch.testing.assert_close(m(x, t), L.focal_loss(x, t, 1.0))  # gamma_initial everywhere
    for kw in ({"gamma_initial": 0.1}, {"gamma_min": 1.0}, {"n_bins": 0}, {"switch_pt": 0.0}, {"lamda": -1.0}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            L.AdaFocalLoss(**kw)
    with pytest.raises(ValueError, match="bin_edges"):
        L.adafocal_loss(x, t, torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0]))


# --------------------------------------------------------------------------------------------
# Brier, label smoothing
# --------------------------------------------------------------------------------------------

def test_brier_matches_direct_formula():
    x, t = rand_batch(40, 5, seed=31)
    p = probs(x)
    ref = torch.stack([sum((p[i, k] - float(k == t[i])) ** 2 for k in range(5)) for i in range(40)])
    for reduction in ("mean", "sum", "none"):
        torch.testing.assert_close(L.brier_loss(x, t, reduction=reduction), reduce_(ref, reduction))


def test_label_smoothing_matches_formula_and_torch_convention():
    x, t = rand_batch(40, 5, seed=37)
    a = 0.1
    logp = F.log_softmax(x, 1)
    ref = torch.stack([-sum(((1 - a) if k == t[i] else a / 4) * logp[i, k] for k in range(5)) for i in range(40)])
    torch.testing.assert_close(L.label_smoothing_loss(x, t, a, reduction="none"), ref)
    # PyTorch spreads a'/K over all classes: a' = a K / (K - 1) gives the same targets
    torch.testing.assert_close(L.label_smoothing_loss(x, t, a), F.cross_entropy(x, t, label_smoothing=a * 5 / 4))
    torch.testing.assert_close(L.label_smoothing_loss(x, t, 0.0), F.cross_entropy(x, t))
    with pytest.raises(ValueError, match="alpha"):
        L.label_smoothing_loss(x, t, 0.9)  # > (K-1)/K = 0.8
    with pytest.raises(ValueError, match="alpha"):
        L.LabelSmoothingLoss(alpha=1.5)


@pytest.mark.parametrize("gamma", [0.0, 1.0, 2.0, 3.5])
def test_focal_loss_with_label_smoothing_matches_formula(gamma):
    """Charoenphakdee et al.'s "LS" paradigm: the focal loss against the smoothed target, value and
    gradient against the direct float64 formula; gamma = 0 is label_smoothing_loss, a = 0 the focal loss."""
    x, t = rand_batch(40, 5, seed=43)
    x = x.double().requires_grad_(True)
    a = 0.1
    p = torch.softmax(x, 1)
    s = torch.full_like(p, a / 4).scatter(1, t.unsqueeze(1), 1 - a)
    ref = -(s * (1 - p) ** gamma * torch.log(p)).sum(1)
    out = L.focal_loss(x, t, gamma, label_smoothing=a, reduction="none")
    torch.testing.assert_close(out, ref)
    g_out, = torch.autograd.grad(out.sum(), x)
    g_ref, = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(g_out, g_ref)
    module = L.FocalLoss(gamma, label_smoothing=a)
    torch.testing.assert_close(module(x, t), ref.mean())
    assert "label_smoothing=0.1" in repr(module)
    torch.testing.assert_close(L.focal_loss(x, t, gamma, label_smoothing=0.0), L.focal_loss(x, t, gamma))
    if gamma == 0.0:
        torch.testing.assert_close(L.focal_loss(x, t, 0.0, label_smoothing=a), L.label_smoothing_loss(x, t, a))


def test_focal_loss_with_label_smoothing_on_extreme_and_low_precision_input():
    z = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 0.0], [0.0, 0.0, 0.0]], requires_grad=True)
    y = torch.tensor([0, 0, 2])
    out = L.focal_loss(z, y, 3.0, label_smoothing=0.1)
    out.backward()
    assert torch.isfinite(out) and torch.isfinite(z.grad).all()
    x, t = rand_batch(30, 4, seed=47)
    ref = L.focal_loss(x.double(), t, 2.0, label_smoothing=0.2)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        assert float(L.focal_loss(x.to(dtype), t, 2.0, label_smoothing=0.2)) == pytest.approx(float(ref), rel=2e-2)
    ignored = t.clone()
    ignored[:5] = -100
    torch.testing.assert_close(L.focal_loss(x, ignored, 2.0, label_smoothing=0.2),
                               L.focal_loss(x[5:], t[5:], 2.0, label_smoothing=0.2))
    with pytest.raises(TypeError, match="label_smoothing"):
        L.focal_loss(x, t, 2.0, label_smoothing="0.1")
    with pytest.raises(ValueError, match="label_smoothing"):
        L.focal_loss(x, t, 2.0, label_smoothing=0.8)  # > (K-1)/K = 0.75
    with pytest.raises(ValueError, match="label_smoothing"):
        L.FocalLoss(label_smoothing=-0.1)


# --------------------------------------------------------------------------------------------
# MMCE and KDE-XE
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("weighted", [True, False])
def test_mmce_matches_double_loop(weighted):
    x, t = rand_batch(25, 4, seed=41, scale=1.5)
    assert float(M.mmce(x, t, weighted=weighted)) == pytest.approx(slow_mmce(x, t, weighted), rel=1e-10)
    lam = 2.0
    out = L.mmce_loss(x, t, lam, weighted=weighted, reduction="none")
    torch.testing.assert_close(out, F.cross_entropy(x, t, reduction="none") + lam * slow_mmce(x, t, weighted))
    torch.testing.assert_close(L.mmce_loss(x, t, lam, weighted=weighted), out.mean())
    torch.testing.assert_close(L.mmce_loss(x, t, lam, weighted=weighted, reduction="sum"), out.sum())


def test_weighted_mmce_is_zero_when_a_group_is_empty():
    x = torch.tensor([[3.0, 0.0], [0.0, 2.0], [1.0, 0.5]], dtype=torch.float64)
    t = x.argmax(1)  # all correct
    assert float(M.mmce(x, t, weighted=True)) == 0.0
    assert float(M.mmce(x, t, weighted=False)) > 0.0


@pytest.mark.parametrize("mode", ["canonical", "top_label"])
@pytest.mark.parametrize("p_norm", [1.0, 2.0])
def test_ece_kde_matches_scipy_densities(mode, p_norm):
    x, t = rand_batch(18, 3, seed=43, scale=1.0)
    h = 0.2
    assert float(M.ece_kde(x, t, bandwidth=h, p=p_norm, mode=mode)) == pytest.approx(
        slow_ece_kde(x, t, h, p_norm, mode), rel=1e-8)
    lam = 0.3
    out = L.kde_xe_loss(x, t, lam, bandwidth=h, p=p_norm, mode=mode, reduction="none")
    torch.testing.assert_close(out, F.cross_entropy(x, t, reduction="none") + lam * slow_ece_kde(x, t, h, p_norm, mode))


def test_kde_bandwidth_maximises_leave_one_out_likelihood():
    x, _ = rand_batch(15, 3, seed=47, scale=1.0)
    pr = probs(x).numpy()
    grid = (0.01, 0.05, 0.1, 0.3, 1.0)

    def loo(h):
        return sum(np.log(np.mean([stats.dirichlet(pr[i] / h + 1).pdf(pr[j]) for i in range(15) if i != j]))
                   for j in range(15))
    assert M.kde_bandwidth(x, grid=grid) == grid[int(np.argmax([loo(h) for h in grid]))]
    assert M.kde_bandwidth(x) in BANDWIDTH_GRID
    t = torch.randint(0, 3, (15,), generator=gen(1))
    torch.testing.assert_close(L.kde_xe_loss(x, t), L.kde_xe_loss(x, t, bandwidth=M.kde_bandwidth(x)))


# --------------------------------------------------------------------------------------------
# AURC and the selective-risk loss
# --------------------------------------------------------------------------------------------

def test_confidence_scores_are_the_metrics_scores():
    """One module of confidence scores: the losses' differentiable scores are the metrics' scores,
    all three in [0, 1] (the negative entropy rescaled from [-log K, 0])."""
    x, _ = rand_batch(30, 5, seed=53)
    p = probs(x)
    logp = F.log_softmax(x, 1)
    top2 = p.topk(2, 1).values
    torch.testing.assert_close(scores.from_log_probs(logp, "msp"), p.max(1).values)
    torch.testing.assert_close(scores.from_log_probs(logp, "margin"), top2[:, 0] - top2[:, 1])
    torch.testing.assert_close(scores.from_log_probs(logp, "neg_entropy"), 1 + (p * p.log()).sum(1) / math.log(5))
    for score in L.SCORES:
        torch.testing.assert_close(scores.from_log_probs(logp, score), M.confidence_score(logits=x, score=score))
        # the AURC loss ranks by the same key as metrics.aurc
        torch.testing.assert_close(scores.ranking_key(logp, score).argsort(),
                                   scores.from_log_probs(logp, score).argsort())
    with pytest.raises(ValueError, match="score"):
        scores.from_log_probs(logp, "energy")


@pytest.mark.parametrize("score", L.SCORES)
def test_aurc_loss_is_the_empirical_aurc_of_the_cross_entropy(score):
    x, t = rand_batch(40, 5, seed=59)
    ce = F.cross_entropy(x, t, reduction="none")
    g = scores.from_log_probs(F.log_softmax(x, 1), score)
    order = torch.argsort(g, descending=True)
    # (1/N) sum_k (mean CE of the k most confident): the area under the risk-coverage curve
    aurc = sum(float(ce[order[:k]].mean()) for k in range(1, 41)) / 40
    assert float(L.aurc_loss(x, t, score=score)) == pytest.approx(aurc, rel=1e-12)
    # the 'log' weights -ln(1 - r/(N+1)) for ascending rank r
    rank = torch.empty(40, dtype=torch.float64)
    rank[torch.argsort(g)] = torch.arange(1, 41, dtype=torch.float64)
    torch.testing.assert_close(L.aurc_loss(x, t, score=score, weights="log", reduction="none"),
                               -torch.log(1 - rank / 41) * ce)


def slow_selective_weights(s, tau, nu, n_bins):
    n = len(s)
    counts = np.zeros(n_bins)
    for v in s:
        counts[min(int(v * n_bins), n_bins - 1)] += 1
    centres = (np.arange(n_bins) + 0.5) / n_bins

    def G(v):
        val = sum(counts[k] / (1 + math.exp(-(v - centres[k]) / nu)) for k in range(n_bins)) / n
        return min(max(val, 1 / (n + 1)), n / (n + 1))
    return np.array([-math.log(1 - G(tau)) if v >= tau else -math.log(1 - G(v)) for v in s])


def test_selective_weights_match_eq_15_16_loop():
    s = torch.rand(60, generator=gen(61), dtype=torch.float64)
    for cov, nu, bins in ((0.5, 0.1, 8), (0.9, 0.02, 16), (1.0, 0.05, 5)):
        k = math.ceil(cov * 60)
        tau = float(torch.sort(s).values[k - 1])
        ref = slow_selective_weights(s.numpy(), tau, nu, bins)
        beta = L.selective_risk_weights(s, coverage=cov, nu=nu, n_bins=bins)
        np.testing.assert_allclose(beta.numpy(), ref, rtol=1e-12)
    ref = slow_selective_weights(s.numpy(), 0.4, 0.05, 10)
    np.testing.assert_allclose(L.selective_risk_weights(s, threshold=0.4, nu=0.05, n_bins=10).numpy(), ref, rtol=1e-12)


def test_selective_weights_against_prop_4_6_and_eq_11():
    """Uniform scores: G(s) = s. Eq. 12 (Prop. 4.6) is -ln(1 - min(s, tau)); the exact empirical
    eq. 11 is that divided by G(tau) = kappa (the normalisation the proof drops)."""
    n, kappa = 4000, 0.6
    s = torch.rand(n, generator=gen(67), dtype=torch.float64)
    beta = L.selective_risk_weights(s, coverage=kappa, nu=1e-4, n_bins=2000)
    tau = float(torch.kthvalue(s, math.ceil(kappa * n)).values)
    prop46 = -torch.log1p(-torch.clamp(s, max=tau))
    assert float((beta - prop46).abs().max()) < 0.02
    exact = S.selective_weights(s, tau)  # eq. 11 on the empirical measure (sorting)
    cond = L.selective_risk_weights(s, coverage=kappa, nu=1e-4, n_bins=2000, conditional=True)
    assert float(((cond - exact).abs() / exact).median()) < 0.02
    ratio = (beta / exact)[s >= tau]
    assert float(ratio.mean()) == pytest.approx(kappa, abs=0.01)


def test_selective_weights_direct_double_sum_small():
    """Eq. 11 written as the literal double sum for a small sample (no sorting anywhere)."""
    s = torch.rand(300, generator=gen(71), dtype=torch.float64)
    kappa = 0.5
    tau = float(torch.kthvalue(s, 150).values)
    low = [j for j in range(300) if s[j] < tau]
    acc = {j: float((s >= s[j]).double().mean()) for j in low}
    direct = np.array([np.mean([float(s[i] >= s[j]) / acc[j] for j in low]) for i in range(300)])
    cond = L.selective_risk_weights(s, coverage=kappa, nu=1e-5, n_bins=600, conditional=True).numpy()
    assert np.median(np.abs(cond - direct) / direct) < 0.05


def test_selective_risk_loss_is_weighted_cross_entropy_without_sorting(monkeypatch):
    x, t = rand_batch(80, 6, seed=73)
    for score in L.SCORES:
        logp = F.log_softmax(x, 1)
        beta = L.selective_risk_weights(scores.from_log_probs(logp, score), coverage=0.7, nu=0.05, n_bins=32)
        out = L.selective_risk_loss(x, t, score=score, coverage=0.7, nu=0.05, n_bins=32, reduction="none")
        torch.testing.assert_close(out, beta * F.cross_entropy(x, t, reduction="none"))

    def no_sort(*a, **k):
        raise AssertionError("the selective-risk loss must not sort")
    for name in ("sort", "argsort", "quantile", "topk"):
        monkeypatch.setattr(torch, name, no_sort)
        monkeypatch.setattr(torch.Tensor, name, no_sort)
    xx = x.clone().requires_grad_()
    L.selective_risk_loss(xx, t, score="msp").backward()
    assert torch.isfinite(xx.grad).all()


def test_selective_weights_gradient_flows_below_tau_only():
    s = torch.rand(50, generator=gen(79), dtype=torch.float64).requires_grad_()
    beta = L.selective_risk_weights(s, threshold=0.5, nu=0.05, n_bins=16)
    beta.sum().backward()
    assert bool((s.grad[s.detach() >= 0.5] == 0).all()) and bool((s.grad[s.detach() < 0.5] > 0).all())


# --------------------------------------------------------------------------------------------
# the selective-risk loss's variants: as printed, as released, with detached weights
# --------------------------------------------------------------------------------------------

def paper_selective_reference(x, t, *, coverage=None, threshold=None, nu, n_bins, detached=False):
    """Eqs. 13-17 written per sample in float64, with the gradient of eq. 27: tau, the counts and
    G(tau) are constants; a sample at or above tau gets the constant weight."""
    logp = torch.log_softmax(x, 1)
    ce = -logp[torch.arange(len(t)), t]
    g = logp.exp().max(1).values
    n = len(g)
    gd = [float(v) for v in g.detach()]
    tau = sorted(gd)[math.ceil(coverage * n) - 1] if threshold is None else threshold
    counts = [0.0] * n_bins
    for v in gd:
        counts[min(int(v * n_bins), n_bins - 1)] += 1

    def G(s):
        val = sum(counts[k] * torch.sigmoid((s - (k + 0.5) / n_bins) / nu) for k in range(n_bins)) / n
        return val.clamp(1 / (n + 1), n / (n + 1))
    beta = []
    for i in range(n):
        if gd[i] >= tau:
            beta.append(-torch.log(1 - G(torch.tensor(tau, dtype=x.dtype))))
        else:
            beta.append(-torch.log(1 - G(g[i])))
    beta = torch.stack(beta)
    return ((beta.detach() if detached else beta) * ce).mean()


def released_selective_reference(batches, *, coverage, nu, n_bins, score="msp"):
    """What the released SelectiveAULoss computes, written again from its description: scores of
    the clamped softmax passed through a second softmax, a histogram with bucketize on
    linspace(0, 1, n_bins + 1) accumulated over the batches, tau = torch.quantile (with gradient),
    G clamped to [1/(N+1), N/(N+1)], alpha = where(g >= tau, -log(1 - G(tau)), -log(1 - G(g))).
    Returns the mean loss of every batch in turn."""
    edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)
    centres = (edges[:-1] + edges[1:]) / 2
    counts, total, out = torch.zeros(n_bins, dtype=torch.float64), 0, []
    for x, t in batches:
        n, k = x.shape
        p = torch.softmax(x, 1).clamp(1e-9, 1 - 1e-9)
        q = torch.softmax(p, 1)
        if score == "msp":
            g = q.max(1).values
        elif score == "margin":
            top = q.topk(2, 1).values
            g = top[:, 0] - top[:, 1]
        else:
            neg_h = (p * torch.log(p)).sum(1)
            g = ((neg_h - math.log(k)) / (0 - math.log(k))).clamp(0, 1)
        idx = (torch.bucketize(g.detach(), edges, right=True) - 1).clamp(0, n_bins - 1)
        counts = counts + torch.bincount(idx, minlength=n_bins).double()
        total += n

        def G(s):
            val = (torch.sigmoid((s.reshape(-1, 1) - centres) / nu) * counts).sum(1) / total
            return val.clamp(1 / (n + 1), n / (n + 1))
        tau = torch.quantile(g, coverage)
        alpha = torch.where(g >= tau, -torch.log(1 - G(tau)), -torch.log(1 - G(g)))
        out.append((F.cross_entropy(x, t, reduction="none") * alpha).mean())
    return out


@pytest.mark.parametrize("detached", [False, True])
def test_selective_paper_variant_matches_eqs_13_17_and_27(detached):
    variant = "detached" if detached else "paper"
    x, t = rand_batch(30, 5, seed=201, scale=1.5)
    for kw in ({"coverage": 0.6, "nu": 0.1, "n_bins": 16}, {"threshold": 0.5, "nu": 0.05, "n_bins": 8}):
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        got = L.selective_risk_loss(xa, t, variant=variant, **kw)
        want = paper_selective_reference(xb, t, detached=detached, **kw)
        assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-12)
        got.backward()
        want.backward()
        torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-10, atol=1e-12)
    # finite differences (a fixed tau: eq. 27 differentiates with tau held constant); the detached
    # variant's gradient is by design not its value's (the reference above checks it)
    xx = x[:12].clone().requires_grad_()
    f = lambda a: L.selective_risk_loss(a, t[:12], threshold=0.5, nu=0.05, n_bins=8, variant=variant)  # noqa: E731
    if not detached:
        assert torch.autograd.gradcheck(f, (xx,), eps=1e-6, atol=1e-8)
    else:  # the weight part is missing: the detached gradient differs from the paper's
        f(xx).backward()
        g = xx.grad.clone()
        xx.grad = None
        L.selective_risk_loss(xx, t[:12], threshold=0.5, nu=0.05, n_bins=8).backward()
        assert float((g - xx.grad).abs().max()) > 1e-3


@pytest.mark.parametrize("score", ["msp", "margin", "neg_entropy"])
def test_selective_released_variant_matches_the_released_computation(score):
    (x1, t1), (x2, t2) = rand_batch(24, 10, seed=211, scale=2.0), rand_batch(24, 10, seed=213, scale=0.5)
    kw = {"coverage": 0.7, "nu": 0.05, "n_bins": 64}
    # the function: the batch alone
    xa, xb = x2.clone().requires_grad_(), x2.clone().requires_grad_()
    got = L.selective_risk_loss(xa, t2, score=score, variant="released", **kw)
    (want,) = released_selective_reference([(xb, t2)], score=score, **kw)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-9)
    got.backward()
    want.backward()
    torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-8, atol=1e-11)
    # the module: the histogram of both batches, the released default nu = 0.05
    m = L.SelectiveRiskLoss(score=score, coverage=0.7, variant="released")
    assert m.nu == 0.05 and L.make_loss("selective_risk", variant="released").nu == 0.05
    want = released_selective_reference([(x1, t1), (x2, t2)], score=score, **kw)
    got = [m(x1, t1), m(x2, t2)]
    assert [float(v) for v in got] == pytest.approx([float(v.detach()) for v in want], rel=1e-9)
    assert float(got[1]) != pytest.approx(float(L.selective_risk_loss(x2, t2, score=score, variant="released", **kw)),
                                          rel=1e-6) or score == "neg_entropy"
    # set_epoch clears it: the next call is the function's (the batch alone)
    m.set_epoch(1)
    assert float(m(x2, t2)) == pytest.approx(float(L.selective_risk_loss(x2, t2, score=score, variant="released",
                                                                         **kw)), rel=1e-12)


def test_selective_released_gradient_by_finite_differences():
    (x1, t1), (x2, t2) = rand_batch(12, 4, seed=223, scale=1.5), rand_batch(12, 4, seed=227, scale=1.5)

    def accumulated(a):  # a fresh module per call: the first batch's histogram, then a's
        m = L.SelectiveRiskLoss(coverage=0.7, nu=0.1, n_bins=8, variant="released")
        m(x1, t1)
        return m(a, t2)
    for f in (lambda a: L.selective_risk_loss(a, t2, coverage=0.7, nu=0.1, n_bins=8, variant="released"),
              accumulated,
              lambda a: L.selective_risk_loss(a, t2, score="margin", coverage=0.7, nu=0.1, n_bins=8,
                                              variant="released")):
        assert torch.autograd.gradcheck(f, (x2.clone().requires_grad_(),), eps=1e-6, atol=1e-8)


def test_selective_released_scores_and_neg_entropy():
    # MSP on softmax(softmax(z)) lies in [1/K, e/(e+K-1)]: a confident and a uniform row at its ends,
    # seen through the weights: threshold 0 puts every sample at or above tau (the constant weight)
    k = 10
    x = torch.zeros(2, k, dtype=torch.float64)
    x[0, 0] = 1e4
    t = torch.tensor([0, 3])
    p = torch.softmax(x, 1).clamp(1e-9, 1 - 1e-9)
    msp = torch.softmax(p, 1).max(1).values
    assert msp.tolist() == pytest.approx([math.e / (math.e + k - 1), 1 / k], rel=1e-8)
    # normalised negative entropy is 1 for every sample: the loss is -ln(1 - G(1)) times the CE
    x, t = rand_batch(40, k, seed=229, scale=3.0)
    xx = x.clone().requires_grad_()
    out = L.selective_risk_loss(xx, t, score="neg_entropy", variant="released", reduction="none")
    ce = F.cross_entropy(x, t, reduction="none")
    g1 = float(sum(torch.sigmoid(torch.tensor((1 - (j + 0.5) / 64) / 0.05)) for j in [63]))  # all in the last bin
    torch.testing.assert_close(out, -math.log(1 - g1) * ce)
    out.sum().backward()
    xc = x.clone().requires_grad_()
    (-math.log(1 - g1) * F.cross_entropy(xc, t, reduction="sum")).backward()
    torch.testing.assert_close(xx.grad, xc.grad)


def test_selective_weight_gradient_rewards_lowering_a_low_confidence():
    """The mechanism: below tau, d(beta_i CE_i)/dg_i = CE_i G'(g_i) / (1 - G(g_i)) > 0, so
    lowering a low-confidence sample's confidence lowers the loss; at or above tau it is 0."""
    n, nu, n_bins = 40, 0.05, 16
    s = (0.3 + 0.6 * torch.rand(n, generator=gen(233), dtype=torch.float64)).requires_grad_()
    ce = 0.1 + torch.rand(n, generator=gen(239), dtype=torch.float64)
    (L.selective_risk_weights(s, coverage=0.5, nu=nu, n_bins=n_bins) * ce).sum().backward()
    sd = s.detach()
    tau = float(torch.kthvalue(sd, 20).values)
    counts = np.bincount(np.minimum((sd.numpy() * n_bins).astype(int), n_bins - 1), minlength=n_bins)
    c = (np.arange(n_bins) + 0.5) / n_bins
    sig = 1 / (1 + np.exp(-(sd.numpy()[:, None] - c) / nu))
    G = (sig * counts).sum(1) / n
    dG = (sig * (1 - sig) / nu * counts).sum(1) / n
    below = sd.numpy() < tau
    assert below.sum() == 19 and ((G > 1 / (n + 1)) & (G < n / (n + 1)))[below].all()
    expected = ce.numpy() * dG / (1 - G)
    np.testing.assert_allclose(s.grad.numpy()[below], expected[below], rtol=1e-10)
    assert (s.grad.numpy()[below] > 0).all()
    assert (s.grad.numpy()[~below] == 0).all()


def test_selective_sample_exactly_at_tau_gets_no_weight_gradient():
    # the coverage rule puts the k-th smallest score exactly at tau; torch.minimum gave it half
    s = torch.tensor([0.45, 0.48, 0.5, 0.6, 0.8], dtype=torch.float64, requires_grad=True)
    L.selective_risk_weights(s, coverage=0.6, nu=0.05, n_bins=8).sum().backward()
    assert s.grad[2] == 0 and bool((s.grad[:2] > 0).all()) and bool((s.grad[3:] == 0).all())
    s.grad = None
    L.selective_risk_weights(s, threshold=0.5, nu=0.05, n_bins=8).sum().backward()
    assert s.grad[2] == 0 and bool((s.grad[:2] > 0).all())


@pytest.mark.parametrize("variant", ["paper", "released", "detached"])
def test_selective_variants_low_precision_and_saturated_logits(variant):
    x, t = rand_batch(64, 10, seed=251)
    ref = float(L.selective_risk_loss(x, t, variant=variant))
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        xx = x.to(dtype).requires_grad_()
        out = L.selective_risk_loss(xx, t, variant=variant)
        assert float(out) == pytest.approx(ref, rel=1e-5 if dtype == torch.float32 else 0.05)
        out.backward()
        assert xx.grad.dtype == dtype and bool(torch.isfinite(xx.grad.float()).all())
    big = (torch.randn(64, 10, generator=gen(257)) * 1e4).requires_grad_()
    for score in L.SCORES:
        out = L.selective_risk_loss(big, t, score=score, variant=variant)
        out.backward()
        assert bool(torch.isfinite(out)) and bool(torch.isfinite(big.grad).all())
    assert float(L.selective_risk_loss(x.tolist(), t.tolist(), variant=variant)) == pytest.approx(ref, rel=1e-6)


def test_selective_variant_bad_parameters():
    x, t = rand_batch(6, 3)
    with pytest.raises(ValueError, match="variant"):
        L.selective_risk_loss(x, t, variant="code")
    with pytest.raises(ValueError, match="variant"):
        L.SelectiveRiskLoss(variant="authors")
    with pytest.raises(ValueError, match="conditional"):
        L.selective_risk_loss(x, t, variant="released", conditional=True)
    with pytest.raises(ValueError, match="nu"):
        L.selective_risk_loss(x, t, variant="released", nu=0.0)
    with pytest.raises(ValueError, match="epoch"):
        L.SelectiveRiskLoss(variant="released").set_epoch(-1)


# --------------------------------------------------------------------------------------------
# gradients: gradcheck in float64
# --------------------------------------------------------------------------------------------

GRADCHECK = {
    "focal_g0.5": lambda x, t: L.focal_loss(x, t, 0.5),
    "focal_g3_sum": lambda x, t: L.focal_loss(x, t, 3.0, reduction="sum"),
    "focal_none": lambda x, t: L.focal_loss(x, t, 2.0, reduction="none"),
    "inverse_focal": lambda x, t: L.inverse_focal_loss(x, t, 2.5),
    "flsd53": lambda x, t: L.flsd_loss(x, t, 3.0),
    "flsd_custom": lambda x, t: L.sample_dependent_focal_loss(x, t, ((0.3, 0.7), (1.0, 4.0))),
    "dual_paper": lambda x, t: L.dual_focal_loss(x, t, 2.0),
    "dual_released": lambda x, t: L.dual_focal_loss(x, t, 0.7, variant="released"),
    "adafocal": lambda x, t: L.adafocal_loss(x, t, torch.tensor([0.0, 0.3, 0.6, 1.0]), torch.tensor([2.0, -1.5, 0.5])),
    "brier": L.brier_loss,
    "label_smoothing": lambda x, t: L.label_smoothing_loss(x, t, 0.1),
    "mmce_w": lambda x, t: L.mmce_loss(x, t, 2.0),
    "mmce_m": lambda x, t: L.mmce_loss(x, t, 2.0, weighted=False),
    "kde_canonical": lambda x, t: L.kde_xe_loss(x, t, 0.5, bandwidth=0.1),
    "kde_top_label": lambda x, t: L.kde_xe_loss(x, t, 0.5, bandwidth=0.1, mode="top_label", p=2.0),
    "aurc": L.aurc_loss,
    "selective_msp": lambda x, t: L.selective_risk_loss(x, t, threshold=0.6, nu=0.1, n_bins=8),
    "selective_entropy": lambda x, t: L.selective_risk_loss(x, t, score="neg_entropy", threshold=0.3, nu=0.1, n_bins=8),
    "selective_margin": lambda x, t: L.selective_risk_loss(x, t, score="margin", threshold=0.4, nu=0.1, n_bins=8),
}


@pytest.mark.parametrize("name", sorted(GRADCHECK))
def test_gradcheck_float64(name):
    x, t = rand_batch(12, 4, seed=83, scale=1.5)
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda a: GRADCHECK[name](a, t), (x,), eps=1e-6, atol=1e-7)


FUSED = {
    "focal": lambda x, t: L.focal_loss(x, t, 2.0),
    "focal_none": lambda x, t: L.focal_loss(x, t, 0.5, reduction="none").sum(),
    "inverse_focal": lambda x, t: L.inverse_focal_loss(x, t, 2.5),
    "flsd53": lambda x, t: L.flsd_loss(x, t, 3.0),
    "dual_paper": lambda x, t: L.dual_focal_loss(x, t, 2.0),
    "dual_released": lambda x, t: L.dual_focal_loss(x, t, 0.7, variant="released"),
}


def _fused_grads(x, t):
    out = {}
    for name, fn in FUSED.items():
        xx = x.clone().requires_grad_()
        fn(xx, t).backward()
        out[name] = xx.grad
    return out


def test_fused_backward_private_kernel_and_public_formula_agree(monkeypatch):
    """The fused backward runs torch's private log_softmax kernel when it works and the public
    formula g - exp(log p) rowsum(g) otherwise; both give autograd's gradient (gradcheck)."""
    x, t = rand_batch(12, 4, seed=83, scale=1.5)
    calls = []
    private = torch._log_softmax_backward_data

    def spy(*args):
        calls.append(1)
        return private(*args)

    monkeypatch.setattr(torch, "_log_softmax_backward_data", spy)
    monkeypatch.setattr(_core, "USE_PRIVATE_LOG_SOFTMAX_BACKWARD", True)
    with_kernel = _fused_grads(x, t)
    assert len(calls) == len(FUSED)
    monkeypatch.setattr(_core, "USE_PRIVATE_LOG_SOFTMAX_BACKWARD", False)
    public = _fused_grads(x, t)
    assert len(calls) == len(FUSED)  # the public path does not call the kernel
    for name in FUSED:
        torch.testing.assert_close(public[name], with_kernel[name], rtol=1e-12, atol=1e-14)
        xx = x.clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda a: FUSED[name](a, t), (xx,), eps=1e-6, atol=1e-7), name
    # against plain autograd through the direct formula
    xx = x.clone().requires_grad_()
    slow_focal(xx, t, 2.0).mean().backward()
    torch.testing.assert_close(public["focal"], xx.grad)


@pytest.mark.parametrize("broken", ["missing", "other_signature"])
def test_fused_backward_falls_back_when_the_private_kernel_fails(monkeypatch, broken):
    x, t = rand_batch(12, 4, seed=83, scale=1.5)
    monkeypatch.setattr(_core, "USE_PRIVATE_LOG_SOFTMAX_BACKWARD", False)
    want = _fused_grads(x, t)
    monkeypatch.setattr(_core, "USE_PRIVATE_LOG_SOFTMAX_BACKWARD", True)
    if broken == "missing":
        monkeypatch.delattr(torch, "_log_softmax_backward_data")
    else:
        def old_signature(grad_output, output, dim, self):  # e.g. torch 1.10 took the input tensor
            if not isinstance(self, torch.Tensor):
                raise TypeError("_log_softmax_backward_data(): argument 'self' must be Tensor")
        monkeypatch.setattr(torch, "_log_softmax_backward_data", old_signature)
    got = _fused_grads(x, t)
    assert _core.USE_PRIVATE_LOG_SOFTMAX_BACKWARD is False  # switched once, for good
    for name in FUSED:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0)


# --------------------------------------------------------------------------------------------
# saturated logits: finite values and gradients
# --------------------------------------------------------------------------------------------

ALL_BUT_HESSIAN = [n for n in L.LOSSES if n != "hessian_trace"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ALL_BUT_HESSIAN)
def test_saturated_logits_give_finite_values_and_gradients(name, dtype):
    k = 5
    x = torch.full((8, k), -1e4, dtype=dtype)
    t = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])
    x[torch.arange(8), t] = 1e4        # confidently right
    x[5] = -1e4
    x[5, 3] = 1e4                       # confidently wrong
    x[6, :] = 1e4                       # tied
    x[7] = torch.tensor([1e4, -1e4, 1e4, -1e4, 0.0], dtype=dtype)
    params = {"focal": {"gamma": 0.3}, "inverse_focal": {"gamma": 0.5}, "dual_focal": {"gamma": 0.5},
              "dual_focal_released": {"gamma": 0.5}, "kde_xe": {"bandwidth": 0.05}}.get(name, {})
    for reduction in ("mean", "none"):
        fn = L.make_loss(name, reduction=reduction, **params)
        xx = x.clone().requires_grad_()
        out = fn(xx, t)
        assert bool(torch.isfinite(out).all()), (name, out)
        out.sum().backward()
        assert bool(torch.isfinite(xx.grad).all()), (name, xx.grad)


@pytest.mark.parametrize("gamma", [0.1, 0.3, 0.5, 0.9])
def test_focal_gradient_vanishes_for_gamma_below_one_half(gamma):
    """The curvature paper's eq. 31 claims divergence at p -> 1 for gamma < 0.5; the true focal
    gradient dl/dz_t = -(1 - p) g(p, gamma) tends to 0 (and is exactly 0 when p rounds to 1)."""
    grads = []
    for margin in (2.0, 5.0, 10.0, 20.0, 40.0, 1e4):
        x = torch.tensor([[margin, 0.0]], dtype=torch.float64, requires_grad=True)
        L.focal_loss(x, torch.tensor([0]), gamma).backward()
        grads.append(abs(float(x.grad[0, 0])))
    assert all(math.isfinite(v) for v in grads)
    assert all(b <= a for a, b in zip(grads, grads[1:])) and grads[-1] == 0.0 and grads[-2] < 1e-7


def test_inverse_focal_gradient_threshold():
    g_thr, p_thr = L.inverse_focal_gamma_threshold()
    # closed form: 1 / W(1/e) at p = W(1/e)
    from scipy.special import lambertw
    w = float(np.real(lambertw(1 / math.e)))
    assert g_thr == pytest.approx(1 / w, rel=1e-9) and p_thr == pytest.approx(w, rel=1e-6)
    assert g_thr == pytest.approx(3.5911, abs=1e-4)

    def logit_grad(p, gamma):
        z = torch.tensor([[math.log(p / (1 - p)), 0.0]], dtype=torch.float64, requires_grad=True)
        L.inverse_focal_loss(z, torch.tensor([0]), gamma).backward()
        return float(z.grad[0, 0])
    grid = np.linspace(0.01, 0.99, 197)
    assert max(logit_grad(p, 3.5) for p in grid) < 0          # Zhou's "3.5" is still safe
    assert max(logit_grad(p, 3.59) for p in grid) < 0
    assert logit_grad(p_thr, 3.6) > 0 and logit_grad(p_thr, 4.0) > 0   # positive below Zhou's "4"


# --------------------------------------------------------------------------------------------
# Hessian-trace penalty
# --------------------------------------------------------------------------------------------

def _tiny_problem():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2).double()
    x = torch.randn(7, 2, generator=gen(89), dtype=torch.float64)
    y = torch.randint(0, 2, (7,), generator=gen(90))
    return model, x, y


def _exact_trace(model, x, y):
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    def f(theta):
        ps, i = {}, 0
        for n_, s in zip(names, shapes):
            ps[n_] = theta[i:i + s.numel()].reshape(s)
            i += s.numel()
        return F.cross_entropy(torch.func.functional_call(model, ps, (x,)), y)
    return torch.autograd.functional.hessian(f, flat).diagonal().sum(), f, flat


def test_hutchinson_over_all_sign_vectors_is_the_exact_trace():
    model, x, y = _tiny_problem()
    exact, _, _ = _exact_trace(model, x, y)
    params = list(model.parameters())
    d = sum(p.numel() for p in params)
    probes = []
    for signs in itertools.product((-1.0, 1.0), repeat=d):
        v = torch.tensor(signs, dtype=torch.float64)
        probes.append([v[:4].reshape(2, 2), v[4:]])
    loss = F.cross_entropy(model(x), y)
    est = L.hutchinson_trace(loss, params, probes=probes)
    assert float(est.detach()) == pytest.approx(float(exact), rel=1e-12)
    # one probe is v^T H v
    _, f, flat = _exact_trace(model, x, y)
    H = torch.autograd.functional.hessian(f, flat)
    v = torch.tensor([1.0, -1, -1, 1, 1, -1], dtype=torch.float64)
    one = L.hutchinson_trace(F.cross_entropy(model(x), y), params, probes=[[v[:4].reshape(2, 2), v[4:]]])
    assert float(one.detach()) == pytest.approx(float(v @ H @ v), rel=1e-12)


def test_hessian_trace_penalty_value_gradient_and_protocol():
    model, x, y = _tiny_problem()
    pen = L.make_loss("hessian_trace", lamda=0.5, n_probes=1500, seed=0)
    assert pen.requires_model is True
    exact, f, flat = _exact_trace(model, x, y)
    val = pen(model(x), y, model=model, inputs=x)
    ce = F.cross_entropy(model(x), y)
    assert float(val.detach()) == pytest.approx(float(ce.detach() + 0.5 * exact), rel=0.05)
    # the gradient of the penalty (a third derivative) equals that of the exact trace when all
    # sign vectors are used
    probes = []
    for signs in itertools.product((-1.0, 1.0), repeat=6):
        v = torch.tensor(signs, dtype=torch.float64)
        probes.append([v[:4].reshape(2, 2), v[4:]])
    model.zero_grad()
    L.hutchinson_trace(F.cross_entropy(model(x), y), list(model.parameters()), probes=probes).backward()
    got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    want = torch.autograd.functional.jacobian(_trace_fn(f), flat)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # logits without a graph are recomputed from inputs; a missing model is an error
    with torch.no_grad():
        z = model(x)
    assert torch.isfinite(pen(z, y, model=model, inputs=x))
    with pytest.raises(ValueError, match="model"):
        pen(model(x), y)
    with pytest.raises(ValueError, match="inputs"):
        pen(z, y, model=model)
    with pytest.raises(ValueError, match="reduction"):
        L.HessianTracePenalty(reduction="none")
    plain = L.hessian_trace_loss(model(x), y, model=model, lamda=0.0)
    assert float(plain.detach()) == pytest.approx(float(ce.detach()))


def _trace_fn(f):
    def tr(theta):
        return torch.autograd.functional.hessian(f, theta, create_graph=True).diagonal().sum()
    return tr


def test_hessian_trace_penalty_trains_a_model():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    x = torch.randn(32, 4, generator=gen(97))
    y = torch.randint(0, 3, (32,), generator=gen(98))
    pen = L.HessianTracePenalty(lamda=1e-2, seed=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first = None
    for _ in range(20):
        opt.zero_grad()
        loss = pen(model(x), y, model=model, inputs=x)
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters())
        opt.step()
        first = float(loss.detach()) if first is None else first
    assert float(F.cross_entropy(model(x), y).detach()) < first


# --------------------------------------------------------------------------------------------
# registry and input validation
# --------------------------------------------------------------------------------------------

def test_registry_names_and_factories():
    required = {"ce", "focal", "flsd53", "flsd532", "flsc531", "dual_focal", "dual_focal_released",
                "inverse_focal", "adafocal", "brier", "label_smoothing", "mmce", "kde_xe", "aurc",
                "selective_risk", "hessian_trace"}
    assert required <= set(L.LOSSES)
    x, t = rand_batch(16, 4)
    for name in L.LOSSES:
        m = L.make_loss(name)
        assert isinstance(m, torch.nn.Module)
        if name != "hessian_trace":
            assert torch.isfinite(m(x, t))
    with pytest.raises(ValueError, match="name must be one of the registered losses, got 'focall'; valid names: ce, focal"):
        L.make_loss("focall")
    with pytest.raises(ValueError, match="valid parameters: gamma, reduction, ignore_index"):
        L.make_loss("focal", gama=2.0)
    with pytest.raises(ValueError, match="schedule"):
        L.make_loss("flsd53", schedule=L.FLSD532)  # fixed by the preset
    with pytest.raises(ValueError, match="variant"):
        L.make_loss("dual_focal_released", variant="paper")
    assert L.make_loss("dual_focal_released").variant == "released"
    assert L.make_loss("focal", gamma=1.0).gamma == 1.0
    with pytest.raises(ValueError, match="gamma"):
        L.make_loss("focal", gamma=-1.0)


def test_every_registered_loss_has_one_display_name():
    # the one table of display names (the plotting colours, the lab's run labels and the released
    # networks' names read it: tests/test_plotting.py)
    assert set(L.DISPLAY_NAMES) == set(L.LOSSES)
    assert len(set(L.DISPLAY_NAMES.values())) == len(L.DISPLAY_NAMES)


@pytest.mark.parametrize("fn", [
    lambda x, t, **k: L.focal_loss(x, t, 2.0, **k), L.cross_entropy_loss, L.brier_loss,
    lambda x, t, **k: L.dual_focal_loss(x, t, 2.0, **k), L.aurc_loss, L.selective_risk_loss,
    lambda x, t, **k: L.mmce_loss(x, t, **k), lambda x, t, **k: L.kde_xe_loss(x, t, bandwidth=0.1, **k)])
def test_bad_input_raises_value_error(fn):
    x, t = rand_batch(6, 3)
    with pytest.raises(ValueError, match="reduction"):
        fn(x, t, reduction="avg")
    with pytest.raises(ValueError, match="labels must have shape"):
        fn(x, t[:5])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\]"):
        fn(x, torch.tensor([0, 1, 2, 3, 0, 1]))
    with pytest.raises(ValueError, match="labels must hold integer class indices"):
        fn(x, t.double())
    with pytest.raises(ValueError, match="logits must have at least 2 classes"):
        fn(x[:, :1], t * 0)
    with pytest.raises(ValueError, match="logits must be a floating"):
        fn(x.long(), t)
    with pytest.raises(ValueError, match="ignore_index"):
        fn(x, t, ignore_index=1.5)
    bad = x.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(ValueError, match="logits contains 1 NaN"):
        fn(bad, t)
    bad[2, 1] = float("inf")
    with pytest.raises(ValueError, match="logits"):
        fn(bad, t)


def test_bad_parameters_raise_value_error():
    x, t = rand_batch(6, 3)
    for g in (-0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="gamma"):
            L.focal_loss(x, t, g)
    with pytest.raises(TypeError, match="gamma must be a real number"):
        L.focal_loss(x, t, "a")
    with pytest.raises(ValueError, match="variant"):
        L.dual_focal_loss(x, t, 2.0, variant="code")
    for sched in ([], [(0.5, 2.0), (0.2, 1.0)], [(0.2, 5.0), (0.9, 3.0)], [(0.2, -1.0), (1.0, 2.0)], [1, 2]):
        with pytest.raises(ValueError, match="schedule"):
            L.sample_dependent_focal_loss(x, t, sched)
    with pytest.raises(ValueError, match="score"):
        L.aurc_loss(x, t, score="energy")
    with pytest.raises(ValueError, match="ties"):
        L.aurc_loss(x, t, weights="log", ties="threshold")
    with pytest.raises(ValueError, match="scores must lie in"):
        L.selective_risk_weights(torch.tensor([0.2, 1.5]))
    with pytest.raises(ValueError, match="coverage"):
        L.selective_risk_loss(x, t, coverage=0.0)
    with pytest.raises(ValueError, match="nu"):
        L.selective_risk_loss(x, t, nu=0.0)
    with pytest.raises(ValueError, match="threshold"):
        L.selective_risk_loss(x, t, threshold=1.5)
    with pytest.raises(ValueError, match="bandwidth"):
        L.kde_xe_loss(x, t, bandwidth=-1.0)
    with pytest.raises(ValueError, match="bandwidth"):
        L.kde_xe_loss(x, t, bandwidth="scott")
    with pytest.raises(ValueError, match="logits must hold at least 2"):
        L.kde_xe_loss(x[:1], t[:1], bandwidth=0.1)
    with pytest.raises(ValueError, match="lamda"):
        L.mmce_loss(x, t, -1.0)
    with pytest.raises(ValueError, match="mode"):
        M.ece_kde(x, t, bandwidth=0.1, mode="marginal")
    with pytest.raises(ValueError, match="p must be"):
        M.ece_kde(x, t, bandwidth=0.1, p=0.5)
    with pytest.raises(ValueError, match="kernel_width"):
        L.MMCELoss(kernel_width=0.0)


def test_dtypes_and_low_precision():
    x, t = rand_batch(30, 5, seed=101)
    for name in ("focal", "dual_focal", "flsd53", "brier"):
        f = L.make_loss(name)
        v64, v32 = f(x, t), f(x.float(), t)
        assert v32.dtype == torch.float32 and v64.dtype == torch.float64
        assert float(v32) == pytest.approx(float(v64), rel=1e-5)
        vb = f(x.bfloat16(), t)
        assert torch.isfinite(vb) and float(vb) == pytest.approx(float(v64), rel=0.05)
    xb = x.bfloat16().requires_grad_()
    L.focal_loss(xb, t, 2.0).backward()
    assert xb.grad.dtype == torch.bfloat16 and torch.isfinite(xb.grad.float()).all()
    # numpy and list input are accepted
    assert float(L.focal_loss(x.numpy(), t.numpy(), 2.0)) == pytest.approx(float(L.focal_loss(x, t, 2.0)))


# --------------------------------------------------------------------------------------------
# the names a torch user guesses: (logits, labels) everywhere, a class per registry preset
# --------------------------------------------------------------------------------------------

LOSS_FUNCTIONS = sorted(n for n in L.__all__ if n.endswith("_loss") and n not in ("make_loss", "hessian_trace_loss"))


@pytest.mark.parametrize("name", LOSS_FUNCTIONS)
def test_loss_functions_take_logits_then_labels(name):
    import inspect

    assert list(inspect.signature(getattr(L, name)).parameters)[:2] == ["logits", "labels"]


@pytest.mark.parametrize("name", sorted(L.LOSSES))
def test_loss_modules_forward_takes_logits_then_labels(name):
    import inspect

    params = list(inspect.signature(L.make_loss(name).forward).parameters)
    assert params[:2] == ["logits", "labels"]


@pytest.mark.parametrize("name", sorted(set(L.LOSSES) - {"hessian_trace"}))
def test_labels_by_keyword_and_non_integer_labels_rejected(name):
    x, t = rand_batch(12, 4, seed=3)
    loss = L.make_loss(name)
    torch.testing.assert_close(loss(logits=x, labels=t), loss(x, t))
    for bad in (t.double(), t.bool(), t.numpy().astype(np.float32)):
        with pytest.raises(ValueError, match="labels must hold integer class indices"):
            loss(x, bad)


def test_flsd_presets_are_named_classes_of_the_one_implementation():
    x, t = rand_batch(30, 5, seed=4)
    assert type(L.make_loss("flsd53")) is L.FLSD53Loss
    assert type(L.make_loss("flsd532")) is L.FLSD532Loss
    assert isinstance(L.FLSD53Loss(), L.SampleDependentFocalLoss)
    assert L.FLSD53Loss().schedule == L.FLSD53 and L.FLSD532Loss().schedule == L.FLSD532
    torch.testing.assert_close(L.FLSD53Loss()(x, t), L.sample_dependent_focal_loss(x, t, L.FLSD53))
    torch.testing.assert_close(L.FLSD532Loss(reduction="none")(x, t),
                               L.sample_dependent_focal_loss(x, t, L.FLSD532, reduction="none"))
    # FLSD-53 is also flsd_loss with gamma_high = 3 (the released code's three buckets)
    torch.testing.assert_close(L.FLSD53Loss(reduction="sum")(x, t), L.flsd_loss(x, t, reduction="sum"))
    with pytest.raises(ValueError, match="schedule"):
        L.make_loss("flsd53", schedule=L.FLSD532)


# ------------------------------------------------------------------ the compiled (CUDA) path ---

def test_the_compiled_path_is_chosen_on_cuda_only(monkeypatch):
    from focalcal.losses import _core
    assert _core.use_compiled(torch.device("cuda")) and _core.use_compiled(torch.device("cuda:1"))
    assert not _core.use_compiled(torch.device("cpu"))

    def refused(which):
        raise AssertionError("the CPU must stay on the eager path")
    monkeypatch.setattr(_core, "_compiled", refused)
    z = torch.randn(8, 5, requires_grad=True)
    L.focal_loss(z, torch.arange(8) % 5).backward()
    assert z.grad is not None


def test_the_compiled_path_equals_the_eager_one(monkeypatch):
    # torch.compile (inductor) on the CPU, as it is on CUDA: the same values and gradients as the
    # eager fused path, for focal (constant gamma), FLSD-53 (per-sample gamma), inverse focal, with
    # ignored labels and every reduction, on logits up to +-1e4
    from focalcal.losses import _core
    g = torch.Generator().manual_seed(0)
    z = 4 * torch.randn(64, 10, generator=g)
    z[0, 0], z[1, 3] = 1e4, -1e4
    t = torch.randint(0, 10, (64,), generator=g)
    t[5] = -100
    cases = [(lambda a, b, **k: L.focal_loss(a, b, gamma=3.0, **k), "mean"),
             (lambda a, b, **k: L.flsd_loss(a, b, **k), "sum"),
             (lambda a, b, **k: L.inverse_focal_loss(a, b, **k), "none")]
    eager = []
    for fn, red in cases:
        x = z.clone().requires_grad_()
        out = fn(x, t, reduction=red)
        out.sum().backward()
        eager.append((out.detach(), x.grad))
    monkeypatch.setattr(_core, "COMPILED_DEVICE_TYPES", frozenset({"cpu"}))
    monkeypatch.setattr(_core, "_COMPILED", {})
    for (fn, red), (v, grad) in zip(cases, eager):
        x = z.clone().requires_grad_()
        out = fn(x, t, reduction=red)
        out.sum().backward()
        assert torch.allclose(out.detach(), v, rtol=1e-5, atol=1e-6)
        assert torch.allclose(x.grad, grad, rtol=1e-5, atol=1e-7) and torch.isfinite(x.grad).all()
    assert set(_core._COMPILED) == {"forward", "backward"}  # the compiled path ran


# every device torch offers on this machine: the CPU always, CUDA where there is a GPU (there the
# losses take the compiled path). Each gets the float64 formula's values and gradients, in every
# precision a training loop feeds them, at +-1e4 too.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["focal", "flsd53", "inverse_focal", "dual_focal"])
def test_losses_on_each_device_match_the_float64_formula(device, dtype, name):
    z64, t = rand_batch(128, 10, seed=7, scale=3.0)
    z64[0, 0], z64[1, 4] = 1e4, -1e4
    t[3] = -100
    fn = L.make_loss(name)
    ref_z = z64.to(dtype).double().clone().requires_grad_()  # the formula on the input as rounded to dtype
    ref = fn(ref_z, t)
    ref.backward()
    x = z64.to(device=device, dtype=dtype).clone().requires_grad_()
    out = fn(x, t.to(device))
    out.backward()
    # half-precision logits are computed in float32 and give a float32 loss (as F.cross_entropy
    # under autocast); their gradient is rounded to their dtype (2^-11 relative in half precision,
    # 2^-8 in bfloat16)
    assert out.device.type == device and x.grad.dtype == dtype
    assert out.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-4, torch.float64: 1e-10}[dtype]
    assert float(out.detach()) == pytest.approx(float(ref.detach()), rel=tol)
    grad = x.grad.double().cpu()
    assert torch.isfinite(grad).all()
    assert torch.allclose(grad, ref_z.grad, rtol=tol, atol=tol / 128)
