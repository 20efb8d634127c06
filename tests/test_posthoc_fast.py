"""The fast focal-temperature-scaling search selects exactly what the full float64 search selects.

``FocalTemperatureScaling(method="fast")`` (the default) evaluates only the pairs that a lower
bound cannot rule out; ``method="exact"`` scores every pair. The selected ``(gamma_ev, T)`` must be
the same and its score the same to 1e-12, on the 17 released networks (local copies of the
published logits, never downloaded here), on random problems, and on adversarial ones: ties
(duplicated rows, tied logits, repeated grid values, all-equal scores), saturated rows (logits
+-1e4), K = 2, K = 1000 and 10k x 1000. The bounds themselves are checked against the exact
score grid. These tests check correctness only; speed is measured by ``bench/bench_posthoc.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from focalcal import _fts_bounds as fb
from focalcal import _fts_search as fts
from focalcal.posthoc import KK_GAMMAS, KK_TEMPERATURES, FocalTemperatureScaling

CRITERIA = ("ece_mass", "ece", "nll")


def _fit_both(z, y, **kw) -> tuple[FocalTemperatureScaling, FocalTemperatureScaling]:
    fast = FocalTemperatureScaling(method="fast", **kw).fit(z, y)
    exact = FocalTemperatureScaling(method="exact", **kw).fit(z, y)
    return fast, exact


def _assert_same_selection(fast: FocalTemperatureScaling, exact: FocalTemperatureScaling) -> None:
    assert (fast.gamma_ev_, fast.temperature_) == (exact.gamma_ev_, exact.temperature_)
    assert abs(fast.best_score_ - exact.best_score_) <= 1e-12
    if fast.search == "line":
        assert fast.line_ == exact.line_
    # the exact fit evaluates every pair; the fast one fewer (or all, on tiny problems)
    assert fast.n_exact_ <= exact.n_exact_


def _problem(n: int, k: int, seed: int, scale: float = 3.0, temp: float = 1.7, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z / (scale * temp / 3), -1), 1, generator=g).squeeze(-1)
    return z.to(dtype), y


# ------------------------------------------------------------------------ released networks ---

def _released(root: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The fitting sets of the 17 networks: Mukhoti et al.'s validation splits, and a fixed random
    half (seed 0) of the test logits of the five CIFAR-10 ResNet-50 runs (they have no validation)."""
    out = {}
    for d in sorted((root / "mukhoti-pretrained-logits").iterdir()):
        if (d / "val_logits.npy").is_file():
            out[d.name] = (np.load(d / "val_logits.npy"), np.load(d / "val_labels.npy"))
    for f in sorted((root / "cifar10-resnet50-logits").glob("*_test.npz")):
        a = np.load(f)
        perm = torch.randperm(len(a["targets"]), generator=torch.Generator().manual_seed(0))[:5000].numpy()
        out["resnet50_" + f.name[:-len("_test.npz")]] = (a["logits"][perm], a["targets"][perm])
    return out


@pytest.fixture(scope="module")
def released(shared_data_root):
    nets = _released(shared_data_root)
    assert len(nets) == 17, sorted(nets)
    return nets


RELEASED = ["cifar100_densenet121_brier", "cifar100_resnet110_brier", "cifar100_resnet50_brier",
            "cifar100_wide_resnet_brier", "cifar10_densenet121_brier", "cifar10_densenet121_flsd53",
            "cifar10_resnet110_brier", "cifar10_resnet110_flsd53", "cifar10_resnet50_brier",
            "cifar10_resnet50_flsd53", "cifar10_wide_resnet_brier", "cifar10_wide_resnet_flsd53",
            "resnet50_aurc", "resnet50_ce", "resnet50_dual_focal", "resnet50_ece_kde", "resnet50_focal"]


# three of the 17 stand for the rest in `make test-fast` (a CIFAR-100 and a CIFAR-10 network of
# Mukhoti et al., a ResNet-50 of Zhou et al.); `make test` checks all 17
REPRESENTATIVE = ("cifar100_resnet50_brier", "cifar10_resnet110_flsd53", "resnet50_ce")


@pytest.mark.parametrize("name", [n if n in REPRESENTATIVE else pytest.param(n, marks=pytest.mark.exhaustive)
                                  for n in RELEASED])
