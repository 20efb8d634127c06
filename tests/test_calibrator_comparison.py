"""focalcal.lab.results.calibrators: the comparison of post-hoc calibrators (ranks, Friedman/Nemenyi, bootstrap)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from focalcal import metrics
from focalcal.lab.results import calibrators as C


def network(seed: int, n: int = 1200, k: int = 4, scale: float = 2.5):
    g = torch.Generator().manual_seed(seed)
    z = 1.5 * torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    h = n // 2
    return scale * z[:h], y[:h], scale * z[h:], y[h:]


def test_evaluate_fits_every_method_and_scores_it():
    zf, yf, zt, yt = network(0)
    rows, lps = C.evaluate(zf, yf, zt, yt, gamma=None)
    assert set(rows) == set(C.METHODS) - {"Psi"}  # Psi needs a focal training gamma
    assert set(C.evaluate(zf, yf, zt, yt, gamma=3.0)[0]) == set(C.METHODS)
    assert rows["TS (NLL)"]["NLL"] == pytest.approx(metrics.nll(logits=lps["TS (NLL)"], labels=yt))
    # over-confident logits: TS (NLL) lowers the test NLL and keeps the accuracy
    assert rows["TS (NLL)"]["NLL"] < rows["uncalibrated"]["NLL"]
    assert rows["TS (NLL)"]["accuracy"] == rows["uncalibrated"]["accuracy"]


def test_mean_ranks_by_hand_with_ties_and_accuracy_higher_is_better():
    tables = [{"a": {"NLL": 1.0, "accuracy": 0.9}, "b": {"NLL": 2.0, "accuracy": 0.8}, "c": {"NLL": 2.0, "accuracy": 0.7}},
              {"a": {"NLL": 3.0, "accuracy": 0.5}, "b": {"NLL": 1.0, "accuracy": 0.6}, "c": {"NLL": 2.0, "accuracy": 0.7}}]
    assert C.mean_ranks(tables, "NLL") == {"a": 2.0, "b": 1.75, "c": 2.25}
    assert C.mean_ranks(tables, "accuracy") == {"a": 2.0, "b": 2.0, "c": 2.0}


def test_argmax_preserving_methods_keep_the_accuracy_and_the_new_methods_are_listed():
    zf, yf, zt, yt = network(2)
    rows, _ = C.evaluate(zf, yf, zt, yt, gamma=2.0)
    assert {"vector scaling", "matrix scaling", "Dirichlet", "ensemble TS"} <= set(rows)
    assert set(C.ARGMAX_PRESERVING) <= set(C.METHODS)
    for m in C.ARGMAX_PRESERVING:
        assert rows[m]["accuracy"] == rows["uncalibrated"]["accuracy"], m


@pytest.mark.parametrize("k, q", [(2, 1.960), (3, 2.343), (4, 2.569), (5, 2.728), (6, 2.850), (7, 2.949),
                                  (8, 3.031), (9, 3.102), (10, 3.164)])
def test_nemenyi_q_is_demsar_table_5a(k, q):
    assert C.nemenyi_q(k) == pytest.approx(q, abs=1e-3)
    with pytest.raises(ValueError):
        C.nemenyi_q(1)


def test_friedman_of_identical_methods_is_nan_not_an_error():
    tables = [{m: {"accuracy": 0.5} for m in "abc"} for _ in range(4)]
    res = C.friedman_nemenyi(tables, "accuracy")
    assert np.isnan(res["p_value"]) and (res["k"], res["n"]) == (3, 4)


def test_nemenyi_critical_difference_is_demsar_table_value():
    # Demsar (2006), Table 5(a): q_0.05 = 2.728 for k = 5 classifiers
    rng = np.random.default_rng(0)
    tables = [{m: {"NLL": float(rng.random())} for m in "abcde"} for _ in range(20)]
    res = C.friedman_nemenyi(tables, "NLL")
    assert res["critical_difference"] == pytest.approx(2.728 * np.sqrt(5 * 6 / (6 * 20)), abs=1e-3)
    ref = stats.friedmanchisquare(*[[t[m]["NLL"] for t in tables] for m in "abcde"])
    assert res["p_value"] == pytest.approx(ref.pvalue)


def test_nll_interval_signs():
    zf, yf, zt, yt = network(1)
    _, lps = C.evaluate(zf, yf, zt, yt, methods={m: C.METHODS[m] for m in ("uncalibrated", "TS (NLL)")})
    worse = C.nll_interval(lps["uncalibrated"], lps["TS (NLL)"], yt, n_resamples=200)
    assert worse.verdict == "worse" and worse.low > 0
    assert worse.estimate == pytest.approx(metrics.nll(logits=lps["uncalibrated"], labels=yt)
                                           - metrics.nll(logits=lps["TS (NLL)"], labels=yt))
    same = C.nll_interval(lps["TS (NLL)"], lps["TS (NLL)"], yt, n_resamples=50)
    assert same.verdict == "indistinguishable" and same.estimate == 0.0


def test_intervals_match_the_metrics_and_the_ece_bootstrap():
    from focalcal.lab.results.bootstrap import ece_difference

    zf, yf, zt, yt = network(3)
    methods = {m: C.METHODS[m] for m in ("uncalibrated", "TS (NLL)", "matrix scaling")}
    rows, lps = C.evaluate(zf, yf, zt, yt, methods=methods)
    terms = C.per_sample(lps["matrix scaling"], yt)
    assert float(terms["NLL"].mean()) == pytest.approx(rows["matrix scaling"]["NLL"])
    assert float(terms["Brier"].mean()) == pytest.approx(rows["matrix scaling"]["Brier"])
    assert float(terms["accuracy"].mean()) == pytest.approx(rows["matrix scaling"]["accuracy"])
    ivs = C.intervals(lps, yt, n_resamples=200, seed=1)
    assert set(ivs["uncalibrated"]) == set(C.BOOTSTRAP_METRICS)
    assert ivs["uncalibrated"]["NLL"].verdict == "worse"  # over-confident logits
    assert ivs["uncalibrated"]["NLL"].estimate == pytest.approx(rows["uncalibrated"]["NLL"] - rows["TS (NLL)"]["NLL"])
    assert ivs["TS (NLL)"]["accuracy"].verdict == "indistinguishable"
    ref = ece_difference(lps["uncalibrated"], lps["TS (NLL)"], yt, binning="width", n_resamples=200, seed=1)
    assert ivs["uncalibrated"]["ECE (width)"] == ref
    # the same resamples as the additive metrics: the same seed gives the same draws
    nll = C.nll_interval(lps["uncalibrated"], lps["TS (NLL)"], yt, n_resamples=200, seed=1)
    assert (nll.low, nll.high) == pytest.approx((ivs["uncalibrated"]["NLL"].low, ivs["uncalibrated"]["NLL"].high))


def test_accuracy_interval_calls_a_higher_accuracy_better():
    y = torch.zeros(400, dtype=torch.long)
    right = torch.tensor([[0.0, -5.0]]).expand(400, 2).clone()
    half = right.clone()
    half[::2] = torch.tensor([-5.0, 0.0])
    ivs = C.intervals({"TS (NLL)": half, "good": right}, y, n_resamples=100)
    assert ivs["good"]["accuracy"].verdict == "better" and ivs["good"]["accuracy"].estimate == pytest.approx(0.5)
    assert ivs["good"]["NLL"].verdict == "better"


def test_cached_json_computes_once_per_key(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"x": float("nan"), "y": [1.0]}

    a = C.cached_json(tmp_path, "k", "net", {"data": "abc"}, compute)
    b = C.cached_json(tmp_path, "k", "net", {"data": "abc"}, compute)
    assert len(calls) == 1 and np.isnan(b["x"]) and b["y"] == a["y"]
    C.cached_json(tmp_path, "k", "net", {"data": "abd"}, compute)
    assert len(calls) == 2
    C.cached_json(None, "k", "net", {"data": "abc"}, compute)
    assert len(calls) == 3
    assert len(C.code_digest()) == 16
