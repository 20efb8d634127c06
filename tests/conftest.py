"""Shared fixtures: the published logits location and one smoke sweep per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_LOGITS = ROOT.parent / "shared" / "data" / "cifar10-resnet50-logits"

# Tests never download: point the loader at the local copy that CI and developers have beside
# the project (the Makefile exports the same variable).
if SHARED_LOGITS.is_dir():
    os.environ.setdefault("FOCALCAL_LOGITS_DIR", str(SHARED_LOGITS))
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def smoke_runs() -> Path:
    """Run the sweep's smoke profile once (resuming if already complete) and return its folder."""
    out = ROOT / "_build" / "test" / "runs-smoke"
    proc = subprocess.run([sys.executable, "-m", "focalcal.sweep", "--profile", "smoke", "--out", str(out),
                           "--executor", "local", "--jobs", "2"],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"smoke sweep failed (exit {proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}")
    return out
