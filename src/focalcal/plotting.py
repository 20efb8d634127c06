"""Figures: one colour per method, and reliability diagrams (needs the ``[plot]`` extra).

Colours come from :func:`color`, so that cross-entropy is the same blue in every figure and a
printed figure stays readable (colour-blind safe Okabe-Ito palette, distinct line styles).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

try:
    import matplotlib as mpl
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
except ModuleNotFoundError as err:  # the library alone does not install matplotlib
    if err.name is None or err.name.split(".")[0] != "matplotlib":
        raise
    raise ModuleNotFoundError('focalcal.plotting needs matplotlib, which the library alone does not '
                              'install: pip install "focalcal[plot]"', name="matplotlib") from err

from ._validation import ArrayLike
from .losses import DISPLAY_NAMES
from .metrics import reliability_data

# Okabe-Ito (colour-blind safe) first, then Tol's muted palette for the rarer methods.
METHOD_COLORS: dict[str, str] = {
    # training losses
    "cross-entropy": "#0072B2",
    "focal": "#D55E00",
    "FLSD-53": "#009E73",
    "FLSD-532": "#56B4E9",
    "dual focal": "#CC79A7",
    "inverse focal": "#E69F00",
    "AdaFocal": "#882255",
    "Brier": "#44AA99",
    "label smoothing": "#999933",
    "MMCE": "#AA4499",
    "KDE-XE": "#332288",
    "AURC": "#117733",
    "selective-risk": "#661100",
    "selective-risk (released)": "#BB5566",
    "selective-risk (detached weights)": "#997700",
    "Hessian trace": "#6699CC",
    # post-hoc calibrators
    "uncalibrated": "#4D4D4D",
    "TS": "#DDAA33",
    "focal TS": "#EE3377",
    "Psi": "#33BBEE",
    "TS (focal)": "#A6761D",
    # theory curves
    "identity": "#9E9E9E",
    "true posterior": "#000000",
}

#: other keys :func:`color` accepts: every loss's registry name (by
#: :data:`focalcal.losses.DISPLAY_NAMES`, the one table of display names), a few spellings of them,
#: and the calibrators' short names
ALIASES = {
    **{key: name for key, name in DISPLAY_NAMES.items() if key != name},
    "cross_entropy": "cross-entropy", "nll": "cross-entropy", "flsd_53": "FLSD-53", "flsd_532": "FLSD-532",
    "ts": "TS", "focal_ts": "focal TS", "fts": "focal TS", "psi": "Psi",
}

LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))

#: Width in inches of the widest figure the lab and the book draw. A web page shows a figure at most
#: as wide as its text column and shrinks a wider one, text included; at this width the book's
#: smallest figure text still renders at 10 px in its 688 px column (focalcal_book.style).
FIGURE_WIDTH_IN = 8.4


def color(method: str) -> str:
    """The book-wide colour of ``method`` (a display name or a loss/calibrator key).

    Examples
    --------
    >>> from focalcal.plotting import color
    >>> color("ce"), color("cross-entropy"), color("focal TS")
    ('#0072B2', '#0072B2', '#EE3377')
    """
    key = ALIASES.get(method, ALIASES.get(method.lower(), method))
    if key in METHOD_COLORS:
        return METHOD_COLORS[key]
    if key.startswith("focal"):
        return METHOD_COLORS["focal"]
    raise ValueError(f"method {method!r} has no book colour; known: {', '.join(METHOD_COLORS)}")


def gamma_colors(gammas: Iterable[float], cmap: str = "viridis") -> list[tuple[float, float, float, float]]:
    """Sequential RGBA colours, one per gamma in ``gammas``, for a family of curves (ordered, print-safe).

    Examples
    --------
    >>> from matplotlib.colors import to_hex
    >>> from focalcal.plotting import gamma_colors
    >>> [to_hex(c) for c in gamma_colors([0.0, 1.0, 3.0])]
    ['#440154', '#25848e', '#bddf26']
    """
    gammas = list(gammas)
    cm = mpl.colormaps[cmap]
    n = max(len(gammas) - 1, 1)
    return [cm(0.9 * i / n) for i in range(len(gammas))]


def plot_reliability(probs: ArrayLike | None = None, labels: ArrayLike | None = None, *,
                     logits: ArrayLike | None = None, n_bins: int = 15, binning: str = "width",
                     method: str = "uncalibrated",
                     title: str | None = None,
                     axes: tuple[Axes, Axes] | None = None) -> tuple[Figure, tuple[Axes, Axes]]:
    """Reliability diagram with gap bars and a bin-count histogram (as Mukhoti et al. 2020, Fig. 1).

    Top panel: accuracy per bin (bars in the book colour of ``method``), the gap to the bin's mean
    confidence (hatched) and the reference of perfect calibration. Bottom panel: percentage of
    samples in each bin. The title reports the (Ada)ECE with the same bins.

    With ``binning="width"`` the x axis is the confidence and the reference is the diagonal. With
    ``binning="mass"`` the bins crowd against confidence 1 for a trained network, so the x axis is
    the bin index (bins ordered by confidence, equal numbers of samples) and the reference is the
    bin's mean confidence, drawn as a black tick on each bar.

    Parameters
    ----------
    probs, labels, logits, n_bins, binning
        As in :func:`focalcal.metrics.reliability_data`.
    method : str
        Key for :func:`focalcal.plotting.color` (e.g. ``"ce"``, ``"focal"``, ``"TS"``).
    title : str, optional
        First title line (default: ``method``).
    axes : pair of matplotlib Axes, optional
        (reliability axes, histogram axes); a new figure is made when omitted.

    Returns
    -------
    (Figure, (Axes, Axes))

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> import torch
    >>> from focalcal.plotting import plot_reliability
    >>> probs = torch.tensor([[0.95, 0.05], [0.75, 0.25], [0.35, 0.65], [0.55, 0.45]])
    >>> fig, (ax, ax_hist) = plot_reliability(probs, torch.tensor([0, 1, 1, 0]), n_bins=5, method="focal")
    >>> print(ax.get_title())
    focal
    ECE = 0.2250 (5 bins)
    >>> plt.close(fig)
    """
    data = reliability_data(probs, labels, logits=logits, n_bins=n_bins, binning=binning)
    col = color(method)
    if axes is None:
        _, axes = plt.subplots(2, 1, sharex=True, figsize=(4.6, 5.0),
                               gridspec_kw={"height_ratios": (3, 1), "hspace": 0.08})
    ax, axh = axes
    full = (data.counts > 0).numpy()
    acc = data.accuracy.numpy()[full]
    conf = data.confidence.numpy()[full]
    if binning == "width":
        left = data.edges[:-1].numpy()[full]
        width = data.edges.diff().numpy()[full]
        xlim, xlabel = (0.0, 1.0), "confidence (top-class probability)"
    else:
        left = torch.arange(n_bins, dtype=torch.float64).numpy()[full]
        width = 1.0
        xlim, xlabel = (0.0, float(n_bins)), "equal-mass bin (ordered by confidence)"
    ax.bar(left, acc, width=width, align="edge", color=col, edgecolor="black", linewidth=0.6,
           label="accuracy")
    ax.bar(left, conf - acc, bottom=acc, width=width, align="edge", facecolor="none",
           edgecolor="#C0392B", hatch="///", linewidth=0.6, label="gap to mean confidence")
    if binning == "width":
        ax.plot([0, 1], [0, 1], linestyle="--", color=color("identity"), linewidth=1.2,
                label="perfect calibration")
    else:
        ax.hlines(conf, left, left + width, color=color("true posterior"), linewidth=1.6,
                  label="mean confidence (perfect calibration)")
    ax.set_xlim(*xlim)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    # the legend goes below the histogram: inside the diagram it would cover bars, which can fill
    # any corner (a well-trained network's equal-mass bins fill the panel)
    axh.legend(*ax.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, -0.5),
               ncol=1, frameon=False)
    if binning == "mass":
        from matplotlib.ticker import MaxNLocator

        axh.xaxis.set_major_locator(MaxNLocator(integer=True))
    name = "AdaECE" if binning == "mass" else "ECE"
    ax.set_title(f"{title or method}\n{name} = {data.ece():.4f} ({n_bins} bins)")
    frac = 100.0 * data.counts.numpy()[full] / data.n_samples
    axh.bar(left, frac, width=width, align="edge", color=col, edgecolor="black", linewidth=0.6)
    axh.set_xlim(*xlim)
    axh.set_xlabel(xlabel)
    axh.set_ylabel("% of samples")
    return ax.figure, (ax, axh)
