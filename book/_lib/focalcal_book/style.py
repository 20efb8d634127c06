"""The book's figure style: matplotlib defaults and the ternary-plot frame.

Every chapter calls :func:`use_book_style` once; colours come from :func:`focalcal.plotting.color`.
"""

from __future__ import annotations

import matplotlib as mpl

from focalcal.plotting import LINESTYLES, METHOD_COLORS, color, gamma_colors  # noqa: F401  (re-exported for pages)


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

    Uses the coordinates of :func:`focalcal_book.theory.barycentric_to_cartesian`: class 1 at (0, 0),
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
