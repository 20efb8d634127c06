"""The book reads at normal size: figure text at least MIN_TEXT_PX on the page, tables padded.

The HTML book shows a figure at most as wide as its content column (COLUMN_PX at a 1280 px
window, which tests/test_book.py measures in Chromium) and scales a wider one down, text and all.
These checks compute the rendered text size from the style's rcParams and the figure widths the
book's sources use; tests/test_book.py checks the tables in the rendered pages.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
from matplotlib.font_manager import FontProperties

matplotlib.use("Agg")

from focalcal_book.style import (COLUMN_PX, FIGURE_WIDTH_IN, MIN_TEXT_PX,  # noqa: E402
                                 SMALLEST_FONT_PT, rendered_text_px, use_book_style)

ROOT = Path(__file__).resolve().parents[1]
FONT_PARAMS = ("font.size", "axes.titlesize", "axes.labelsize", "xtick.labelsize", "ytick.labelsize",
               "legend.fontsize", "legend.title_fontsize", "figure.titlesize")
# the code that draws the book's figures: the book's helpers, the lab's figures, the library's
# reliability diagram, and the chapters' own cells
FIGURE_SOURCES = sorted([*(ROOT / "book" / "_lib" / "focalcal_book").glob("*.py"),
                         ROOT / "src" / "focalcal" / "lab" / "results" / "figures.py",
                         ROOT / "src" / "focalcal" / "plotting.py",
                         *(ROOT / "book").glob("*/*.md")])


def test_rendered_text_px_scales_only_figures_wider_than_the_column():
    natural_in = COLUMN_PX / 96  # an SVG this wide is drawn at its natural size
    assert rendered_text_px(9, natural_in / 2) == pytest.approx(12.0)  # 1 pt = 4/3 px
    assert rendered_text_px(9, natural_in) == pytest.approx(12.0)
    assert rendered_text_px(9, 2 * natural_in) == pytest.approx(6.0)
    with pytest.raises(ValueError, match="figure_width_in"):
        rendered_text_px(9, 0.0)


def test_style_fonts_read_at_min_text_px_on_the_widest_figure():
    with matplotlib.rc_context():
        use_book_style()
        sizes = {p: FontProperties(size=matplotlib.rcParams[p]).get_size_in_points() for p in FONT_PARAMS}
        default_width = matplotlib.rcParams["figure.figsize"][0]
    assert min(sizes.values()) >= SMALLEST_FONT_PT, sizes
    for width in (default_width, FIGURE_WIDTH_IN):
        px = rendered_text_px(min(sizes.values()), width)
        assert px >= MIN_TEXT_PX, f"{min(sizes.values())} pt text of a {width} in figure renders at {px:.1f} px"


def _number(node: ast.AST) -> float | None:
    return float(node.value) if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) else None


def _figure_settings(path: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """Literal figure widths (``figsize=(w, h)``) and font sizes (``fontsize=s``) in a source file,
    with their line numbers; a chapter contributes its code cells."""
    text = path.read_text()
    if path.suffix == ".md":
        cells = re.finditer(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, re.S | re.M)
        chunks = [(text[:m.start(1)].count("\n"), m.group(1)) for m in cells]
    else:
        chunks = [(0, text)]
    widths, fonts = [], []
    for offset, code in chunks:
        # cell options (":tags: [...]") and IPython magics are not Python
        code = "\n".join("" if line.startswith((":", "%", "!")) else line for line in code.splitlines())
        for node in ast.walk(ast.parse(code)):
            if not isinstance(node, ast.keyword):
                continue
            if node.arg == "figsize" and isinstance(node.value, ast.Tuple):
                w = _number(node.value.elts[0])
                if w is not None:
                    widths.append((offset + node.value.lineno, w))
            elif node.arg == "fontsize" and _number(node.value) is not None:
                fonts.append((offset + node.value.lineno, _number(node.value)))
    return widths, fonts


@pytest.mark.parametrize("path", FIGURE_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_book_figures_keep_text_readable(path):
    widths, fonts = _figure_settings(path)
    too_wide = [(line, w) for line, w in widths if w > FIGURE_WIDTH_IN]
    assert not too_wide, f"{path.name}: figures wider than {FIGURE_WIDTH_IN} in (line, width): {too_wide}"
    too_small = [(line, s) for line, s in fonts if rendered_text_px(s, FIGURE_WIDTH_IN) < MIN_TEXT_PX]
    assert not too_small, f"{path.name}: text below {MIN_TEXT_PX} px on the page (line, pt): {too_small}"


def test_figure_settings_are_found():
    # the scan above must see the sizes it is meant to bound, or it passes on nothing
    widths, fonts = _figure_settings(ROOT / "book" / "_lib" / "focalcal_book" / "released.py")
    assert widths and fonts
    widths, _ = _figure_settings(ROOT / "book" / "reference" / "which_ece.md")
    assert widths


def test_lab_figures_stay_within_the_width():
    import torch

    from focalcal.lab import results

    z = torch.randn(200, 4, generator=torch.Generator().manual_seed(0))
    y = z.argmax(-1)
    panels = {f"T = {i + 1}": z / (i + 1) for i in range(5)}
    fig, _ = results.plot_reliability_panel(panels, y, colors={name: "TS" for name in panels})
    assert fig.get_figwidth() <= FIGURE_WIDTH_IN
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_styled_pads_cells_and_keeps_the_numbers():
    from focalcal.lab.results import styled

    frame = pd.DataFrame({"loss_label": ["cross-entropy", "focal (gamma=1)"], "ece": [0.012345, 0.1],
                          "runs": [3, 1]})
    html = styled(frame, {"loss_label": "training loss", "ece": "ECE", "runs": "runs"}).to_html()
    padding = re.search(r"#T_\w+\s+td \{\s*padding: ([0-9.]+)em ([0-9.]+)em", html)
    assert padding and min(map(float, padding.groups())) > 0
    assert re.search(r"#T_\w+\s+td\.col1 \{\s*text-align: right", html)  # numbers align right
    assert not re.search(r"td\.col0 \{\s*text-align: right", html)  # text does not
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html)
    assert cells == ["cross-entropy", "0.0123", "3", "focal (gamma=1)", "0.1000", "1"]
