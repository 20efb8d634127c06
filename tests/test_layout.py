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


def test_the_layout_checks_see_the_library():
    names = {p.relative_to(SRC).as_posix() for p in MODULES}
    assert {"maps.py", "posthoc.py", "lab/__init__.py"} <= names
