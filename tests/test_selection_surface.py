"""focalcal_book.selection_surface: K&K's Fig. 8 surface and the 3m line search drawn over it."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from focalcal.posthoc import FocalTemperatureScaling, TemperatureScaling, focal_ts_scores
from focalcal_book.selection_surface import (SURFACE_GAMMAS, SURFACE_TEMPERATURES, plot_selection_surfaces,
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
    assert s.seconds > 0


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