def test_released_networks_paper_protocol(name, released):
    """K&K's protocol (9 x 500 grid, equal-mass 15-bin ECE), full grid and the 3m line search."""
    z, y = (torch.from_numpy(a) for a in released[name])
    for search in ("grid", "line"):
        fast, exact = _fit_both(z, y.long(), criterion="ece_mass", search=search)
        _assert_same_selection(fast, exact)
        if search == "grid":
            i, j = KK_GAMMAS.index(fast.gamma_ev_), KK_TEMPERATURES.index(fast.temperature_)
            assert fast.best_score_ == float(exact.scores_[i, j])


@pytest.mark.parametrize("name", ["cifar10_resnet110_brier", "cifar10_wide_resnet_flsd53", "resnet50_ce",
                                  "resnet50_focal"])
def test_released_networks_other_criteria(name, released):
    """Equal-width ECE and NLL selection on four CIFAR-10 networks (one per training loss family;
    the K = 100 ones are covered by the paper's criterion above and by the random K = 50 and
    K = 1000 cases below)."""
    z, y = (torch.from_numpy(a) for a in released[name])
    for criterion in ("ece", "nll"):
        _assert_same_selection(*_fit_both(z, y.long(), criterion=criterion))


# ------------------------------------------------------------------------------ random cases ---

@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("criterion", CRITERIA)
def test_random_problems(seed, criterion):
    rng = np.random.default_rng(seed)
    n, k = [(300, 3), (1000, 10), (500, 50), (2000, 5), (150, 20), (800, 7)][seed]
    z, y = _problem(n, k, seed, scale=float(rng.choice([0.5, 3.0, 12.0])), temp=float(rng.uniform(0.5, 3)))
    # unsorted grids with repeated values and gammas near -1 and large
    temps = np.round(rng.uniform(0.05, 6.0, size=60), 2)
    temps[::7] = temps[0]
    gammas = np.unique(np.concatenate([[-0.95, 0.0, 20.0], np.round(rng.uniform(-0.9, 6.0, size=6), 2)]))
    rng.shuffle(gammas)
    for search in ("grid", "line"):
        fast, exact = _fit_both(z, y, gammas=gammas, temperatures=temps, criterion=criterion, search=search)
        _assert_same_selection(fast, exact)


@pytest.mark.parametrize("criterion", CRITERIA)
def test_kk_grid_on_a_large_random_problem(criterion):
    z, y = _problem(4000, 30, 11, dtype=torch.float32)
    _assert_same_selection(*_fit_both(z, y, criterion=criterion))


# -------------------------------------------------------------------------- adversarial cases ---

@pytest.mark.parametrize("criterion", CRITERIA)
def test_ties(criterion):
    """Duplicated rows with different labels, rows with tied top logits, all-equal rows, repeated
    temperatures: confidences tie exactly, and equal-mass bin edges fall inside tie groups."""
    z, y = _problem(400, 6, 3)
    z = torch.cat([z, z[:150], z[:150], torch.zeros(40, 6)])  # duplicates and all-equal rows
    z[:60, 1] = z[:60, 0] = z[:60].max(-1).values  # tied top logits
    y = torch.cat([y, (y[:150] + 1) % 6, y[:150], torch.arange(40) % 6])
    temps = [0.5, 1.0, 1.0, 1.5, 2.0, 0.25, 3.0, 1.5] * 4
    for search in ("grid", "line"):
        _assert_same_selection(*_fit_both(z, y, temperatures=temps, criterion=criterion, search=search))


@pytest.mark.parametrize("criterion", CRITERIA)
def test_all_scores_tie(criterion):
    """Uniform rows: every pair has the same score, the tie rule alone decides."""
    z, y = torch.zeros(30, 4, dtype=torch.float64), torch.arange(30) % 4
    fast, exact = _fit_both(z, y, gammas=(0.5, -0.25, 1.0, 0.0), temperatures=(0.5, 2.0, 1.0, 1.5),
                            criterion=criterion)
    _assert_same_selection(fast, exact)
    assert (fast.gamma_ev_, fast.temperature_) == (0.0, 1.0)


@pytest.mark.parametrize("criterion", CRITERIA)
def test_saturated_rows(criterion):
    """Logits of order 1e4: softmax saturates to one-hot at every temperature of the grid."""
    z, y = _problem(600, 8, 5)
    z[:400] *= 3000.0
    z[400:450] = torch.sign(z[400:450]) * 1e4
    for search in ("grid", "line"):
        _assert_same_selection(*_fit_both(z, y, criterion=criterion, search=search))


