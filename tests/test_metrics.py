"""Tests of focalcal.metrics against hand-computed cases, slow direct formulas and peer libraries.

Oracles: netcal 1.4 (ECE / MCE, equal-width and equal-mass), torchmetrics
(MulticlassCalibrationError, l1 / l2 / max), direct per-class loops for the class-wise ECE, the
sort-based risk-coverage formula and Zhou et al.'s population definition for the AURC.
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

import netcal.metrics as netcal_metrics
from torchmetrics.functional.classification import multiclass_calibration_error

from focalcal import metrics as M
from focalcal.lab.data import published_logits
from focalcal.metrics import batched as B
from focalcal.metrics._inputs import top_label
from focalcal.metrics.binned import _bin_index, _mass_index, _width_index

HYP = settings(max_examples=40, deadline=None)


# --------------------------------------------------------------------------------------------
# fixtures and slow reference implementations
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real(shared_logits_dir):
    logits, labels = published_logits("ce", "test", download=False)
    return logits, labels


def random_task(n=3000, k=5, seed=0, scale=2.5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    logits = (scale * torch.randn(n, k, generator=g, dtype=torch.float64)).to(dtype)
    # labels drawn from a sharpened softmax: a mis-calibrated but informative model
    labels = torch.multinomial(torch.softmax(1.5 * logits.double(), -1), 1, generator=g).squeeze(-1)
    return logits, labels


def loop_binned_error(conf, correct, n_bins, binning, norm):
    """Slow reference: explicit loop over bins with the documented rules."""
    conf = np.asarray(conf, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    n = len(conf)
    if binning == "width":
        edges = np.arange(n_bins + 1) / n_bins
        members = [((conf > edges[b]) | ((b == 0) & (conf == 0))) & (conf <= edges[b + 1])
                   for b in range(n_bins)]
    else:
        order = np.argsort(conf, kind="stable")
        srt = conf[order]
        n_le = np.array([np.sum(srt <= c) for c in conf])
        bins = (n_le - 1) * n_bins // n
        members = [bins == b for b in range(n_bins)]
    gaps, weights = [], []
    for m in members:
        if m.sum() == 0:
            continue
        gaps.append(abs(conf[m].mean() - correct[m].mean()))
        weights.append(m.sum() / n)
    gaps, weights = np.array(gaps), np.array(weights)
    if norm == "l1":
        return float((weights * gaps).sum())
    if norm == "l2":
        return float(np.sqrt((weights * gaps ** 2).sum()))
    return float(gaps.max())


def rc_curve_aurc(score, err):
    """Geifman et al.'s risk-coverage AURC for distinct scores: mean risk of the k most confident."""
    order = np.argsort(-np.asarray(score), kind="stable")
    e = np.asarray(err, dtype=np.float64)[order]
    risks = np.cumsum(e) / np.arange(1, len(e) + 1)
    return float(risks.mean())


# --------------------------------------------------------------------------------------------
# hand-computed tiny cases
# --------------------------------------------------------------------------------------------

# four samples, K = 2: confidences 0.9 (right), 0.8 (wrong), 0.7 (right), 0.6 (wrong)
TINY_PROBS = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.4, 0.6]], dtype=torch.float64)
TINY_LABELS = torch.tensor([0, 1, 1, 0])


def test_tiny_equal_width_by_hand():
    # 5 bins (lo, hi]: 0.6 lies on the edge 3/5 -> bin (0.4, 0.6]; 0.8 on 4/5 -> bin (0.6, 0.8]
    # bin (0.4,0.6]: {0.6 wrong}      gap 0.6,  weight 1/4
    # bin (0.6,0.8]: {0.7 right, 0.8 wrong} acc 1/2, conf 0.75, gap 0.25, weight 1/2
    # bin (0.8,1.0]: {0.9 right}      gap 0.1,  weight 1/4
    kw = dict(labels=TINY_LABELS, n_bins=5)
    assert M.ece(TINY_PROBS, **kw) == pytest.approx(0.25 * 0.6 + 0.5 * 0.25 + 0.25 * 0.1, abs=1e-15)
    assert M.mce(TINY_PROBS, **kw) == pytest.approx(0.6, abs=1e-15)
    assert M.ece(TINY_PROBS, norm="l2", **kw) == pytest.approx(
        math.sqrt(0.25 * 0.36 + 0.5 * 0.0625 + 0.25 * 0.01), abs=1e-15)
    rd = M.reliability_data(TINY_PROBS, **kw)
    assert rd.counts.tolist() == [0, 0, 1, 2, 1]
    assert torch.isnan(rd.accuracy[:2]).all() and rd.accuracy[2:].tolist() == [0.0, 0.5, 1.0]


