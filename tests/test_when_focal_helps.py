"""The training-length page's helpers (:mod:`focalcal_book.when_focal_helps`): run selection and verdicts."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from focalcal.lab import profiles, runfolder, sweep
from focalcal.lab.results import runs_for
from focalcal_book import when_focal_helps


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
    out = when_focal_helps.sweep_runs(tmp_path, runs_for(tmp_path, "length", results, setting="first"))
    assert out["run"].tolist() == [ce.run_id, f3.run_id]
    saved = tuple(profiles.CPU_LENGTH_TRAIN["logits_epochs"])
    assert out["gamma"].tolist() == [0.0, 3.0] and out["logits_epochs"].tolist() == [saved, saved]
    # a run that saved no logits at chosen epochs is left out
    _run(tmp_path, "plain", "focal", {"gamma": 3.0}, None)
    plain = pd.DataFrame({"run": ["plain"], "loss_label": ["focal-3"], "seed": [1]})
    assert when_focal_helps.sweep_runs(tmp_path, plain).empty


def test_regime_choice_is_resolved_only_when_every_seed_agrees():
    def table(ce: list[float], focal: list[float]) -> pd.DataFrame:
        return pd.DataFrame([{"loss_label": lab, "seed": s, "epoch": 5, "test_ece": v}
                             for lab, vals in (("CE", ce), ("focal-3", focal)) for s, v in enumerate(vals)])

    c = when_focal_helps.regime_choice(table([0.05, 0.06], [0.02, 0.03]), [5])
    assert (c["best"], c["runner_up"], c["resolved"]) == ("focal-3", "CE", True)
    assert not when_focal_helps.regime_choice(table([0.05, 0.02], [0.02, 0.04]), [5])["resolved"]  # seeds disagree
    assert not when_focal_helps.regime_choice(table([0.05], [0.02]), [5])["resolved"]              # one seed
    one = when_focal_helps.regime_choice(table([0.05], [0.02]).query("loss_label == 'CE'"), [5])
    assert one["runner_up"] is None and not one["resolved"]


def _length_table() -> pd.DataFrame:
    # cross-entropy calibrated early (T ~ 1) and over-confident late (T > 1.25); focal-3
    # under-confident early (T < 0.8) at about its map's temperature
    rows = []
    for seed in (0, 1):
        for epoch, acc, t_ce, t_f3 in ((1, 0.80, 1.00 + 0.02 * seed, 0.50), (10, 0.995, 1.60, 0.9 + 0.01 * seed)):
            rows.append({"loss_label": "CE", "gamma": 0.0, "seed": seed, "epoch": epoch, "train_accuracy": acc,
                         "temperature": t_ce, "map_temperature": 1.0, "test_ece": 0.02 if epoch == 1 else 0.08})
            rows.append({"loss_label": "focal-3", "gamma": 3.0, "seed": seed, "epoch": epoch,
                         "train_accuracy": acc - 0.05, "temperature": t_f3, "map_temperature": 0.55,
                         "test_ece": 0.05 if epoch == 1 else 0.03})
    return pd.DataFrame(rows)


def test_the_pages_three_questions_as_numbers():
    table = _length_table()
    regime = when_focal_helps.regimes(table)
    assert (regime["early"], regime["late"], regime["late_reached"]) == ([1], [10], True)
    ce = when_focal_helps.cross_entropy_regimes(table, regime)
    assert ce["calibrated"] and ce["over"]
    assert ce["early_accuracy"] == pytest.approx(80.0) and ce["late_accuracy"] == pytest.approx(99.5)
    predictions = when_focal_helps.map_predictions([3.0])
    focal = when_focal_helps.focal_early(table, predictions, regime["early"]).iloc[0]
    assert focal["loss_label"] == "focal-3" and focal["under"] and focal["near"]
    assert focal["ratio"] == pytest.approx(0.5 / 0.55) and focal["fitted"] == "0.50 (0.50–0.50)"
    assert focal["t1"] == pytest.approx(0.25)    # Prop. 3: T1 = 1 / (gamma + 1)
    choices = when_focal_helps.regime_choices(table, regime)
    assert choices["best"].tolist() == ["CE", "focal-3"] and choices["resolved"].all()
    assert choices["best_value"].tolist() == ["2.00 (2.00–2.00)", "3.00 (3.00–3.00)"]
    segs = when_focal_helps.segment_table([("CE", 1, 5), ("focal-3", 10, 10)])
    assert segs.to_dict("records")[1] == {"loss_label": "focal-3", "first_epoch": 10, "last_epoch": 10}
