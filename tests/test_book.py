"""Build the book as CI would and read it as a reader would.

One session-scoped build executes every chapter (a failing cell fails the build, since the config
sets ``nb_execution_raise_on_error``); then every page of the table of contents is opened in
headless Chromium after its scripts ran: typeset math present, no raw TeX delimiters left, every
image present and non-empty, and, at a 1280 px wide window, no table wider than the content
column unless it scrolls inside a container of its own.
"""

from __future__ import annotations

import html as html_lib
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from bs4 import BeautifulSoup
from conftest import chapter_cache
from focalcal_book.style import COLUMN_PX, MIN_TEXT_PX, SMALLEST_FONT_PT

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "_build" / "test"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=20000", "--window-size=1280,4000", "--hide-scrollbars",
                  "--dump-dom"]
# Run in each page once MathJax has typeset it (formulas change widths): the content column's width
# and every table in the article that sticks out past the column without a scrolling container of
# its own between it and the column. Written into the DOM, where --dump-dom picks it up.
LAYOUT_PROBE = """<script>
window.addEventListener("load", () => {
  const typeset = (window.MathJax && MathJax.startup && MathJax.startup.promise) || Promise.resolve();
  typeset.then(() => {
    const article = document.querySelector("article.bd-article") || document.querySelector("main");
    const cs = getComputedStyle(article);
    const box = article.getBoundingClientRect();
    const left = box.left + parseFloat(cs.paddingLeft), right = box.right - parseFloat(cs.paddingRight);
    const overflowing = [];
    for (const table of article.querySelectorAll("table")) {
      const r = table.getBoundingClientRect();
      if (r.right <= right + 1 && r.left >= left - 1) continue;
      let scrolls = false;
      for (let el = table.parentElement; el && el !== article; el = el.parentElement) {
        const e = el.getBoundingClientRect();
        if (["auto", "scroll"].includes(getComputedStyle(el).overflowX) && e.right <= right + 1) {
          scrolls = true;
          break;
        }
      }
      if (!scrolls) overflowing.push({width: r.width, text: table.innerText.slice(0, 80)});
    }
    const images = [...article.querySelectorAll("img")].map((img) => ({
      src: img.currentSrc.slice(0, 200), natural: img.naturalWidth, shown: img.getBoundingClientRect().width}));
    const out = document.createElement("pre");
    out.id = "focalcal-layout";
    out.textContent = JSON.stringify({column: right - left, overflowing: overflowing, images: images});
    document.body.appendChild(out);
  });
});
</script>"""


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                pages.append(e["file"])
            walk(e.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    return pages


PAGES = toc_pages()


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.fail("headless Chromium is needed to check the built book; `make test` installs "
                    "Debian's chromium where the machine allows (apt-get install chromium)")
    return exe


@pytest.fixture(scope="session")
def built_book(smoke_runs, shared_logits_dir) -> Path:
    """Build the whole book once, into _build/test, with the smoke sweep's results and the
    published logits (the build inherits FOCALCAL_LOGITS_ROOT). The calibrator caches are filled
    first, in two processes, as ``make book`` fills them (``make calibrator-cache``)."""
    warm_caches(smoke_runs)
    return jupyter_book(OUT, smoke_runs, "-W", "-n", "--keep-going")


def warm_caches(runs: Path) -> None:
    """What ``make calibrator-cache`` runs, for the sweep folder ``runs``: the released networks'
    rows and the calibrator comparison's fits, in two processes (cold, the two pages took 173 s of
    a serial test build)."""
    code = (f"from focalcal_book.which_calibrator import warm; warm({str(runs)!r}, jobs=2); "
            "from focalcal_book.released import warm; warm(jobs=2)")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "book" / "_lib"), MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"filling the calibrator caches failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")


