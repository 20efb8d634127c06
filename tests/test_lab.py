"""`make lab`: JupyterLab starts on the repository root and opens the MyST pages as notebooks.

Started exactly as a reader would, headless, as the current user (root on these machines, where
the Makefile must add --allow-root itself): the chapters and the papermill templates come back
from the contents API as notebooks through jupytext's contents manager.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "focalcal-test-token"
# the first `make lab` on a machine installs the dev extra; later ones find it installed
START_TIMEOUT_S = 420.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _request(url: str, method: str = "GET", timeout: float = 30.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read()


def _log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


class Lab:
    def __init__(self, proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
        self.proc, self.base, self.log = proc, base, log

    def get_json(self, path: str) -> dict:
        status, body = _request(self.base + path)
        assert status == 200, (path, status)
        return json.loads(body)


def _stop(proc: subprocess.Popen[bytes], base: str) -> None:
    if proc.poll() is None:
        try:
            _request(base + "/api/shutdown", method="POST", timeout=10)
        except (urllib.error.URLError, OSError):
            pass  # not answering: the signals below stop it
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # the group this test started (start_new_session)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    tmp = tmp_path_factory.mktemp("lab")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp / "make_lab.log"
    # a user's own Jupyter config and runtime files would hide what the project itself sets up
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime")}
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    lab_args = f"--port={port} --ServerApp.ip=127.0.0.1 --IdentityProvider.token={TOKEN} --no-browser"
    with log.open("wb") as out:
        proc = subprocess.Popen(["make", "--no-print-directory", "lab", f"LAB_ARGS={lab_args}"],
                                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"make lab exited with {proc.returncode} before answering:\n{_log_tail(log)}")
            try:
                if _request(base + "/api/status", timeout=5)[0] == 200:
                    break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"make lab did not answer within {START_TIMEOUT_S:.0f} s:\n{_log_tail(log)}")
            time.sleep(1.0)
        yield Lab(proc, base, log)
    finally:
        _stop(proc, base)


@pytest.mark.notebooks
def test_make_lab_starts_headless_as_this_user(lab: Lab) -> None:
    text = lab.log.read_text(errors="replace")
    command = re.search(r"^make lab: (\S*jupyter lab .*)$", text, re.M)
    assert command is not None, _log_tail(lab.log)
    # what make adds itself comes before LAB_ARGS (which starts with --port)
    added = command.group(1).split("--port=")[0]
    assert ("--allow-root" in added) == (os.getuid() == 0), command.group(1)
    if sys.platform.startswith("linux"):  # the test's environment has no display
        assert "--no-browser" in added, command.group(1)
    assert "installing JupyterLab" in text and "constraints.txt" in text
    status, body = _request(lab.base + "/lab")
    assert status == 200 and b"JupyterLab" in body


@pytest.mark.notebooks
@pytest.mark.parametrize("path", ["book/theory/mukhoti.md", "notebooks/train_classifier.md"])
def test_myst_page_opens_as_notebook(lab: Lab, path: str) -> None:
    """The server is rooted at the repository, and jupytext turns the MyST page into its notebook."""
    model = lab.get_json(f"/api/contents/{path}?type=notebook&content=1")
    assert model["type"] == "notebook" and model["path"] == path
    cells = model["content"]["cells"]
    expected = jupytext.read(ROOT / path).cells
    assert [c["cell_type"] for c in cells] == [c.cell_type for c in expected]
    assert any(c["cell_type"] == "code" for c in cells)
    assert [c["source"] for c in cells] == [c.source for c in expected]
