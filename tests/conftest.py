"""Shared fixtures: the published logits location and one smoke sweep per version of the code."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

# Tests never download: they read the local copy of the published logits that CI and developers
# have, a directory holding cifar10-resnet50-logits/ and mukhoti-pretrained-logits/. `make test` finds
# it and exports FOCALCAL_LOGITS_ROOT; a bare `pytest` in a checkout with ../shared beside it finds
# it here. Set before any test module imports focalcal.
_BESIDE = ROOT.parent / "shared" / "data"
if "FOCALCAL_LOGITS_ROOT" not in os.environ and (_BESIDE / "cifar10-resnet50-logits").is_dir():
    os.environ["FOCALCAL_LOGITS_ROOT"] = str(_BESIDE)
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def shared_logits_dir() -> Path:
    """The local copy of the published CIFAR-10 logits (tests that need real data fail without it)."""
    root = os.environ.get("FOCALCAL_LOGITS_ROOT")
    folder = Path(root) / "cifar10-resnet50-logits" if root else None
    if folder is None or not (folder / "ce_test.npz").is_file():
        pytest.fail("the published CIFAR-10 logits are needed: set FOCALCAL_LOGITS_ROOT to a directory "
                    "holding cifar10-resnet50-logits/ (`make test` looks for ../shared/data beside the "
                    "project and beside the repository it was cloned from); got "
                    f"FOCALCAL_LOGITS_ROOT={root!r}")
    return folder


@pytest.fixture(scope="session")
def shared_data_root() -> Path:
    """The local directory holding both published-logits folders (the released networks' pages and
    tests need Mukhoti et al.'s networks as well; tests that need them fail without it)."""
    root = os.environ.get("FOCALCAL_LOGITS_ROOT")
    need = ("cifar10-resnet50-logits/ce_test.npz", "mukhoti-pretrained-logits/cifar10_resnet50_brier/val_logits.npy")
    if not root or not all((Path(root) / n).is_file() for n in need):
        pytest.fail("the published logits of the released networks are needed: set FOCALCAL_LOGITS_ROOT "
                    "to a directory holding cifar10-resnet50-logits/ and mukhoti-pretrained-logits/ "
                    f"(e.g. ../shared/data); got {root!r}")
    return Path(root)


def code_key(base: Path = ROOT / "src" / "focalcal") -> str:
    """A digest of what a sweep run executes: every ``.py`` file under ``base`` (the library and the
    lab) and the papermill templates, by relative path and content (not by time stamp, so a checkout
    or a touch alone does not count as a change)."""
    from focalcal.lab.io import source_digest

    files = sorted(p for p in base.rglob("*")
                   if p.is_file() and (p.suffix == ".py" or (p.suffix == ".md" and p.parent.name == "templates")))
    return source_digest(files, base)


# `make test-fast` (and any `pytest -n 2`) runs the tests in two processes (pytest-xdist): one takes
# every file with a test that uses a session fixture of HEAVY_FIXTURES (the smoke sweeps, the
# executed chapters, the book build: HEAVY_FILES), in order, so that each is made once; the other
# takes the remaining files, a file at a time. (xdist's own --dist loadgroup does not group on pytest 9: it renames nodes through an
# attribute pytest no longer reads.) Collection checks that no such test sits outside HEAVY_FILES.
HEAVY_FIXTURES = {"smoke_runs", "gpu_shrunk_runs", "chapters", "built_book", "rendered", "gpu_book"}
HEAVY_FILES = frozenset({"test_book.py", "test_ledgers.py", "test_profiles.py", "test_slurm.py", "test_sweep.py"})


def pytest_collection_modifyitems(config, items):
    outside = sorted({item.path.name for item in items
                      if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())) and item.path.name not in HEAVY_FILES})
    if outside:
        raise pytest.UsageError(f"tests/conftest.py: HEAVY_FILES must list {', '.join(outside)}, whose tests use "
                                f"a session fixture of {sorted(HEAVY_FIXTURES)}")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which the oldest-torch check runs without
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class HeavyFilesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "heavy" if path.rsplit("/", 1)[-1] in HEAVY_FILES else path

    return HeavyFilesTogether(config, log)


def chapter_cache() -> Path:
    """The jupyter-cache of executed chapters that the ledger tests fill and the test book build
    reads, so that `make test` executes each chapter once: ``_build/test/jupyter-cache-<key>``.
    jupyter-cache keys a chapter on its own code cells; the key here adds what the cells import
    (the library, the lab, the book's helpers) and the numeric packages' versions."""
    from importlib import metadata

    from focalcal.lab.io import source_digest

    files = [p for base in (ROOT / "src" / "focalcal", ROOT / "book" / "_lib" / "focalcal_book")
             for p in sorted(base.rglob("*.py"))]
    key = source_digest(files, ROOT, extra=[*(f"{pkg}=={metadata.version(pkg)}" for pkg in
                                              ("torch", "numpy", "scipy", "sympy", "mpmath")),
                                            f"python {sys.version_info[:2]}"])
    out = ROOT / "_build" / "test" / f"jupyter-cache-{key}"
    for old in out.parent.glob("jupyter-cache-*"):
        if old != out and old.is_dir() and time.time() - old.stat().st_mtime > 86400:
            shutil.rmtree(old, ignore_errors=True)
    return out