@pytest.mark.parametrize("criterion", CRITERIA)
def test_two_classes(criterion):
    z, y = _problem(1500, 2, 6)
    for search in ("grid", "line"):
        _assert_same_selection(*_fit_both(z, y, criterion=criterion, search=search))


@pytest.mark.parametrize("criterion", CRITERIA)
def test_thousand_classes(criterion):
    z, y = _problem(300, 1000, 7, scale=2.0)
    temps = np.arange(1, 201) / 40  # 0.025 .. 5
    _assert_same_selection(*_fit_both(z, y, temperatures=temps, criterion=criterion))


def test_gammas_beyond_the_bounds_range_fall_back_to_the_exact_search():
    z, y = _problem(200, 5, 8)
    fast, exact = _fit_both(z, y, gammas=(0.0, 1.0, 2.0 * fts.BIG_GAMMA), temperatures=(0.5, 1.0, 2.0))
    _assert_same_selection(fast, exact)
    assert fast.n_exact_ == exact.n_exact_ == 9


# ------------------------------------------------------------------- the fitted attributes ---

def test_scores_and_candidates_of_a_fast_fit_are_the_exact_ones():
    z, y = _problem(500, 10, 9)
    temps = np.arange(1, 101) / 20
    for search in ("grid", "line"):
        fast, exact = _fit_both(z, y, temperatures=temps, criterion="ece_mass", search=search)
        assert fast.n_exact_ < exact.n_exact_
        if search == "grid":
            torch.testing.assert_close(fast.scores_, exact.scores_, rtol=0, atol=0)
        torch.testing.assert_close(fast.candidates_, exact.candidates_, rtol=0, atol=0)


def test_fast_fit_state_dict_round_trip():
    z, y = _problem(300, 5, 10)
    fast = FocalTemperatureScaling(temperatures=[0.5, 1.0, 2.0]).fit(z, y)
    fresh = FocalTemperatureScaling(temperatures=[0.5, 1.0, 2.0])
    fresh.load_state_dict(fast.state_dict())  # scores_ never accessed: not computed, not stored
    assert (fresh.gamma_ev_, fresh.temperature_, fresh.best_score_) == (fast.gamma_ev_, fast.temperature_, fast.best_score_)
    assert fresh.scores_ is None
    torch.testing.assert_close(fresh.predict_proba(z), fast.predict_proba(z))
    fast.scores_  # computed now, and then travels
    fresh.load_state_dict(fast.state_dict())
    torch.testing.assert_close(fresh.scores_, fast.scores_)


def test_method_is_validated():
    with pytest.raises(ValueError, match="method"):
        FocalTemperatureScaling(method="approximate")


def test_fast_fit_leaves_torch_threads_as_they_were():
    z, y = _problem(300, 5, 12)
    before = torch.get_num_threads()
    FocalTemperatureScaling(temperatures=[0.5, 1.0]).fit(z, y)
    assert torch.get_num_threads() == before


# ------------------------------------------------------------------------------ the bounds ---

@pytest.mark.parametrize("criterion", CRITERIA)
@pytest.mark.parametrize("k", [2, 4, 12])
def test_box_bounds_are_lower_bounds(criterion, k):
    """Every bound over a box of (gamma, T) is at most the exact score of every pair in the box."""
    z, y = _problem(400, k, 13 + k, scale=4.0)
    z[:30] *= 500.0  # saturated rows
    prob = fts.Problem(z, y, dedupe=criterion != "nll")
    gammas = np.array([-0.9, -0.5, 0.0, 0.3, 1.0, 2.5, 5.0, 30.0])
    temps = np.array([0.02, 0.1, 0.3, 0.5, 0.8, 1.0, 1.3, 2.0, 3.5, 5.0, 20.0])
    grid = fts.grid_scores(prob, torch.from_numpy(temps), torch.from_numpy(gammas), criterion, 15, None).numpy()
    terms = {t: fb.Terms.at(prob, t, s) for t, s in zip(temps.tolist(), fb.group_sums(prob, temps.tolist(), None))}
    boxes = [(g0, g1, t0, t1) for g0 in range(len(gammas)) for g1 in range(g0, len(gammas))
             for t0 in range(len(temps)) for t1 in range(t0, len(temps)) if g1 - g0 <= 2 and t1 - t0 <= 3]
    for t0, t1 in {(b[2], b[3]) for b in boxes}:
        sel = [b for b in boxes if (b[2], b[3]) == (t0, t1)]
        g_lo = torch.tensor([gammas[b[0]] for b in sel], dtype=torch.float64)
        g_hi = torch.tensor([gammas[b[1]] for b in sel], dtype=torch.float64)
        lb, _ = fb.box_bounds(prob, terms[float(temps[t0])], terms[float(temps[t1])], g_lo, g_hi, criterion)
        for (g0, g1, _, _), v in zip(sel, lb):
            best = grid[g0:g1 + 1, t0:t1 + 1].min()
            assert v <= best + 1e-12 * max(1.0, abs(best)), (criterion, gammas[g0], gammas[g1], temps[t0], temps[t1])
            assert math.isfinite(v)


