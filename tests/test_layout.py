"""The shape of the library and the lab: modules a reader can read in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "focalcal"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120
MODULES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_module_fits_one_sitting(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_MODULE_LINES, f"{path.relative_to(SRC)} has {n} lines (at most {MAX_MODULE_LINES})"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_functions_are_short(path):
    tree = ast.parse(path.read_text())
    long = [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{path.relative_to(SRC)}: functions over {MAX_FUNCTION_LINES} lines: {long}"


# the lab's and the book helpers' module docstrings say what the module is for and its conventions;
# details live with the functions they describe (the library's public modules are the API
# reference's pages and keep their longer guides)
MAX_DOCSTRING_LINES = 25
HELPERS = SRC.parents[1] / "book" / "_lib" / "focalcal_book"
SHORT_DOCSTRINGS = sorted(SRC.joinpath("lab").rglob("*.py")) + sorted(HELPERS.glob("*.py"))


@pytest.mark.parametrize("path", SHORT_DOCSTRINGS, ids=lambda p: p.name if p.parent == HELPERS else str(p.relative_to(SRC)))
def test_module_docstring_is_short(path):
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
    n = len(doc.splitlines())
    assert n <= MAX_DOCSTRING_LINES, f"{path.name}: module docstring of {n} lines (at most {MAX_DOCSTRING_LINES})"


def test_the_layout_checks_see_the_library():
    names = {p.relative_to(SRC).as_posix() for p in MODULES}
    assert {"maps.py", "posthoc.py", "lab/__init__.py"} <= names


def _readme_layout() -> dict[str, str]:
    """The README's layout table: first-column path -> the row's text."""
    text = (SRC.parents[1] / "README.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            first, rest = line[2:].split(" | ", 1)
            for path in first.replace("`", "").split(", "):
                rows[path.strip()] = rest
    return rows


def test_readme_layout_paths_exist():
    root = SRC.parents[1]
    rows = _readme_layout()
    assert len(rows) >= 8
    missing = [p for p in rows if not (root / p).exists()]
    assert not missing, f"README layout names paths that do not exist: {missing}"


@pytest.mark.parametrize("folder", ["src/focalcal/", "src/focalcal/lab/", "src/focalcal/losses/",
                                    "book/_lib/focalcal_book/"])
def test_readme_layout_lists_every_module(folder):
    root = SRC.parents[1]
    row = _readme_layout()[folder]
    children = [p for p in (root / folder).iterdir()
                if not p.name.startswith(("_", ".")) and (p.suffix == ".py" or (p / "__init__.py").exists()
                                                          or p.name == "templates")]
    unlisted = [p.name for p in children if f"`{p.stem}`" not in row and f"`{p.name}`" not in row
                and f"`{p.stem}/`" not in row]
    assert not unlisted, f"README layout row {folder} does not mention {unlisted}"


def test_import_contracts_cover_every_library_module():
    """A new library module must be added to the architecture contracts of pyproject.toml."""
    import tomllib

    config = tomllib.loads((SRC.parents[1] / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = {c["name"]: set(c.get("source_modules", ())) for c in config["contracts"]}
    library = {f"focalcal.{p.stem}" for p in SRC.iterdir()
               if p.name not in ("__init__.py", "lab", "__pycache__")
               and (p.suffix == ".py" or (p / "__init__.py").exists())}
    plotting = {"focalcal.plotting"}
    assert library - contracts["The library imports nothing from the lab or the book's helpers"] == set()
    assert library - plotting - contracts["The library's core imports only numpy, scipy and torch"] == set()
    # and every lab module has its place in the lab's layers
    layers = next(c["layers"] for c in config["contracts"] if c["type"] == "layers")
    lab = {f"focalcal.lab.{p.stem}" for p in (SRC / "lab").iterdir()
           if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert lab - set(layers) == set()
