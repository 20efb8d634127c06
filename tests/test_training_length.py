"""The training-length page's helpers (:mod:`focalcal_book.training_length`): run selection and verdicts."""

from __future__ import annotations

import json

import pandas as pd

from focalcal_book import training_length as tl


def _run(out, run: str, loss: str, params: dict, epochs: list[int] | None) -> None:
    folder = out / "runs" / run
    folder.mkdir(parents=True)
    config = {"loss": loss, "loss_params": json.dumps(params)}
    if epochs:
        config["logits_epochs"] = epochs
    (folder / "config.json").write_text(json.dumps({"config": config}))


def test_sweep_runs_keeps_the_length_block_only(tmp_path):
    # the length block's labels (CE, focal-3) against another block that also saves logits
    # at chosen epochs (Mukhoti's cross-entropy) and a run that saves none
    _run(tmp_path, "ce", "ce", {}, [1, 2])
    _run(tmp_path, "f3", "focal", {"gamma": 3.0}, [1, 2])
    _run(tmp_path, "mukhoti", "ce", {}, [2, 6])
    _run(tmp_path, "plain", "focal", {"gamma": 3.0}, None)
    results = pd.DataFrame({"run": ["ce", "ce", "f3", "mukhoti", "plain"],
                            "loss_label": ["CE", "CE", "focal-3", "cross-entropy", "focal-3"],
                            "seed": [0, 0, 0, 0, 1]})
    out = tl.sweep_runs(tmp_path, results)
    assert out["run"].tolist() == ["ce", "f3"]
    assert out["gamma"].tolist() == [0.0, 3.0] and out["logits_epochs"].tolist() == [(1, 2), (1, 2)]


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
