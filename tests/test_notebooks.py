"""The papermill templates in notebooks/: their contract with the sweep, default execution, validation.

The smoke sweep (tests/test_sweep.py) executes both templates with the sweep's parameters for every
loss; here: the templates' structure, their execution with the defaults (what a reader gets in
JupyterLab), and that bad parameters stop them with a message listing the valid choices.
"""

from __future__ import annotations

import json

import jupytext
import nbformat
import papermill as pm
import pytest

from focalcal.lab import results, sweep
from focalcal.lab.io import torch_load

TEMPLATES = sweep.templates_dir()
HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""


def as_ipynb(name: str, dest) -> str:
    path = dest / f"{name}.ipynb"
    path.write_text(nbformat.writes(jupytext.read(TEMPLATES / f"{name}.md")))
    return str(path)


@pytest.mark.parametrize("name", sweep.TEMPLATES)
def test_template_structure(name):
    text = (TEMPLATES / f"{name}.md").read_text()
    assert text.startswith(HEADER)
    nb = jupytext.read(TEMPLATES / f"{name}.md")
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{name} must have exactly one cell tagged 'parameters'"
    # no library code in a template: no function or class definitions
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert "\ndef " not in "\n" + cell.source and "\nclass " not in "\n" + cell.source


def test_templates_take_every_parameter_the_sweep_passes(tmp_path):
    """Every profile's parameters are parameters of the templates (papermill would otherwise
    inject unknown names silently and the run would use the defaults)."""
    declared = {name: set(pm.inspect_notebook(as_ipynb(name, tmp_path))) for name in sweep.TEMPLATES}
    for profile in sweep.PROFILES:
        for spec in sweep.get_profile(profile).expand():
            assert set(spec.train_parameters(tmp_path)) <= declared["train_classifier"], (profile, spec)
            assert set(spec.posthoc_parameters(tmp_path)) <= declared["posthoc_calibration"], (profile, spec)


@pytest.mark.notebooks
def test_templates_execute_with_defaults(tmp_path):
    """Both templates run top to bottom with their defaults: train, then calibrate that run."""
    cwd = tmp_path / "notebooks"  # the defaults write to ../_build/notebooks/, as from notebooks/
    cwd.mkdir()
    for name in sweep.TEMPLATES:
        pm.execute_notebook(as_ipynb(name, tmp_path), str(tmp_path / f"{name}.out.ipynb"),
                            kernel_name="python3", progress_bar=False, cwd=str(cwd))
    run_dir = tmp_path / "_build" / "notebooks" / "train_classifier"
    blob = torch_load(run_dir / "logits.pt")
    assert blob["val_logits"].shape == (1000, 10) and blob["test_labels"].shape == (1000,)
    config = json.loads((run_dir / "config.json").read_text())["config"]
    assert config["loss"] == "focal" and json.loads(config["loss_params"]) == {"gamma": 3.0}
    rows = json.loads((run_dir / "calibration.json").read_text())
    assert [r["method"] for r in rows] == list(results.METHODS)
    psi = rows[results.METHODS.index("Psi")]
    assert psi["gamma_ev"] == 3.0  # the focal training gamma reaches Psi
    # the results are glued for a book page
    out = nbformat.read(tmp_path / "posthoc_calibration.out.ipynb", as_version=4)
    glued = {o["metadata"]["scrapbook"]["name"] for c in out.cells if c.cell_type == "code"
             for o in c.get("outputs", []) if "scrapbook" in o.get("metadata", {})}
    assert "focal TS (ECE):ece_mass" in glued and "TS (NLL):temperature" in glued
    out = nbformat.read(tmp_path / "train_classifier.out.ipynb", as_version=4)
    assert any("test_nll" == o["metadata"]["scrapbook"]["name"] for c in out.cells
               if c.cell_type == "code" for o in c.get("outputs", []) if "scrapbook" in o.get("metadata", {}))


@pytest.mark.notebooks
@pytest.mark.parametrize("parameters, message", [
    ({"loss": "focall"}, "valid names: ce, focal, flsd53"),
    ({"loss_params": '{"gama": 2}'}, "valid parameters: gamma"),
    ({"dataset": "mnist"}, "name must be one of 'charoenphakdee_1d', 'gaussian_mixture', 'fashion_mnist'"),
    ({"model": "small_cnn"}, "name must be one of 'mlp', 'cnn', 'resnet50'"),
    ({"schedule": "paper"}, "schedule must be one of 'paper_cifar'"),
    ({"epochs": 0}, "epochs must be an integer >= 1"),
    ({"device": "tpu"}, "device must be 'auto', 'cpu', 'cuda'"),
])
def test_train_template_rejects_bad_parameters(tmp_path, parameters, message):
    with pytest.raises(pm.PapermillExecutionError) as err:
        pm.execute_notebook(as_ipynb("train_classifier", tmp_path), str(tmp_path / "out.ipynb"),
                            parameters={"out_dir": str(tmp_path / "run"), **parameters},
                            kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    assert "ValueError" in str(err.value) and message in str(err.value)
    assert not (tmp_path / "run").exists()  # stopped before training wrote anything


@pytest.mark.notebooks
@pytest.mark.parametrize("parameters, error, message", [
    ({"run_dir": "nowhere"}, "FileNotFoundError", "finished train_classifier run"),
])
def test_posthoc_template_rejects_bad_parameters(tmp_path, parameters, error, message):
    with pytest.raises(pm.PapermillExecutionError) as err:
        pm.execute_notebook(as_ipynb("posthoc_calibration", tmp_path), str(tmp_path / "out.ipynb"),
                            parameters=parameters, kernel_name="python3", progress_bar=False,
                            cwd=str(tmp_path))
    assert error in str(err.value) and message in str(err.value)
