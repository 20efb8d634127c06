"""The theory chapters' claim ledgers, outside the book build.

Every theory chapter turns each claim of a paper into an assertion (``focalcal_book.verify``): a
claim that stops holding raises in its cell. Here each chapter is executed as a notebook (read
by MyST-NB's reader, executed by nbclient in the chapter's folder, as Jupyter Book does; several
chapters at a time), and a failing cell fails the chapter's test with the claim named in the
traceback. Then the pasted numbers of the errata page are compared with the quantities the page
says they are.

The executed chapters go into the jupyter-cache that the test book build reads
(``conftest.chapter_cache``, keyed on the code the chapters import), so `make test` executes
each chapter once and an unchanged chapter is not executed again; ``FOCALCAL_LEDGER_CACHE=0``
executes them all again. The chapters' tests are marked ``notebooks`` (not in `make test-fast`).
"""

from __future__ import annotations

import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mpmath
import nbformat
import pytest
import sympy as sp
from bs4 import BeautifulSoup
from conftest import chapter_cache
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from myst_nb.core.read import read_myst_markdown_notebook
from myst_parser.config.main import MdParserConfig
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from focalcal_book import verify

ROOT = Path(__file__).resolve().parents[1]
THEORY = ROOT / "book" / "theory"
# the chapters that keep a ledger (summary and errata only paste from them)
CHAPTERS = ["mukhoti", "charoenphakdee", "kk_binary", "kk_multiclass", "zhou", "curvature",
            "unified"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def read_page(path: Path) -> nbformat.NotebookNode:
    """A MyST page as the notebook Jupyter Book executes (and jupyter-cache keys)."""
    return read_myst_markdown_notebook(path.read_text(), MdParserConfig(), path=path)


def execute(path: Path, timeout: int = 1800) -> nbformat.NotebookNode:
    """Execute a MyST page in its folder; raises ``CellExecutionError`` naming the failing cell."""
    nb = read_page(path)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
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
    """Execute one chapter: its glued values, or the failing cell's error, and the notebook."""
    try:
        nb = execute(THEORY / f"{page}.md")
    except CellExecutionError as exc:
        return {"glue": {}, "error": ANSI.sub("", str(exc)), "notebook": None}
    return {"glue": glued(nb), "error": None, "notebook": nb}


@pytest.fixture(scope="session")
def chapters() -> dict[str, dict]:
    """Every ledger chapter, from the cache or executed now, several at a time (each in its own
    kernel), then cached. Only this thread touches the cache (jupyter-cache keeps its index in
    SQLite)."""
    cache = get_cache(chapter_cache())
    results, pending = {}, []
    for page in CHAPTERS:
        try:
            if os.environ.get("FOCALCAL_LEDGER_CACHE", "1") == "0":
                raise KeyError(page)
            _, nb = cache.merge_match_into_notebook(read_page(THEORY / f"{page}.md"))
            results[page] = {"glue": glued(nb), "error": None}
        except KeyError:
            pending.append(page)
    with ThreadPoolExecutor(max_workers=max(1, min(len(CHAPTERS), os.cpu_count() or 2))) as pool:
        for page, result in zip(pending, pool.map(run_chapter, pending)):
            nb = result.pop("notebook")
            if nb is not None:
                cache.cache_notebook_bundle(CacheBundleIn(nb, str(THEORY / f"{page}.md")),
                                            check_validity=False, overwrite=True)
            results[page] = result
    return results


@pytest.mark.notebooks
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


@pytest.mark.notebooks
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


@pytest.mark.notebooks
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
