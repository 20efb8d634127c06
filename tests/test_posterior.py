"""Tests of focalcal_book.posterior against direct slow formulas, SciPy and brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from focalcal import maps
from focalcal_book import posterior as P
from focalcal_book.theory import simplex_grid


def slow_focal_risk(q, eta, gamma):
    total = 0.0
    for qi, ei in zip(q, eta):
        if ei == 0:
            continue
        total += ei * (-(1 - qi) ** gamma * math.log(qi)) if qi > 0 else math.inf
    return total


# ------------------------------------------------------------------------------------------
# sampling
# ------------------------------------------------------------------------------------------

def test_sample_simplex_shape_sum_seed_and_dtype():
    x = P.sample_simplex(1001, 7, seed=3)
    assert x.shape == (1001, 7) and x.dtype == torch.float64
    assert torch.allclose(x.sum(-1), torch.ones(1001, dtype=torch.float64), atol=1e-12)
    assert bool((x > 0).all())
    assert torch.equal(x, P.sample_simplex(1001, 7, seed=3))
    assert not torch.equal(x, P.sample_simplex(1001, 7, seed=4))
    assert P.sample_simplex(10, 3, dtype=torch.float32).dtype == torch.float32
    # the mixture reaches both the vertices and the centre
    top = x.amax(-1)
    assert float(top.max()) > 0.9 and float(top.min()) < 0.25


@pytest.mark.parametrize("kwargs, name", [({"n": 0, "n_classes": 3}, "n"),
                                          ({"n": 5, "n_classes": 1}, "n_classes"),
                                          ({"n": 5, "n_classes": 3, "concentrations": (1.0, -1.0)}, "concentrations"),
                                          ({"n": 5, "n_classes": 3, "concentrations": ()}, "concentrations")])
def test_sample_simplex_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name} must"):
        P.sample_simplex(**kwargs)


# ------------------------------------------------------------------------------------------
# focal risk
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0, 3.0])
def test_focal_risk_matches_direct_formula(dtype, gamma):
    q = P.sample_simplex(50, 4, seed=1)
    eta = P.sample_simplex(50, 4, seed=2)
    got = P.focal_risk(q.to(dtype), eta.to(dtype), gamma)
    want = torch.tensor([slow_focal_risk(a.tolist(), b.tolist(), gamma) for a, b in zip(q, eta)],
                        dtype=torch.float64)
    assert got.dtype == dtype and got.shape == (50,)
    rtol = 1e-5 if dtype == torch.float32 else 1e-12
    assert torch.allclose(got.double(), want, rtol=rtol)


def test_focal_risk_zero_posterior_entries_and_broadcasting():
    eta = torch.tensor([0.7, 0.3, 0.0], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]], dtype=torch.float64)
    r = P.focal_risk(q, eta, 2.0)
    assert r.shape == (2,)
    assert math.isclose(float(r[0]), slow_focal_risk([0.5, 0.5], [0.7, 0.3], 2.0), rel_tol=1e-14)
    assert r[1] == math.inf  # no mass on a class with posterior 0.7


def test_focal_risk_rejects_mismatched_classes_and_negative_gamma():
    with pytest.raises(ValueError, match="classes"):
        P.focal_risk(torch.full((2, 3), 1 / 3), torch.full((2, 4), 0.25), 1.0)
    with pytest.raises(ValueError, match="gamma"):
        P.focal_risk(torch.full((3,), 1 / 3), torch.full((3,), 1 / 3), -0.5)
    with pytest.raises(ValueError, match="eta"):
        P.focal_risk(torch.full((3,), 1 / 3), torch.tensor([0.5, 0.6, 0.1]), 1.0)


# ------------------------------------------------------------------------------------------
# the Newton oracle
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("gamma", [0.3, 1.0, 4.0])
def test_minimizer_binary_matches_scipy(gamma):
    t = np.array([0.01, 0.2, 0.5, 0.73, 0.95, 0.999])
    eta = torch.tensor(np.stack([t, 1 - t], 1))
    got = P.focal_risk_minimizer(eta, gamma)[:, 0].numpy()
    for ti, gi in zip(t, got):
        res = minimize_scalar(lambda x: slow_focal_risk([x, 1 - x], [ti, 1 - ti], gamma),
                              bounds=(1e-12, 1 - 1e-12), method="bounded", options={"xatol": 1e-12})
        assert abs(gi - res.x) < 1e-7


def test_minimizer_three_classes_beats_a_dense_grid():
    eta = P.sample_simplex(40, 3, seed=5)
    q = P.focal_risk_minimizer(eta, 2.0)
    grid = simplex_grid(200, 3, interior=True)
    w_grid = P.focal_risk(grid[None, :, :], eta[:, None, :], 2.0).amin(-1)
    w_q = P.focal_risk(q, eta, 2.0)
    assert bool((w_q <= w_grid + 1e-15).all())
    # and it is close to the best grid point (grid spacing 1/200)
    assert float((w_grid - w_q).max()) < 1e-2


@pytest.mark.parametrize("gamma", [0.01, 1.0, 5.0, 20.0])
def test_minimizer_agrees_with_closed_form_inverse_map(gamma):
    eta = P.sample_simplex(120, 5, seed=7)
    q = P.focal_risk_minimizer(eta, gamma)
    qc = maps.inverse_focal_map(eta, gamma)
    assert float(((q - qc).abs() / qc).max()) < 1e-11
    assert float(P.stationarity_spread(q, eta, gamma).max()) < 1e-10


def test_minimizer_special_rows_dtype_and_gamma_zero():
    eta = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.0, 0.8], [1 - 1e-15, 1e-15, 0.0]],
                       dtype=torch.float64)
    q = P.focal_risk_minimizer(eta, 3.0)
    assert torch.equal(q[0], eta[0])
    assert torch.allclose(q[1], eta[1], atol=1e-15)          # uniform on a subset: Prop. 6
    assert q[2, 1] == 0 and float(q[2, 2]) < 0.8             # eta-under-confident (Cor. 10)
    assert bool(torch.isfinite(q).all())
    assert torch.equal(P.focal_risk_minimizer(eta, 0.0), eta)
    q32 = P.focal_risk_minimizer(eta.float(), 1.0)
    assert q32.dtype == torch.float32 and bool(torch.isfinite(q32).all())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=3, max_size=6), st.floats(0.0, 6.0),
       st.lists(st.floats(0.01, 1.0), min_size=6, max_size=6))
def test_minimizer_is_never_beaten_by_another_point(weights, gamma, other):
    eta = torch.tensor(weights, dtype=torch.float64)
    eta = eta / eta.sum()
    alt = torch.tensor(other[: len(weights)], dtype=torch.float64)
    alt = alt / alt.sum()
    q = P.focal_risk_minimizer(eta, gamma)
    assert float(P.focal_risk(q, eta, gamma)) <= float(P.focal_risk(alt, eta, gamma)) + 1e-13


def test_stationarity_spread_detects_non_minimisers():
    eta = torch.tensor([[0.6, 0.3, 0.1], [0.6, 0.4, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    s_eta = P.stationarity_spread(eta, eta, 2.0)       # eta itself is not the focal minimiser
    assert bool((s_eta[:2] > 1e-2).all()) and s_eta[2] == 0
    q = maps.inverse_focal_map(eta, 2.0)
    assert float(P.stationarity_spread(q, eta, 2.0).max()) < 1e-12
    bad = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)   # mass off the support of eta[1]
    assert P.stationarity_spread(bad, eta[1], 2.0) == math.inf
    assert float(P.stationarity_spread(eta, eta, 0.0).max()) < 1e-15  # cross-entropy is proper


# ------------------------------------------------------------------------------------------
# Def. 7, order preservation, S^K
# ------------------------------------------------------------------------------------------

def test_confidence_gap_and_classification():
    eta = torch.tensor([[0.7, 0.2, 0.1], [0.3, 0.3, 0.4], [0.5, 0.5, 0.0]])
    q = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.35, 0.45], [0.5, 0.5, 0.0]])
    assert torch.allclose(P.confidence_gap(q, eta), torch.tensor([-0.1, 0.05, 0.0]), atol=1e-7)
    codes = P.classify_confidence(q, eta, atol=1e-7)
    assert codes.tolist() == [P.ETA_UNDERCONFIDENT, P.ETA_OVERCONFIDENT, P.ETA_EXACT]
    with pytest.raises(ValueError, match="atol"):
        P.classify_confidence(q, eta, atol=-1.0)


def brute_force_order(a, b):
    return all(not (x < y) or (u < v) for (x, u), (y, v) in itertools.product(zip(a, b), repeat=2))


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 7).flatmap(lambda k: st.tuples(st.lists(st.integers(0, 3), min_size=k, max_size=k),
                                                      st.lists(st.integers(0, 3), min_size=k, max_size=k))))
def test_strictly_order_preserving_matches_brute_force(ab):
    a, b = ab
    got = bool(P.strictly_order_preserving(torch.tensor([a], dtype=torch.float64),
                                           torch.tensor([b], dtype=torch.float64))[0])
    assert got == brute_force_order(a, b)


def test_strictly_order_preserving_batched_and_errors():
    a = torch.tensor([[1.0, 2, 2, 3], [1, 2, 2, 3]])
    b = torch.tensor([[0.0, 1, 5, 6], [0, 5, 1, 1]])
    assert P.strictly_order_preserving(a, b).tolist() == [True, False]
    with pytest.raises(ValueError, match="same shape"):
        P.strictly_order_preserving(a, b[:, :3])
    with pytest.raises(ValueError, match="finite"):
        P.strictly_order_preserving(torch.tensor([[1.0, float("nan")]]), torch.tensor([[1.0, 2.0]]))


def test_in_uniform_support_set():
    v = torch.tensor([[1.0, 0, 0, 0], [0.5, 0, 0.5, 0], [0.25] * 4, [0.4, 0.4, 0.2, 0.0]], dtype=torch.float64)
    assert P.in_uniform_support_set(v).tolist() == [True, True, True, False]


# ------------------------------------------------------------------------------------------
# footnote 2 search
# ------------------------------------------------------------------------------------------

def test_max_eta_overconfidence_finds_k4_but_not_k3():
    gap4, q4 = P.max_eta_overconfidence(4, 0.3, n_grid=400, n_random=2000)
    assert gap4 > 5e-5
    assert math.isclose(float(q4.sum()), 1.0, rel_tol=1e-12) and bool((q4[:-1] >= q4[1:]).all())
    eta4 = maps.focal_map(q4, 0.3)
    assert math.isclose(float(q4.max() - eta4.max()), gap4, rel_tol=1e-9)
    for gamma in (0.01, 0.3, 2.0):
        gap3, _ = P.max_eta_overconfidence(3, gamma, n_grid=400, n_random=2000)
        assert gap3 <= 1e-12
    # with K = 4 over-confidence needs tau_uc(gamma) > 1/3, i.e. gamma < gamma_star(1/3) ~ 1.43
    gap_hi, _ = P.max_eta_overconfidence(4, 2.0, n_grid=400, n_random=2000)
    assert gap_hi <= 1e-12


@pytest.mark.parametrize("k, p0", [(4, 1 / 3), (5, 1 / 4)])
def test_max_eta_overconfidence_threshold_is_gamma_star_of_one_over_k_minus_one(k, p0):
    # near (1/(K-1), ..., 1/(K-1), 0) the sign of the gap is that of phi(1/(K-1)) - 1
    g_lim = maps.gamma_star(p0)
    below, _ = P.max_eta_overconfidence(k, 0.97 * g_lim, n_grid=400, n_random=1000)
    above, _ = P.max_eta_overconfidence(k, 1.03 * g_lim, n_grid=400, n_random=1000)
    assert below > 1e-10 and above <= 1e-12