@pytest.fixture(scope="session")
def smoke_runs() -> Path:
    """Run the sweep's smoke profile once per version of the code and return its folder.

    The folder is ``_build/test/runs-smoke-<code_key()>``: the sweep resumes a folder of the same
    code (finished runs are not repeated) and starts afresh when the library, the lab or a template
    changed, so no test reads results of older code. Folders of other versions untouched for a day
    are removed (not sooner: a test session of the code before an edit may still be reading one).
    """
    key = code_key()
    out = ROOT / "_build" / "test" / f"runs-smoke-{key}"
    for old in out.parent.glob("runs-smoke*"):
        if old != out and old.is_dir() and time.time() - old.stat().st_mtime > 86400:
            shutil.rmtree(old, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-m", "focalcal.lab.sweep", "--profile", "smoke", "--out", str(out),
                           "--executor", "local", "--jobs", "2"],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"smoke sweep failed (exit {proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}")
    (out / "CODE_KEY").write_text(key + "\n")
    return out


# torchvision's on-disk layout of the CIFAR python batches (what focalcal.lab.data.images reads)
CIFAR_LAYOUT = {"cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], "test_batch",
                            "batches.meta", "label_names", "labels", 10),
                "cifar100": ("cifar-100-python", ["train"], "test", "meta", "fine_label_names",
                             "fine_labels", 100)}


def write_cifar(root: Path, name: str, n_train: int = 400, n_test: int = 64, seed: int = 0) -> Path:
    """Write a small CIFAR-10 or CIFAR-100 in torchvision's layout under ``root`` (``root/cifar-10-
    batches-py/data_batch_1..5``, ``test_batch``, ``batches.meta``; ``root/cifar-100-python/train``,
    ``test``, ``meta``): python pickles of ``data`` (uint8, (N, 3072), channel planes row-major) and
    the labels (``i % K``), with each class's images brighter by its own offset so a network can
    learn something. Returns ``root``."""
    folder_name, train_files, test_file, meta, names_key, labels_key, k = CIFAR_LAYOUT[name]
    folder = root / folder_name
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def batch(n: int, start: int) -> dict:
        labels = [(start + i) % k for i in range(n)]
        data = rng.integers(0, 128, size=(n, 3072), dtype="uint8")
        data += (np.asarray(labels, dtype="uint8") * (127 // k))[:, None]
        return {"data": data, labels_key: labels}

    per_file = n_train // len(train_files)
    for i, fname in enumerate(train_files):
        with open(folder / fname, "wb") as f:
            pickle.dump(batch(per_file, i * per_file), f)
    with open(folder / test_file, "wb") as f:
        pickle.dump(batch(n_test, 0), f)
    with open(folder / meta, "wb") as f:
        pickle.dump({names_key: [f"class{i}" for i in range(k)]}, f)
    return root


@pytest.fixture(scope="session")
def gpu_shrunk_runs() -> Path:
    """The gpu profile shrunk (``profiles.shrink``: 1 epoch, a few batches, the pages' losses) and run
    on this machine's CPU on CIFAR-10 and CIFAR-100 data written in torchvision's layout; returns
    its folder (``runs/<run>/...`` and ``results.csv``, as the cpu profile's), cached per version of
    the code like :func:`smoke_runs` (``_build/test/runs-gpu-shrunk-<code_key()>``)."""
    key = code_key()
    out = ROOT / "_build" / "test" / f"runs-gpu-shrunk-{key}"
    for old in out.parent.glob("runs-gpu-shrunk*"):
        if old != out and old.is_dir() and time.time() - old.stat().st_mtime > 86400:
            shutil.rmtree(old, ignore_errors=True)
    data = out / "data"
    for name in CIFAR_LAYOUT:
        write_cifar(data, name)
    # the runs' kernels inherit the environment: the datasets' root, and no GPU even where there is one
    env = {**os.environ, "FOCALCAL_DATA": str(data), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "focalcal.lab.sweep", "--profile", "gpu", "--shrink",
                           "--out", str(out), "--executor", "local", "--jobs", "2"],
                          cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        pytest.fail(f"shrunk gpu sweep failed (exit {proc.returncode}):\n{proc.stdout[-5000:]}\n"
                    f"{proc.stderr[-5000:]}")
    (out / "CODE_KEY").write_text(key + "\n")
    return out