def test_point_bounds_are_closer_than_the_group_ranges():
    """At a single ``(gamma, T)`` the group sums of ``_point_sums`` (Jensen over each group's
    ``f``) bring the NLL bound closer to the exact NLL than the group's worst-case
    ``h^gamma(q)/q`` does: at least 5x for 0 < gamma <= 1 and 2.5x for every gamma of the paper's
    grid (7-46x and 2.8-12x measured here); both remain lower bounds."""
    z, y = _problem(3000, 100, 23)
    prob = fts.Problem(z, y, dedupe=False)
    gammas = torch.tensor(KK_GAMMAS, dtype=torch.float64)
    for t in (0.7, 1.7, 4.0):
        exact = fts.exact_scores(prob, [t], [gammas.tolist()], "nll", 15, None)[0].numpy()
        terms = fb.Terms.at(prob, t, fb.group_sums(prob, [t], None)[0])
        loose, tight = (fb.row_bounds(prob, terms, terms, gammas, gammas, "nll", tight=f)[0].mean(-1).numpy()
                        for f in (False, True))
        assert (tight <= exact + 1e-12).all() and (tight >= loose - 1e-12).all()
        gain = (exact - loose) / (exact - tight)
        assert (gain >= 2.5).all() and (gain[(gammas > 0) & (gammas <= 1)] >= 5).all(), (t, gain)


def test_nll_box_bounds_are_of_second_order_in_the_width_at_gamma_zero():
    """Over a box of temperatures the NLL bound is cross-entropy (convex in ``beta``: tangents at
    both ends) plus the focal correction (``_split_lower``). At gamma = 0 the correction vanishes,
    so the gap to the exact minimum over the box shrinks about 4x when the box halves; the bound
    from the ends' row terms alone loses a first-order term (0.03-0.3 here) and fails this."""
    z, y = _problem(3000, 100, 29)
    prob = fts.Problem(z, y, dedupe=False)
    temps = np.round(np.arange(1.3, 2.3, 0.01), 2)
    grid = fts.grid_scores(prob, torch.from_numpy(temps), torch.zeros(1, dtype=torch.float64), "nll", 15, None)[0]
    j0 = int(grid.argmin())
    zero = torch.zeros(1, dtype=torch.float64)
    gaps = []
    for half in (16, 8, 4, 2):
        ta, tb = float(temps[j0 - half]), float(temps[j0 + half])
        a, b = (fb.Terms.at(prob, t, s) for t, s in zip((ta, tb), fb.group_sums(prob, [ta, tb], None)))
        lb = fb.box_bounds(prob, a, b, zero, zero, "nll")[0][0]
        gaps.append(float(grid[j0 - half:j0 + half + 1].min()) - lb)
    assert all(g >= -1e-12 for g in gaps), gaps
    assert gaps[-1] < 3e-4 and all(g1 < g0 / 3 for g0, g1 in zip(gaps, gaps[1:])), gaps


