"""HistogramBinning and IsotonicCalibration (focalcal.posthoc) against netcal and scikit-learn."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from netcal.binning import HistogramBinning as NetcalHB
from netcal.binning import IsotonicRegression as NetcalIso
from sklearn.base import clone
from sklearn.isotonic import IsotonicRegression

from focalcal.posthoc import HistogramBinning, IsotonicCalibration, NotFittedError

CALIBRATORS = [HistogramBinning(), HistogramBinning(mode="classwise"), HistogramBinning(binning="width"),
               IsotonicCalibration()]
IDS = ["hb-top", "hb-classwise", "hb-width", "isotonic"]


def task(n: int = 3000, k: int = 5, scale: float = 2.5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Over-confident logits ``scale * z`` with labels drawn from ``softmax(z)``."""
    g = torch.Generator().manual_seed(seed)
    z = 1.5 * torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    return scale * z, y


def split(n=4000, k=5, seed=0):
    z, y = task(n, k, seed=seed)
    h = n // 2
    return z[:h], y[:h], z[h:]


# ------------------------------------------------------------------------------------------------
# reference parity
# ------------------------------------------------------------------------------------------------

def test_top_label_width_matches_netcal():
    z, y, zt = split()
    p, pt = torch.softmax(z, 1).numpy(), torch.softmax(zt, 1).numpy()
    ref = NetcalHB(bins=15, equal_intervals=True).fit(p.max(1), (p.argmax(1) == y.numpy()).astype(float))
    ours = HistogramBinning(15, binning="width").fit(z, y).predict_proba(zt)
    top = ours.gather(1, torch.from_numpy(pt.argmax(1)).view(-1, 1)).squeeze(1).numpy()
    np.testing.assert_allclose(top, ref.transform(pt.max(1)), atol=1e-9)


def test_classwise_width_matches_netcal():
    z, y, zt = split()
    ref = NetcalHB(bins=15, equal_intervals=True).fit(torch.softmax(z, 1).numpy(), y.numpy())
    ours = HistogramBinning(15, mode="classwise", binning="width").fit(z, y).predict_proba(zt)
    np.testing.assert_allclose(ours.numpy(), ref.transform(torch.softmax(zt, 1).numpy()), atol=1e-9)


@pytest.mark.parametrize("mode", ["top_label", "classwise"])
def test_equal_mass_fit_matches_netcal_which_cannot_predict_with_it(mode):
    z, y, zt = split()
    p = torch.softmax(z, 1).numpy()
    ours = HistogramBinning(10, mode=mode).fit(z, y)
    if mode == "top_label":
        refs = [NetcalHB(bins=10, equal_intervals=False).fit(p.max(1), (p.argmax(1) == y.numpy()).astype(float))]
        edges, values = ours.bin_edges_[None], ours.bin_values_[None]
    else:
        refs = [m for _, m in NetcalHB(bins=10, equal_intervals=False).fit(p, y.numpy())._multiclass_instances]
        edges, values = ours.bin_edges_, ours.bin_values_
    for ref, e, v in zip(refs, edges, values, strict=True):
        np.testing.assert_allclose(e.numpy(), ref._bin_bounds[0], atol=1e-12)
        np.testing.assert_allclose(v.numpy(), ref._bin_map, atol=1e-12)
    # the difference: netcal fits equal-mass bins but refuses to use them
    with pytest.raises(ValueError, match="equal_intervals"):
        refs[0].transform(p.max(1) if mode == "top_label" else p[:, 0])
    assert torch.isfinite(ours(zt)).all()


def test_isotonic_matches_netcal():
    z, y, zt = split()
    ref = NetcalIso().fit(torch.softmax(z, 1).numpy(), y.numpy())
    ours = IsotonicCalibration().fit(z, y).predict_proba(zt)
    np.testing.assert_allclose(ours.numpy(), ref.transform(torch.softmax(zt, 1).numpy()), atol=1e-9)


def test_isotonic_matches_sklearn_per_class():
    z, y, zt = split(k=4, seed=3)
    p, pt = torch.softmax(z, 1).numpy(), torch.softmax(zt, 1).numpy()
    iso = IsotonicCalibration().fit(z, y)
    per_class = []
    for k in range(4):
        ref = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(p[:, k], y.numpy() == k)
        np.testing.assert_allclose(iso.x_thresholds_[k].numpy(), ref.X_thresholds_, atol=0)
        np.testing.assert_allclose(iso.y_thresholds_[k].numpy(), ref.y_thresholds_, atol=1e-12)
        per_class.append(ref.predict(pt[:, k]))
    q = np.stack(per_class, 1)
    np.testing.assert_allclose(iso.predict_proba(zt).numpy(), q / q.sum(1, keepdims=True), atol=1e-9)