def test_tiny_equal_mass_by_hand():
    # sorted: 0.6 (w), 0.7 (r) | 0.8 (w), 0.9 (r): gaps |0.65 - 0.5| and |0.85 - 0.5|, weights 1/2
    assert M.ece(TINY_PROBS, TINY_LABELS, n_bins=2, binning="mass") == pytest.approx(0.25)
    assert M.mce(TINY_PROBS, TINY_LABELS, n_bins=2, binning="mass") == pytest.approx(0.35)


def test_zero_and_one_confidence_are_counted():
    # conf 0 goes into the first bin (0, 1/2] with 0.5; conf 1 into the last bin
    ce = M.calibration_error(torch.tensor([0.0, 0.5, 1.0]), torch.tensor([1.0, 0.0, 1.0]), n_bins=2)
    assert float(ce) == pytest.approx(2 / 3 * 0.25)
    rd_counts = torch.bincount(_width_index(torch.tensor([0.0, 0.5, 1.0]), 2), minlength=2)
    assert rd_counts.tolist() == [2, 1]


def test_fewer_samples_than_bins():
    conf = torch.tensor([0.95, 0.55, 0.75])
    correct = torch.tensor([True, False, True])
    for binning in M.BINNINGS:
        got = float(M.calibration_error(conf, correct, n_bins=15, binning=binning))
        # every sample alone in its bin: ECE = mean |conf - correct|
        assert got == pytest.approx((0.05 + 0.55 + 0.25) / 3, abs=1e-7)


def test_mass_bins_keep_ties_together():
    # three tied confidences and one larger: the tie group takes the bin of its last position
    conf = torch.tensor([0.5, 0.5, 0.5, 0.9], dtype=torch.float64)
    assert _mass_index(conf, 2).tolist() == [1, 1, 1, 1]
    assert _mass_index(torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]), 2).tolist() == [0, 0, 0, 1, 1]
    correct = torch.tensor([1.0, 0.0, 1.0, 1.0])
    assert float(M.calibration_error(conf, correct, n_bins=2, binning="mass")) == pytest.approx(
        abs(conf.mean() - correct.mean()))


def test_mass_bins_sizes_differ_by_at_most_one():
    for n, nb in [(10, 3), (10000, 15), (17, 15), (7, 7), (31, 4)]:
        counts = torch.bincount(_mass_index(torch.rand(n, dtype=torch.float64), nb), minlength=nb)
        assert counts.sum() == n and counts.max() - counts.min() <= 1


# --------------------------------------------------------------------------------------------
# against slow loops
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("binning", M.BINNINGS)
@pytest.mark.parametrize("norm", M.NORMS)
def test_calibration_error_matches_loop(binning, norm):
    g = torch.Generator().manual_seed(1)
    conf = torch.rand(700, generator=g, dtype=torch.float64)
    # a few ties and exact edge values, as float32 softmax produces
    conf[:50] = 1.0
    conf[50:60] = 2 / 15
    conf[60:80] = conf[80:100]
    correct = torch.rand(700, generator=g, dtype=torch.float64) < conf
    got = float(M.calibration_error(conf, correct, n_bins=15, binning=binning, norm=norm))
    assert got == pytest.approx(loop_binned_error(conf, correct, 15, binning, norm), abs=1e-12)


@pytest.mark.parametrize("binning", M.BINNINGS)
@pytest.mark.parametrize("norm", M.NORMS)
def test_classwise_matches_per_class_loop(binning, norm):
    logits, labels = random_task(n=800, k=4, seed=3)
    probs = torch.softmax(logits, -1)
    per_class = np.array([loop_binned_error(probs[:, c], labels == c, 10, binning, norm)
                          for c in range(4)])
    want = {"l1": per_class.mean(), "l2": np.sqrt((per_class ** 2).mean()),
            "max": per_class.max()}[norm]
    got = M.classwise_ece(probs, labels, n_bins=10, binning=binning, norm=norm)
    assert got == pytest.approx(want, abs=1e-12)


def test_classwise_real_matches_loop(real):
    logits, labels = real
    probs = torch.softmax(logits, -1)
    want = np.mean([loop_binned_error(probs[:, c], labels == c, 15, "width", "l1")
                    for c in range(10)])
    assert M.classwise_ece(logits=logits, labels=labels) == pytest.approx(want, abs=1e-12)


