import matplotlib
import pytest

from focalcal import plotting


def test_every_method_has_a_distinct_colour():
    colours = list(plotting.METHOD_COLORS.values())
    assert len(set(colours)) == len(colours)


def test_aliases_resolve_and_unknown_raises():
    assert plotting.color("ce") == plotting.color("cross-entropy")
    assert plotting.color("focal_ts") == plotting.color("focal TS")
    assert plotting.color("focal (gamma=3)") == plotting.color("focal")
    with pytest.raises(ValueError, match="no book colour"):
        plotting.color("hinge")


def test_style_and_gamma_colours():
    plotting.use_book_style()
    assert matplotlib.rcParams["axes.grid"]
    cols = plotting.gamma_colors([0, 1, 2])
    assert len(cols) == 3 and cols[0] != cols[-1]
