"""Grids and temperature fits used by the theory chapters."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from focalcal_book import oracles, theory


# ------------------------------------------------------------------------------------------
# simplex_grid
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,k", [(1, 2), (4, 3), (10, 3), (6, 4), (5, 5)])
def test_simplex_grid_count_sum_and_spacing(n, k):
    grid = theory.simplex_grid(n, k)
    assert grid.shape == (math.comb(n + k - 1, k - 1), k)
    assert torch.allclose(grid.sum(-1), torch.ones(len(grid), dtype=grid.dtype))
    assert bool((grid >= 0).all())
    assert torch.allclose(grid * n, (grid * n).round())
    assert len(torch.unique(grid, dim=0)) == len(grid)


def test_simplex_grid_interior_count_and_small_case_by_hand():
    assert theory.simplex_grid(9, 3, interior=True).shape == (math.comb(8, 2), 3)
    expected = torch.tensor([[0, 0, 2], [0, 1, 1], [0, 2, 0], [1, 0, 1], [1, 1, 0], [2, 0, 0]],
                            dtype=torch.float64) / 2
    assert torch.equal(theory.simplex_grid(2, 3), expected)
    assert torch.equal(theory.simplex_grid(3, 3, interior=True), torch.full((1, 3), 1 / 3, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_simplex_grid_dtype(dtype):
    assert theory.simplex_grid(5, 3, dtype=dtype).dtype == dtype


def test_simplex_grid_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"^n must be an integer"):
        theory.simplex_grid(0)
    with pytest.raises(ValueError, match=r"^k must be an integer"):
        theory.simplex_grid(5, 1)
    with pytest.raises(ValueError, match="interior"):
        theory.simplex_grid(2, 3, interior=True)
    with pytest.raises(ValueError, match="steps"):
        theory.simplex_grid(10_000, 5)


# ------------------------------------------------------------------------------------------
# barycentric_to_cartesian
# ------------------------------------------------------------------------------------------

def test_barycentric_vertices_centroid_and_batching():
    xy = theory.barycentric_to_cartesian(torch.eye(3))
    assert torch.allclose(xy, torch.tensor([[0, 0], [1, 0], [0.5, math.sqrt(3) / 2]], dtype=torch.float64))
    centre = theory.barycentric_to_cartesian([1 / 3, 1 / 3, 1 / 3])
    assert torch.allclose(centre, torch.tensor([0.5, math.sqrt(3) / 6], dtype=torch.float64))
    batch = torch.rand(4, 5, 3, dtype=torch.float32)
    out = theory.barycentric_to_cartesian(batch)
    assert out.shape == (4, 5, 2)
    # unnormalised weights give the same point as the normalised ones
    assert torch.allclose(out, theory.barycentric_to_cartesian(batch / batch.sum(-1, keepdim=True)))


def test_barycentric_rejects_bad_input():
    with pytest.raises(ValueError, match="3 classes"):
        theory.barycentric_to_cartesian(torch.ones(2, 4))
    with pytest.raises(ValueError, match="non-negative"):
        theory.barycentric_to_cartesian([0.5, 0.7, -0.2])
    with pytest.raises(ValueError, match="NaN"):
        theory.barycentric_to_cartesian([0.5, float("nan"), 0.5])
    with pytest.raises(ValueError, match="positive sum"):
        theory.barycentric_to_cartesian([0.0, 0.0, 0.0])


# ------------------------------------------------------------------------------------------
# logit_grid
# ------------------------------------------------------------------------------------------

def test_logit_grid_constraints_and_count():
    z = theory.logit_grid(3, 2.0, 1.0)
    # (a, b) in {-2..2}^2 with |a - b| <= 2, |a| <= 2, |b| <= 2: 19 points, counted by hand
    assert z.shape == (19, 3)
    assert bool((z[:, -1] == 0).all())
    assert bool(((z.max(-1).values - z.min(-1).values) <= 2 + 1e-12).all())
    assert bool((z == torch.tensor([2.0, 2.0, 0.0], dtype=torch.float64)).all(-1).any())
    assert not bool((z == torch.tensor([2.0, -1.0, 0.0], dtype=torch.float64)).all(-1).any())
    assert theory.logit_grid(2, 3.0, 0.5).shape == (13, 2)


def test_logit_grid_covers_softmax_of_a_box():
    # every softmax output of logits in [-1, 1]^3 on a 0.5-grid is reached by the relative grid
    box = torch.cartesian_prod(*[torch.arange(-1, 1.01, 0.5, dtype=torch.float64)] * 3)
    rel = theory.logit_grid(3, 2.0, 0.5)
    p_box = torch.unique(torch.softmax(box, -1).round(decimals=10), dim=0)
    p_rel = torch.unique(torch.softmax(rel, -1).round(decimals=10), dim=0)
    assert p_box.shape == p_rel.shape and torch.allclose(p_box, p_rel)


def test_logit_grid_rejects_bad_arguments():
    with pytest.raises(ValueError, match="spread"):
        theory.logit_grid(3, -1.0, 0.1)
    with pytest.raises(ValueError, match="step"):
        theory.logit_grid(3, 1.0, 0.0)
    with pytest.raises(ValueError, match="too large"):
        theory.logit_grid(5, 10.0, 0.001)


# ------------------------------------------------------------------------------------------
# minimax_inverse_temperature
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k,beta", [(2, 0.37), (3, 2.5), (4, 1.3)])
def test_minimax_recovers_an_exact_temperature(dtype, k, beta):
    z = theory.logit_grid(k, 6.0, 0.5 if k < 4 else 1.0).to(dtype)
    target = torch.softmax(beta * z.double(), -1)
    b, err = theory.minimax_inverse_temperature(z, target, bounds=(0.1, 5.0))
    assert b == pytest.approx(beta, abs=1e-6)
    assert err < 1e-7


def test_minimax_matches_a_brute_force_scan():
    # target: a map that is not a TS map (power sharpening) -> compare with a fine scan
    z = theory.logit_grid(3, 8.0, 0.25)
    p = torch.softmax(z, -1)
    target = p**2 / (p**2).sum(-1, keepdim=True) * 0.5 + torch.softmax(3 * z, -1) * 0.5
    b, err = theory.minimax_inverse_temperature(z, target, bounds=(0.5, 5.0))
    fine = torch.linspace(0.5, 5.0, 4501, dtype=torch.float64)
    errs = torch.stack([(torch.softmax(bb * z, -1) - target).abs().max() for bb in fine])
    assert err <= float(errs.min()) + 1e-12
    assert b == pytest.approx(float(fine[errs.argmin()]), abs=2e-3)
    # the reported error is the objective at the reported b
    assert err == pytest.approx(float((torch.softmax(b * z, -1) - target).abs().max()), rel=1e-12)


def test_minimax_rejects_bad_arguments():
    z = theory.logit_grid(3, 2.0, 1.0)
    t = torch.softmax(z, -1)
    with pytest.raises(ValueError, match="bounds"):
        theory.minimax_inverse_temperature(z, t, bounds=(2.0, 1.0))
    with pytest.raises(ValueError, match="bounds"):
        theory.minimax_inverse_temperature(z, t, bounds=(0.0, 1.0))
    with pytest.raises(ValueError, match="target"):
        theory.minimax_inverse_temperature(z, t[:, :2], bounds=(0.5, 2.0))
    with pytest.raises(ValueError, match="logits"):
        theory.minimax_inverse_temperature(z[:, 0], t[:, 0], bounds=(0.5, 2.0))
    bad = t.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="target"):
        theory.minimax_inverse_temperature(z, bad, bounds=(0.5, 2.0))


# ------------------------------------------------------------------------------------------
# tightest_temperature_bounds
# ------------------------------------------------------------------------------------------

def test_bounds_of_a_ts_map_coincide():
    s = torch.linspace(-5, 5, 101, dtype=torch.float64)
    t_sharp, t_soft = theory.tightest_temperature_bounds(s, s / 0.4)
    assert t_sharp == pytest.approx(0.4, rel=1e-12) and t_soft == pytest.approx(0.4, rel=1e-12)


def test_bounds_by_hand_and_they_sandwich():
    s = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    m = np.array([-7.0, -3.0, 0.0, 3.0, 7.0])  # ratios 3.5, 3, 3, 3.5
    t_sharp, t_soft = theory.tightest_temperature_bounds(s, m)
    assert (t_sharp, t_soft) == pytest.approx((1 / 3.5, 1 / 3))
    pos = s > 0
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    assert np.all(sig(s[pos] / t_soft) <= sig(m[pos]) + 1e-15)
    assert np.all(sig(m[pos]) <= sig(s[pos] / t_sharp) + 1e-15)
    assert np.all(sig(s[~pos] / t_soft) >= sig(m[~pos]) - 1e-15)


@settings(max_examples=40, deadline=None)
@given(a=st.floats(0.1, 5.0), c=st.floats(0.0, 3.0))
def test_bounds_of_an_odd_map_property(a, c):
    # m(s) = a s + c tanh(s): ratio in (a, a + c], supremum at s -> 0, infimum at the grid edge
    s = torch.linspace(-4, 4, 801, dtype=torch.float64)
    t_sharp, t_soft = theory.tightest_temperature_bounds(s, a * s + c * torch.tanh(s))
    ratio = a + c * torch.tanh(s[s != 0]) / s[s != 0]
    assert t_sharp == pytest.approx(1 / float(ratio.max()), rel=1e-12)
    assert t_soft == pytest.approx(1 / (a + c * math.tanh(4.0) / 4.0), rel=1e-12)
    assert t_sharp <= t_soft


def test_bounds_reject_bad_input():
    s = torch.linspace(-1, 1, 5)
    with pytest.raises(ValueError, match="sign"):
        theory.tightest_temperature_bounds(s, -s)
    with pytest.raises(ValueError, match="non-zero"):
        theory.tightest_temperature_bounds(torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        theory.tightest_temperature_bounds(s, s[:3])
    with pytest.raises(ValueError, match="NaN"):
        theory.tightest_temperature_bounds(s, s * float("nan"))


# ------------------------------------------------------------------------------------------
# the focal-map oracles (focalcal_book.oracles): each printed formula against another one
# ------------------------------------------------------------------------------------------

def test_reference_map_identity_binary_closed_form_and_direct_derivative():
    import mpmath
    from fractions import Fraction

    assert theory.reference_focal_map is oracles.reference_focal_map  # one copy, used by the chapters
    out = oracles.reference_focal_map(["0.2", "0.3", "0.5"], 0.0)
    assert [float(v) for v in out] == pytest.approx([0.2, 0.3, 0.5], rel=1e-25)
    # binary: K&K Eq. (1) against their Prop. 2 closed form
    with mpmath.workdps(40):
        closed = oracles.kk_prop2_mp("0.7", 2, dps=40)
    out = oracles.reference_focal_map([Fraction(3, 10), Fraction(7, 10)], 2.0, dps=35)
    assert abs(out[1] - closed) < mpmath.mpf(10) ** -33
    # K = 3: weights 1 / l'(q) with l' from mpmath's numerical derivative
    q = ["0.1", "0.25", "0.65"]
    with mpmath.workdps(30):
        w = [1 / mpmath.diff(lambda x: -(1 - x) ** 1.5 * mpmath.log(x), mpmath.mpf(v)) for v in q]
        expected = [x / mpmath.fsum(w) for x in w]
    got = oracles.reference_focal_map(q, 1.5)
    assert all(abs(a - b) < 1e-20 for a, b in zip(got, expected))


def test_reference_map_reads_floats_by_repr_and_tensors():
    exact = oracles.reference_focal_map(["0.33", "0.67"], "0.5")
    assert oracles.reference_focal_map([0.33, 0.67], 0.5) == exact
    assert oracles.reference_focal_map(torch.tensor([0.33, 0.67], dtype=torch.float64), 0.5) == exact


def test_reference_map_rejects_bad_input():
    with pytest.raises(ValueError, match="sum to 1"):
        oracles.reference_focal_map([0.2, 0.2], 1.0)
    with pytest.raises(ValueError, match="open interval"):
        oracles.reference_focal_map([0.0, 1.0], 1.0)
    with pytest.raises(ValueError, match=r"^gamma must"):
        oracles.reference_focal_map([0.5, 0.5], -2.0)
    with pytest.raises(ValueError, match="at least 2"):
        oracles.reference_focal_map([1.0], 1.0)
    with pytest.raises(ValueError, match=r"^dps must"):
        oracles.reference_focal_map([0.5, 0.5], 1.0, dps=10)


@pytest.mark.parametrize("gamma", [-1.0, -0.5, 0.5, 2.0, 7.0])
def test_float64_oracles_agree_with_each_other_and_with_mpmath(gamma):
    import mpmath

    rng = np.random.default_rng(3)
    q = rng.dirichlet(np.ones(4), size=50).clip(1e-4, None)
    q /= q.sum(-1, keepdims=True)
    # K&K Eq. (1) and Charoenphakdee's Psi are the same map, typed from two papers
    np.testing.assert_allclose(oracles.kk_eq1(q, gamma), oracles.psi_charoenphakdee(q, gamma), rtol=1e-12)
    rows = [[mpmath.mpf(float(x)) for x in row] for row in q[:5]]
    with mpmath.workdps(40):
        rows = [[x / mpmath.fsum(row) for x in row] for row in rows]  # on the simplex at 40 digits
    ref = np.array([[float(v) for v in oracles.reference_focal_map(row, gamma)] for row in rows])
    np.testing.assert_allclose(oracles.kk_eq1(q[:5], gamma), ref, rtol=1e-12)
    # Mukhoti's g is Charoenphakdee's phi = -v l'(v)
    v = np.array([1e-3, 0.1, 0.5, 0.9])
    np.testing.assert_allclose(oracles.g_mukhoti(v, gamma), [float(oracles.phi_mp(x, gamma)) for x in v],
                               rtol=1e-12)
    # K&K Prop. 3's logit form is the log-odds of their Prop. 2 map
    for s in [-3.0, 0.25, 2.0]:
        p2 = oracles.kk_prop2_mp(1 / (1 + math.exp(-s)), gamma)
        with mpmath.workdps(50):
            assert abs(oracles.kk_prop3_logit_mp(s, gamma) - mpmath.log(p2 / (1 - p2))) < mpmath.mpf(10) ** -12


def test_mpmath_oracles_reject_bad_input():
    with pytest.raises(ValueError, match=r"^q must"):
        oracles.kk_prop2_mp(1.0, 1.0)
    with pytest.raises(ValueError, match=r"^gamma must"):
        oracles.kk_prop2_mp(0.5, -1.5)
    with pytest.raises(ValueError, match=r"^s must"):
        oracles.kk_prop3_logit_mp(float("inf"), 1.0)
    with pytest.raises(ValueError, match=r"^v must"):
        oracles.phi_mp(0.0, 1.0)


# ------------------------------------------------------------------------------------------
# refute_at
# ------------------------------------------------------------------------------------------

def test_refute_at_accepts_real_counterexamples_and_rejects_fake_ones():
    import sympy as sp

    from focalcal_book import verify

    x = sp.symbols("x", positive=True)
    v = theory.refute_at("log(1 + x) = x", sp.log(1 + x), x, {x: "0.5"})
    assert v.status == verify.REFUTED and "x = 0.5" in v.detail
    v = theory.refute_at("x^2 <= x", x**2, x, {x: 2}, relation="<=")
    assert v.status == verify.REFUTED
    with pytest.raises(AssertionError, match="not a counterexample"):
        theory.refute_at("log x <= x - 1", sp.log(x), x - 1, {x: 3}, relation="<=")
    with pytest.raises(AssertionError, match="not a counterexample"):
        # equal to 40 digits: not a refutation of the identity
        theory.refute_at("sin^2 + cos^2 = 1", sp.sin(x) ** 2 + sp.cos(x) ** 2, 1, {x: "0.3"})
    with pytest.raises(ValueError, match="relation"):
        theory.refute_at("c", x, x, {x: 1}, relation="~")
    with pytest.raises(ValueError, match="values for"):
        theory.refute_at("c", x + sp.Symbol("y"), x, {x: 1})


# ------------------------------------------------------------------------------------------
# refine_worst_logits / adaptive_minimax_inverse_temperature
# ------------------------------------------------------------------------------------------

def _sharpen(z):
    return torch.softmax(2.0 * z, -1)


def test_refine_finds_the_peak_between_grid_points_and_stays_in_the_box():
    coarse = theory.logit_grid(3, 4.0, 2.0)
    dense = theory.logit_grid(3, 4.0, 0.02)
    disc = lambda z: (torch.softmax(z, -1) - _sharpen(z)).abs().amax(-1)  # noqa: E731
    refined = theory.refine_worst_logits(coarse, _sharpen, 1.0, spread=4.0, n_points=8, steps=200, lr=0.3)
    assert refined.shape == (8, 3)
    assert bool((refined[:, -1] == 0).all())
    assert bool(((refined.max(-1).values - refined.min(-1).values) <= 4.0 + 1e-9).all())
    assert float(disc(refined).max()) > float(disc(coarse).max()) + 1e-3
    assert float(disc(refined).max()) == pytest.approx(float(disc(dense).max()), abs=2e-4)


@pytest.mark.parametrize("k", [2, 3])
def test_adaptive_minimax_recovers_an_exact_temperature_and_beats_the_grid(k):
    b, err, z = theory.adaptive_minimax_inverse_temperature(lambda x: torch.softmax(1.7 * x, -1), k, spread=6.0,
                                                            step=1.0, bounds=(0.5, 4.0), xatol=1e-9)
    assert b == pytest.approx(1.7, abs=1e-6) and err < 1e-7
    assert z.shape[0] > theory.logit_grid(k, 6.0, 1.0).shape[0]
    # a map that is not TS: the adaptive error is at least the coarse-grid error at its own b
    target = lambda x: 0.5 * torch.softmax(3 * x, -1) + 0.5 * torch.softmax(x, -1)  # noqa: E731
    b2, err2, z2 = theory.adaptive_minimax_inverse_temperature(target, k, spread=6.0, step=1.5, bounds=(0.5, 4.0))
    assert err2 == pytest.approx(float((torch.softmax(b2 * z2, -1) - target(z2)).abs().max()), rel=1e-12)
    dense = theory.logit_grid(k, 6.0, 0.05)
    b_d, err_d = theory.minimax_inverse_temperature(dense, target(dense), bounds=(0.5, 4.0))
    assert err2 == pytest.approx(err_d, abs=2e-3) and b2 == pytest.approx(b_d, abs=2e-2)


def test_refine_rejects_bad_arguments():
    z = theory.logit_grid(3, 2.0, 1.0)
    with pytest.raises(ValueError, match="inv_temperature"):
        theory.refine_worst_logits(z, _sharpen, -1.0, spread=2.0)
    with pytest.raises(ValueError, match="spread"):
        theory.refine_worst_logits(z, _sharpen, 1.0, spread=0.0)
    with pytest.raises(ValueError, match="logits"):
        theory.refine_worst_logits(z[:, 0], _sharpen, 1.0, spread=2.0)
