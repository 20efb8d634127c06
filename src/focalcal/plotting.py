"""The book's figure style: one colour per method, everywhere.

Every chapter calls :func:`use_book_style` once and takes colours from :func:`color`, so that
cross-entropy is the same blue on every page and a printed figure stays readable (colour-blind
safe Okabe-Ito palette, distinct line styles, vector output).
"""

from __future__ import annotations

import matplotlib as mpl

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

ALIASES = {
    "ce": "cross-entropy", "cross_entropy": "cross-entropy", "nll": "cross-entropy",
    "flsd53": "FLSD-53", "flsd_53": "FLSD-53", "flsd532": "FLSD-532", "flsd_532": "FLSD-532",
    "dual_focal": "dual focal", "inverse_focal": "inverse focal", "adafocal": "AdaFocal",
    "brier": "Brier", "label_smoothing": "label smoothing", "mmce": "MMCE", "kde_xe": "KDE-XE",
    "aurc": "AURC", "ts": "TS", "focal_ts": "focal TS", "fts": "focal TS", "psi": "Psi",
}

LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))


def color(method: str) -> str:
    """The book-wide colour of ``method`` (a display name or a loss/calibrator key)."""
    key = ALIASES.get(method, ALIASES.get(method.lower(), method))
    if key in METHOD_COLORS:
        return METHOD_COLORS[key]
    if key.startswith("focal"):
        return METHOD_COLORS["focal"]
    raise ValueError(f"method {method!r} has no book colour; known: {', '.join(METHOD_COLORS)}")


def gamma_colors(gammas, cmap: str = "viridis") -> list:
    """Sequential colours for a family of curves indexed by gamma (ordered, print-safe)."""
    gammas = list(gammas)
    cm = mpl.colormaps[cmap]
    n = max(len(gammas) - 1, 1)
    return [cm(0.9 * i / n) for i in range(len(gammas))]


def use_book_style() -> None:
    """Matplotlib defaults for every figure of the book."""
    mpl.rcParams.update({
        "figure.figsize": (6.4, 4.0),
        "figure.dpi": 110,
        "savefig.bbox": "tight",
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.labelsize": 10,
        "legend.fontsize": 9,
        "legend.frameon": False,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "lines.linewidth": 1.8,
        "image.cmap": "viridis",
    })
    try:  # vector figures in the HTML book where the notebook front-end allows it
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("svg")
    except ImportError:  # pragma: no cover - outside IPython
        pass
