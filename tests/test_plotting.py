import matplotlib
import pytest

from focalcal import metrics, plotting
from focalcal.lab.data import published_logits
from focalcal_book import style


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
    style.use_book_style()
    assert matplotlib.rcParams["axes.grid"]
    cols = plotting.gamma_colors([0, 1, 2])
    assert len(cols) == 3 and cols[0] != cols[-1]


def test_simplex_frame_matches_barycentric_coordinates():
    import matplotlib.pyplot as plt
    import torch

    from focalcal_book.theory import barycentric_to_cartesian

    fig, ax = plt.subplots()
    style.simplex_frame(ax, "t")
    xy = ax.lines[0].get_xydata()[:3]
    want = barycentric_to_cartesian(torch.eye(3, dtype=torch.float64)).numpy()
    assert abs(xy - want).max() < 1e-12
    assert ax.get_title() == "t" and [t.get_text() for t in ax.texts] == ["class 1", "class 2", "class 3"]
    plt.close(fig)


@pytest.fixture(scope="module")
def real(shared_logits_dir):
    return published_logits("ce", "test", download=False)


def test_plot_reliability_draws_bins(real):
    logits, labels = real
    fig, (ax, axh) = plotting.plot_reliability(logits=logits, labels=labels, method="ce")
    rd = metrics.reliability_data(logits=logits, labels=labels)
    n_full = int((rd.counts > 0).sum())
    assert len(ax.patches) == 2 * n_full and len(axh.patches) == n_full
    assert "0.0562" in ax.get_title()
    assert ax.get_xlim() == (0, 1) and axh.get_xlabel() and ax.get_ylabel()
    matplotlib.pyplot.close(fig)
    fig, (ax, axh) = plotting.plot_reliability(logits=logits, labels=labels, binning="mass", method="focal")
    assert len(ax.patches) == 2 * 15 and ax.get_xlim() == (0, 15) and "AdaECE = 0.0559" in ax.get_title()
    matplotlib.pyplot.close(fig)


def test_plotting_without_matplotlib_names_the_extra(monkeypatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "focalcal.plotting")
    with pytest.raises(ModuleNotFoundError, match=r'focalcal.plotting needs matplotlib.*'
                                                  r'pip install "focalcal\[plot\]"') as err:
        importlib.import_module("focalcal.plotting")
    assert err.value.name == "matplotlib"


def test_the_colours_the_lab_and_the_released_networks_read_the_librarys_display_names():
    from focalcal.lab.data.released import RELEASED
    from focalcal.lab.profiles import ALL_LOSSES
    from focalcal.losses import DISPLAY_NAMES

    assert all(plotting.ALIASES.get(key, key) == name for key, name in DISPLAY_NAMES.items())
    colored = {n for n in plotting.METHOD_COLORS if n in DISPLAY_NAMES.values()}
    assert {"cross-entropy", "focal", "FLSD-53", "dual focal", "inverse focal", "Brier"} <= colored
    assert plotting.color("selective_risk") == plotting.color("selective-risk")
    assert {lo.display for lo in ALL_LOSSES if not lo.params} <= set(DISPLAY_NAMES.values())
    assert {net.loss for net in RELEASED.values()} <= set(DISPLAY_NAMES.values())
