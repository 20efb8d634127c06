"""focalcal_book.fmnist_focal_ts: K&K's Fig. 8 surface and the 3m line search drawn over it."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from focalcal.posthoc import FocalTemperatureScaling, TemperatureScaling, focal_ts_scores
from focalcal_book.fmnist_focal_ts import (SURFACE_GAMMAS, SURFACE_TEMPERATURES, plot_selection_surfaces,
                                             selection_surface)

GAMMAS = (-0.5, 0.0, 0.5, 1.0, 2.0, 3.0)
TEMPS = tuple(k / 10 for k in range(2, 41, 2))      # 0.2, 0.4, ..., 4.0


@pytest.fixture(scope="module")
def over_confident() -> tuple[torch.Tensor, torch.Tensor]:
    """An over-confident 4-class model: logits three times those of the labels' posterior."""
    g = torch.Generator().manual_seed(3)
    z = 2 * torch.randn(600, 4, generator=g, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    return 3 * z, labels


def test_default_grid_holds_kk_gammas_and_is_increasing():
    from focalcal.posthoc import KK_GAMMAS

    assert set(KK_GAMMAS) <= set(SURFACE_GAMMAS)
    assert all(np.diff(SURFACE_GAMMAS) > 0) and all(np.diff(SURFACE_TEMPERATURES) > 0)
    assert min(SURFACE_GAMMAS) == min(KK_GAMMAS) and max(SURFACE_GAMMAS) == max(KK_GAMMAS)


@pytest.mark.parametrize("criterion", ["ece_mass", "nll"])
def test_surface_agrees_with_the_library_searches(over_confident, criterion):
    z, y = over_confident
    s = selection_surface(z, y, criterion=criterion, gammas=GAMMAS, temperatures=TEMPS)
    m = len(TEMPS)
    # the surface is the library's exact score grid, and the grid pick is its fitted pair
    np.testing.assert_allclose(s.scores, focal_ts_scores(z, y, gammas=GAMMAS, temperatures=TEMPS,
                                                         criterion=criterion).numpy(), rtol=1e-12, atol=0)
    grid = FocalTemperatureScaling(GAMMAS, TEMPS, criterion=criterion).fit(z, y)
    assert s.grid_pick.tolist() == pytest.approx([grid.gamma_ev_, grid.temperature_, grid.best_score_])
    assert s.grid_pick[2] == pytest.approx(s.scores.min())
    # Fig. 8's curve: the best temperature of each row
    assert s.best_t.tolist() == [TEMPS[j] for j in s.scores.argmin(axis=1)]
    # the first anchor (gamma = 0) is plain TS on the same grid with the same criterion
    ts = TemperatureScaling(criterion, grid=TEMPS).fit(z, y)
    assert s.anchors[0, :2].tolist() == pytest.approx([0.0, ts.temperature_])
    assert s.anchors[0, 2] == pytest.approx(s.scores[GAMMAS.index(0.0), TEMPS.index(ts.temperature_)])
    assert s.anchors[1, 0] == 1.0
    # the line passes through both anchors; its m pairs span the gamma range, T clipped to the grid
    intercept, slope = s.line
    assert intercept + slope * s.anchors[:, 0] == pytest.approx(s.anchors[:, 1])
    assert s.line_pairs.shape == (m, 3)
    assert s.line_pairs[[0, -1], 0].tolist() == pytest.approx([min(GAMMAS), max(GAMMAS)])
    assert s.line_pairs[:, 1].min() >= min(TEMPS) and s.line_pairs[:, 1].max() <= max(TEMPS)
    # the line pick is the best of its 3m pairs, and the gap is measured against the grid's optimum
    assert s.n_line == 3 * m and s.n_grid == len(GAMMAS) * m
    assert s.line_pick[2] <= min(s.anchors[:, 2].min(), s.line_pairs[:, 2].min()) + 1e-15
    assert s.gap == pytest.approx(s.line_pick[2] - s.scores.min())
    assert s.same_pair == bool(np.allclose(s.line_pick[:2], s.grid_pick[:2]))
    assert s.seconds > 0 and s.cpu_seconds > 0


def test_bad_arguments_are_named(over_confident):
    z, y = over_confident
    with pytest.raises(ValueError, match="criterion"):
        selection_surface(z, y, criterion="brier", gammas=GAMMAS, temperatures=TEMPS)
    with pytest.raises(ValueError, match="gammas"):
        selection_surface(z, y, gammas=(1.0, 0.0), temperatures=TEMPS)
    with pytest.raises(ValueError, match="temperatures"):
        selection_surface(z, y, gammas=GAMMAS, temperatures=(1.0,))
    with pytest.raises(ValueError, match="surfaces"):
        plot_selection_surfaces([])


def test_plot_has_one_panel_per_surface_and_labelled_overlays(over_confident):
    import matplotlib.pyplot as plt

    from focalcal.plotting import FIGURE_WIDTH_IN

    z, y = over_confident
    surfaces = [selection_surface(z, y, criterion=c, gammas=GAMMAS, temperatures=TEMPS) for c in ("ece_mass", "nll")]
    fig, axes = plot_selection_surfaces(surfaces, title="synthetic")
    try:
        assert len(axes) == 2 and fig.get_figwidth() <= FIGURE_WIDTH_IN
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert {"grid selection", "3m selection"} <= set(labels) and len(labels) == 5
        assert all(ax.get_xlabel() and ax.get_ylabel() for ax in axes)
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# the page's verdicts and sentences
# --------------------------------------------------------------------------------------------

def test_trend_verdicts_follow_the_seed_ranges():
    from focalcal_book.fmnist_focal_ts import trend
    from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_RUN

    falling = trend([[1.0, 1.1], [0.8, 0.9], [0.5, 0.6]])
    assert falling["verdict"] == HOLDS and falling["steps"] == ["down", "down"] and falling["ends"] == "down"
    assert falling["means"] == pytest.approx([1.05, 0.85, 0.55])
    overlap = trend([[1.0, 1.1], [1.05, 0.7], [0.5, 0.6]])
    assert overlap["verdict"] == NOT_RESOLVED and overlap["steps"] == ["overlap", "down"]
    rising_step = trend([[1.0, 1.1], [1.2, 1.3], [0.5, 0.6]])
    assert rising_step["verdict"] == DOES_NOT_HOLD and rising_step["steps"] == ["up", "down"]
    assert trend([[1.0, 1.1], [1.2, 1.3]], decreasing=False)["verdict"] == HOLDS
    # one seed per level: the spread cannot decide, whatever the order
    assert trend([[1.0], [0.5]])["verdict"] == NOT_RESOLVED
    assert trend([[1.0, 2.0]])["verdict"] == NOT_RUN
    with pytest.raises(ValueError, match="values"):
        trend([[1.0], []])


def test_trend_majority_for_generally_and_the_failed_experiment_rule():
    from focalcal_book.fmnist_focal_ts import trend
    from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_TRAINED

    # K&K's Table 1 shape: three of four steps down, one up -> "generally" holds, "every step" fails
    levels = [[2.0, 2.1], [1.6, 1.7], [1.8, 1.9], [1.2, 1.3], [0.9, 1.0]]
    assert trend(levels, rule="majority")["verdict"] == HOLDS
    assert trend(levels, rule="every_step")["verdict"] == DOES_NOT_HOLD
    assert trend(levels)["step_verdicts"] == [HOLDS, DOES_NOT_HOLD, HOLDS, HOLDS]
    # two of four down, two overlapping: no majority either way
    assert trend([[2.0, 2.1], [1.6, 1.7], [1.5, 1.8], [1.2, 1.3], [1.0, 1.5]], rule="majority")["verdict"] == NOT_RESOLVED
    # three of four up: decided against
    assert trend([[1.0, 1.1], [1.2, 1.3], [1.4, 1.5], [1.6, 1.7], [1.0, 1.1]], rule="majority")["verdict"] == DOES_NOT_HOLD
    # a level that did not train: no step is judged
    gated = trend(levels, rule="majority", labels=list("abcde"), failed=["e"])
    assert gated["verdict"] == NOT_TRAINED and gated["step_verdicts"] == []
    with pytest.raises(ValueError, match="rule"):
        trend(levels, rule="mostly")
    with pytest.raises(ValueError, match="labels"):
        trend(levels, labels=["a"])


def test_seed_ranges():
    from focalcal_book.fmnist_focal_ts import seed_ranges

    assert seed_ranges([[0.011, 0.0125], [0.02]], [0.0, 3.0], scale=100) == (
        "1.10–1.25 at $\\gamma_{tr} = 0$, 2.00 at $\\gamma_{tr} = 3$")
    with pytest.raises(ValueError, match="gammas"):
        seed_ranges([[1.0]], [0.0, 1.0])


def test_paired_lower_counts_seeds_of_each_run():
    import pandas as pd

    from focalcal_book.fmnist_focal_ts import paired_lower
    from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED

    rows = []
    for loss, diffs in {"a": [-0.01, -0.02], "b": [0.01, -0.01], "c": [0.02, 0.01], "d": [-0.01]}.items():
        for seed, d in enumerate(diffs):
            rows += [{"loss_label": loss, "seed": seed, "method": "TS (ECE)", "ece_mass": 0.05},
                     {"loss_label": loss, "seed": seed, "method": "focal TS (ECE)", "ece_mass": 0.05 + d}]
    out = paired_lower(pd.DataFrame(rows), "focal TS (ECE)", "TS (ECE)")
    assert list(out.index) == ["a", "b", "c", "d"]
    assert out["verdict"].tolist() == [HOLDS, NOT_RESOLVED, DOES_NOT_HOLD, NOT_RESOLVED]
    assert out["lower"].tolist() == [2, 1, 0, 1] and out["seeds"].tolist() == [2, 2, 2, 1]
    assert out.loc["a", "min_diff"] == pytest.approx(-0.02) and out.loc["b", "max_diff"] == pytest.approx(0.01)
    with pytest.raises(ValueError, match="column"):
        paired_lower(pd.DataFrame(rows), "focal TS (ECE)", "TS (ECE)", column="brier")


def test_search_table_says_whether_the_line_found_the_optimum(over_confident):
    import dataclasses

    from focalcal_book.fmnist_focal_ts import OUTCOMES, line_tex, search_table

    z, y = over_confident
    s = selection_surface(z, y, criterion="nll", gammas=GAMMAS, temperatures=TEMPS)
    same = dataclasses.replace(s, line_pick=s.grid_pick.copy())
    worse = dataclasses.replace(s, line_pick=s.grid_pick + np.array([0.5, 0.2, 0.01]))
    better = dataclasses.replace(s, line_pick=s.grid_pick + np.array([0.1, 0.0, -0.001]))
    tied = dataclasses.replace(s, line_pick=s.grid_pick + np.array([0.1, 0.0, 0.0]))
    table = search_table([same, worse, better, tied])
    assert table["outcome"].tolist() == [OUTCOMES[i] for i in (0, 3, 1, 2)]
    assert table["criterion"].tolist() == ["NLL"] * 4
    assert table.loc[1, "gap"] == pytest.approx(0.01) and table.loc[2, "gap"] == pytest.approx(-0.001)
    assert table.loc[1, "line_gamma"] == pytest.approx(s.grid_pick[0] + 0.5)
    assert (table["line_pairs"] == s.n_line).all() and (table["grid_pairs"] == s.n_grid).all()
    ece = selection_surface(z, y, criterion="ece_mass", gammas=GAMMAS, temperatures=TEMPS)
    assert search_table([ece]).loc[0, "grid_score"] == pytest.approx(100 * ece.grid_pick[2])   # percent
    assert line_tex(0.8, -0.25) == "$T = 0.80 - 0.25\\,\\gamma_{ev}$"


def test_best_t_fit_is_the_least_squares_line(over_confident):
    import dataclasses

    z, y = over_confident
    s = selection_surface(z, y, criterion="ece_mass", gammas=GAMMAS, temperatures=TEMPS)
    exact = dataclasses.replace(s, best_t=0.9 + 0.3 * s.gammas)
    assert exact.best_t_fit() == pytest.approx((0.9, 0.3, 1.0))
    flat = dataclasses.replace(s, best_t=np.full_like(s.gammas, 1.2))
    assert flat.best_t_fit() == pytest.approx((1.2, 0.0, 1.0), abs=1e-12)


def test_best_t_curves_are_the_rows_of_the_surface(over_confident):
    from focalcal_book.fmnist_focal_ts import best_t_curves, linear_fit, plot_best_t_curves

    z, y = over_confident
    s = selection_surface(z, y, criterion="ece_mass", gammas=GAMMAS, temperatures=TEMPS)
    curves = best_t_curves({"over-confident": (z, y), "sharper": (2 * z, y)}, gammas=GAMMAS, temperatures=TEMPS)
    assert list(curves.columns) == ["label", "gamma_ev", "best_t", "score"] and len(curves) == 2 * len(GAMMAS)
    first = curves[curves["label"] == "over-confident"]
    assert first["best_t"].tolist() == s.best_t.tolist()
    assert first["score"].to_numpy() == pytest.approx(s.scores.min(axis=1))
    # doubling the logits doubles the best temperature (up to the grid)
    sharper = curves[curves["label"] == "sharper"]["best_t"].to_numpy()
    assert (sharper >= first["best_t"].to_numpy()).all()
    assert linear_fit([0, 1, 2], [1.0, 1.5, 2.0]) == pytest.approx((1.0, 0.5, 1.0))
    with pytest.raises(ValueError, match="x and y"):
        linear_fit([0.0], [1.0])
    import matplotlib.pyplot as plt

    fig, ax = plot_best_t_curves(curves, {"sharper": ("#000000", "--")})
    try:
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["over-confident", "sharper"]
        assert ax.get_xlabel() and ax.get_ylabel()
    finally:
        plt.close(fig)
