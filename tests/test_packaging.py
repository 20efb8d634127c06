"""The library as a user installs it: a wheel, no extras, a fresh venv, outside the checkout.

The fresh venv sees exactly the distributions the wheel declares (numpy, scipy, torch and what
they need), linked from this project's `.venv` so that nothing is downloaded or copied: a missing
declaration or an import of an undeclared package (pandas, matplotlib, sympy, ...) fails here.
Two more venvs run tests on the oldest releases admitted: torch (the library's tests) and
scikit-learn (the calibrators' scikit-learn tests).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

# every test here builds the wheel or installs into fresh virtual environments: not a unit test
pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build" / "test" / "packaging"


def _run(cmd: list[str], cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def _fresh_venv(path: Path) -> Path:
    if path.exists():
        subprocess.run(["rm", "-rf", str(path)], check=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin" / "python"


def _site_packages(python: Path) -> Path:
    out = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout
    return Path(out.strip())


def _closure(requirements: list[str]) -> set[str]:
    """Names of the installed distributions that `requirements` need (markers and extras applied)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        key = (req.name.lower().replace("_", "-"), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        for sub in md.distribution(req.name).requires or []:
            r = Requirement(sub)
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(r)
    return {name for name, _ in seen}


def _link_distributions(names: set[str], target: Path) -> None:
    """Symlink every top-level file and folder of `names` (from this .venv) into `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        dist = md.distribution(name)
        base = Path(dist.locate_file(""))
        for f in dist.files or []:
            top = f.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            link = target / top
            if not link.exists():
                link.symlink_to(base / top)


@pytest.fixture(scope="module")
def wheel() -> Path:
    out = BUILD / "wheel"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, ROOT])
    (path,) = out.glob("focalcal-*.whl")
    return path


def _requires_dist(wheel: Path) -> list[Requirement]:
    """The wheel's Requires-Dist entries."""
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [Requirement(line.split(":", 1)[1].strip()) for line in meta.splitlines()
            if line.startswith("Requires-Dist:")]


def _core_requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist without an extra marker."""
    return [str(r) for r in _requires_dist(wheel) if r.marker is None]


def test_wheel_holds_the_library_and_lab_not_the_book(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "focalcal/maps.py" in names or "focalcal/maps/__init__.py" in names
    assert "focalcal/lab/templates/train_classifier.md" in names
    assert "focalcal/lab/templates/posthoc_calibration.md" in names
    assert not [n for n in names if n.startswith("focalcal_book") or re.search(r"/(verify|theory)\.py$", n)]
    core = sorted(Requirement(r).name for r in _core_requirements(wheel))
    assert core == ["numpy", "scipy", "torch"], core


def _extra_requirements(wheel: Path, extra: str) -> list[str]:
    """The wheel's Requires-Dist that ``extra`` adds, with ``focalcal[...]`` self-references expanded."""
    out = []
    for req in _requires_dist(wheel):
        if req.marker is None or not req.marker.evaluate({"extra": extra}):
            continue
        if req.name == "focalcal":
            out += [r for e in req.extras for r in _extra_requirements(wheel, e)]
        else:
            req.marker = None
            out.append(str(req))
    return out


def _venv_with_wheel(wheel: Path, name: str, requirements: list[str]) -> Path:
    """A fresh venv with the wheel installed and only the distributions ``requirements`` need
    importable (linked from this .venv, nothing downloaded)."""
    python = _fresh_venv(BUILD / f"venv-{name}")
    # ensurepip's own setuptools would shadow the one torch declares
    _run([python, "-m", "pip", "uninstall", "--quiet", "--yes", "setuptools"])
    deps = BUILD / f"deps-{name}"
    subprocess.run(["rm", "-rf", str(deps)], check=True)
    _link_distributions(_closure(requirements) - {"focalcal"}, deps)
    (_site_packages(python) / "focalcal-deps.pth").write_text(f"{deps}\n")
    _run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", wheel])
    return python


@pytest.fixture(scope="module")
def bare_python(wheel) -> Path:
    """A fresh venv with the wheel installed and only its declared dependencies importable."""
    python = _venv_with_wheel(wheel, "bare", _core_requirements(wheel))
    _run([python, "-m", "pip", "check"])
    return python


@pytest.fixture(scope="module")
def lab_python(wheel) -> Path:
    """A fresh venv with the wheel and what ``focalcal[lab]`` declares (nothing of the book)."""
    return _venv_with_wheel(wheel, "lab", _core_requirements(wheel) + _extra_requirements(wheel, "lab"))


@pytest.mark.notebooks
def test_smoke_sweep_runs_from_the_wheel_outside_the_checkout(lab_python, tmp_path):
    """The installed lab finds its templates as package data, writes under the working directory
    and needs none of the book's packages: one run of the smoke profile, end to end."""
    probe = "import importlib.util as u; print([m for m in ('myst_nb', 'focalcal_book', 'jupyter_book') if u.find_spec(m)])"
    assert _run([lab_python, "-c", probe], cwd=tmp_path).stdout.strip() == "[]"
    pattern = "gaussian_mixture-mlp-FLSD-532-*"
    listed = _run([lab_python, "-m", "focalcal.lab.sweep", "--profile", "smoke", "--only", pattern, "--list"],
                  cwd=tmp_path).stdout
    assert listed.count("pending") == 1, listed
    _run([lab_python, "-m", "focalcal.lab.sweep", "--profile", "smoke", "--only", pattern, "--jobs", "1"],
         cwd=tmp_path, timeout=600)
    (result,) = (tmp_path / "runs" / "smoke" / "runs").glob("gaussian_mixture-mlp-FLSD-532-*/result.json")
    rows = json.loads(result.read_text())["rows"]
    assert {r["method"] for r in rows} >= {"uncalibrated", "TS (NLL)", "focal TS (ECE)"}, rows
    log = (result.parent / "run.log").read_text()
    assert "epoch 1" in log, log[-2000:]
    where = _run([lab_python, "-c", "import focalcal.lab.runner as r; print(r.templates_dir())"], cwd=tmp_path).stdout
    assert Path(where.strip()).is_relative_to(_site_packages(lab_python)), where


def _readme_snippet(marker: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert m, f"README.md must mark its snippet with <!-- {marker} -->"
    return m.group(1)


def _run_snippet_outside_the_checkout(python: Path, marker: str, tmp_path: Path) -> str:
    script = tmp_path / "snippet.py"
    script.write_text(_readme_snippet(marker) + "\nimport focalcal\nprint('FROM', focalcal.__file__)\n")
    out = _run([python, script], cwd=tmp_path).stdout
    where = Path(out.split("FROM", 1)[1].strip())
    assert ROOT / "src" not in where.parents, f"focalcal was imported from the checkout: {where}"
    assert "site-packages" in where.parts
    return out


def test_readme_snippet_runs_from_the_wheel_outside_the_checkout(bare_python, tmp_path):
    _run_snippet_outside_the_checkout(bare_python, "library-snippet", tmp_path)


@pytest.fixture(scope="module")
def sklearn_python(wheel) -> Path:
    """A fresh venv with the wheel, its declared dependencies and scikit-learn (linked)."""
    return _venv_with_wheel(wheel, "sklearn", _core_requirements(wheel) + ["scikit-learn"])


def test_readme_scikit_learn_snippet_runs_from_the_wheel_outside_the_checkout(sklearn_python, tmp_path):
    """make_pipeline, check_is_fitted and GridSearchCV with a proper scorer, as the README shows them."""
    out = _run_snippet_outside_the_checkout(sklearn_python, "sklearn-snippet", tmp_path)
    assert "{'criterion':" in out, out


def test_bare_install_has_no_extras(bare_python, tmp_path):
    probe = ("import importlib.util as u; "
             "print([m for m in ('pandas', 'matplotlib', 'papermill', 'sympy', 'mpmath', 'jupytext', "
             "'submitit', 'torchvision', 'focalcal_book') if u.find_spec(m)])")
    # sympy and mpmath come with torch itself: the library must not need them, but they may be present
    present = set(eval(_run([bare_python, "-c", probe], cwd=tmp_path).stdout))
    assert present <= {"sympy", "mpmath"}, present


def test_lab_without_its_extra_names_the_install_command(bare_python, tmp_path):
    proc = subprocess.run([str(bare_python), "-c", "import focalcal.lab"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError") and 'pip install "focalcal[lab]"' in last, last


def test_plotting_without_its_extra_names_the_install_command(bare_python, tmp_path):
    proc = subprocess.run([str(bare_python), "-c", "import focalcal.plotting"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError") and 'pip install "focalcal[plot]"' in last, last


def test_wheel_carries_the_license_its_metadata_names(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        (lic,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        text = z.read(lic).decode()
    assert "License-Expression: MIT" in meta.splitlines()
    assert text.startswith("MIT License") and text == (ROOT / "LICENSE").read_text()


def test_readme_says_how_to_install_without_a_gpu_and_what_the_extras_add():
    text = (ROOT / "README.md").read_text()
    library = text.split("## The library in your own code", 1)[1].split("<!-- library-snippet -->", 1)[0]
    cpu = library.index("pip install torch --index-url https://download.pytorch.org/whl/cpu")
    assert cpu < library.index("pip install focalcal\n")  # the CPU build first
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("plot", "lab", "book"):
        (row,) = [line for line in library.splitlines() if line.startswith(f"| `focalcal[{extra}]`")]
        for req in declared[extra]:
            name = Requirement(req).name
            assert name.startswith("focalcal") or name in row, (extra, name, row)


# --------------------------------------------------------------------------------------------
# the oldest torch pyproject.toml admits
# --------------------------------------------------------------------------------------------

def _lower_bound(spec: str) -> str:
    """The ``>=`` version of a requirement, with its patch number (``2.13`` -> ``2.13.0``)."""
    lower = [s.version for s in Requirement(spec).specifier if s.operator == ">="]
    assert lower, f"{Requirement(spec).name} must have a lower bound in pyproject.toml, got {spec!r}"
    return lower[0] + ".0" if lower[0].count(".") == 1 else lower[0]


def _oldest_torch(wheel: Path) -> str:
    (spec,) = [r for r in _core_requirements(wheel) if Requirement(r).name == "torch"]
    return _lower_bound(spec)


LIBRARY_TESTS = ("test_maps.py", "test_losses.py")


def test_library_tests_pass_on_the_oldest_torch(wheel):
    version = _oldest_torch(wheel)
    home = BUILD / f"venv-torch-{version}"
    python = home / "bin" / "python"
    stamp = home / ".torch-installed"
    if not stamp.exists():
        _fresh_venv(home)
        pins = [f"{n}=={md.version(n)}" for n in ("numpy", "scipy", "pytest", "hypothesis", "mpmath")]
        _run([python, "-m", "pip", "install", "--quiet", f"torch=={version}", *pins], timeout=1800)
        stamp.touch()
    _run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", wheel])
    probe = "import focalcal, torch; print(torch.__version__, focalcal.__file__)"
    got, where = _run([python, "-c", probe], cwd=BUILD).stdout.split()
    assert got.split("+")[0] == version and ROOT / "src" not in Path(where).parents, (got, where)
    # the library's own tests against the installed wheel; the book's oracles come from book/_lib
    env_path = f"PYTHONPATH={ROOT / 'book' / '_lib'}"
    proc = _run(["env", env_path, python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-c", ROOT / "pyproject.toml", "--rootdir", ROOT,
                 *[ROOT / "tests" / t for t in LIBRARY_TESTS]], cwd=BUILD, timeout=1800)
    assert re.search(r"\d+ passed", proc.stdout), proc.stdout[-2000:]


# --------------------------------------------------------------------------------------------
# the oldest scikit-learn the test extra admits
# --------------------------------------------------------------------------------------------

def test_scikit_learn_tests_pass_on_the_oldest_scikit_learn(wheel):
    """tests/test_posthoc_sklearn.py against the installed wheel and the oldest scikit-learn of the
    ``test`` extra (downloaded once from the package index; torch and its dependencies linked)."""
    (spec,) = [r for r in _extra_requirements(wheel, "test") if Requirement(r).name == "scikit-learn"]
    version = _lower_bound(spec)
    home = BUILD / f"venv-sklearn-{version}"
    python = home / "bin" / "python"
    stamp = home / ".sklearn-installed"
    if not stamp.exists():
        _fresh_venv(home)
        # scikit-learn before 1.4.2 imports names that NumPy 2 removed: its users have NumPy 1
        _run([python, "-m", "pip", "install", "--quiet", f"scikit-learn=={version}", "numpy<2",
              f"pytest=={md.version('pytest')}"], timeout=1800)
        stamp.touch()
    deps = BUILD / "deps-sklearn-oldest"
    subprocess.run(["rm", "-rf", str(deps)], check=True)
    _link_distributions(_closure(["torch"]) - {"numpy"}, deps)
    (_site_packages(python) / "focalcal-deps.pth").write_text(f"{deps}\n")
    _run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", wheel])
    probe = "import focalcal, sklearn; print(sklearn.__version__, focalcal.__file__)"
    got, where = _run([python, "-c", probe], cwd=BUILD).stdout.split()
    assert got == version and ROOT / "src" not in Path(where).parents, (got, where)
    proc = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", ROOT / "pyproject.toml",
                 "--rootdir", ROOT, ROOT / "tests" / "test_posthoc_sklearn.py"], cwd=BUILD, timeout=1800)
    assert re.search(r"\d+ passed", proc.stdout) and " skipped" not in proc.stdout, proc.stdout[-2000:]