# --------------------------------------------------------------------------------------------
# against netcal and torchmetrics
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_bins", [10, 15])
@pytest.mark.parametrize("seed", [0, 1])
def test_ece_mce_match_netcal_equal_width_random(n_bins, seed):
    logits, labels = random_task(seed=seed)
    probs = torch.softmax(logits, -1)
    want = netcal_metrics.ECE(bins=n_bins).measure(probs.numpy(), labels.numpy())
    assert M.ece(probs, labels, n_bins=n_bins) == pytest.approx(want, abs=1e-6)
    want_mce = netcal_metrics.MCE(bins=n_bins).measure(probs.numpy(), labels.numpy())
    assert M.mce(probs, labels, n_bins=n_bins) == pytest.approx(want_mce, abs=1e-6)


@pytest.mark.parametrize("n_bins", [10, 15, 20])
def test_ece_matches_netcal_equal_mass_random(n_bins):
    # netcal's quantile edges give exactly our equal-mass groups when N is a multiple of n_bins
    logits, labels = random_task(n=3000, seed=2)
    probs = torch.softmax(logits, -1)
    want = netcal_metrics.ECE(bins=n_bins, equal_intervals=False).measure(probs.numpy(), labels.numpy())
    assert M.ece(probs, labels, n_bins=n_bins, binning="mass") == pytest.approx(want, abs=1e-6)


def test_ece_matches_netcal_real(real):
    logits, labels = real
    probs = torch.softmax(logits, -1).numpy()
    y = labels.numpy()
    assert M.ece(logits=logits, labels=labels) == pytest.approx(
        netcal_metrics.ECE(bins=15).measure(probs, y), abs=1e-6)
    assert M.mce(logits=logits, labels=labels) == pytest.approx(
        netcal_metrics.MCE(bins=15).measure(probs, y), abs=1e-6)
    for n_bins in (10, 20, 25):  # N = 10000 is a multiple of these
        assert M.ece(logits=logits, labels=labels, n_bins=n_bins, binning="mass") == pytest.approx(
            netcal_metrics.ECE(bins=n_bins, equal_intervals=False).measure(probs, y), abs=1e-6)
    # the exact float64 value quoted in the book
    assert M.ece(logits=logits, labels=labels) == pytest.approx(0.0562255, abs=5e-8)


@pytest.mark.parametrize("norm", M.NORMS)
def test_ece_matches_torchmetrics(norm, real):
    logits, labels = random_task(n=4000, k=7, seed=5)
    for z, y in ((logits, labels), real):
        want = float(multiclass_calibration_error(z.float(), y, num_classes=z.shape[-1],
                                                  n_bins=15, norm=norm))
        assert M.ece(logits=z, labels=y, norm=norm) == pytest.approx(want, abs=1e-4)


def test_torchmetrics_difference_on_real_data_is_float32(real):
    """torchmetrics sums the confidences of a bin in float32; on the real logits that biases the
    top bin's mean confidence upwards. The exact value is netcal's (see the test above). The
    float32 sums' rounding depends on the machine's kernels, so the test recomputes them here (the
    same bins, ``scatter_add_`` in float32) instead of pinning torchmetrics' digits: that value is
    torchmetrics', and our ECE of the float32 probabilities (summed in float64) is ours."""
    logits, labels = real
    tm = float(multiclass_calibration_error(logits.float(), labels, num_classes=10, n_bins=15))
    ours = M.ece(logits=logits, labels=labels)
    probs32 = torch.softmax(logits.float(), -1)
    conf, pred = probs32.max(-1)
    idx = torch.bucketize(conf, torch.linspace(0, 1, 16), right=True) - 1
    n, s, a = (torch.zeros(16).scatter_add_(0, idx, v)
               for v in (torch.ones_like(conf), conf, (pred == labels).float()))
    float32_sums = float(((torch.nan_to_num(s / n) - torch.nan_to_num(a / n)).abs() * n / len(conf)).sum())
    assert tm == pytest.approx(float32_sums, abs=1e-12)
    assert M.ece(probs=probs32.double(), labels=labels) == pytest.approx(ours, abs=1e-9)
    assert 1e-5 < tm - ours < 2e-5


# --------------------------------------------------------------------------------------------
# dtypes, logits vs probs, batching
# --------------------------------------------------------------------------------------------

def test_float32_and_float64_agree():
    logits, labels = random_task(n=2000, k=6, seed=7)
    for binning in M.BINNINGS:
        a = M.ece(logits=logits.float(), labels=labels, binning=binning)
        b = M.ece(logits=logits, labels=labels, binning=binning)
        assert a == pytest.approx(b, abs=1e-6)
    assert M.classwise_ece(logits=logits.float(), labels=labels) == pytest.approx(
        M.classwise_ece(logits=logits, labels=labels), abs=1e-6)
    assert M.nll(logits=logits.float(), labels=labels) == pytest.approx(M.nll(logits=logits, labels=labels), rel=1e-6)
    assert M.aurc(logits=logits.float(), labels=labels) == pytest.approx(M.aurc(logits=logits, labels=labels),
                                                                   abs=1e-6)
    ce32 = M.calibration_error(torch.rand(50, dtype=torch.float32), torch.rand(50) > 0.5)
    assert ce32.dtype == torch.float32


