"""The papermill templates in notebooks/: their contract with the sweep, default execution, validation.

The smoke sweep (tests/test_sweep.py) executes both templates with the sweep's parameters for every
loss; here: the templates' structure, their execution with the defaults (what a reader gets in
JupyterLab), and that bad parameters stop them with a message listing the valid choices.
"""

from __future__ import annotations

import json
import os

import jupytext
import nbformat
import papermill as pm
import pytest

from focalcal.lab import profiles, results, runner, template
from focalcal.lab.io import torch_load

TEMPLATES = runner.templates_dir()
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


@pytest.mark.parametrize("name", runner.TEMPLATES)
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
    # the [lab] extra alone runs them: nothing of the book's packages
    assert not [m for m in ("myst_nb", "focalcal_book", "jupyter_book") if m in text]


def test_templates_take_every_parameter_the_sweep_passes(tmp_path):
    """Every profile's parameters are parameters of the templates (papermill would otherwise
    inject unknown names silently and the run would use the defaults)."""
    declared = {name: set(pm.inspect_notebook(as_ipynb(name, tmp_path))) for name in runner.TEMPLATES}
    for profile in profiles.PROFILES:
        for spec in profiles.get_profile(profile).expand():
            assert set(spec.train_parameters(tmp_path)) <= declared["train_classifier"], (profile, spec)
            assert set(spec.posthoc_parameters(tmp_path)) <= declared["posthoc_calibration"], (profile, spec)


def test_check_templates_reads_the_declared_parameters():
    declared = runner.check_templates(profiles.get_profile("cpu").expand())
    assert declared["train_classifier"][:3] == ["dataset", "model", "loss"]
    assert {"out_dir", "resume", "epochs"} <= set(declared["train_classifier"])
    assert declared["posthoc_calibration"] == ["run_dir", "fts_temperatures", "n_bins"]


def test_check_parameters_finds_what_papermill_injected():
    params = 'dataset = "gaussian_mixture"  # a comment\nepochs = 3\nlr = None'
    template.check_parameters(["", params])  # nothing injected: the defaults
    template.check_parameters(["", params, "# Parameters\nepochs = 1\nlr = 0.1\n", "x = 1"])
    with pytest.raises(ValueError, match=r"unknown parameter 'epoch' \(did you mean 'epochs'\?\); "
                                         r"the parameters are dataset, epochs, lr$"):
        template.check_parameters(["", params, "# Parameters\nepoch = 1\n"])
    with pytest.raises(ValueError, match="unknown parameter 'colour'; the parameters"):
        template.check_parameters(["", params, "# Parameters\nepochs = 2\ncolour = 'red'\n"])
    template.check_parameters([])  # outside a kernel there is no history


def test_check_names_names_the_template_parameter():
    template.check_names(dataset="cifar10", model="mlp", loss="focal", schedule="")  # "": defaults
    for kw, message in ((dict(loss="focall"), "^loss must be one of 'ce', 'focal'.*; got 'focall'$"),
                        (dict(dataset="mnist"), "^dataset must be one of 'charoenphakdee_1d'"),
                        (dict(model="small_cnn"), "^model must be one of 'mlp', 'cnn'"),
                        (dict(schedule="paper"), "^schedule must be one of 'paper_cifar'")):
        with pytest.raises(ValueError, match=message):
            template.check_names(**kw)


def test_reported_errors_put_the_cause_first(capsys):
    with pytest.raises(ValueError, match="epochs must be an integer >= 1") as err:
        with template.reported_errors():
            template.train_settings("cpu_adam", epochs=-1)
    rendered = err.value._render_traceback_()
    assert rendered[0] == "ValueError: epochs must be an integer >= 1, got -1"
    assert rendered[1].startswith("(raised by check_int in ") and len(rendered) == 2
    assert capsys.readouterr().err == "error: ValueError: epochs must be an integer >= 1, got -1\n"
    with pytest.raises(KeyError):  # other errors keep their traceback
        with template.reported_errors():
            raise KeyError("x")


def test_run_folders_of_the_templates(tmp_path, monkeypatch):
    params = {"dataset": "gaussian_mixture", "model": "mlp", "loss": "focal", "loss_params": "{}",
              "seed": 0, "epochs": 3, "train_subset": 2000, "lr": None}
    focal = template.default_run_dir(params, tmp_path)
    assert focal.parent == tmp_path / "runs" and focal.name.startswith("gaussian_mixture-mlp-focal-s0-")
    assert focal == template.default_run_dir({**params, "device": "cpu", "out_dir": "x"}, tmp_path)
    others = {template.default_run_dir({**params, **change}, tmp_path) for change in (
        {"loss": "ce"}, {"loss_params": '{"gamma": 1.0}'}, {"seed": 1}, {"epochs": 1},
        {"train_subset": 0}, {"lr": 0.1})}
    assert len(others) == 6 and focal not in others
    monkeypatch.chdir(tmp_path)
    assert template.default_run_dir(params) == focal
    with pytest.raises(FileNotFoundError, match="no finished train_classifier run in"):
        template.latest_run()
    for i, d in enumerate((focal, *sorted(others)[:2])):
        d.mkdir(parents=True)
        (d / "logits.pt").write_bytes(b"")
        os.utime(d / "logits.pt", (1e9 + i, 1e9 + i))  # trained one after the other
    assert template.latest_run() == sorted(others)[1] and template.latest_run(tmp_path) == sorted(others)[1]
    assert template.loss_parameters('{"gamma": 2}') == {"gamma": 2}
    for bad in ("gamma=2", "[1]", None):
        with pytest.raises(ValueError, match="loss_params must be a JSON object"):
            template.loss_parameters(bad)


