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
    if _in_jupyter_kernel():
        # A kernel inherits MPLBACKEND from the shell that started it; with "Agg" (usual on a
        # headless machine) plt.show() and the end of a cell draw nothing, and the executed
        # chapter would silently lose every figure. The inline backend puts them in the notebook,
        # as vector graphics for the HTML book.
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        get_ipython().run_line_magic("matplotlib", "inline")
        set_matplotlib_formats("svg")


def _in_jupyter_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency of the book extra
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def simplex_frame(ax, title: str | None = None,
                  labels: tuple[str, str, str] = ("class 1", "class 2", "class 3")) -> None:
    """Outline and vertex labels of a ternary plot of the 3-class simplex.

    Uses the coordinates of :func:`focalcal.theory.barycentric_to_cartesian`: class 1 at (0, 0),
    class 2 at (1, 0), class 3 at (1/2, sqrt(3)/2).
    """
    import numpy as np

    corners = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3.0) / 2]])
    ax.plot(*np.vstack([corners, corners[:1]]).T, color="k", lw=1)
    for (x, y), name, dy in zip(corners, labels, (-0.06, -0.06, 0.03)):
        ax.text(x, y + dy, name, ha="center", va="bottom" if dy > 0 else "top", fontsize=9)
    ax.set(aspect="equal", xlim=(-0.08, 1.08), ylim=(-0.12, 0.96))
    if title is not None:
        ax.set_title(title)
    ax.axis("off")
