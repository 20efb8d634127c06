"""focalcal_book.curvature_measured: the numbers behind the measured-curvature page's verdicts."""

from __future__ import annotations

import numpy as np
import pandas as pd

from focalcal_book import curvature_measured as cm
from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_RUN


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
