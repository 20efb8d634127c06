"""The theory chapters' claim ledgers, outside the book build.

Every theory chapter turns each claim of a paper into an assertion (``focalcal_book.verify``): a
claim that stops holding raises in its cell. Here each chapter is executed as a notebook
(jupytext -> nbclient, in the chapter's folder, as Jupyter Book does), unmarked, so that
``make test-fast`` runs all the ledger checks; a failing cell fails the chapter's test with the
claim named in the traceback. Then the pasted numbers of the errata page are compared with the
quantities the page says they are.

An executed chapter is kept in ``_build/test/ledgers`` under a digest of everything it depends
on (its source, the library, the book's helpers and the versions of the numeric packages), so
an unchanged chapter is not executed twice; ``FOCALCAL_LEDGER_CACHE=0`` executes them all again.
"""

from __future__ import annotations

import math
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import jupytext
import mpmath
import nbformat
import pytest
import sympy as sp
from bs4 import BeautifulSoup
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from focalcal_book import verify

ROOT = Path(__file__).resolve().parents[1]
THEORY = ROOT / "book" / "theory"
CACHE = ROOT / "_build" / "test" / "ledgers"
# the chapters that keep a ledger (summary and errata only paste from them)
CHAPTERS = ["mukhoti", "charoenphakdee", "kk_binary", "kk_multiclass", "zhou", "curvature",
            "unified"]
PACKAGES = ("torch", "numpy", "scipy", "sympy", "mpmath")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _digest(page: str) -> str:
    from focalcal.lab.io import source_digest

    files = [THEORY / f"{page}.md"] + [p for base in (ROOT / "src" / "focalcal", ROOT / "book" / "_lib" / "focalcal_book")
                                       for p in sorted(base.rglob("*.py"))]
    return source_digest(files, ROOT, extra=[*(f"{pkg}=={metadata.version(pkg)}" for pkg in PACKAGES),
                                             f"python {sys.version_info[:2]}"])


def execute(path: Path, timeout: int = 1800) -> nbformat.NotebookNode:
    """Execute a MyST page (or any jupytext-readable file) in its folder; raises
    ``CellExecutionError`` naming the failing cell."""
    nb = jupytext.read(path)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb


def glued(nb: nbformat.NotebookNode) -> dict[str, str]:
    """The values a notebook glued (``myst_nb.glue``), as their text/plain or text/html."""
    out = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is None:
                continue
            data = o["data"]
            prefix = o["metadata"]["scrapbook"].get("mime_prefix", "")
            out[name] = data.get(prefix + "text/html", data.get(prefix + "text/plain"))
    return out


def run_chapter(page: str) -> dict:
    """Execute one chapter (or reuse its executed copy for this digest)."""
    key = _digest(page)
    cached = CACHE / f"{page}-{key}.ipynb"
    if os.environ.get("FOCALCAL_LEDGER_CACHE", "1") != "0" and cached.is_file():
        return {"glue": glued(nbformat.read(cached, 4)), "error": None, "cached": True}
    try:
        nb = execute(THEORY / f"{page}.md")
    except CellExecutionError as exc:
        return {"glue": {}, "error": ANSI.sub("", str(exc)), "cached": False}
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in CACHE.glob(f"{page}-*.ipynb"):
        old.unlink()
    for cell in nb.cells:  # keep only the glued values (the figures run to tens of MB)
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", [])
                            if "scrapbook" in o.get("metadata", {})]
    nbformat.write(nb, cached)
    return {"glue": glued(nb), "error": None, "cached": False}