def test_where_every_class_map_is_zero_netcal_gives_nan_and_ours_the_uniform_row():
    # class 2 never occurs; a row with small p_0 and p_1 is mapped to 0 by all three maps
    p = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1]] * 5)
    y = np.array([0, 1] * 5)
    test = np.array([[0.1, 0.1, 0.8]])
    with np.errstate(invalid="ignore"):
        ref = NetcalIso().fit(p, y).transform(test)
    assert np.isnan(ref).all()
    ours = IsotonicCalibration().fit(np.log(p), y).predict_proba(np.log(test))
    assert isinstance(ours, np.ndarray)  # NumPy in, NumPy out
    np.testing.assert_allclose(ours, [[1 / 3] * 3], atol=1e-12)
    # histogram binning: netcal leaves the absent class at 0, ours at the floor (finite log)
    hb_ref = NetcalHB(bins=2, equal_intervals=True).fit(p, y).transform(p[:1])
    hb = HistogramBinning(2, mode="classwise", binning="width").fit(np.log(p), y)
    assert hb_ref[0, 2] == 0.0
    assert 0 < float(hb.predict_proba(np.log(p[:1]))[0, 2]) < 1e-11
    assert torch.isfinite(hb(np.log(p[:1]))).all()


# ------------------------------------------------------------------------------------------------
# accuracy: neither preserves the argmax
# ------------------------------------------------------------------------------------------------

def test_top_label_binning_can_change_the_argmax():
    z, _ = task(600, 4, seed=1)
    wrong = (z.argmax(1) + 1) % 4  # every prediction wrong: every bin's accuracy is 0
    hb = HistogramBinning(3).fit(z, wrong)
    changed = hb.predict_proba(z).argmax(1) != z.argmax(1)
    assert changed.all()


@pytest.mark.parametrize("cal", [HistogramBinning(mode="classwise"), IsotonicCalibration()], ids=["hb-cw", "iso"])
def test_one_vs_rest_maps_change_the_argmax_on_ordinary_data(cal):
    z, y = task(4000, 10, seed=2)
    pred = cal.fit(z, y).predict_proba(z).argmax(1)
    assert 0 < int((pred != z.argmax(1)).sum()) < 4000


# ------------------------------------------------------------------------------------------------
# dtypes, extremes, shapes, K, API
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cal", CALIBRATORS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtypes_and_extreme_logits(cal, dtype):
    z, y = task(1000, 4)
    cal = clone(cal).fit(z.to(dtype), y)
    for logits in (z.to(dtype), (1e4 * z / z.abs().max()).to(dtype)):
        lp = cal(logits)
        assert lp.dtype == dtype and torch.isfinite(lp).all()
        assert lp.min() >= math.log(1e-12 / 4) * (1 + 1e-2)  # the floor over a row sum <= K
        p = cal.predict_proba(logits).double()
        assert torch.allclose(p.sum(1), torch.ones(1000, dtype=torch.float64), atol=1e-2 if dtype in (
            torch.float16, torch.bfloat16) else 1e-5)


@pytest.mark.parametrize("cal", CALIBRATORS, ids=IDS)
@pytest.mark.parametrize("k", [2, 1000])
def test_two_to_a_thousand_classes_and_batch_dims(cal, k):
    z, y = task(3000, k, seed=k)
    cal = clone(cal).fit(z.float(), y)
    p = cal.predict_proba(z.float().view(3, 1000, k))
    assert p.shape == (3, 1000, k) and p.dtype == torch.float32
    assert torch.allclose(p.reshape(3000, k), cal.predict_proba(z.float()))


@pytest.mark.parametrize("cal", CALIBRATORS, ids=IDS)
def test_ordinary_input_and_state_dict(cal):
    z, y = task(300, 3)
    a = clone(cal).fit(z.numpy(), y.tolist())
    b = clone(cal).fit(z.tolist(), y.numpy())
    assert torch.equal(a.predict_proba(z), b.predict_proba(z))
    c = clone(cal)
    c.load_state_dict(a.state_dict())
    assert torch.equal(c.predict_proba(z), a.predict_proba(z))


def test_bad_input_names_the_argument():
    z, y = task(100, 3)
    with pytest.raises(ValueError, match="n_bins"):
        HistogramBinning(0)
    with pytest.raises(ValueError, match="mode"):
        HistogramBinning(mode="top")
    with pytest.raises(ValueError, match="binning"):
        HistogramBinning(binning="quantile")
    for cal in (HistogramBinning(), IsotonicCalibration()):
        with pytest.raises(NotFittedError):
            cal.predict_proba(z)
        with pytest.raises(ValueError, match="labels"):
            cal.fit(z, y + 3)
        with pytest.raises(ValueError, match="logits"):
            cal.fit(z.clone().fill_(math.nan), y)
        with pytest.raises(ValueError, match="logits"):
            cal.fit(z, y).predict_proba(z[:, :2])
