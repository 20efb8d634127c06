"""The claim checkers must accept true propositions and fail on false ones."""

import mpmath
import pytest
import sympy as sp

from focalcal_book import verify

x, g = sp.symbols("x gamma", positive=True)


def test_symbolic_identity_is_verified_symbolically():
    v = verify.check_identity("log(x^2) = 2 log x", sp.log(x**2), 2 * sp.log(x), {x: sp.Interval.open(0, 1)})
    assert v.status == verify.VERIFIED_SYMBOLIC


def test_identity_sympy_cannot_close_falls_back_to_numeric():
    # Dilogarithm reflection: true, but simplify leaves it unclosed.
    lhs = sp.polylog(2, x) + sp.polylog(2, 1 - x)
    rhs = sp.pi**2 / 6 - sp.log(x) * sp.log(1 - x)
    v = verify.check_identity("Euler reflection", lhs, rhs, {x: sp.Interval.open(0, 1)})
    assert v.status in (verify.VERIFIED_NUMERIC, verify.VERIFIED_SYMBOLIC)
    if v.status == verify.VERIFIED_NUMERIC:
        assert "30 digits" in v.method


def test_false_identity_fails():
    with pytest.raises(AssertionError, match="claim failed: wrong"):
        verify.check_identity("wrong", sp.log(1 + x), x - x**2 / 2, {x: sp.Interval.open(0, 1)})


def test_false_identity_failing_only_near_an_edge_is_caught():
    # equal except within 1e-6 of x = 1: the edge points of the grid must find it
    bump = sp.exp(-(1 - x) * 10**7)
    with pytest.raises(AssertionError):
        verify.check_identity("edge", x + bump, x, {x: sp.Interval.open(0, 1)})


def test_inequality_true_and_false():
    v = verify.check_inequality("log x <= x - 1", sp.log(x), x - 1, {x: sp.Interval.open(0, 5)})
    assert v.status == verify.VERIFIED_NUMERIC
    with pytest.raises(AssertionError, match="x - 1 <= log x"):
        verify.check_inequality("x - 1 <= log x", x - 1, sp.log(x), {x: sp.Interval.open(0, 5)})
    with pytest.raises(AssertionError):  # equality at the edge x = 1 violates strictness
        verify.check_inequality("strict", sp.log(x), x - 1, {x: sp.Interval(1, 2)}, strict=True)


def test_domain_grid_covers_edges_and_is_seeded():
    grid = verify.domain_grid({x: sp.Interval.open(0, 1), g: sp.Interval(0, sp.oo)}, n=4, seed=3)
    xs = sorted({p[x] for p in grid})
    gs = sorted({p[g] for p in grid})
    assert xs[0] < mpmath.mpf("1e-11") and xs[-1] > 1 - mpmath.mpf("1e-11")
    assert 0 < xs[0] and xs[-1] < 1
    assert gs[0] == 0 and gs[-1] >= 10**6
    assert grid == verify.domain_grid({x: sp.Interval.open(0, 1), g: sp.Interval(0, sp.oo)}, n=4, seed=3)


def test_domain_grid_rejects_non_intervals():
    with pytest.raises(ValueError, match="sympy.Interval"):
        verify.domain_grid({x: (0, 1)})
    with pytest.raises(ValueError, match="at least one"):
        verify.domain_grid({})


def test_check_close_and_true():
    assert verify.check_close("pi", 3.14159265, float(sp.pi), rtol=1e-8).status == verify.VERIFIED_NUMERIC
    with pytest.raises(AssertionError):
        verify.check_close("pi", 3.14, float(sp.pi), rtol=1e-6)
    with pytest.raises(AssertionError, match="counterexample"):
        verify.check_true("counterexample", False, method="search")


def test_ledger_table_and_status_override():
    ledger = verify.Ledger("Test (2026)")
    ledger.add(verify.check_true("a", True, method="m"))
    ledger.add(verify.check_true("b", True, method="m"), status=verify.VERIFIED_CORRECTED, detail="fixed")
    t = ledger.table()
    assert list(t.columns) == ["source", "claim", "status", "method", "detail"]
    assert t["source"].unique().tolist() == ["Test (2026)"]
    assert t.loc[1, "status"] == verify.VERIFIED_CORRECTED and t.loc[1, "detail"] == "fixed"
    assert ledger.counts() == {"n_claims": 2, "n_symbolic": 0, "n_numeric": 1, "n_corrected": 1,
                               "n_refuted": 0, "n_cited": 0}
    with pytest.raises(ValueError, match="status"):
        verify.Verdict("c", "probably", "m")


def test_numeric_residuals_rejects_uncovered_symbols():
    with pytest.raises(ValueError, match="does not cover"):
        verify.numeric_residuals(x + g, {x: sp.Interval(0, 1)})


def test_undefined_point_fails_with_the_point_named(monkeypatch):
    # (x - 1/2) / (x - 1/2) = 1 except at x = 1/2, which the grid (n=1) hits exactly
    half = x - sp.Rational(1, 2)
    lhs = sp.Mul(half, sp.Pow(half, -1, evaluate=False), evaluate=False)
    monkeypatch.setattr(verify, "symbolic_zero", lambda *a, **k: False)
    with pytest.raises(AssertionError, match="cannot evaluate at"):
        verify.check_identity("removable singularity", lhs, sp.Integer(1), {x: sp.Interval(0.25, 0.75)}, n=1)
