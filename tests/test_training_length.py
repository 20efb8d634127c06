"""The training-length page's helpers (:mod:`focalcal_book.training_length`): run selection and verdicts."""

from __future__ import annotations

import json

import pandas as pd

from focalcal.lab import profiles, runfolder, sweep
from focalcal.lab.results import runs_for
from focalcal_book import training_length as tl


def _run(out, run: str, loss: str, params: dict, epochs: list[int] | None) -> None:
    folder = out / "runs" / run
    folder.mkdir(parents=True)
    config = {"loss": loss, "loss_params": json.dumps(params)}
    if epochs:
        config["logits_epochs"] = epochs
    runfolder.write_config(folder, {"config": config})


def test_sweep_runs_keeps_the_length_block_only(tmp_path):
    # the cpu profile's length block (CE, focal-3) against another block that also saves logits
    # at chosen epochs (Mukhoti's cross-entropy, Fig. 1): the page's role selection keeps the first
    sweep.write_profile(tmp_path, "cpu")
    profile = profiles.get_profile("cpu")
    ce, f3 = (next(r for r in profile.runs_of("length") if r.loss.display == lab and r.seed == 0)
              for lab in ("CE", "focal-3"))
    mukhoti = next(r for r in profile.runs_of("comparison") if dict(r.train).get("logits_epochs"))
    for r in (ce, f3, mukhoti):
        _run(tmp_path, r.run_id, r.loss.name, dict(r.loss.params), dict(r.train)["logits_epochs"])
    results = pd.DataFrame({"run": [ce.run_id, ce.run_id, f3.run_id, mukhoti.run_id],
                            "loss_label": ["CE", "CE", "focal-3", mukhoti.loss.display], "seed": 0,
                            "dataset": "fashion_mnist", "model": "cnn"})
    out = tl.sweep_runs(tmp_path, runs_for(tmp_path, "length", results, setting="first"))
    assert out["run"].tolist() == [ce.run_id, f3.run_id]
    saved = tuple(profiles.CPU_LENGTH_TRAIN["logits_epochs"])
    assert out["gamma"].tolist() == [0.0, 3.0] and out["logits_epochs"].tolist() == [saved, saved]
    # a run that saved no logits at chosen epochs is left out
    _run(tmp_path, "plain", "focal", {"gamma": 3.0}, None)
    plain = pd.DataFrame({"run": ["plain"], "loss_label": ["focal-3"], "seed": [1]})
    assert tl.sweep_runs(tmp_path, plain).empty


def test_regime_choice_is_resolved_only_when_every_seed_agrees():
    def table(ce: list[float], focal: list[float]) -> pd.DataFrame:
        return pd.DataFrame([{"loss_label": lab, "seed": s, "epoch": 5, "test_ece": v}
                             for lab, vals in (("CE", ce), ("focal-3", focal)) for s, v in enumerate(vals)])

    c = tl.regime_choice(table([0.05, 0.06], [0.02, 0.03]), [5])
    assert (c["best"], c["runner_up"], c["resolved"]) == ("focal-3", "CE", True)
    assert not tl.regime_choice(table([0.05, 0.02], [0.02, 0.04]), [5])["resolved"]  # seeds disagree
    assert not tl.regime_choice(table([0.05], [0.02]), [5])["resolved"]              # one seed
    one = tl.regime_choice(table([0.05], [0.02]).query("loss_label == 'CE'"), [5])
    assert one["runner_up"] is None and not one["resolved"]
