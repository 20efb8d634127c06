"""focalcal_book.mukhoti_linear: Mukhoti et al.'s linear model (App. B) and its verdicts."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from focalcal.losses import focal_loss
from focalcal_book import mukhoti_linear as ml
from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED


def test_data_follow_the_papers_setup():
    xtr, ytr, xte, yte = ml.make_data(3)
    assert xtr.shape == (ml.N_TRAIN, 2) and xte.shape == (ml.N_TEST, 2)
    assert xtr.dtype == torch.float64 and ytr.dtype == torch.int64
    # half the points per class, up to the flips; classes separable by x1 = 0 before the flips
    assert abs(float(ytr.double().mean()) - 0.5) < 0.05
    agree = ((xtr[:, 0] > 0).long() == ytr).double().mean()
    assert 0.82 < float(agree) < 0.92  # 10 % flipped, a few per cent across the boundary
    # reproducible, and different seeds give different data
    assert torch.equal(ml.make_data(3)[0], xtr)
    assert not torch.equal(ml.make_data(4)[0], xtr)


def test_training_side_by_side_equals_one_model_at_a_time():
    sets = [ml.make_data(s) for s in (0, 1)]
    x = torch.stack([d[0] for d in sets])
    y = torch.stack([d[1] for d in sets])
    w, hist = ml.train(x, y, 1.0, steps=40, every=20)
    for i in range(2):
        wi, _ = ml.train(x[i:i + 1], y[i:i + 1], 1.0, steps=40, every=20)
        torch.testing.assert_close(w[i], wi[0])
    assert list(hist["step"].unique()) == [0, 20, 40]


def test_cross_entropy_reaches_the_logistic_maximum_likelihood():
    x, y, _, _ = ml.make_data(0)
    w, _ = ml.train(x[None], y[None], 0.0)
    w = w[0].clone().requires_grad_(True)
    (g,) = torch.autograd.grad(focal_loss(torch.stack([torch.zeros(len(x), dtype=torch.float64), x @ w], 1), y,
                                          gamma=0.0), w)
    assert float(g.norm()) < 1e-8  # a stationary point of the (convex) logistic loss


def test_run_and_summary():
    final, history, mistakes = ml.run([0, 1])
    assert len(final) == 4 and set(final["loss"]) == set(ml.LOSSES)
    assert set(mistakes) == {(s, lo) for s in (0, 1) for lo in ml.LOSSES}
    ce = final[final["loss"] == "cross-entropy"]
    assert (ce["agreement"] == 1.0).all()
    found = ml.summary(final, history)
    assert set(found["verdicts"]) == set(ml.RULES)
    assert found["converged"] is True and found["seeds"] == 2


def _final(ce_norm, fl_norm, ce_share, ce_med, fl_med, agreement=1.0):
    rows = []
    for seed in range(len(ce_norm)):
        rows.append({"seed": seed, "loss": "cross-entropy", "weight_norm": ce_norm[seed], "logit_rms": ce_norm[seed],
                     "share_above_09": ce_share[seed], "median_conf": ce_med[seed], "agreement": 1.0,
                     "ece": 0.05, "accuracy": 0.9, "mean_conf": 0.9})
        rows.append({"seed": seed, "loss": "focal (gamma=1)", "weight_norm": fl_norm[seed], "logit_rms": fl_norm[seed],
                     "share_above_09": 0.0, "median_conf": fl_med[seed], "agreement": agreement, "ece": 0.1,
                     "accuracy": 0.9, "mean_conf": 0.8})
    return pd.DataFrame(rows)


def _history(n):
    return pd.DataFrame([{"loss": lo, "seed": s, "step": t, "weight_norm": 1.0}
                         for lo in ml.LOSSES for s in range(n) for t in (0, 1)])


@pytest.mark.parametrize("case, expected", [
    (dict(ce_norm=[2, 2], fl_norm=[1, 1], ce_share=[0.95, 0.92], ce_med=[0.95, 0.95], fl_med=[0.7, 0.7]),
     (HOLDS, HOLDS, HOLDS)),
    (dict(ce_norm=[1, 1], fl_norm=[2, 2], ce_share=[0.3, 0.4], ce_med=[0.8, 0.8], fl_med=[0.7, 0.7], agreement=0.9),
     (DOES_NOT_HOLD, DOES_NOT_HOLD, DOES_NOT_HOLD)),
    (dict(ce_norm=[2, 1], fl_norm=[1, 2], ce_share=[0.95, 0.5], ce_med=[0.9, 0.9], fl_med=[0.7, 0.7]),
     (NOT_RESOLVED, HOLDS, NOT_RESOLVED)),
])
def test_summary_verdicts_follow_their_rules(case, expected):
    v = ml.summary(_final(**case), _history(2))["verdicts"]
    assert (v["mukhoti_linear_norms"], v["mukhoti_linear_regions"], v["mukhoti_linear_mistakes"]) == expected