@pytest.fixture(scope="session")
def chapters() -> dict[str, dict]:
    """Every ledger chapter executed, several at a time (each in its own kernel)."""
    workers = max(1, min(len(CHAPTERS), (os.cpu_count() or 2)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(CHAPTERS, pool.map(run_chapter, CHAPTERS)))


@pytest.mark.parametrize("page", CHAPTERS)
def test_every_claim_of_the_chapter_holds(chapters, page):
    result = chapters[page]
    assert result["error"] is None, f"{page}: a cell failed (a claim no longer holds?)\n" \
                                    f"{result['error'][-4000:]}"
    glue = result["glue"]
    counts = {k: int(glue[k]) for k in ("n_claims", *verify.COUNT_KEYS.values())}
    assert counts["n_claims"] > 0
    assert counts["n_claims"] == sum(counts[k] for k in verify.COUNT_KEYS.values())
    rows = BeautifulSoup(glue["verdicts"], "html.parser").select("tbody tr")
    assert len(rows) == counts["n_claims"], f"{page}: the verdict table lost rows"
    statuses = [tr["data-status"] for tr in rows]
    assert set(statuses) <= set(verify.STATUSES)


# ------------------------------------------------------------------------------------------
# the harness itself: a false claim must fail its page
# ------------------------------------------------------------------------------------------

PAGE = """---
jupytext:
  text_representation: {{extension: .md, format_name: myst}}
kernelspec: {{display_name: Python 3, language: python, name: python3}}
---

```{{code-cell}} ipython3
import sympy as sp
from focalcal_book.verify import Ledger, check_inequality

x = sp.Symbol("x", positive=True)
ledger = Ledger("test")
ledger.add(check_inequality("claim", {smaller}, {larger}, {{x: sp.Interval.open(0, 1)}}))
ledger.glue()
```
"""


def test_a_false_claim_fails_its_page(tmp_path):
    good = tmp_path / "good.md"
    good.write_text(PAGE.format(smaller="sp.log(x)", larger="x - 1"))
    nb = execute(good, timeout=300)
    assert glued(nb)["n_claims"] == "1"
    bad = tmp_path / "bad.md"
    bad.write_text(PAGE.format(smaller="x - 1", larger="sp.log(x)"))
    with pytest.raises(CellExecutionError, match="claim failed: claim"):
        execute(bad, timeout=300)


# ------------------------------------------------------------------------------------------
# the errata page pastes the numbers it names
# ------------------------------------------------------------------------------------------

def gamma_star(p0: float) -> float:
    """Mukhoti's Prop. 2 threshold from its Lambert-W formula (mpmath, 30 digits)."""
    with mpmath.workdps(30):
        a, b = 1 - mpmath.mpf(p0), mpmath.mpf(p0) * mpmath.log(p0)
        return float(a / b + mpmath.lambertw(-a**(1 - a / b) / b * mpmath.log(a), -1).real
                     / mpmath.log(a))


def g(p: float, gamma: float) -> float:
    """Mukhoti's gradient factor, Eq. (7) as printed."""
    return (1 - p)**gamma - gamma * p * (1 - p)**(gamma - 1) * math.log(p)


# TeX a row of the errata table writes right before a pasted value ("$TeX$ = {glue:text}`...`"),
# and that quantity computed here from its formula, independently of the chapter that glued it
NAMED_QUANTITIES = {
    r"\gamma^*(1/3)": lambda: gamma_star(1 / 3),
    r"\gamma^*(0.2)": lambda: gamma_star(0.2),
    r"\gamma^*(0.25)": lambda: gamma_star(0.25),
    r"g(0.2, 5)": lambda: g(0.2, 5),
    r"g(0.25, 3)": lambda: g(0.25, 3),
    r"g(0.3, 1)": lambda: g(0.3, 1),
    r"5 - 8/\ln 5": lambda: 5 - 8 / math.log(5),
    r"1/e": lambda: math.exp(-1),
    r"\gamma_c = 2 - 2/\log 2": lambda: 2 - 2 / math.log(2),
    r"1/W(1/e)": lambda: 1 / float(mpmath.lambertw(mpmath.exp(-1)).real),
    r"p = W(1/e)": lambda: float(mpmath.lambertw(mpmath.exp(-1)).real),
}
PASTE = re.compile(r"\$([^$]+)\$\s*=\s*\{glue:text\}`(\w+)\.md::(\w+)(?::[^`]*)?`")


def errata_pastes() -> list[tuple[str, str, str, str]]:
    """(row, TeX, page, key) for every "$TeX$ = {glue:text}`page.md::key`" of the errata page."""
    rows = [line for line in (THEORY / "errata.md").read_text().splitlines()
            if line.startswith("| ") and "{glue:text}" in line]
    return [(row.split("|")[1].strip(), m[1].strip(), m[2], m[3])
            for row in rows for m in PASTE.finditer(row)]


def test_errata_names_the_quantities_it_pastes():
    named = [(tex, page, key) for _, tex, page, key in errata_pastes() if tex in NAMED_QUANTITIES]
    # the footnote-2 row once pasted the near-uniform threshold gamma_4 = -0.33 as gamma*(1/3)
    footnote2 = [(tex, page, key) for row, tex, page, key in errata_pastes()
                 if row == "footnote 2" and tex == r"\gamma^*(1/3)"]
    assert footnote2 == [(r"\gamma^*(1/3)", "charoenphakdee", "g_lim4")]
    assert len({tex for tex, _, _ in named}) == len(NAMED_QUANTITIES), \
        "a quantity of NAMED_QUANTITIES is no longer pasted by the errata page"


def test_errata_pastes_the_value_of_the_quantity_it_names(chapters):
    checked = 0
    for row, tex, page, key in errata_pastes():
        if tex not in NAMED_QUANTITIES:
            continue
        assert chapters[page]["error"] is None, f"{page} did not execute"
        value = float(chapters[page]["glue"][key])
        expected = NAMED_QUANTITIES[tex]()
        assert value == pytest.approx(expected, rel=1e-8), \
            f"errata row {row!r} pastes {page}.md::{key} = {value} as ${tex}$ = {expected}"
        checked += 1
    assert checked >= len(NAMED_QUANTITIES)


# ------------------------------------------------------------------------------------------
# what the ledgers render and count
# ------------------------------------------------------------------------------------------

def test_claims_render_as_math():
    html = verify.tex_html(r"Bernoulli: $(1-p)^\gamma \ge 1 - \gamma p$ for $p < 1$ & more")
    assert html.count('<span class="math notranslate nohighlight">\\(') == 2
    assert "&lt; 1" in html and "&amp; more" in html and "$" not in html
    with pytest.raises(ValueError, match="unbalanced"):
        verify.tex_html("a $b")


def test_verdict_table_numbers_rows_by_their_place_in_the_ledger():
    ledger = verify.Ledger("t")
    first = ledger.add(verify.check_true("$a$", True, method="m"))
    second = verify.check_true("b", True, method="m", detail=r"$x < 1$")
    soup = BeautifulSoup(ledger.html([first, second]), "html.parser")
    cells = [tr.find("td").get_text() for tr in soup.select("tbody tr")]
    assert cells == ["1", ""]  # the second is not in the ledger (yet)
    assert [tr["data-status"] for tr in soup.select("tbody tr")] == [verify.VERIFIED_NUMERIC] * 2
    shown = ledger.record([second])
    assert "data-status" in shown.data and len(ledger.verdicts) == 2


def test_cited_statements_are_counted_apart():
    ledger = verify.Ledger("t")
    ledger.add(verify.cited("Lemma 1 of someone", reference="someone (2024), Lemma 1"))
    ledger.add(verify.check_true("c", True, method="m"))
    counts = ledger.counts()
    assert counts["n_cited"] == 1 and counts["n_numeric"] == 1 and counts["n_claims"] == 2
    with pytest.raises(ValueError, match="reference"):
        verify.cited("x", reference="")


def test_inequality_tries_sympy_only_when_asked():
    x = sp.Symbol("x", positive=True)
    dom = {x: sp.Interval.open(0, sp.oo)}
    assert verify.check_inequality("x^2 + 1 > 0", 0, x**2 + 1, dom).status == verify.VERIFIED_NUMERIC
    v = verify.check_inequality("x^2 + 1 > 0", 0, x**2 + 1, dom, strict=True, symbolic=True)
    assert v.status == verify.VERIFIED_SYMBOLIC
    # a closed finite end is not covered by the positive sweep: numeric, and still checked there
    v = verify.check_inequality("x >= 0", 0, x, {x: sp.Interval(0, 1)}, symbolic=True)
    assert v.status == verify.VERIFIED_NUMERIC
    with pytest.raises(AssertionError, match="claim failed"):
        verify.check_inequality("x < 1/2", x, sp.Rational(1, 2), {x: sp.Interval.open(0, 1)},
                                symbolic=True)
