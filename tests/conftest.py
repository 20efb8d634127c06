"""Shared fixtures: the published logits location and one smoke sweep per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Tests never download: they read the local copy of the published logits that CI and developers
# have. `make test` finds it and exports FOCALCAL_LOGITS_DIR; a bare `pytest` in a checkout with
# ../shared beside it finds it here. Set before any test module imports focalcal.
_BESIDE = ROOT.parent / "shared" / "data" / "cifar10-resnet50-logits"
if "FOCALCAL_LOGITS_DIR" not in os.environ and _BESIDE.is_dir():
    os.environ["FOCALCAL_LOGITS_DIR"] = str(_BESIDE)
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def shared_logits_dir() -> Path:
    """The local copy of the published CIFAR-10 logits (tests that need real data fail without it)."""
    env = os.environ.get("FOCALCAL_LOGITS_DIR")
    if not env or not (Path(env) / "ce_test.npz").is_file():
        pytest.fail("the published CIFAR-10 logits are needed: set FOCALCAL_LOGITS_DIR to a directory "
                    "holding ce_test.npz etc. (`make test` looks in ../shared/data/cifar10-resnet50-logits "
                    f"beside the project and beside the repository it was cloned from); got {env!r}")
    return Path(env)


@pytest.fixture(scope="session")
def smoke_runs() -> Path:
    """Run the sweep's smoke profile once (resuming if already complete) and return its folder."""
    out = ROOT / "_build" / "test" / "runs-smoke"
    proc = subprocess.run([sys.executable, "-m", "focalcal.lab.sweep", "--profile", "smoke", "--out", str(out),
                           "--executor", "local", "--jobs", "2"],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"smoke sweep failed (exit {proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}")
    return out
