"""Exact selective-risk and discrete-distribution references (focalcal_book.selective).

Oracles: direct double sums over thresholds (the definition of eq. 9 of Zhou et al. 2025),
hand-computed tiny cases, focalcal.metrics (AURC, finest-binning ECE/cwECE, Brier) and the
selective-risk weights of focalcal.losses.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from focalcal import losses, metrics, scores
from focalcal_book import selective as S


def slow_area(losses_, scores, tau=None):
    """Eq. (9) of Zhou et al. on the empirical measure, as a literal double loop."""
    l, s = np.asarray(losses_, float), np.asarray(scores, float)
    idx = [i for i in range(len(s)) if tau is None or s[i] < tau]
    return float(np.mean([(l * (s >= s[i])).sum() / (s >= s[i]).sum() for i in idx]))


def slow_weights(scores, tau=None):
    s = np.asarray(scores, float)
    n = len(s)
    region = np.ones(n, bool) if tau is None else s < tau
    m = region.sum()
    n_acc = np.array([(s >= si).sum() for si in s])
    return np.array([(n / m) * sum(1 / n_acc[i] for i in range(n) if region[i] and s[i] <= s[j])
                     for j in range(n)])


# --------------------------------------------------------------------------------------------
# selective weights and areas
# --------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=25), st.data())
def test_area_and_weights_match_double_loop_with_ties(levels, data):
    scores = torch.tensor(levels, dtype=torch.float64) / 6  # coarse levels: many ties
    loss = torch.tensor(data.draw(st.lists(st.floats(0, 3), min_size=len(levels), max_size=len(levels))),
                        dtype=torch.float64)
    taus = [None] + [t for t in (0.2, 0.5, 0.9, 1.1) if (scores < t).any()]
    for tau in taus:
        w = S.selective_weights(scores, tau)
        np.testing.assert_allclose(w.numpy(), slow_weights(scores.numpy(), tau), rtol=1e-12)
        got = float(S.selective_risk_area(loss, scores, tau))
        assert got == pytest.approx(slow_area(loss.numpy(), scores.numpy(), tau), rel=1e-12, abs=1e-14)


def test_harmonic_weights_for_distinct_scores():
    n = 7
    scores = torch.randperm(n, generator=torch.Generator().manual_seed(0)).to(torch.float64)
    w = S.selective_weights(scores)
    harmonic = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, n + 1))])
    rank = scores.argsort().argsort().numpy() + 1  # ascending rank 1..n
    np.testing.assert_allclose(w.numpy(), harmonic[n] - harmonic[n - rank], rtol=1e-14)


def test_aurc_equals_metrics_aurc_for_untied_scores():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2000, 6, generator=g, dtype=torch.float64) * 2
    labels = torch.randint(0, 6, (2000,), generator=g)
    p = logits.softmax(-1)
    err = (p.argmax(-1) != labels).to(torch.float64)
    assert float(S.selective_risk_area(err, p.max(-1).values)) == pytest.approx(
        metrics.aurc(logits=logits, labels=labels), rel=1e-12)


def test_aurc_of_all_errors_is_one_not_more():
    """Every prediction wrong: the risk is 1 at every coverage, so the AURC is 1 (and E-AURC 0). The rank weights
    sum to 1 + 2e-16 in floating point on this sample (found by the property test of
    test_metrics); the area stays a fraction."""
    logits = torch.tensor([[2.2522, -1.3599, 2.0486], [-0.3440, -0.6978, -0.7730], [0.4688, -0.2717, 0.4738],
                           [0.0350, 0.1202, -0.1119], [1.2213, 0.7960, 1.4427], [-0.0459, 0.2727, -1.2392]],
                          dtype=torch.float64)
    labels = torch.tensor([2, 2, 0, 0, 1, 0])
    assert (logits.argmax(-1) != labels).all()
    assert metrics.aurc(logits=logits, labels=labels) == 1.0
    # the excess over the optimum (every ranking is optimal here) is 0, not 2e-16
    assert metrics.eaurc(logits=logits, labels=labels, optimum="exact") == 0.0


def test_weights_are_the_library_aurc_weights_with_threshold_ties():
    """The book's oracle and the library share one implementation of the AURC weights: tau=None
    is focalcal.scores.aurc_weights(ties="threshold"), and metrics.aurc(ties="threshold") is the
    threshold area on tied data, where it differs from the default tie rule (averaged orders)."""
    probs = torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.7, 0.3], [0.7, 0.3], [0.7, 0.3], [0.6, 0.4]],
                         dtype=torch.float64)
    labels = torch.tensor([0, 1, 1, 0, 1, 0])
    err = (probs.argmax(-1) != labels).to(torch.float64)
    key = probs.max(-1).values
    torch.testing.assert_close(S.selective_weights(key), scores.aurc_weights(key, ties="threshold"))
    area = float(S.selective_risk_area(err, key))
    assert metrics.aurc(probs, labels, ties="threshold") == pytest.approx(area, rel=1e-14)
    assert metrics.aurc(probs, labels) != pytest.approx(area, rel=1e-3)
    # distinct scores: the three tie rules agree
    s = torch.rand(50, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    w = [scores.aurc_weights(s, ties=t) for t in scores.TIES]
    torch.testing.assert_close(w[0], w[1], rtol=1e-13, atol=0)
    torch.testing.assert_close(w[0], w[2], rtol=1e-13, atol=0)


def test_weights_are_monotone_and_constant_above_tau():
    g = torch.Generator().manual_seed(1)
    s = torch.rand(300, generator=g, dtype=torch.float64)
    w = S.selective_weights(s, tau=0.4)
    order = s.argsort()
    assert bool((w[order].diff() >= -1e-15).all())
    above = w[s >= 0.4]
    assert float(above.max() - above.min()) < 1e-12


def test_tau_above_all_scores_is_the_aurc():
    g = torch.Generator().manual_seed(2)
    s, l = torch.rand(50, generator=g, dtype=torch.float64), torch.rand(50, generator=g, dtype=torch.float64)
    assert float(S.selective_risk_area(l, s, tau=2.0)) == pytest.approx(float(S.selective_risk_area(l, s)))


def test_batched_equals_rowwise_and_float32_is_accepted():
    g = torch.Generator().manual_seed(4)
    s = torch.rand(3, 4, 40, generator=g)
    l = torch.rand(40, generator=g)
    out = S.selective_risk_area(l, s, tau=0.5)
    assert out.shape == (3, 4) and out.dtype == torch.float64
    for i in range(3):
        for j in range(4):
            assert float(out[i, j]) == pytest.approx(slow_area(l.numpy(), s[i, j].numpy(), 0.5), rel=1e-10)


def test_risk_coverage_curve_hand_case_and_mean_is_aurc():
    # scores 0.9, 0.5, 0.5, 0.1 with losses 0, 1, 0, 1
    cov, risk = S.risk_coverage_curve(torch.tensor([1.0, 0, 1, 0]), torch.tensor([0.5, 0.9, 0.5, 0.1]))
    np.testing.assert_allclose(cov.numpy(), [0.25, 0.75, 0.75, 1.0])
    np.testing.assert_allclose(risk.numpy(), [0.0, 2 / 3, 2 / 3, 0.5])
    s = torch.tensor([0.5, 0.9, 0.5, 0.1])
    assert float(risk.mean()) == pytest.approx(float(S.selective_risk_area(torch.tensor([1.0, 0, 1, 0]), s)))


def test_empirical_cdf_hand_case():
    s = torch.tensor([0.2, 0.5, 0.5, 0.9])
    np.testing.assert_allclose(S.empirical_cdf(s).numpy(), [0.25, 0.75, 0.75, 1.0])
    np.testing.assert_allclose(S.empirical_cdf(s, torch.tensor([0.0, 0.5, 1.0])).numpy(), [0, 0.75, 1])


@pytest.mark.parametrize("bad, match", [
    (dict(scores=[0.1, 0.2], tau=0.05), "tau=0.05 leaves no sample"),
    (dict(scores=[0.1, 0.2], tau=float("nan")), "tau must be a number"),
    (dict(scores=[0.1, float("nan")], tau=None), "scores contains 1 NaN"),
    (dict(scores=[], tau=None), "scores is empty"),
])
def test_selective_weights_reject_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        S.selective_weights(bad["scores"], bad["tau"])


def test_area_rejects_mismatched_losses():
    with pytest.raises(ValueError, match="losses"):
        S.selective_risk_area([0.0, 1.0, 1.0], [0.1, 0.2])
    with pytest.raises(ValueError, match="at must have the leading dims of scores"):
        S.empirical_cdf(torch.rand(2, 5), torch.rand(3, 5))
    with pytest.raises(ValueError, match="at must have the leading dims of scores"):
        S.smoothed_cdf(torch.rand(2, 5), torch.rand(3, 5))


# --------------------------------------------------------------------------------------------
# smoothed CDF
# --------------------------------------------------------------------------------------------

def test_smoothed_cdf_matches_the_selective_risk_weights_of_losses():
    g = torch.Generator().manual_seed(5)
    s = torch.rand(400, generator=g, dtype=torch.float64) ** 0.3
    for nu, bins in ((0.05, 64), (0.01, 15)):
        gh = S.smoothed_cdf(s, nu=nu, n_bins=bins).clamp(1 / 401, 400 / 401)
        beta = losses.selective_risk_weights(s, coverage=1.0, nu=nu, n_bins=bins)
        np.testing.assert_allclose(beta.numpy(), (-torch.log1p(-gh)).numpy(), rtol=1e-12)


def test_smoothed_cdf_limits_and_monotonicity():
    g = torch.Generator().manual_seed(6)
    s = torch.rand(200, generator=g, dtype=torch.float64)
    at = torch.linspace(0, 1, 101, dtype=torch.float64)
    # nu -> inf: every sigmoid is 1/2
    assert float((S.smoothed_cdf(s, at, nu=1e9) - 0.5).abs().max()) < 1e-8
    # nu -> 0: whole bins counted once t passes their centre, so the error is at most the own bin
    idx = (s * 10).floor().clamp(0, 9).long()  # the documented bin of a score: floor(s * n_bins)
    own = torch.bincount(idx, minlength=10)[idx].to(torch.float64) / 200
    err = (S.smoothed_cdf(s, nu=1e-9, n_bins=10) - S.empirical_cdf(s)).abs()
    assert bool((err <= own + 1e-12).all())
    vals = S.smoothed_cdf(s, at, nu=0.03)
    assert bool((vals.diff() >= 0).all()) and float(vals.min()) > 0 and float(vals.max()) < 1


def test_smoothed_cdf_custom_edges_batched_and_errors():
    s = torch.rand(2, 30, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * 4 - 2
    out = S.smoothed_cdf(s, nu=0.1, edges=torch.linspace(-2, 2, 9))
    assert out.shape == (2, 30)
    np.testing.assert_allclose(out[1].numpy(), S.smoothed_cdf(s[1], nu=0.1, edges=torch.linspace(-2, 2, 9)).numpy())
    with pytest.raises(ValueError, match="nu"):
        S.smoothed_cdf(s, nu=0.0, edges=torch.linspace(-2, 2, 9))
    with pytest.raises(ValueError, match="inside the bin edges"):
        S.smoothed_cdf(s, nu=0.1)
    with pytest.raises(ValueError, match="edges"):
        S.smoothed_cdf(s, nu=0.1, edges=torch.tensor([0.0, 0.0, 1.0]))


# --------------------------------------------------------------------------------------------
# calibration errors of a discrete distribution
# --------------------------------------------------------------------------------------------

def test_discrete_errors_hand_case():
    # two atoms, binary: f = (0.8, 0.2) with P(y=0) = 0.6, f = (0.3, 0.7) with P(y=0) = 0.5
    w = torch.tensor([0.5, 0.5], dtype=torch.float64)
    f = torch.tensor([[0.8, 0.2], [0.3, 0.7]], dtype=torch.float64)
    eta = torch.tensor([[0.6, 0.4], [0.5, 0.5]], dtype=torch.float64)
    r = S.discrete_calibration_errors(w, f, eta, rho=1.0)
    assert r["ce"] == pytest.approx(0.5 * 0.4 + 0.5 * 0.4)
    assert r["cwece"] == pytest.approx(0.5 * (0.5 * 0.2 + 0.5 * 0.2) * 2)
    assert r["ece"] == pytest.approx(0.5 * 0.2 + 0.5 * 0.2)
    assert r["error"] == pytest.approx(0.5 * 0.4 + 0.5 * 0.5)
    brier = 0.5 * (0.6 * (0.04 + 0.04) + 0.4 * (0.64 + 0.64)) + 0.5 * (0.5 * (0.49 + 0.49) + 0.5 * (0.09 + 0.09))
    assert r["brier"] == pytest.approx(brier)


@pytest.mark.parametrize("rho", [1.0, 1.5, 2.0, 3.0])
def test_binary_distinct_atoms_have_ce_equal_two_pow_one_over_rho_cwece(rho):
    g = torch.Generator().manual_seed(8)
    m = 30
    w = torch.rand(m, generator=g, dtype=torch.float64)
    w /= w.sum()
    a = torch.rand(m, generator=g, dtype=torch.float64)
    b = torch.rand(m, generator=g, dtype=torch.float64)
    f, eta = torch.stack([a, 1 - a], -1), torch.stack([b, 1 - b], -1)
    r = S.discrete_calibration_errors(w, f, eta, rho)
    assert r["ce"] == pytest.approx(2 ** (1 / rho) * r["cwece"], rel=1e-12)


def test_grouping_merges_atoms_with_equal_predictions():
    f = torch.tensor([[0.7, 0.2, 0.1], [0.7, 0.2, 0.1], [0.2, 0.5, 0.3]], dtype=torch.float64)
    eta = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0.2, 0.5, 0.3]], dtype=torch.float64)
    w = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    merged = S.discrete_calibration_errors(torch.tensor([0.5, 0.5], dtype=torch.float64), f[1:],
                                           torch.tensor([[0.5, 0.5, 0], [0.2, 0.5, 0.3]], dtype=torch.float64), 2.0)
    split = S.discrete_calibration_errors(w, f, eta, 2.0)
    for key in ("ce", "cwece", "ece"):
        assert split[key] == pytest.approx(merged[key], rel=1e-12)


def test_empirical_measure_matches_finest_binning_metrics():
    g = torch.Generator().manual_seed(9)
    n, k = 500, 4
    p = torch.softmax(torch.randn(n, k, generator=g, dtype=torch.float64) * 2, -1)
    y = torch.randint(0, k, (n,), generator=g)
    r = S.discrete_calibration_errors(torch.full((n,), 1 / n, dtype=torch.float64), p,
                                      torch.nn.functional.one_hot(y, k).to(torch.float64))
    conf, pred = p.max(-1)
    assert r["ece"] == pytest.approx(float(metrics.calibration_error(conf, pred == y, n_bins=n, binning="mass")))
    assert r["cwece"] == pytest.approx(metrics.classwise_ece(p, y, n_bins=n, binning="mass"))
    assert r["brier"] == pytest.approx(metrics.brier(p, y))
    assert r["error"] == pytest.approx(1 - float((pred == y).double().mean()))


def test_calibrated_distribution_has_zero_errors():
    f = torch.softmax(torch.randn(20, 3, generator=torch.Generator().manual_seed(10), dtype=torch.float64), -1)
    r = S.discrete_calibration_errors(torch.full((20,), 0.05, dtype=torch.float64), f, f, rho=2.0)
    assert max(r["ce"], r["cwece"], r["ece"]) < 1e-15 and r["brier"] > 0
    assert math.isfinite(r["brier"])


@pytest.mark.parametrize("kwargs, match", [
    (dict(weights=[0.5, 0.6]), "weights"),
    (dict(rho=0.5), "rho"),
    (dict(posteriors=[[0.5, 0.5]]), "probs and posteriors must both have shape"),
])
def test_discrete_errors_reject_bad_input(kwargs, match):
    base = dict(weights=[0.5, 0.5], probs=[[0.6, 0.4], [0.1, 0.9]], posteriors=[[0.5, 0.5], [0.5, 0.5]], rho=1.0)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        S.discrete_calibration_errors(**base)
