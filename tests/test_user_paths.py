"""What a new user does first, end to end: the README's papermill commands, from a project folder.

The commands are read from the README (the block after ``<!-- papermill-commands -->``) and run
as written, with three paths moved: ``.venv/bin/`` is this interpreter's folder, ``notebooks/`` the
templates' folder, and ``/tmp/`` a temporary folder. The working directory is an empty temporary
project, so every file a run writes must land in it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from focalcal.lab import runner, template

ROOT = Path(__file__).resolve().parents[1]
EPOCH_LINE = re.compile(r"^epoch 1/1  train loss \d+\.\d+  val NLL \d+\.\d+  val ECE \d+\.\d+", re.M)


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- papermill-commands -->\s*```bash\n(.*?)```", text, re.S)
    assert m, "README.md must mark its papermill commands with <!-- papermill-commands -->"
    return [line.strip() for line in m.group(1).splitlines() if line.strip()]


def localise(command: str, scratch: Path) -> list[str]:
    """The README's command with its paths moved to this interpreter, the templates and ``scratch``."""
    bin_dir = Path(sys.executable).parent
    args = []
    for arg in shlex.split(command):
        if arg.startswith(".venv/bin/"):
            arg = str(bin_dir / arg.removeprefix(".venv/bin/"))
        elif arg.startswith("notebooks/"):
            arg = str(runner.templates_dir() / arg.removeprefix("notebooks/"))
        elif arg.startswith("/tmp/"):
            arg = str(scratch / arg.removeprefix("/tmp/"))
        args.append(arg)
    return args


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def project(tmp_path) -> tuple[Path, Path]:
    """An empty project folder to run in, and a scratch folder standing for /tmp."""
    (tmp_path / "project").mkdir()
    (tmp_path / "scratch").mkdir()
    return tmp_path / "project", tmp_path / "scratch"


@pytest.mark.notebooks
def test_readme_papermill_commands_twice_with_two_losses(project):
    cwd, scratch = project
    commands = readme_commands()
    trains = [c for c in commands if "papermill" in c and "train" in c]
    assert [re.findall(r"-p loss (\w+)", c) for c in trains] == [["focal"], ["ce"]]
    assert all("--log-output" in c and "-p epochs 1" in c for c in trains)
    logs = []
    for command in commands:
        proc = run(localise(command, scratch), cwd)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        logs.append(proc.stdout + proc.stderr)

    # the runs land in the project, in one folder each, named after their loss
    runs = sorted(p for p in (cwd / "runs").iterdir())
    assert [p.name.split("-")[2] for p in runs] == ["ce", "focal"]
    assert {p.name for p in cwd.iterdir()} == {"runs"}
    for run_dir in runs:
        config = json.loads((run_dir / "config.json").read_text())["config"]
        assert config["epochs"] == 1 and run_dir == template.default_run_dir(config, cwd)
        assert len(json.loads((run_dir / "history.json").read_text())["records"]) == 1
    # --log-output shows the trainer's line per epoch
    train_logs = [log for command, log in zip(commands, logs) if command in trains]
    assert all(len(EPOCH_LINE.findall(log)) == 1 for log in train_logs), train_logs
    # the calibration template took the run trained last (cross-entropy)
    rows = json.loads((runs[0] / "calibration.json").read_text())
    assert rows and not (runs[1] / "calibration.json").exists()


@pytest.mark.notebooks
def test_unknown_parameter_fails_with_one_line_naming_it(project):
    cwd, scratch = project
    commands = readme_commands()
    convert = next(c for c in commands if "jupytext" in c and "train_classifier" in c)
    train = next(c for c in commands if "papermill" in c and "-p loss focal" in c)
    assert run(localise(convert, scratch), cwd).returncode == 0
    proc = run(localise(train.replace("-p epochs 1", "-p epoch 1"), scratch), cwd)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert errors == ["error: ValueError: unknown parameter 'epoch' (did you mean 'epochs'?); the "
                      "parameters are " + ", ".join(runner.check_templates()["train_classifier"])]
    # the cause comes before any traceback, and again first in papermill's exception
    assert output.index(errors[0]) < output.index("Traceback")
    after = output.split('Exception encountered at "In [', 1)[1].splitlines()[1]
    assert after == errors[0].removeprefix("error: ")
    assert not (cwd / "runs").exists()  # stopped before training