def test_the_passes_over_the_classes_return_their_sums():
    """``group_sums`` (sums of ``w_j`` per group, the NLL's ``sum_j w_j (delta_j - delta_1)``),
    ``second_sums`` (of ``w_j^2`` and ``w_j^2 beta delta_j``, computed when a point needs them) and
    ``_ce_moments`` (mean cross-entropy of ``softmax(z / T)`` and its slope in ``beta``, checked
    against ``F.cross_entropy`` and autograd) agree with their definitions."""
    z, y = _problem(700, 23, 31)
    prob = fts.Problem(z, y, dedupe=False)
    groups = list(zip(prob.starts, prob.ends))
    for t in (0.3, 1.0, 2.5):
        beta = 1.0 / t
        sums = fb.group_sums(prob, [t], None)[0]
        w = torch.exp(-beta * prob.dd)
        want = torch.stack([w[:, a:e].sum(1) for a, e in groups])
        torch.testing.assert_close(sums.ws, want, rtol=1e-13, atol=0)
        torch.testing.assert_close(sums.wdd, (w * prob.dd).sum(1), rtol=1e-12, atol=1e-300)
        terms = fb.Terms.at(prob, t, sums)
        assert terms.w2 is None  # not computed until a point needs it
        fb._at_point(prob, terms)
        for got, x in ((terms.w2, w * w), (terms.w2u, w * w * beta * prob.dd)):
            torch.testing.assert_close(got, torch.stack([x[:, a:e].sum(1) for a, e in groups]), rtol=1e-12, atol=0)
        b = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
        ce = torch.nn.functional.cross_entropy(z * b, y)
        ce.backward()
        assert terms.ce[0] == pytest.approx(ce.item(), rel=1e-13)
        assert terms.ce[1] == pytest.approx(float(b.grad), rel=1e-10)


def test_log_w_skips_the_clamp_only_where_it_changes_nothing():
    """``Problem.log_w`` is ``-beta dd`` clamped at ``_MIN_U``, bit for bit, for betas whose largest
    ``beta dd`` lies just below, at and above the clamp (the pass is skipped only below it)."""
    z, y = _problem(300, 12, 3, scale=5.0)
    prob = fts.Problem(z, y, dedupe=False)
    edge = -fts._MIN_U / prob.dd_max
    for beta in (edge * (1 - 1e-15), edge, edge * (1 + 1e-15), edge * 0.5, edge * 3.0):
        want = torch.mul(prob.dd, -beta).clamp(min=fts._MIN_U)
        assert torch.equal(prob.log_w(prob.dd, beta), want), beta
        assert torch.equal(prob.log_w(prob.dd_first, beta), torch.mul(prob.dd_first, -beta).clamp(min=fts._MIN_U))
    assert (prob.log_w(prob.dd, edge * 3.0) == fts._MIN_U).any()  # the clamp did act there


@pytest.mark.parametrize("binning", ["width", "mass"])
def test_binned_bound_of_exact_confidences_is_the_calibration_error(binning):
    """Where every confidence is known (``c_lo = c_hi``), the binned bound is the binned error
    itself: each row's bin is known, so the partition into single bins loses nothing. Duplicated
    rows with different labels and a confidence on a bin edge are included."""
    z, y = _problem(600, 6, 5, scale=2.0)
    z[300:400], y[350:400] = z[200:300], (y[200:250] + 1) % 6  # duplicates, other labels
    z[0] = torch.tensor([math.log(2.0), 0.0, -1e4, -1e4, -1e4, -1e4], dtype=torch.float64)  # conf 2/3
    prob = fts.Problem(z, y, dedupe=True)
    for t in (0.4, 1.0, 2.5):
        conf = torch.softmax(z.double() / t, -1).amax(-1)
        per_row = torch.empty(prob.rows, dtype=torch.float64).scatter_(0, prob.inverse, conf)  # equal copies
        exact = float(fts.calibration_error(conf, prob.correct, n_bins=15, binning=binning))
        lb = fb.binned_lower_bound(prob, per_row[None], per_row[None], 15, binning)
        assert float(lb[0]) <= exact + 1e-12
        assert float(lb[0]) == pytest.approx(exact, abs=1e-9)


@pytest.mark.exhaustive
@pytest.mark.parametrize("criterion", CRITERIA)
def test_ten_thousand_rows_of_a_thousand_classes(criterion):
    """10k x 1000 (float32, like a network's output) with the paper's gammas and every tenth of its
    temperatures (0.05 .. 4.95): the exact search scores 450 pairs of 10M logits each. Labels from
    a softer softmax than the logits' make the model overconfident, which puts the selected pair
    inside the grid for ``ece_mass`` and ``nll`` (at gamma = -0.5 for ``ece``)."""
    z, y = _problem(10_000, 1000, 17, scale=2.0, temp=2.5, dtype=torch.float32)
    _assert_same_selection(*_fit_both(z, y, temperatures=KK_TEMPERATURES[4::10], criterion=criterion))