@pytest.mark.notebooks
def test_templates_execute_with_defaults(tmp_path):
    """Both templates run top to bottom with their defaults: train into runs/<run id>/ of the
    working directory, then calibrate the run trained last there."""
    for name in runner.TEMPLATES:
        pm.execute_notebook(as_ipynb(name, tmp_path), str(tmp_path / f"{name}.out.ipynb"),
                            kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    (run_dir,) = (tmp_path / "runs").iterdir()
    blob = torch_load(run_dir / "logits.pt")
    assert blob["val_logits"].shape == (1000, 10) and blob["test_labels"].shape == (1000,)
    config = json.loads((run_dir / "config.json").read_text())["config"]
    assert config["loss"] == "focal" and json.loads(config["loss_params"]) == {}
    assert run_dir == template.default_run_dir(config, tmp_path)
    rows = json.loads((run_dir / "calibration.json").read_text())
    assert [r["method"] for r in rows] == list(results.METHODS)
    psi = rows[results.METHODS.index("Psi")]
    assert psi["gamma_ev"] == 3.0  # the focal loss's default gamma reaches Psi
    # the trainer's line per epoch is in the notebook's output
    out = nbformat.read(tmp_path / "train_classifier.out.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in out.cells if c.cell_type == "code" for o in c.outputs)
    assert [line.split("  ")[0] for line in text.splitlines() if line.startswith("epoch ")] == \
        ["epoch 1/3", "epoch 2/3", "epoch 3/3"]


@pytest.mark.notebooks
@pytest.mark.parametrize("parameters, message", [
    # a bad name names the template parameter and lists its choices (issue 21, item 6)
    ({"loss": "focall"}, "loss must be one of 'ce', 'focal', 'flsd53'"),
    ({"loss_params": '{"gama": 2}'}, "valid parameters: gamma"),
    ({"dataset": "mnist"}, "dataset must be one of 'charoenphakdee_1d', 'gaussian_mixture', 'fashion_mnist'"),
    ({"model": "small_cnn"}, "model must be one of 'mlp', 'cnn', 'resnet50'"),
    ({"schedule": "paper"}, "schedule must be one of 'paper_cifar'"),
    ({"epochs": 0}, "epochs must be an integer >= 1"),
    ({"device": "tpu"}, "device must be 'auto', 'cpu', 'cuda'"),
    ({"loss_params": "gamma=2"}, "loss_params must be a JSON object"),
    ({"epoch": 2}, "unknown parameter 'epoch' (did you mean 'epochs'?)"),
    ({"train_logits": True}, "train_logits=True needs logits_epochs"),
    ({"record_subset": -5}, "record_subset must be an integer >= 0"),
    ({"num_workers": "many"}, "num_workers must be 'auto' or an integer >= 0"),
])
def test_train_template_rejects_bad_parameters(tmp_path, parameters, message):
    with pytest.raises(pm.PapermillExecutionError) as err:
        pm.execute_notebook(as_ipynb("train_classifier", tmp_path), str(tmp_path / "out.ipynb"),
                            parameters={"out_dir": str(tmp_path / "run"), **parameters},
                            kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    # the cause is the first line of what papermill shows, not the end of a long traceback
    assert err.value.ename == "ValueError" and message in err.value.evalue
    assert err.value.traceback[0] == f"ValueError: {err.value.evalue}" and len(err.value.traceback) == 2
    assert not (tmp_path / "run").exists()  # stopped before training wrote anything


@pytest.mark.notebooks
@pytest.mark.parametrize("parameters, error, message", [
    ({"run_dir": "nowhere"}, "FileNotFoundError", "finished train_classifier run"),
    ({}, "FileNotFoundError", "no finished train_classifier run in"),  # nothing trained here yet
    ({"run_dri": "nowhere"}, "ValueError", "unknown parameter 'run_dri' (did you mean 'run_dir'?)"),
])
def test_posthoc_template_rejects_bad_parameters(tmp_path, parameters, error, message):
    with pytest.raises(pm.PapermillExecutionError) as err:
        pm.execute_notebook(as_ipynb("posthoc_calibration", tmp_path), str(tmp_path / "out.ipynb"),
                            parameters=parameters, kernel_name="python3", progress_bar=False,
                            cwd=str(tmp_path))
    assert err.value.ename == error and message in err.value.traceback[0]
