"""focalcal_book.curvature_measured: the numbers behind the measured-curvature page's verdicts."""

from __future__ import annotations

import numpy as np
import pandas as pd

from focalcal_book import curvature_measured as cm
from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_RUN, NOT_TRAINED


def _focal(ece: dict[float, list[float]], trace=None) -> pd.DataFrame:
    rows = [{"gamma": g, "seed": s, "ece": v, "loss_trace": (trace or {}).get(g, [1.0 + g] * len(vals))[s],
             "cross_entropy_trace": 1.0 + g} for g, vals in ece.items() for s, v in enumerate(vals)]
    return pd.DataFrame(rows)


def test_ece_minimum_at_an_inner_gamma_or_at_an_end():
    inner = _focal({0.0: [0.05, 0.06], 2.0: [0.01, 0.02], 5.0: [0.04, 0.05]})
    assert cm.ece_minimum(inner) == (HOLDS, 2.0)
    overlap = _focal({0.0: [0.05, 0.015], 2.0: [0.01, 0.02], 5.0: [0.04, 0.05]})
    assert cm.ece_minimum(overlap)[0] == NOT_RESOLVED
    at_end = _focal({0.0: [0.01, 0.02], 2.0: [0.04, 0.05], 5.0: [0.06, 0.07]})
    assert cm.ece_minimum(at_end) == (DOES_NOT_HOLD, 0.0)
    assert cm.ece_minimum(_focal({0.0: [0.01], 2.0: [0.02]}))[0] == NOT_RUN


def test_trend_row_counts_the_steps():
    frame = _focal({0.0: [0.05, 0.06], 1.0: [0.03, 0.04], 2.0: [0.035, 0.045]})
    row = cm.trend_row(frame, "gamma", "ece", "ECE")
    assert (row["falls"], row["rises"], row["unresolved"], row["verdict"]) == (1, 0, 1, NOT_RESOLVED)
    assert row["first"] == np.mean([0.05, 0.06]) and row["last"] == np.mean([0.035, 0.045])
    assert cm.trend_row(frame[frame["gamma"] == 0.0], "gamma", "ece", "ECE")["verdict"] == NOT_RUN


def test_rank_correlations_need_two_seeds_that_agree():
    ece = {0.0: [0.05, 0.06], 1.0: [0.03, 0.04], 2.0: [0.01, 0.02]}
    rows = cm.rank_correlations(_focal(ece, trace={0.0: [3.0, 3.0], 1.0: [2.0, 2.0], 2.0: [1.0, 1.0]}))
    loss = rows.set_index("curvature").loc["training loss"]
    assert (loss["seeds"], loss["low"], loss["high"], loss["sign"]) == (2, 1.0, 1.0, "positive")
    ce = rows.set_index("curvature").loc["cross-entropy"]      # trace grows with gamma, ECE falls
    assert ce["sign"] == "negative"
    one = cm.rank_correlations(_focal({0.0: [0.05], 1.0: [0.03], 2.0: [0.01]}))
    assert (one["sign"] == NOT_RESOLVED).all() and (one["seeds"] == 1).all()


def _sweep(model: str, loss_gamma: list[tuple[str, float]], ece: dict[float, list[float]],
           lam: dict[float, float], accuracy: dict[float, float] | None = None) -> pd.DataFrame:
    rows = [{"run": f"{model}-{g}-{s}", "model": model, "loss": lo, "seed": s, "gamma": g, "ece": v,
             "accuracy": (accuracy or {}).get(g, 0.85), "loss_lambda_max": lam[g] * (1 + 0.01 * s),
             "loss_trace": 10 * lam[g]} for lo, g in loss_gamma for s, v in enumerate(ece[g])]
    return pd.DataFrame(rows)


def test_architecture_rows_test_each_network_and_gate_an_untrained_one():
    ece = {0.0: [0.05, 0.06], 2.0: [0.01, 0.02], 5.0: [0.04, 0.05]}
    cnn = _sweep("cnn", [("ce", 0.0), ("focal", 2.0), ("focal", 5.0)], ece, {0.0: 9.0, 2.0: 3.0, 5.0: 1.0})
    mlp = _sweep("mlp", [("focal", 0.0), ("focal", 2.0), ("focal", 5.0)], ece, {0.0: 1.0, 2.0: 3.0, 5.0: 0.5})
    dead = _sweep("wide_resnet26_10", [("ce", 0.0), ("focal", 2.0), ("focal", 5.0)], ece,
                  {0.0: 9.0, 2.0: 3.0, 5.0: 1.0}, accuracy={5.0: 0.1})
    other = pd.DataFrame([{**cnn.iloc[0].to_dict(), "loss": "hessian_trace", "run": "penalty"}])
    sweeps = cm.gamma_sweeps(pd.concat([cnn, mlp, dead, other]))
    assert list(sweeps) == ["cnn", "mlp", "wide_resnet26_10"] and "penalty" not in set(sweeps["cnn"]["run"])
    rows = {r["model"]: r for r in cm.architecture_rows(sweeps, n_classes=10)}
    assert rows["cnn"]["network"] == "small CNN" and rows["cnn"]["gammas"] == "0, 2, 5"
    assert (rows["cnn"]["lambda_falls"], rows["cnn"]["ece_minimum"], rows["cnn"]["best_gamma"]) == (HOLDS, HOLDS, 2.0)
    assert rows["cnn"]["trace_at_best"] == 30.0 and rows["cnn"]["seeds"] == 2
    assert rows["mlp"]["lambda_falls"] == DOES_NOT_HOLD                 # rises from gamma 0 to 2
    assert rows["wide_resnet26_10"]["untrained"] == ["5"]
    assert rows["wide_resnet26_10"]["lambda_falls"] == rows["wide_resnet26_10"]["ece_minimum"] == NOT_TRAINED


def test_cubic_fit_needs_enough_runs_and_recovers_a_cubic():
    x = np.logspace(1, 3, 6)
    y = 10 ** (0.1 * np.log10(x) ** 3 - 0.5 * np.log10(x) ** 2 + 0.2)
    fx, fy = cm.cubic_fit(x, y)
    assert np.allclose(fy, 10 ** (0.1 * np.log10(fx) ** 3 - 0.5 * np.log10(fx) ** 2 + 0.2))
    assert fx.min() == x.min() and fx.max() == x.max()
    assert cm.cubic_fit(x[:4], y[:4]) is None                          # fewer than five runs
    assert cm.cubic_fit(np.r_[x[:3], x[:3]], np.r_[y[:3], y[:3]]) is None   # three distinct traces
