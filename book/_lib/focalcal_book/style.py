"""The book's figure style: matplotlib defaults, the sizes that keep figure text readable, and the
ternary-plot frame.

Every chapter calls :func:`use_book_style` once; colours come from :func:`focalcal.plotting.color`.

Figure text is sized for the page: the HTML book shows a figure at most as wide as its content
column (:data:`COLUMN_PX` at a 1280 px window) and shrinks a wider one, text and all. So no figure
is wider than :data:`FIGURE_WIDTH_IN` and no figure text smaller than :data:`SMALLEST_FONT_PT`;
:func:`rendered_text_px` says what that gives on the page (at least :data:`MIN_TEXT_PX`).
"""

from __future__ import annotations

import matplotlib as mpl

# re-exported for the pages and the book's figures
from focalcal.plotting import FIGURE_WIDTH_IN, LINESTYLES, METHOD_COLORS, color, gamma_colors  # noqa: F401

#: width in CSS px of the book's content column at a 1280 px wide window (measured by
#: tests/test_book.py in headless Chromium)
COLUMN_PX = 688
#: the least height of figure text on the page, in CSS px (the body's small print is 12-13 px)
MIN_TEXT_PX = 10.0
#: the smallest font size any figure of the book sets (tick labels, legends, contour labels)
SMALLEST_FONT_PT = 9.0
# An SVG (the book's figure format) is sized in points, which a browser draws at 4/3 px each.
_PX_PER_PT = 4.0 / 3.0


def rendered_text_px(font_pt: float, figure_width_in: float, column_px: float = COLUMN_PX) -> float:
    """Height in CSS px of ``font_pt`` text of a figure ``figure_width_in`` inches wide on the page.

    The figure is drawn at its natural size (1 pt = 4/3 px) when it fits the column and scaled
    down to the column's width when it does not.
    """
    if font_pt <= 0 or figure_width_in <= 0 or column_px <= 0:
        raise ValueError(f"font_pt, figure_width_in and column_px must be positive, got {font_pt}, "
                         f"{figure_width_in} and {column_px}")
    natural_px = figure_width_in * 72.0 * _PX_PER_PT
    return font_pt * _PX_PER_PT * min(1.0, column_px / natural_px)


def use_book_style() -> None:
    """Matplotlib defaults for every figure of the book."""
    mpl.rcParams.update({
        "figure.figsize": (6.4, 4.0),
        "figure.dpi": 110,
        "savefig.bbox": "tight",
        "font.size": 10,
        "axes.titlesize": 10.5,
        "axes.labelsize": 10,
        "xtick.labelsize": SMALLEST_FONT_PT,
        "ytick.labelsize": SMALLEST_FONT_PT,
        "legend.fontsize": SMALLEST_FONT_PT,
        "legend.title_fontsize": SMALLEST_FONT_PT,
        "figure.titlesize": 11,
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

    Uses the coordinates of :func:`focalcal_book.theory.barycentric_to_cartesian`: class 1 at (0, 0),
    class 2 at (1, 0), class 3 at (1/2, sqrt(3)/2).
    """
    import numpy as np

    corners = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3.0) / 2]])
    ax.plot(*np.vstack([corners, corners[:1]]).T, color="k", lw=1)
    for (x, y), name, dy in zip(corners, labels, (-0.06, -0.06, 0.03)):
        ax.text(x, y + dy, name, ha="center", va="bottom" if dy > 0 else "top", fontsize=SMALLEST_FONT_PT)
    ax.set(aspect="equal", xlim=(-0.08, 1.08), ylim=(-0.12, 0.96))
    if title is not None:
        ax.set_title(title)
    ax.axis("off")
