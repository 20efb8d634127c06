"""Post-hoc calibrators against slow oracles: per-(gamma, T) loops over focalcal.maps and
focalcal.metrics, dense temperature grids, synthetic logits with a known temperature, and the
real CIFAR-10 logits."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from focalcal import maps, metrics, posthoc
from focalcal.lab import data
from focalcal.posthoc import (KK_GAMMAS, KK_TEMPERATURES, MUKHOTI_TEMPERATURES, FocalTemperatureScaling,
                              NotFittedError, PsiCorrection, TemperatureScaling, focal_ts_scores)

# ----------------------------------------------------------------------------------- helpers ---


def _problem(n: int, k: int, seed: int, scale: float = 3.0, dtype=torch.float64):
    """Overconfident synthetic logits: labels drawn from softmax(z / 1.7)."""
    g = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z / 1.7, -1), 1, generator=g).squeeze(-1)
    return z.to(dtype), y


def _oracle_select(scores: np.ndarray, gammas: np.ndarray, temps: np.ndarray) -> int:
    """The documented tie rule, written out independently: best score (ties within 1e-12 rel),
    then smallest |gamma|, then smallest |log T|, then first index."""
    best = scores.min()
    tol = 1e-12 * max(1.0, abs(best))
    cands = [i for i in range(len(scores)) if scores[i] <= best + tol]
    return min(cands, key=lambda i: (abs(gammas[i]), abs(math.log(temps[i])), i))


def _loop_scores(z, y, gammas, temps, criterion):
    """Slow oracle: one focal_map_from_logits + one metric call per (gamma, T)."""
    out = np.empty((len(gammas), len(temps)))
    for i, g in enumerate(gammas):
        for j, t in enumerate(temps):
            logp = maps.log_focal_map_from_logits(z, float(g), float(t))
            if criterion == "nll":
                out[i, j] = metrics.nll(logits=logp, labels=y)
            else:
                binning = "mass" if criterion == "ece_mass" else "width"
                out[i, j] = metrics.ece(logp.exp(), y, binning=binning)
    return out


@pytest.fixture(scope="module")
def ce_split(shared_logits_dir):
    """Real CIFAR-10 ResNet-50 cross-entropy test logits, a fixed random half to fit on."""
    z, y = data.published_logits("ce", "test", download=False)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    fit, ev = perm[:5000], perm[5000:]
    return z[fit], y[fit], z[ev], y[ev]


def _assert_argmax_kept(probs: torch.Tensor, logits: torch.Tensor) -> None:
    assert torch.isfinite(probs).all()
    # the class of largest logit keeps the largest probability; only a rounding-level tie with
    # another class is allowed (logits 0 and 3e-220 both give 0.5, and tied logits may come out
    # an ulp apart)
    top = logits.argmax(-1, keepdim=True)
    eps = torch.finfo(probs.dtype).eps
    assert (probs.gather(-1, top).squeeze(-1) >= probs.amax(-1) * (1 - 8 * eps)).all()
    torch.testing.assert_close(probs.sum(-1).double(), torch.ones(probs.shape[:-1], dtype=torch.float64),
                               rtol=0, atol=1e-5 if probs.dtype == torch.float32 else 1e-12)


# ---------------------------------------------------------------------- interface and errors ---

CALIBRATORS = [
    lambda: TemperatureScaling(),
    lambda: TemperatureScaling("ece"),
    lambda: TemperatureScaling("ece_mass"),
    lambda: TemperatureScaling("focal", gamma=3.0),
    lambda: TemperatureScaling("focal", gamma=3.0, psi=True),
    lambda: FocalTemperatureScaling(temperatures=np.arange(1, 101) / 20),
    lambda: FocalTemperatureScaling(temperatures=np.arange(1, 101) / 20, search="line", criterion="nll"),
]


@pytest.mark.parametrize("make", CALIBRATORS)
def test_unfitted_use_raises(make):
    cal = make()
    z = torch.randn(4, 3)
    for call in (cal.predict_proba, cal.forward, cal):
        with pytest.raises(NotFittedError, match="not fitted yet.*fit"):
            call(z)
    assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, AttributeError)
    assert not hasattr(cal, "temperature_")


@pytest.mark.parametrize("make", CALIBRATORS + [lambda: PsiCorrection(2.0)])
def test_bad_fit_input_raises(make):
    z, y = _problem(30, 4, 0)
    cal = make()
    with pytest.raises(ValueError, match="labels"):
        cal.fit(z, y[:-1])  # shape mismatch
    with pytest.raises(ValueError, match="labels"):
        cal.fit(z, torch.full_like(y, 4))  # out of range
    with pytest.raises(ValueError, match="labels"):
        cal.fit(z, -torch.ones_like(y))
    bad = z.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="logits.*NaN"):
        cal.fit(bad, y)
    with pytest.raises(ValueError, match="empty"):
        cal.fit(torch.empty(0, 4), torch.empty(0, dtype=torch.long))
    with pytest.raises(ValueError, match="logits"):
        cal.fit(z[:, 0], y)  # 1-D logits
    with pytest.raises(ValueError, match="logits"):
        cal.fit(z[:, :1], torch.zeros_like(y))  # one class
    with pytest.raises(ValueError, match="labels"):
        cal.fit(z, y.double() + 0.5)  # non-integer labels
    # after a valid fit, predict-time logits must be finite and have the fitted number of classes
    cal.fit(z, y)
    with pytest.raises(ValueError, match="classes"):
        cal.predict_proba(torch.randn(5, 3))
    with pytest.raises(ValueError, match="NaN"):
        cal.predict_proba(torch.full((2, 4), float("inf")))


def test_bad_constructor_arguments_raise():
    with pytest.raises(ValueError, match="criterion"):
        TemperatureScaling("brier")
    with pytest.raises(ValueError, match="criterion"):
        FocalTemperatureScaling(criterion="focal")
    with pytest.raises(ValueError, match="search"):
        FocalTemperatureScaling(search="random")
    with pytest.raises(ValueError, match="grid"):
        TemperatureScaling("ece", grid=[0.5, -1.0])
    with pytest.raises(ValueError, match="grid"):
        TemperatureScaling("ece", grid=[])
    with pytest.raises(ValueError, match="grid"):
        TemperatureScaling("ece", grid=[[1.0, 2.0]])
    with pytest.raises(ValueError, match="grid"):
        TemperatureScaling("ece", grid=[1.0, float("nan")])
    with pytest.raises(ValueError, match="grid"):
        TemperatureScaling("ece", grid=2.0)
    with pytest.raises(ValueError, match="temperatures"):
        FocalTemperatureScaling(temperatures=[0.0, 1.0])
    with pytest.raises(ValueError, match="gammas"):
        FocalTemperatureScaling(gammas=[-1.0, 0.5])  # the map degenerates at gamma = -1
    with pytest.raises(ValueError, match="gammas"):
        FocalTemperatureScaling(gammas=[])
    with pytest.raises(ValueError, match="line_gammas"):
        FocalTemperatureScaling(search="line", line_gammas=(1.0, 1.0))
    with pytest.raises(ValueError, match="n_bins"):
        FocalTemperatureScaling(n_bins=0)
    with pytest.raises(ValueError, match="gamma"):
        TemperatureScaling("focal")  # needs the training gamma
    with pytest.raises(ValueError, match="gamma"):
        TemperatureScaling("nll", gamma=2.0)
    with pytest.raises(ValueError, match="gamma"):
        TemperatureScaling("focal", gamma=-0.5)
    with pytest.raises(ValueError, match="psi"):
        TemperatureScaling("nll", psi=True)
    with pytest.raises(ValueError, match="bounds"):
        TemperatureScaling(bounds=(2.0, 1.0))
    with pytest.raises(ValueError, match="gamma"):
        PsiCorrection(-0.5)
    with pytest.raises(ValueError, match="labels"):
        focal_ts_scores(torch.randn(5, 3), torch.tensor([0, 1, 2, 3, 0]))
    with pytest.raises(ValueError, match="criterion"):
        focal_ts_scores(torch.randn(5, 3), torch.zeros(5, dtype=torch.long), criterion="mce")


def test_module_interface_forward_state_dict_and_gradients():
    z, y = _problem(400, 5, 1)
    zt, _ = _problem(50, 5, 2)
    factories = [TemperatureScaling, lambda: FocalTemperatureScaling(temperatures=np.arange(1, 61) / 20),
                 lambda: TemperatureScaling("focal", gamma=2.0, psi=True), lambda: PsiCorrection(2.0)]
    for make in factories:
        cal = make().fit(z, y)
        assert isinstance(cal, torch.nn.Module)
        logp = cal(zt)
        torch.testing.assert_close(logp.exp(), cal.predict_proba(zt))
        torch.testing.assert_close(torch.logsumexp(logp, -1), torch.zeros(50, dtype=torch.float64))
        # batched over leading dims, dtype kept
        assert cal.predict_proba(zt.view(5, 10, 5).float()).shape == (5, 10, 5)
        assert cal.predict_proba(zt.float()).dtype == torch.float32
        # it can sit at the end of a model and be trained through
        lin = torch.nn.Linear(5, 5).double()
        model = torch.nn.Sequential(lin, cal)
        loss = torch.nn.functional.nll_loss(model(zt), y[:50])
        loss.backward()
        assert torch.isfinite(lin.weight.grad).all() and lin.weight.grad.abs().sum() > 0
        # the fitted state travels in state_dict
        fresh = make()
        fresh.load_state_dict(cal.state_dict())
        torch.testing.assert_close(fresh.predict_proba(zt), cal.predict_proba(zt))
        for name in ("temperature_", "gamma_ev_"):
            assert getattr(fresh, name, None) == getattr(cal, name, None)
    fts = FocalTemperatureScaling(temperatures=[0.5, 1.0]).fit(z, y)
    assert isinstance(fts.gamma_ev_, float) and isinstance(fts.temperature_, float)
    assert fts.scores_.shape == (len(KK_GAMMAS), 2) and fts.candidates_.shape == (2 * len(KK_GAMMAS), 3)
    assert "gamma_ev_=" in repr(fts)


# -------------------------------------------------------------------- temperature scaling ---

def _dense_nll(z, y, log_t):
    """Mean NLL of softmax(z / T) at every log T, straight from log_softmax (chunks of 50 T)."""
    out = []
    for c in log_t.split(50):
        logp = torch.log_softmax(z / c.exp().view(-1, 1, 1), -1)
        out.append(-logp.gather(-1, y.view(1, -1, 1).expand(len(c), -1, 1)).mean((1, 2)))
    return torch.cat(out)


@pytest.mark.parametrize("source", ["real", "synthetic", "synthetic_fp32"])
def test_ts_nll_matches_dense_grid_oracle(source, ce_split):
    if source == "real":
        z, y = ce_split[0], ce_split[1]
    else:
        z, y = _problem(3000, 10, 3, dtype=torch.float32 if source == "synthetic_fp32" else torch.float64)
    ts = TemperatureScaling("nll").fit(z, y)
    z64 = z.double()
    log_t = torch.linspace(math.log(0.5), math.log(5), 1601, dtype=torch.float64)
    dense = _dense_nll(z64, y, log_t)
    i = int(dense.argmin())
    step = float(log_t[1] - log_t[0])
    assert abs(math.log(ts.temperature_) - float(log_t[i])) <= step
    nll_fit = float(torch.nn.functional.cross_entropy(z64 / ts.temperature_, y))
    assert nll_fit <= float(dense.min()) + 1e-12
    assert ts.best_score_ == pytest.approx(nll_fit, abs=1e-12)


def test_ts_nll_edge_cases_return_bounds():
    # a perfectly separated fitting set: NLL keeps falling as T -> 0
    z = torch.tensor([[5.0, 0.0], [0.0, 5.0]] * 10, dtype=torch.float64)
    y = torch.tensor([0, 1] * 10)
    with pytest.warns(UserWarning, match=r"lower edge .* bounds="):
        assert TemperatureScaling(bounds=(0.05, 20)).fit(z, y).temperature_ == 0.05
    # labels independent of a confident model: the optimum is T -> infinity
    with pytest.warns(UserWarning, match=r"upper edge .* bounds="):
        assert TemperatureScaling(bounds=(0.05, 20)).fit(z, 1 - y).temperature_ == 20


def test_ts_recovers_known_temperature():
    """Labels sampled from softmax(z): calibrated. The model reports 3 z, so T should be ~3."""
    g = torch.Generator().manual_seed(7)
    z = 1.5 * torch.randn(20000, 10, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z, -1), 1, generator=g).squeeze(-1)
    t_nll = TemperatureScaling("nll").fit(3 * z, y).temperature_
    assert t_nll == pytest.approx(3.0, rel=0.03)
    t_ece = TemperatureScaling("ece").fit(3 * z, y).temperature_  # Mukhoti grid, step 0.1
    assert abs(t_ece - 3.0) <= 0.3
    # the same data at T = 1 are calibrated already
    assert TemperatureScaling("nll").fit(z, y).temperature_ == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("criterion", ["ece", "ece_mass", "nll"])
def test_ts_grid_equals_loop_oracle(criterion):
    z, y = _problem(500, 6, 4)
    ts = TemperatureScaling(criterion, grid=MUKHOTI_TEMPERATURES).fit(z, y)
    temps = np.array(MUKHOTI_TEMPERATURES)
    oracle = _loop_scores(z, y, [0.0], temps, criterion)[0]
    np.testing.assert_allclose(ts.scores_.numpy(), oracle, rtol=0, atol=1e-12)
    assert ts.temperature_ == temps[_oracle_select(oracle, np.zeros_like(temps), temps)]
    assert len(MUKHOTI_TEMPERATURES) == 100 and MUKHOTI_TEMPERATURES[0] == 0.1 and MUKHOTI_TEMPERATURES[-1] == 10.0


def test_ts_focal_criterion_minimises_focal_risk():
    z, y = _problem(1000, 10, 5)
    gamma = 2.0
    ts = TemperatureScaling("focal", gamma=gamma).fit(z, y)

    def risk(t):  # independent oracle through maps.focal_loss_term on softmax probabilities
        q = torch.softmax(z / t, -1).gather(-1, y.view(-1, 1)).squeeze(-1)
        return float(maps.focal_loss_term(q, gamma).mean())

    dense = np.linspace(math.log(0.3), math.log(5), 1201)
    r = np.array([risk(math.exp(t)) for t in dense])
    assert risk(ts.temperature_) <= r.min() + 1e-10
    assert abs(math.log(ts.temperature_) - dense[r.argmin()]) <= dense[1] - dense[0]
    assert ts.best_score_ == pytest.approx(risk(ts.temperature_), rel=1e-10)
    # gamma = 0 is the NLL fit
    t0 = TemperatureScaling("focal", gamma=0.0).fit(z, y).temperature_
    assert t0 == pytest.approx(TemperatureScaling("nll").fit(z, y).temperature_, rel=1e-7)
    # TS_FL + Psi: Psi^gamma(softmax(z / T)) with the fitted T
    tsp = TemperatureScaling("focal", gamma=gamma, psi=True).fit(z, y)
    assert tsp.temperature_ == ts.temperature_
    torch.testing.assert_close(tsp.predict_proba(z), maps.focal_map_from_logits(z, gamma, ts.temperature_))
    torch.testing.assert_close(ts.predict_proba(z), torch.softmax(z / ts.temperature_, -1))


# ------------------------------------------------------------- focal temperature scaling ---

@pytest.mark.parametrize("criterion", ["ece_mass", "ece", "nll"])
def test_fts_grid_equals_loop_oracle(criterion):
    z, y = _problem(200, 5, 6)
    temps = np.arange(1, 101) / 20  # 0.05 .. 5
    fts = FocalTemperatureScaling(temperatures=temps, criterion=criterion).fit(z, y)
    oracle = _loop_scores(z, y, KK_GAMMAS, temps, criterion)
    np.testing.assert_allclose(fts.scores_.numpy(), oracle, rtol=1e-11, atol=1e-12)
    gg, tt = np.meshgrid(KK_GAMMAS, temps, indexing="ij")
    i = _oracle_select(oracle.ravel(), gg.ravel(), tt.ravel())
    assert (fts.gamma_ev_, fts.temperature_) == (gg.ravel()[i], tt.ravel()[i])
    assert fts.best_score_ == pytest.approx(oracle.ravel()[i], abs=1e-12)


def test_fts_scores_on_extreme_logits_match_maps():
    """The vectorised kernel against focal_map_from_logits on saturated rows and extreme gammas."""
    z, y = _problem(60, 4, 8)
    z[:20] *= 3000  # logits up to ~1e4
    z[20] = 0.0  # all tied
    gammas = [-0.99, -0.5, 0.0, 0.05, 1.0, 5.0, 80.0]
    temps = [0.01, 0.3, 1.0, 5.0, 100.0]
    for criterion in ("nll", "ece"):
        s = focal_ts_scores(z, y, gammas=gammas, temperatures=temps, criterion=criterion)
        assert torch.isfinite(s).all()
        np.testing.assert_allclose(s.numpy(), _loop_scores(z, y, gammas, temps, criterion), rtol=1e-10, atol=1e-12)
    # gamma = 0 is plain temperature scaling
    s0 = focal_ts_scores(z, y, gammas=[0.0], temperatures=temps, criterion="ece")[0]
    for t, v in zip(temps, s0.tolist()):
        assert v == pytest.approx(metrics.ece(logits=z / t, labels=y), abs=1e-13)


def test_fts_float32_input_gives_the_float64_result():
    z, y = _problem(300, 5, 9)
    z32 = z.float()
    a = FocalTemperatureScaling(temperatures=np.arange(1, 51) / 10).fit(z32, y)
    b = FocalTemperatureScaling(temperatures=np.arange(1, 51) / 10).fit(z32.double(), y)
    assert (a.gamma_ev_, a.temperature_) == (b.gamma_ev_, b.temperature_)
    torch.testing.assert_close(a.scores_, b.scores_, rtol=0, atol=0)


def test_fts_ties_prefer_the_identity():
    # one sample: every (gamma, T) gives ECE = 1 - conf or conf; make all scores tie with a
    # degenerate problem (a uniform row: confidence 1/K for every map)
    z = torch.zeros(3, 3, dtype=torch.float64)
    y = torch.tensor([0, 1, 2])
    fts = FocalTemperatureScaling(gammas=(0.5, -0.25, 1.0), temperatures=(0.5, 2.0, 1.0, 1.5)).fit(z, y)
    assert torch.allclose(fts.scores_, fts.scores_[0, 0])
    assert (fts.gamma_ev_, fts.temperature_) == (-0.25, 1.0)


def test_fts_line_search_follows_the_3m_procedure():
    z, y = _problem(300, 5, 10)
    temps = np.arange(1, 101) / 20
    for criterion in ("ece_mass", "nll"):
        fts = FocalTemperatureScaling(temperatures=temps, criterion=criterion, search="line",
                                      line_gammas=(0.0, 1.0)).fit(z, y)
        m = len(temps)
        # oracle, step by step with slow loops
        anchor = _loop_scores(z, y, [0.0, 1.0], temps, criterion)
        t1 = temps[_oracle_select(anchor[0], np.zeros(m), temps)]
        t2 = temps[_oracle_select(anchor[1], np.ones(m), temps)]
        slope = (t2 - t1) / 1.0
        g_line = np.linspace(min(KK_GAMMAS), max(KK_GAMMAS), m)
        t_line = np.clip(t1 + slope * g_line, temps.min(), temps.max())
        s_line = np.array([_loop_scores(z, y, [g], [t], criterion)[0, 0] for g, t in zip(g_line, t_line)])
        g_all = np.concatenate([np.zeros(m), np.ones(m), g_line])
        t_all = np.concatenate([temps, temps, t_line])
        s_all = np.concatenate([anchor[0], anchor[1], s_line])
        np.testing.assert_allclose(fts.candidates_[:, 2].numpy(), s_all, rtol=1e-11, atol=1e-12)
        i = _oracle_select(s_all, g_all, t_all)
        assert fts.gamma_ev_ == pytest.approx(g_all[i], abs=1e-15)
        assert fts.temperature_ == pytest.approx(t_all[i], abs=1e-15)
        assert fts.line_ == pytest.approx((t1, slope))
        assert len(fts.candidates_) == 3 * m


def test_fts_improves_ece_on_real_cifar10_logits(ce_split):
    """Fit on a fixed random half of the CE test logits (paper grid), evaluate on the other half."""
    zf, yf, ze, ye = ce_split
    fts = FocalTemperatureScaling(criterion="ece_mass").fit(zf, yf)  # 9 x 500 grid
    assert fts.scores_.shape == (9, 500)
    before = metrics.ece(logits=ze, labels=ye, binning="mass")
    after = metrics.ece(fts.predict_proba(ze), ye, binning="mass")
    assert after < 0.5 * before
    assert metrics.accuracy(fts.predict_proba(ze), ye) == metrics.accuracy(logits=ze, labels=ye)
    # at least as good as TS on the fitting set (TS is on the same T grid with gamma = 0 ...
    # not in the gamma grid, so compare with the TS selected by the same criterion)
    ts = TemperatureScaling("ece_mass", grid=KK_TEMPERATURES).fit(zf, yf)
    assert fts.best_score_ <= ts.best_score_ + 0.002


# ---------------------------------------------------------------------------- Psi ---

def test_psi_correction_is_the_focal_map():
    z, y = _problem(100, 6, 11)
    psi = PsiCorrection(3.0)
    torch.testing.assert_close(psi.predict_proba(z), maps.focal_map_from_logits(z, 3.0))
    assert psi.fit(z, y) is psi and psi.n_classes_ == 6
    torch.testing.assert_close(PsiCorrection(0.0).predict_proba(z), torch.softmax(z, -1))


# ----------------------------------------------------------------- argmax is never changed ---

@pytest.mark.parametrize("make", CALIBRATORS + [lambda: PsiCorrection(2.0)])
def test_argmax_kept_on_real_logits(make, ce_split):
    zf, yf, ze, _ = ce_split
    cal = make().fit(zf[:1000], yf[:1000])
    for dtype in (torch.float64, torch.float32):
        _assert_argmax_kept(cal.predict_proba(ze.to(dtype)), ze.to(dtype))


_logit_rows = st.integers(2, 6).flatmap(
    lambda k: st.lists(st.lists(st.floats(-1e4, 1e4, allow_nan=False, allow_subnormal=False),
                                min_size=k, max_size=k), min_size=3, max_size=12))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_logit_rows, seed=st.integers(0, 2**16), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_argmax_kept_on_generated_logits(rows, seed, dtype):
    z = torch.tensor(rows, dtype=dtype)
    n, k = z.shape
    y = torch.randint(0, k, (n,), generator=torch.Generator().manual_seed(seed))
    small_grid = np.array([0.01, 0.1, 0.7, 1.0, 2.0, 5.0])
    cals = [TemperatureScaling(), TemperatureScaling("ece"), TemperatureScaling("ece_mass"),
            TemperatureScaling("focal", gamma=2.0), TemperatureScaling("focal", gamma=2.0, psi=True),
            FocalTemperatureScaling(temperatures=small_grid),
            FocalTemperatureScaling(temperatures=small_grid, criterion="nll", search="line"),
            PsiCorrection(3.0)]
    for cal in cals:
        cal.fit(z, y)
        assert math.isfinite(getattr(cal, "temperature_", 1.0)) and getattr(cal, "temperature_", 1.0) > 0
        _assert_argmax_kept(cal.predict_proba(z), z)
        assert torch.isfinite(cal(z)).all()


# ------------------------------------------------------- the scikit-learn estimator API ---

ESTIMATORS = [
    lambda: TemperatureScaling("ece_mass", grid=[0.5, 1, 2], n_bins=10),
    lambda: TemperatureScaling("focal", gamma=3, psi=True, bounds=(0.1, 10)),
    lambda: FocalTemperatureScaling([0.0, 1], np.arange(1, 41) / 10, criterion="ece", search="line",
                                    line_gammas=[0, 1], method="exact"),
    lambda: PsiCorrection(3),
]


@pytest.mark.parametrize("make", ESTIMATORS)
def test_get_params_returns_the_constructor_arguments_unchanged(make):
    import inspect

    cal = make()
    params = cal.get_params()
    names = list(inspect.signature(type(cal).__init__).parameters)[1:]
    assert sorted(params) == sorted(names)
    assert params == cal.get_params(deep=False)
    # stored as passed (the identity sklearn.base.clone checks), not converted
    assert all(getattr(cal, n) is v for n, v in params.items())


@pytest.mark.parametrize("make", ESTIMATORS)
def test_sklearn_clone_gives_an_unfitted_equal_copy(make):
    from sklearn.base import clone

    z, y = _calibrated_problem(0)
    cal = make().fit(3 * z, y)
    copy = clone(cal)
    assert type(copy) is type(cal) and copy is not cal
    assert copy.get_params().keys() == cal.get_params().keys()
    for name, value in cal.get_params().items():
        assert repr(copy.get_params()[name]) == repr(value)
    if not isinstance(cal, PsiCorrection):  # Psi has nothing to fit
        with pytest.raises(NotFittedError):
            copy.predict_proba(z)
    torch.testing.assert_close(copy.fit(3 * z, y).predict_proba(z), cal.predict_proba(z))


def test_set_params_validates_and_returns_self():
    ts = TemperatureScaling()
    assert ts.set_params(criterion="ece", n_bins=10) is ts
    assert ts.get_params()["criterion"] == "ece" and ts.n_bins == 10
    z, y = _calibrated_problem(1)
    assert ts.fit(3 * z, y).scores_.shape == (len(MUKHOTI_TEMPERATURES),)  # the ECE grid is used
    with pytest.raises(ValueError, match="n_bins"):
        ts.set_params(n_bins=0)
    assert ts.n_bins == 10  # a rejected value leaves the parameters as they were
    with pytest.raises(ValueError, match="gamma"):
        ts.set_params(gamma=2.0)  # gamma needs criterion="focal"
    assert ts.set_params(criterion="focal", gamma=2.0).gamma == 2.0
    with pytest.raises(ValueError, match="'temperature'.*valid parameters: bounds, criterion"):
        ts.set_params(temperature=1.0)
    fts = FocalTemperatureScaling()
    with pytest.raises(ValueError, match="gammas"):
        fts.set_params(gammas=[-2.0])
    assert fts.set_params(gammas=[0.0, 1.0]).fit(3 * z, y).gamma_ev_ in (0.0, 1.0)
    with pytest.raises(ValueError, match="gamma"):
        PsiCorrection(1.0).set_params(gamma=-1.0)


def test_a_state_with_attributes_the_calibrator_does_not_fit_is_refused():
    z, y = _calibrated_problem(0)
    fts = FocalTemperatureScaling(temperatures=np.arange(1, 101) / 20).fit(3 * z, y)
    state = fts.state_dict()
    fresh = FocalTemperatureScaling(temperatures=np.arange(1, 101) / 20)
    fresh.load_state_dict(state)
    assert fresh.gamma_ev_ == fts.gamma_ev_
    torch.testing.assert_close(fresh.predict_proba(z), fts.predict_proba(z))
    extra = dict(state["_extra_state"])
    extra["gamma_"] = extra.pop("gamma_ev_")  # the name an early version used
    state["_extra_state"] = extra
    with pytest.raises(ValueError, match=r"state names .*gamma_"):
        FocalTemperatureScaling().load_state_dict(state)


# ------------------------------------------------------------ warnings for probable misuse ---

def _calibrated_problem(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels drawn from softmax(z): a model that reports 3 z needs T near 3, gamma_ev near 0."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(400, 4, generator=g, dtype=torch.float64) * 2
    return z, torch.multinomial(torch.softmax(z, -1), 1, generator=g).squeeze(1)


def test_a_normal_fit_does_not_warn():
    import warnings

    z, y = _calibrated_problem(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TemperatureScaling().fit(3 * z, y)
        TemperatureScaling("ece").fit(3 * z, y)
        FocalTemperatureScaling(temperatures=np.arange(1, 101) / 20).fit(3 * z, y)
        PsiCorrection(2.0).fit(3 * z, y)
        TemperatureScaling().fit(torch.log_softmax(3 * z, -1), y)  # log(probs) are logits


@pytest.mark.parametrize("make", [TemperatureScaling, lambda: FocalTemperatureScaling(temperatures=[1.0]),
                                  lambda: PsiCorrection(1.0)])
def test_fit_on_probabilities_warns(make):
    z, y = _calibrated_problem(0)
    probs = torch.softmax(3 * z, -1)
    with pytest.warns(UserWarning, match=r"fit: the logits passed look like probabilities.*log\(probs\)"):
        make().fit(probs, y)
    with pytest.warns(UserWarning, match="focal_ts_scores: the logits passed look like probabilities"):
        focal_ts_scores(probs, y, temperatures=[1.0])


def test_ts_at_the_edge_of_its_range_warns_with_the_argument_to_widen():
    z, y = _calibrated_problem(0)
    wrong = -5.0 * torch.nn.functional.one_hot(y, 4).double()  # every label gets the least score
    with pytest.warns(UserWarning, match=r"TemperatureScaling.fit: .*upper edge of its search range "
                                         r"\[0.01, 100\].*bounds="):
        assert TemperatureScaling().fit(wrong, y).temperature_ == 100
    with pytest.warns(UserWarning, match=r"upper edge .*\[0.5, 2\].*grid="):
        TemperatureScaling("ece", grid=[0.5, 1.0, 2.0]).fit(3 * z, y)
    with pytest.warns(UserWarning, match=r"upper edge .*bounds="):
        TemperatureScaling("focal", gamma=1.0, bounds=(0.1, 1.0)).fit(3 * z, y)


def test_fts_at_the_edge_of_its_grids_warns_with_the_argument_to_widen():
    z, y = _calibrated_problem(0)
    with pytest.warns(UserWarning, match=r"FocalTemperatureScaling.fit: the selected temperature = 2 "
                                         r"is at the upper edge .*temperatures="):
        FocalTemperatureScaling(temperatures=[0.5, 1.0, 2.0]).fit(3 * z, y)
    # T fixed at 1 (a one-point grid never warns): under-confident logits want a larger gamma_ev
    with pytest.warns(UserWarning, match=r"the selected gamma_ev = 0.5 is at the upper edge .*gammas="):
        FocalTemperatureScaling(gammas=[-0.5, 0.0, 0.5], temperatures=[1.0]).fit(z / 3, y)
    with pytest.warns(UserWarning, match=r"the selected gamma_ev = -0.5 is at the lower edge .*gammas="):
        FocalTemperatureScaling(gammas=[-0.5, 0.0, 0.5], temperatures=[1.0]).fit(3 * z, y)


def test_edge_warnings_have_their_own_category_that_the_papers_protocols_filter():
    from focalcal.lab.results.protocol import fit_on_grid
    from focalcal.posthoc import SearchRangeWarning

    z, y = _calibrated_problem(0)
    assert issubclass(SearchRangeWarning, UserWarning)
    with pytest.warns(SearchRangeWarning, match="temperatures="):
        FocalTemperatureScaling(temperatures=[0.5, 1.0, 2.0]).fit(3 * z, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any other warning still surfaces
        fitted = fit_on_grid(FocalTemperatureScaling(temperatures=[0.5, 1.0, 2.0]), 3 * z, y)
        assert fitted.temperature_ == 2.0
        with pytest.raises(UserWarning, match="look like probabilities"):
            fit_on_grid(TemperatureScaling(), torch.softmax(z, -1), y)
