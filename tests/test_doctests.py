"""The library's docstring examples run, and every public function and class has one.

One test per module of ``src/focalcal/`` (the lab excepted: it needs data and the ``[lab]``
extra) runs that module's doctests; the coverage test asserts that every public function and
class of the public modules (their ``__all__``, or else the functions and classes they define
without a leading underscore) shows at least one ``>>>`` example. Both module lists are computed
by walking the package, so a new module is checked without being listed here.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest
import torch

import focalcal

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _library_modules() -> list[str]:
    names = ["focalcal"]
    for info in pkgutil.walk_packages(focalcal.__path__, prefix="focalcal."):
        if info.name == "focalcal.lab" or info.name.startswith("focalcal.lab."):
            continue
        names.append(info.name)
    return sorted(names)


MODULES = _library_modules()


def _is_private(module_name: str) -> bool:
    return any(part.startswith("_") for part in module_name.split("."))


def _public_objects(module: ModuleType) -> dict[str, object]:
    """The public functions and classes of ``module``: its ``__all__`` or what it defines."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, obj in vars(module).items()
                 if not n.startswith("_") and getattr(obj, "__module__", None) == module.__name__]
    objects = {n: getattr(module, n) for n in names}
    return {n: obj for n, obj in objects.items() if inspect.isfunction(obj) or inspect.isclass(obj)}


def test_the_module_list_is_the_library():
    # the walk found the library's modules and left the lab out
    assert {"focalcal", "focalcal.maps", "focalcal.metrics", "focalcal.metrics.binned",
            "focalcal.scores", "focalcal.plotting", "focalcal.posthoc"} <= set(MODULES)
    assert not [m for m in MODULES if m.startswith("focalcal.lab")]


@pytest.mark.parametrize("module_name", MODULES)
def test_doctests(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    torch.manual_seed(0)  # examples draw their own generators; this only guards against a slip
    for test in finder.find(module, module_name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {module_name}"


@pytest.mark.parametrize("module_name", [m for m in MODULES if not _is_private(m)])
def test_every_public_function_and_class_has_an_example(module_name):
    module = importlib.import_module(module_name)
    objects = _public_objects(module)
    assert objects, f"{module_name} exports no function or class"
    missing = [name for name, obj in objects.items() if ">>>" not in (inspect.getdoc(obj) or "")]
    assert not missing, f"{module_name}: no example (>>>) in the docstring of {', '.join(missing)}"


def test_the_coverage_check_catches_a_missing_example():
    without = ModuleType("focalcal_fake")

    def documented():
        """Example.

        >>> 1 + 1
        2
        """

    def bare():
        """No example."""

    documented.__module__ = bare.__module__ = "focalcal_fake"
    without.documented, without.bare = documented, bare
    objects = _public_objects(without)
    assert sorted(objects) == ["bare", "documented"]
    assert [n for n, o in objects.items() if ">>>" not in (inspect.getdoc(o) or "")] == ["bare"]