def test_float32_binned_exactly_as_float64():
    # float32 values just below, on and above every edge b/15: same bins as their float64 copies
    edges = (torch.arange(16, dtype=torch.float64) / 15).float()
    near = torch.cat([torch.nextafter(edges, torch.zeros_like(edges)), edges,
                      torch.nextafter(edges, torch.ones_like(edges))]).clamp(0, 1)
    assert torch.equal(_width_index(near, 15), _width_index(near.double(), 15))
    exact = torch.tensor([loop_bin(float(v), 15) for v in near.double()])
    assert torch.equal(_width_index(near.double(), 15), exact)


def loop_bin(c, n_bins):
    edges = np.arange(n_bins + 1) / n_bins
    return max(0, int(np.searchsorted(edges, c, side="left")) - 1)


def test_logits_and_probs_agree():
    logits, labels = random_task(n=1500, k=5, seed=8)
    probs = torch.softmax(logits, -1)
    for fn in (M.ece, M.mce, M.classwise_ece, M.nll, M.brier, M.accuracy, M.aurc, M.eaurc):
        assert fn(logits=logits, labels=labels) == pytest.approx(fn(probs, labels), abs=1e-10), fn
    for score in M.SCORES:
        assert M.aurc(logits=logits, labels=labels, score=score) == pytest.approx(
            M.aurc(probs, labels, score=score), abs=1e-10)
    assert M.frac_confident(logits=logits, labels=labels, threshold=0.9) == M.frac_confident(
        probs, labels, threshold=0.9)


def test_batched_core_equals_loop_over_batch():
    g = torch.Generator().manual_seed(9)
    conf = torch.rand(3, 4, 500, generator=g, dtype=torch.float64)
    correct = torch.rand(500, generator=g) < 0.7
    for binning in M.BINNINGS:
        for norm in M.NORMS:
            got = M.calibration_error(conf, correct, binning=binning, norm=norm)
            assert got.shape == (3, 4)
            for i, j in itertools.product(range(3), range(4)):
                want = M.calibration_error(conf[i, j], correct, binning=binning, norm=norm)
                assert float(got[i, j]) == pytest.approx(float(want), abs=1e-14)
    # correct with its own batch dims
    corr_b = torch.rand(3, 1, 500, generator=g) < 0.5
    got = M.calibration_error(conf, corr_b)
    assert float(got[2, 1]) == pytest.approx(float(M.calibration_error(conf[2, 1], corr_b[2, 0])))


def test_batched_metrics_over_temperature_grid():
    logits, labels = random_task(n=600, k=4, seed=10)
    temps = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    grid = logits / temps.view(-1, 1, 1)
    for name in ("ece", "classwise_ece", "nll", "brier", "aurc", "eaurc", "accuracy"):
        batched, scalar = getattr(B, name), getattr(M, name)
        got = batched(logits=grid, labels=labels)
        assert isinstance(got, torch.Tensor) and got.shape == (3,)
        for t in range(3):
            one = scalar(logits=grid[t], labels=labels)
            assert type(one) is float and float(got[t]) == pytest.approx(one, abs=1e-12), name
            assert float(batched(logits=grid[t], labels=labels)) == one
        with pytest.raises(ValueError, match=f"focalcal.metrics.batched.{name}"):
            scalar(logits=grid, labels=labels)
    assert float(B.classwise_ece(logits=grid, labels=labels, binning="mass", norm="max")[1]) == pytest.approx(
        M.classwise_ece(logits=logits, labels=labels, binning="mass", norm="max"))


def test_extreme_logits_are_finite():
    logits = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4], [0.0, 0.0, -1e4]], dtype=torch.float64)
    labels = torch.tensor([0, 2, 1])
    for dtype in (torch.float32, torch.float64):
        z = logits.to(dtype)
        for fn in (M.ece, M.mce, M.classwise_ece, M.nll, M.brier, M.aurc, M.eaurc):
            assert math.isfinite(fn(logits=z, labels=labels)), fn
        assert math.isfinite(M.kl_to_posterior(logits=z, true_probs=torch.full((3, 3), 1 / 3, dtype=dtype)))
    # a zero probability of the true class gives a large but finite NLL
    assert M.nll(torch.tensor([[1.0, 0.0]]), torch.tensor([1])) == pytest.approx(
        -math.log(torch.finfo(torch.float32).tiny))


# --------------------------------------------------------------------------------------------
# proper scores, accuracy, KL, |S99|
# --------------------------------------------------------------------------------------------