def jupyter_book(out: Path, runs: Path, *options: str) -> Path:
    """``jupyter-book build --all`` of the repository into ``out`` with the sweep folder ``runs``
    (``$FOCALCAL_RUNS``) and ``options``; returns the HTML folder, or fails the test with the
    build's output and its execution reports. Its execution cache is the ledger tests'
    (``conftest.chapter_cache``: a theory chapter they executed is not executed again), never
    `make book`'s."""
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    cfg["execute"]["cache"] = str(chapter_cache())
    out.mkdir(parents=True, exist_ok=True)
    (out / "_config.yml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, FOCALCAL_RUNS=str(runs), MPLBACKEND="Agg")
    jb = Path(sys.executable).with_name("jupyter-book")
    proc = subprocess.run([str(jb), "build", str(ROOT), "--path-output", str(out), "--config",
                           str(out / "_config.yml"), *options, "--all"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    html = out / "_build" / "html"
    if proc.returncode != 0:
        reports = "\n".join(p.read_text()[-4000:] for p in sorted((html / "reports").glob("**/*.log"))) \
            if (html / "reports").exists() else ""
        pytest.fail(f"jupyter-book build into {out} failed (exit {proc.returncode}):\n"
                    f"{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}\n{reports}")
    return html


@pytest.fixture(scope="session")
def rendered(built_book) -> dict[str, str]:
    """Each page's DOM after its scripts (MathJax) ran, from headless Chromium."""
    exe = chromium()

    def dump(page: str) -> tuple[str, str]:
        html = built_book / f"{page}.html"
        # a copy beside the page (its relative links still resolve) that carries the layout probe
        probe = html.with_name(f"{html.stem}.layout-probe.html")
        probe.write_text(html.read_text().replace("</head>", LAYOUT_PROBE + "</head>", 1))
        try:
            proc = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={OUT / 'chromium' / page}",
                                   probe.as_uri()], capture_output=True, text=True, timeout=120)
        finally:
            probe.unlink()
        return page, proc.stdout

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(dump, PAGES))


@pytest.mark.parametrize("page", PAGES)
def test_page_executed_without_error(built_book, page):
    html = built_book / f"{page}.html"
    assert html.is_file(), f"{page} was not built"
    text = html.read_text()
    assert "Traceback (most recent call last)" not in text, f"{page} shows a traceback"
    # myst-nb renders a cell's error output as a block with the classes "output traceback"
    errors = BeautifulSoup(text, "html.parser").select(".output.traceback")
    assert not errors, f"{page} shows an error output: {errors[0].get_text()[:500]}"


# TeX that reached the page as text: "$\hat p$" or "$x$" outside any math element (e.g. a glued
# Markdown string that was not parsed as MyST), or any dollar sign left over (a display "$$" that
# shares a paragraph with text is not parsed as math and leaves "$ \gamma ..." behind)
UNPARSED_MATH = re.compile(r"\$\\[A-Za-z]|\$[A-Za-z]\w*\$|\$")


def _prose(built_book: Path, page: str, drop: str):
    """The page's ``<main>`` without the elements that ``drop`` (a CSS selector) matches."""
    main = BeautifulSoup((built_book / f"{page}.html").read_text(), "html.parser").select_one("main")
    for el in main.select(drop):
        el.decompose()
    return main


@pytest.mark.parametrize("page", PAGES)
def test_page_has_no_unparsed_math(built_book, page):
    main = _prose(built_book, page, "script, style, pre, code, .cell_input, .math")
    hit = UNPARSED_MATH.search(main.get_text(" "))
    assert hit is None, f"{page}: unparsed TeX near {main.get_text(' ')[max(0, hit.start() - 60):hit.end() + 40]!r}"


# A Markdown list that reached the page as a paragraph ("- first item. - second item."): a glued
# list pasted with the inline {glue:md} role, which cannot hold block elements (the block
# directive ```{glue:md} key with :format: myst parses it)
UNPARSED_LIST = re.compile(r"(?:^|\n)\s*[-*] \S")


@pytest.mark.parametrize("page", PAGES)
def test_page_has_no_unparsed_lists(built_book, page):
    main = _prose(built_book, page, "script, style, pre, code, .cell_input, .cell_output, .math")
    bad = [p.get_text()[:120] for p in main.find_all("p") if UNPARSED_LIST.search(p.get_text())]
    assert not bad, f"{page}: list items rendered as a paragraph: {bad}"


# A Markdown table that reached the page as text ("| method | seconds | ... | --- |" in a paragraph):
# a pipe table glued inline or printed instead of displayed; its separator row gives it away
UNPARSED_TABLE = re.compile(r"\|\s*:?-{3,}:?\s*\||^\s*\|.*\|.*\|\s*$", re.MULTILINE)


@pytest.mark.parametrize("page", PAGES)
def test_page_has_no_unparsed_tables(built_book, page):
    main = _prose(built_book, page, "script, style, pre, code, .cell_input, .math")
    bad = [p.get_text()[:120] for p in main.find_all(["p", "li"]) if UNPARSED_TABLE.search(p.get_text())]
    assert not bad, f"{page}: a Markdown table rendered as text: {bad}"


