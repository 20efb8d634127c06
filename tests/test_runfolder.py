"""focalcal.lab.runfolder: the one owner of a run folder's files, their format and the run id."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import torch

from focalcal.lab import runfolder, sweep

ROOT = Path(__file__).resolve().parents[1]
# every file name of a sweep folder and of a run folder
FILE_NAMES = ("config.json", "history.json", "logits.pt", "logits_epoch_", "calibration.json", "result.json",
              "results.csv", "profile.json", "spec.json", "curvature.json", "checkpoint.pt", "run.log")
CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)


def _code_sources() -> list[tuple[str, str]]:
    """(name, Python source) of the lab, the book's helpers, the pages' and templates' code cells."""
    out = []
    for path in sorted((ROOT / "src" / "focalcal").rglob("*.py")) + sorted((ROOT / "book").rglob("*.py")):
        if path.name != "runfolder.py" and "_build" not in path.parts:
            out.append((str(path.relative_to(ROOT)), path.read_text()))
    pages = sorted((ROOT / "book").rglob("*.md")) + sorted((ROOT / "src" / "focalcal" / "lab" / "templates").glob("*.md"))
    for path in pages:
        if "_build" in path.parts:
            continue
        for i, cell in enumerate(CELL.findall(path.read_text())):
            # cell options (":tags:") and IPython magics ("%matplotlib") are not Python
            body = "\n".join(line for line in cell.splitlines() if not line.lstrip().startswith((":", "%", "!")))
            out.append((f"{path.relative_to(ROOT)} cell {i}", body))
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_no_module_or_page_but_runfolder_names_a_run_file_or_builds_a_run_path():
    found = []
    for name, source in _code_sources():
        tree = ast.parse(source, filename=name)
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                hits = [f for f in FILE_NAMES if f in node.value]
                if hits:
                    found.append(f"{name}:{node.lineno}: {hits[0]}")
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                    and any(isinstance(s, ast.Constant) and s.value == "runs" for s in (node.left, node.right))):
                found.append(f"{name}:{node.lineno}: / 'runs'")
    assert not found, "run files named outside focalcal.lab.runfolder:\n" + "\n".join(found)


def test_the_ownership_check_would_catch_a_reader(tmp_path):
    # the check above parses what it scans: a page cell that reads config.json is caught
    cell = 'blob = json.loads((runs / "runs" / r / "config.json").read_text())'
    tree = ast.parse(cell)
    names = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    assert "config.json" in names and "runs" in names
    assert CELL.findall("```{code-cell} ipython3\n:tags: [x]\nx = 1\n```\n") == [":tags: [x]\nx = 1\n"]


def test_run_id_is_the_specs():
    spec = sweep.select_runs("smoke")[0]
    assert runfolder.run_id(spec.to_dict(), spec.loss.display) == spec.run_id
    assert spec.run_id.startswith(f"{spec.dataset}-{spec.model}-") and f"-s{spec.seed}-" in spec.run_id
    other = spec.to_dict() | {"seed": spec.seed + 1}
    assert runfolder.run_id(other, spec.loss.display) != spec.run_id


def _finished_run(d: Path, epochs=(2, 10)) -> None:
    z, y = torch.randn(6, 3), torch.tensor([0, 1, 2, 0, 1, 2])
    blob = {"val_logits": z, "val_labels": y, "test_logits": z, "test_labels": y}
    for e in epochs:
        runfolder.save_logits(d, {**blob, "train_logits": z, "train_labels": y}, e)
    runfolder.save_logits(d, blob)
    runfolder.write_history(d, [0.0, 1.0], [{"epoch": 1, "train_loss": 1.0}])
    runfolder.write_config(d, {"config": {"loss": "focal", "loss_params": '{"gamma": 3.0}', "epochs": 10},
                               "trainer": {"lr": 0.05}, "model": {"class": "MLP", "parameters": 123},
                               "data": {"train": 6, "val": 6, "test": 6}, "hardware": {"device": "cpu"}})


def test_a_run_as_a_page_reads_it(tmp_path):
    d = runfolder.run_path(tmp_path, "r")
    _finished_run(d)
    run = runfolder.load_run(d)
    assert run.loss_params == {"gamma": 3.0}  # a value, not JSON
    assert (run.trainer, run.n_params, run.data_sizes["train"], run.hardware["device"]) == ({"lr": 0.05}, 123, 6, "cpu")
    assert run.n_classes == 3 and run.calibration is None and run.curvature is None
    assert run.saved_epochs == [2, 10]  # in numeric order, not by name
    assert torch.equal(run.logits_at(2)["train_logits"], run.val_logits)
    # an epoch without its own file: the final logits for the last epoch, nothing for another
    assert "train_logits" not in runfolder.logits_after(d, 12, last=12)
    assert runfolder.logits_after(d, 5, last=12) is None
    assert runfolder.read_history(d) == [{"epoch": 1, "train_loss": 1.0}] == run.history
    assert runfolder.grad_norm_edges(d) == [0.0, 1.0]
    with pytest.raises(FileNotFoundError, match="epoch 5"):
        runfolder.read_logits(d, 5)
    runfolder.write_calibration(d, [{"method": "uncalibrated"}])
    assert runfolder.load_run(d).calibration == [{"method": "uncalibrated"}]


def test_a_folder_in_another_format_is_refused_and_run_again(tmp_path):
    d = runfolder.run_path(tmp_path, "old")
    _finished_run(d)
    runfolder.write_result(d, {"run": "old", "rows": []})
    assert runfolder.finished(d) and [r["run"] for r in runfolder.finished_records(tmp_path)] == ["old"]
    # what an older lab wrote: no format
    for name in ("config.json", "result.json"):
        record = json.loads((d / name).read_text())
        del record["format"]
        (d / name).write_text(json.dumps(record))
    with pytest.raises(ValueError, match="format None.*run it again"):
        runfolder.load_run(d)
    with pytest.raises(ValueError, match="format"):
        runfolder.read_result(d)
    assert not runfolder.finished(d) and list(runfolder.finished_records(tmp_path)) == []
    spec = sweep.select_runs("smoke")[0]
    assert sweep.pending([spec], tmp_path) == [spec]


def test_missing_files_say_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json.*finished"):
        runfolder.load_run(tmp_path)
    with pytest.raises(FileNotFoundError, match="results.csv"):
        runfolder.read_results(tmp_path)
    with pytest.raises(FileNotFoundError, match="profile.json"):
        runfolder.read_profile(tmp_path)
    assert runfolder.read_history(tmp_path) == [] and runfolder.read_calibration(tmp_path) is None
    assert runfolder.saved_epochs(tmp_path) == [] and not runfolder.has_profile(tmp_path)
    assert runfolder.default_out("gpu", shrunk=True) == Path("runs", "gpu-shrunk")


def test_leftovers_of_a_killed_attempt_go_and_the_resume_state_stays(tmp_path):
    _finished_run(tmp_path)
    for name in (".x.tmp", ".train_classifier.partial.ipynb", ".train_classifier.input.ipynb"):
        (tmp_path / name).write_text("")
    runfolder.write_calibration(tmp_path, [])
    runfolder.remove_leftovers(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["config.json", "history.json", "logits.pt", "logits_epoch_2.pt", "logits_epoch_10.pt"])