def test_nll_brier_accuracy_against_direct():
    logits, labels = random_task(n=1000, k=6, seed=11)
    probs = torch.softmax(logits, -1)
    assert M.nll(logits=logits, labels=labels) == pytest.approx(float(F.cross_entropy(logits, labels)),
                                                         abs=1e-12)
    onehot = F.one_hot(labels, 6).double()
    assert M.brier(probs, labels) == pytest.approx(
        float(((probs - onehot) ** 2).sum(1).mean()), abs=1e-12)
    assert M.accuracy(probs, labels) == pytest.approx(
        float((probs.argmax(1) == labels).double().mean()))
    top3 = np.argsort(-probs.numpy(), axis=1)[:, :3]
    assert M.accuracy(probs, labels, top_k=3) == pytest.approx(
        float(np.mean([labels[i].item() in top3[i] for i in range(1000)])))
    assert M.accuracy(probs, labels, top_k=6) == 1.0


def test_kl_to_posterior():
    g = torch.Generator().manual_seed(12)
    true = torch.softmax(torch.randn(200, 4, generator=g, dtype=torch.float64), -1)
    true[0] = torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=torch.float64)  # zero terms count as 0
    logits = torch.randn(200, 4, generator=g, dtype=torch.float64)
    probs = torch.softmax(logits, -1)
    want = float(np.mean([sum(t * math.log(t / p) for t, p in zip(tr, pr) if t > 0)
                          for tr, pr in zip(true.tolist(), probs.tolist())]))
    assert M.kl_to_posterior(probs, true) == pytest.approx(want, abs=1e-12)
    assert M.kl_to_posterior(logits=logits, true_probs=true) == pytest.approx(want, abs=1e-12)
    assert M.kl_to_posterior(probs, probs) == pytest.approx(0.0, abs=1e-15)


def test_frac_confident(real):
    logits, labels = real
    probs = torch.softmax(logits, -1)
    conf, pred = probs.max(1)
    sel = conf > 0.99
    got = M.frac_confident(logits=logits, labels=labels)
    assert got.count == int(sel.sum())
    assert got.fraction == pytest.approx(float(sel.double().mean()))
    assert got.accuracy == pytest.approx(float((pred[sel] == labels[sel]).double().mean()))
    none = M.frac_confident(TINY_PROBS, TINY_LABELS, threshold=0.95)
    assert none.count == 0 and none.fraction == 0.0 and math.isnan(none.accuracy)


# --------------------------------------------------------------------------------------------
# AURC / E-AURC
# --------------------------------------------------------------------------------------------

def test_confidence_scores_against_direct():
    logits, _ = random_task(n=300, k=5, seed=13)
    p = torch.softmax(logits, -1)
    top2 = p.topk(2, -1).values
    assert torch.allclose(M.confidence_score(logits=logits), p.max(-1).values, atol=1e-14)
    # the negative entropy rescaled from [-log K, 0] to [0, 1]
    assert torch.allclose(M.confidence_score(probs=p, score="neg_entropy"),
                          1 + (p * p.log()).sum(-1) / math.log(5), atol=1e-14)
    for score in M.SCORES:
        s = M.confidence_score(logits=logits, score=score)
        assert float(s.min()) >= 0 and float(s.max()) <= 1
    # the ends of the range: a uniform row and a one-hot row
    ends = torch.tensor([[0.2] * 5, [1.0, 0, 0, 0, 0]], dtype=torch.float64)
    assert M.confidence_score(probs=ends, score="neg_entropy").tolist() == pytest.approx([0.0, 1.0], abs=1e-15)
    assert M.confidence_score(probs=ends, score="margin").tolist() == pytest.approx([0.0, 1.0], abs=1e-15)
    assert torch.allclose(M.confidence_score(logits=logits, score="margin"),
                          top2[:, 0] - top2[:, 1], atol=1e-14)


@pytest.mark.parametrize("score", M.SCORES)
def test_aurc_matches_sort_based_formula(score):
    logits, labels = random_task(n=2000, k=5, seed=14)
    p = torch.softmax(logits, -1)
    s = M.confidence_score(probs=p, score=score).numpy()
    assert len(np.unique(s)) == len(s)
    err = (p.argmax(-1) != labels).numpy()
    assert M.aurc(p, labels, score=score) == pytest.approx(rc_curve_aurc(s, err), abs=1e-12)