@pytest.mark.parametrize("page", PAGES)
def test_page_prints_no_bare_verdict(built_book, page):
    # a verdict reaches the reader through the prose (glued) and the claims table; a cell that ends in
    # Tally.add(...) or a verdict function shows its return value as a quoted string instead
    from focalcal_book.verdicts import VERDICTS

    soup = BeautifulSoup((built_book / f"{page}.html").read_text(), "html.parser")
    shown = [o.get_text().strip() for o in soup.select(".cell_output .output.text_plain")]
    bare = [t for t in shown if t.strip("'\"") in VERDICTS]
    assert not bare, f"{page}: a cell's output is a bare verdict {bare[0]!r} (end the cell with something else)"


def _builder_paths(*paths: Path) -> list[str]:
    """The absolute folders of this build (the checkout, the runs, the logits, the home folder), as
    they would appear in a page's text, longest first."""
    found = {str(p.resolve()) for p in (ROOT, Path.home(), *paths)} | {str(p) for p in (ROOT, *paths)}
    return sorted((f for f in found if f not in ("/", "")), key=len, reverse=True)


@pytest.mark.parametrize("page", PAGES)
def test_page_shows_no_absolute_path_of_the_builder(built_book, smoke_runs, shared_logits_dir, page):
    # everything a reader sees, outputs included (a printed path lands in a <pre>), but not the code
    text = _prose(built_book, page, "script, style, .cell_input").get_text(" ")
    logits = Path(shared_logits_dir)
    leaked = [f for f in _builder_paths(smoke_runs, logits, logits.parent) if f in text]
    assert not leaked, (f"{page} prints the builder's absolute path {leaked[0]!r}: print it relative to "
                        "the project, or the profile's name")


# a figure the source creates: plt.subplots / plt.figure, a call of the book's figure helpers
# (focalcal_book.figures: one figure each), or a focalcal plot_* helper that makes its own
FIGURE_CALLS = re.compile(r"plt\.(?:subplots|figure)\(|(?<![\w.])figures\.[a-z]\w*\(")
PLOT_HELPER = re.compile(r"\bplot_\w+\(")


@pytest.mark.parametrize("page", PAGES)
def test_page_shows_its_figures(built_book, page):
    # The build runs with MPLBACKEND=Agg exported, as on a headless machine: a chapter's figures
    # must reach the page all the same (focalcal.plotting.use_book_style selects the inline backend)
    source = (ROOT / f"{page}.md").read_text()
    expected = len(FIGURE_CALLS.findall(source))
    if PLOT_HELPER.search(source):
        expected = max(expected, 1)
    soup = BeautifulSoup((built_book / f"{page}.html").read_text(), "html.parser")
    shown = len(soup.select("main img"))
    assert shown >= expected, f"{page}: {shown} images for the {expected} figures its source creates"


@pytest.mark.parametrize("page", PAGES)
def test_page_reads_well_in_chromium(built_book, rendered, page):
    dom = rendered[page]
    assert "</html>" in dom, f"Chromium did not render {page}"
    soup = BeautifulSoup(dom, "html.parser")
    static = BeautifulSoup((built_book / f"{page}.html").read_text(), "html.parser")
    n_math = len(static.select(".math"))
    if n_math:
        typeset = soup.find_all("mjx-container")
        assert len(typeset) >= n_math, f"{page}: {len(typeset)} typeset formulas for {n_math} math elements"
        for el in soup.select(".math"):
            raw = el.get_text()
            assert "\\(" not in raw and "\\[" not in raw, f"{page}: raw TeX left in {raw[:80]!r}"
    for img in soup.find_all("img"):
        src = img.get("src", "")
        if src.startswith("data:"):
            assert len(src) > 100, f"{page}: empty inline image"
            continue
        if src.startswith(("http://", "https://")):
            pytest.fail(f"{page}: image {src} needs the network")
        path = (built_book / page).parent / src
        assert path.is_file() and path.stat().st_size > 0, f"{page}: image {src} missing or empty"


def _layout(dom: str, page: str) -> dict:
    hit = re.search(r'<pre id="focalcal-layout"[^>]*>(.*?)</pre>', dom, re.S)
    assert hit is not None, f"{page}: the layout probe did not report (did MathJax finish?)"
    return json.loads(html_lib.unescape(hit.group(1)))


@pytest.mark.parametrize("page", PAGES)
def test_tables_fit_the_column(rendered, page):
    """At 1280 px a table fits the content column or scrolls in its own container: one that runs
    past the column is cut off at the right for the reader (the wide post-hoc tables were)."""
    layout = _layout(rendered[page], page)
    # the figure style sizes its text for this column (focalcal_book.style.COLUMN_PX)
    assert abs(layout["column"] - COLUMN_PX) <= 2, (
        f"{page}: content column {layout['column']:.0f} px at a 1280 px window, the figure style "
        f"assumes {COLUMN_PX} px")
    wide = [f"{t['width']:.0f} px: {t['text'][:60]!r}" for t in layout["overflowing"]]
    assert not wide, f"{page}: tables wider than the {layout['column']:.0f} px column: {wide}"


