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
    worse = C.nll_interval(yt, lps["uncalibrated"], lps["TS (NLL)"], n_resamples=200)
    assert worse.verdict == "worse" and worse.low > 0
    assert worse.estimate == pytest.approx(metrics.nll(logits=lps["uncalibrated"], labels=yt)
                                           - metrics.nll(logits=lps["TS (NLL)"], labels=yt))
    same = C.nll_interval(yt, lps["TS (NLL)"], lps["TS (NLL)"], n_resamples=50)
    assert same.verdict == "indistinguishable" and same.estimate == 0.0