def test_aurc_ties_average_over_tie_orders():
    # six samples, scores with ties: the average of the risk-coverage AURC over every ordering
    # consistent with the scores
    probs = torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.7, 0.3], [0.7, 0.3], [0.7, 0.3], [0.6, 0.4]],
                         dtype=torch.float64)
    labels = torch.tensor([0, 1, 1, 0, 1, 0])
    err = (probs.argmax(-1) != labels).double().numpy()
    score = probs.max(-1).values.numpy()
    vals = []
    for perm in itertools.permutations(range(6)):
        if all(score[perm[i]] >= score[perm[i + 1]] for i in range(5)):
            e = err[list(perm)]
            vals.append(np.mean(np.cumsum(e) / np.arange(1, 7)))
    assert len(vals) == 2 * 6
    assert M.aurc(probs, labels) == pytest.approx(np.mean(vals), abs=1e-14)
    # and therefore it is permutation invariant
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert M.aurc(probs[perm], labels[perm]) == pytest.approx(M.aurc(probs, labels),
                                                                     abs=1e-15)


def test_aurc_ranks_saturated_rows_by_their_logits():
    # float64 softmax rounds every top probability to exactly 1; the ranking still follows the
    # logit gap, which is what an exact computation of p_max would give
    gaps = torch.tensor([40.0, 50.0, 60.0, 70.0, 80.0], dtype=torch.float64)
    logits = torch.stack([gaps, torch.zeros(5, dtype=torch.float64)], -1)
    assert (torch.softmax(logits, -1).max(-1).values == 1.0).all()
    labels = torch.tensor([0, 1, 0, 1, 0])  # errors at gaps 50 and 70
    err = np.array([0, 1, 0, 1, 0])
    assert M.aurc(logits=logits, labels=labels) == pytest.approx(rc_curve_aurc(gaps.numpy(), err),
                                                          abs=1e-14)
    assert M.aurc(logits=logits, labels=labels) != pytest.approx(np.mean(err), abs=1e-3)


def test_aurc_converges_to_zhou_population_definition():
    # Zhou et al. (2025), Def. 3.3: AURC = -E[ln(1 - G(x)) l(x)], G the CDF of the score.
    # Binary task with p_max ~ U(1/2, 1) and P(error | p_max) = 1 - p_max (calibrated):
    # with u = G = 2 p_max - 1, AURC = int_0^1 -ln(1-u) (1-u)/2 du = 1/8.
    g = torch.Generator().manual_seed(15)
    n = 200_000
    pmax = 0.5 + 0.5 * torch.rand(n, generator=g, dtype=torch.float64)
    probs = torch.stack([pmax, 1 - pmax], -1)
    wrong = torch.rand(n, generator=g, dtype=torch.float64) < 1 - pmax
    labels = wrong.long()
    got = M.aurc(probs, labels)
    assert got == pytest.approx(1 / 8, abs=3e-3)
    # the same-sample plug-in of the definition with the true G agrees more tightly
    plug_in = float((-torch.log1p(-(2 * pmax - 1)) * wrong.double()).mean())
    assert got == pytest.approx(plug_in, abs=1e-3)


def test_eaurc_optimal_ranking():
    logits, labels = random_task(n=1000, k=4, seed=16)
    p = torch.softmax(logits, -1)
    err = (p.argmax(-1) != labels).double()
    r = float(err.mean())
    a = M.aurc(p, labels)
    assert M.eaurc(p, labels) == pytest.approx(a - (r + (1 - r) * math.log(1 - r)), abs=1e-12)
    # exact optimum = AURC of an oracle that ranks every correct sample above every error
    top = p.argmax(-1)
    boost = torch.where(err.bool(), 0.0, 1.0) + torch.linspace(0, 0.5, 1000, dtype=torch.float64)
    oracle_logits = torch.log(p) + F.one_hot(top, 4) * boost.unsqueeze(-1) * 50
    assert (oracle_logits.argmax(-1) == top).all()
    best = M.aurc(logits=oracle_logits, labels=labels)
    assert M.eaurc(p, labels, optimum="exact") == pytest.approx(a - best, abs=1e-12)
    assert M.eaurc(p, labels) >= M.eaurc(p, labels, optimum="exact") >= 0
    assert M.eaurc(logits=oracle_logits, labels=labels, optimum="exact") == pytest.approx(0.0, abs=1e-14)


# --------------------------------------------------------------------------------------------
# reliability diagrams
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("binning", M.BINNINGS)
def test_reliability_data_consistent(real, binning):
    logits, labels = real
    rd = M.reliability_data(logits=logits, labels=labels, binning=binning)
    assert rd.counts.sum() == 10000 and rd.edges.shape == (16,)
    assert (rd.edges.diff() >= 0).all() and rd.edges[0] == 0 and rd.edges[-1] == 1
    assert rd.ece() == pytest.approx(M.ece(logits=logits, labels=labels, binning=binning), abs=1e-12)
    conf, _ = top_label(None, labels, logits)
    b = _bin_index(conf, 15, binning)
    lo, hi = rd.edges[b], rd.edges[b + 1]
    if binning == "width":
        assert ((conf > lo) & (conf <= hi)).all()
    else:
        assert ((conf >= lo) & ((conf < hi) | (b == 14))).all()
    full = rd.counts > 0
    assert (rd.confidence[full] >= lo.min()).all() and not torch.isnan(rd.accuracy[full]).any()


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------