@pytest.mark.parametrize("page", PAGES)
def test_figure_text_is_not_shrunk_below_readable(rendered, page):
    """A figure wider than the column is scaled down, text and all: its smallest text (the style's
    SMALLEST_FONT_PT) must still render at MIN_TEXT_PX. The figures are SVG, sized in points
    (1 pt = 4/3 px at natural size), so the scale is all that matters."""
    shrunk = []
    for img in _layout(rendered[page], page)["images"]:
        if not img["natural"] or ".svg" not in img["src"] and "svg+xml" not in img["src"]:
            continue
        px = SMALLEST_FONT_PT * 4 / 3 * min(1.0, img["shown"] / img["natural"])
        if px < MIN_TEXT_PX - 0.25:  # a quarter pixel: the bounding box's rounding
            shrunk.append(f"{img['src'].rsplit('/', 1)[-1][:24]}: {px:.1f} px")
    assert not shrunk, f"{page}: figures whose {SMALLEST_FONT_PT} pt text renders under {MIN_TEXT_PX} px: {shrunk}"


def test_published_logits_page_shows_the_data(built_book):
    # without the logits the page degrades to a note (for readers offline); the test build has
    # them, so the note would mean the page computed nothing
    soup = BeautifulSoup((built_book / "book" / "experiments" / "cifar10_logits.html").read_text(), "html.parser")
    outputs = " ".join(o.get_text(" ") for o in soup.select(".cell_output"))
    assert "not available on this machine" not in outputs
    assert soup.select("main img"), "the reliability figure is missing"


# ------------------------------------------------------- the same pages from the gpu profile ---

#: the pages that read the sweep: they select their runs by role (focalcal.lab.results.runs_for)
SWEEP_PAGES = [p for p in PAGES if "results.runs_for(" in (ROOT / f"{p}.md").read_text()]
GPU_OUT = ROOT / "_build" / "test-gpu"


@pytest.fixture(scope="session")
def gpu_book(gpu_shrunk_runs) -> Path:
    """The pages of :data:`SWEEP_PAGES` built from the shrunk gpu profile's runs (CIFAR-10/100,
    ResNet-50 and Wide-ResNet), as ``make book PROFILE=gpu SWEEP=0 RUNS=...`` builds them: the
    same pages, no edit. Only those pages are in this build's table of contents, so links to the
    others are unresolved; hence no ``-W`` (a failing cell still fails the build)."""
    GPU_OUT.mkdir(parents=True, exist_ok=True)
    (GPU_OUT / "_toc.yml").write_text(yaml.safe_dump(
        {"format": "jb-book", "root": SWEEP_PAGES[0], "chapters": [{"file": p} for p in SWEEP_PAGES[1:]]}))
    return jupyter_book(GPU_OUT, gpu_shrunk_runs, "--toc", str(GPU_OUT / "_toc.yml"))


def test_every_sweep_page_selects_by_role():
    # every page that reads a sweep folder selects its runs by role, so the gpu build below has
    # them all; none selects by data set (that would tie it to one profile)
    reading = [p for p in PAGES if "results.runs_dir()" in (ROOT / f"{p}.md").read_text()]
    assert reading and reading == SWEEP_PAGES
    for page in SWEEP_PAGES:
        assert '== "fashion_mnist"' not in (ROOT / f"{page}.md").read_text(), page


@pytest.mark.parametrize("page", SWEEP_PAGES)
def test_page_builds_from_the_gpu_profile(gpu_book, page):
    text = (gpu_book / f"{page}.html").read_text()
    assert "Traceback (most recent call last)" not in text, f"{page} shows a traceback"
    main = " ".join(BeautifulSoup(text, "html.parser").select_one("main").get_text(" ").split())
    # it says which profile it read, and (but for the synthetic tasks) the data it trained on
    assert "the sweep profile gpu (shrunk)" in main, page
    if "synthetic" not in page:
        assert "CIFAR-10" in main or "cifar10" in main, page
    assert "Fashion-MNIST training images" not in main, page
    # a page that shows one setting of several names the others (the comparison: CIFAR-10 and
    # CIFAR-100 on ResNet-50 and Wide-ResNet-26-10)
    if "build_others" in (ROOT / f"{page}.md").read_text():
        others = main.partition("selects another): ")[2].partition(". ")[0]
        assert {"CIFAR-100 on ResNet-50", "CIFAR-10 on Wide-ResNet-26-10"} <= set(others.split(", ")), (page, others)