def test_bad_inputs_raise():
    probs, labels = TINY_PROBS, TINY_LABELS
    cases = [
        (lambda: M.ece(probs, labels, logits=probs), "exactly one of probs .* or logits="),
        (lambda: M.ece(labels=labels), "exactly one of probs .* or logits="),
        (lambda: M.ece(probs), "labels is required"),
        (lambda: M.ece(logits=probs), "labels is required"),
        (lambda: M.ece(probs, labels[:3]), "labels has 3 entries"),
        (lambda: M.ece(probs, torch.tensor([0, 1, 2, 0])), "labels must lie"),
        (lambda: M.ece(probs, torch.tensor([0, 1, -1, 0])), "labels must lie"),
        (lambda: M.ece(probs, torch.tensor([0.0, 1.5, 1.0, 0.0])), r"labels must hold integer class indices \(an integer dtype\)"),
        (lambda: M.ece(logits=torch.tensor([[0.0, float("nan")]] * 4), labels=labels), "logits contains 4 NaN"),
        (lambda: M.ece(probs * 0.9, labels), "rows of probs must sum to 1"),
        (lambda: M.ece(-probs, labels), r"probs must lie in \[0, 1\]"),
        (lambda: M.ece(torch.zeros(0, 2), torch.tensor([], dtype=torch.long)), "probs is empty"),
        (lambda: M.ece(probs, labels, binning="quantile"), "binning"),
        (lambda: M.ece(probs, labels, norm="l3"), "norm"),
        (lambda: M.ece(probs, labels, n_bins=0), "n_bins"),
        (lambda: M.ece(torch.tensor([0.3, 0.7]), torch.tensor([0])), r"probs must have shape \(\.\.\., N, K\)"),
        (lambda: M.classwise_ece(probs, labels, norm="L1"), "norm"),
        (lambda: M.calibration_error(torch.tensor([0.5, 1.2]), torch.tensor([1, 0])), "confidences"),
        (lambda: M.calibration_error(torch.tensor([0.5, 0.2]), torch.tensor([1, 0, 1])), "correct"),
        (lambda: M.calibration_error(torch.tensor([]), torch.tensor([])), "confidences is empty"),
        (lambda: M.aurc(probs, labels, score="entropy"), "score"),
        (lambda: M.aurc(probs, labels, ties="first"), "ties"),
        (lambda: M.eaurc(probs, labels, optimum="best"), "optimum"),
        (lambda: M.accuracy(probs, labels, top_k=3), "top_k"),
        (lambda: M.frac_confident(probs, labels, threshold=1.0), "threshold"),
        (lambda: M.kl_to_posterior(probs, probs[:3]), "true_probs and the model's scores"),
        (lambda: M.kl_to_posterior(probs), "true_probs is required"),
        (lambda: M.kl_to_posterior(true_probs=probs), "exactly one of probs"),
        (lambda: M.nll(logits=torch.full((4, 2), float("inf")), labels=labels), "logits contains 8 NaN or infinite"),
        (lambda: M.mmce(torch.zeros(4, 2), labels, kernel_width=0.0), "kernel_width"),
        (lambda: M.mmce(torch.zeros(4), labels), "logits must have shape"),
        (lambda: M.ece_kde(torch.zeros(1, 2), labels[:1], bandwidth=0.1), "logits must have at least 2 rows"),
        (lambda: M.ece_kde(torch.zeros(4, 2), labels, bandwidth=0.1, mode="marginal"), "mode"),
        (lambda: M.ece_kde(torch.zeros(4, 2), labels, bandwidth=0.1, p=0.5), "p must be"),
        (lambda: M.ece_kde(torch.zeros(4, 2), labels, bandwidth="scott"), "bandwidth"),
        (lambda: M.kde_bandwidth(torch.zeros(4, 2), grid=[0.1, -1.0]), "grid"),
    ]
    for fn, match in cases:
        with pytest.raises(ValueError, match=match):
            fn()


SCALAR_METRICS = (M.ece, M.mce, M.classwise_ece, M.nll, M.brier, M.accuracy, M.aurc, M.eaurc,
                  M.frac_confident, M.reliability_data)


@pytest.mark.parametrize("fn", SCALAR_METRICS, ids=lambda f: f.__name__)
def test_scores_first_then_labels(fn):
    """The convention: fn(probs, labels) or fn(logits=z, labels=y); the old order fails loudly."""
    probs, labels = TINY_PROBS, TINY_LABELS

    def value(out):  # a number to compare, whatever the return type
        if isinstance(out, M.Confident):
            return out.fraction
        return out.ece() if isinstance(out, M.ReliabilityData) else out

    by_position = value(fn(probs, labels))
    assert by_position == value(fn(probs=probs, labels=labels))
    assert by_position == pytest.approx(value(fn(logits=probs.log(), labels=labels)), abs=1e-12)
    with pytest.raises(TypeError, match="multiple values for argument 'probs'"):
        fn(labels, probs=probs)
    with pytest.raises(ValueError, match="labels is required"):
        fn(labels, logits=probs.log())
    with pytest.raises(ValueError, match="labels is required"):
        fn(probs)


@pytest.mark.parametrize("fn", SCALAR_METRICS + (M.mmce, M.ece_kde, B.ece),
                         ids=lambda f: f.__module__.rsplit(".", 1)[-1] + "." + f.__name__)
@pytest.mark.parametrize("bad", [
    torch.tensor([0.0, 1.0, 1.0, 0.0]),      # whole numbers, but a float dtype
    np.array([0.0, 1.0, 1.0, 0.0]),
    [0.0, 1.0, 1.0, 0.0],
    torch.tensor([False, True, True, False]),
], ids=["torch_float", "numpy_float", "list_float", "bool"])
def test_non_integer_label_dtypes_are_refused(fn, bad):
    """Metrics refuse float labels as the losses do (a float array is probabilities in the wrong place)."""
    if fn in (M.mmce, M.ece_kde):
        call = lambda: fn(TINY_PROBS.log(), bad)  # noqa: E731
    else:
        call = lambda: fn(TINY_PROBS, bad)  # noqa: E731
    with pytest.raises(ValueError, match=r"labels must hold integer class indices \(an integer dtype\)"):
        call()


def test_integer_labels_of_any_int_type_are_accepted():
    want = M.ece(TINY_PROBS, TINY_LABELS, n_bins=2)
    for lab in (TINY_LABELS.int(), TINY_LABELS.numpy().astype(np.int32), TINY_LABELS.tolist()):
        assert M.ece(TINY_PROBS, lab, n_bins=2) == want


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------

@st.composite
def scored_samples(draw):
    n = draw(st.integers(1, 60))
    k = draw(st.integers(2, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    logits = draw(st.sampled_from([1.0, 5.0, 30.0])) * torch.randn(n, k, generator=g,
                                                                    dtype=torch.float64)
    if draw(st.booleans()):  # coarse logits create tied confidences
        logits = logits.round()
    labels = torch.randint(0, k, (n,), generator=g)
    return logits, labels, torch.randperm(n, generator=g)


@HYP
@given(scored_samples(), st.integers(1, 20), st.sampled_from(M.BINNINGS))
def test_property_bounds_order_and_permutation(sample, n_bins, binning):
    logits, labels, perm = sample
    kw = dict(n_bins=n_bins, binning=binning)
    l1 = M.ece(logits=logits, labels=labels, **kw)
    l2 = M.ece(logits=logits, labels=labels, norm="l2", **kw)
    mx = M.mce(logits=logits, labels=labels, **kw)
    assert 0 <= l1 <= l2 + 1e-12 and l2 <= mx + 1e-12 and mx <= 1
    cw = M.classwise_ece(logits=logits, labels=labels, **kw)
    assert 0 <= cw <= 1
    assert M.ece(logits=logits[perm], labels=labels[perm], **kw) == pytest.approx(l1, abs=1e-12)
    assert M.classwise_ece(logits=logits[perm], labels=labels[perm], **kw) == pytest.approx(cw, abs=1e-12)
    a = M.aurc(logits=logits, labels=labels)
    assert 0 <= a <= 1
    assert M.aurc(logits=logits[perm], labels=labels[perm]) == pytest.approx(a, abs=1e-12)
    assert M.eaurc(logits=logits, labels=labels, optimum="exact") >= -1e-12


@HYP
@given(st.integers(0, 2**31 - 1), st.sampled_from(M.BINNINGS))
def test_property_calibrated_data_has_small_ece(seed, binning):
    # outcomes drawn with probability equal to the confidence: the binned ECE is only noise
    g = torch.Generator().manual_seed(seed)
    conf = torch.rand(20_000, generator=g, dtype=torch.float64)
    correct = torch.rand(20_000, generator=g, dtype=torch.float64) < conf
    assert float(M.calibration_error(conf, correct, binning=binning)) < 0.02
    # while a shifted confidence is detected
    assert float(M.calibration_error((conf * 0.8).clamp(0, 1), correct, binning=binning)) > 0.08
