"""focalcal_book.pages: what a page says about the runs it read."""

from __future__ import annotations


import pandas as pd

from focalcal.lab import profiles, runfolder, sweep
from focalcal.lab.data import DATASETS
from focalcal.lab.models import MODEL_TITLES, MODELS
from focalcal.lab.results import runs_for
from focalcal_book.pages import optimizer_text, other_settings, run_setting


def _write(tmp_path, run, dataset, model):
    d = tmp_path / "runs" / run
    d.mkdir(parents=True)
    runfolder.write_config(d, {
        "config": {"dataset": dataset, "model": model, "train_subset": 0, "batch_size": 128},
        "trainer": {"optimizer": "sgd", "lr": 0.1}, "model": {"class": "X", "parameters": 36_500_000},
        "data": {"train": 45_000, "val": 5_000, "test": 10_000}})


def test_run_setting_reads_the_runs_own_config(tmp_path):
    _write(tmp_path, "a", "cifar100", "wide_resnet26_10")
    s = run_setting(tmp_path, "a")
    assert (s["dataset"], s["network"]) == ("CIFAR-100", "Wide-ResNet-26-10")
    # the sizes the run used, not the template's parameters (train_subset 0 means all of them)
    assert (s["n_params"], s["n_train"], s["n_val"], s["n_test"]) == (36_500_000, 45_000, 5_000, 10_000)
    assert s["config"]["batch_size"] == 128 and s["trainer"]["lr"] == 0.1
    # a data set or network without a prose name keeps its key
    _write(tmp_path, "b", "new_data", "new_net")
    assert (run_setting(tmp_path, "b")["dataset"], run_setting(tmp_path, "b")["network"]) == ("new_data", "new_net")


def test_every_dataset_and_network_has_a_prose_name():
    assert all(info.title for info in DATASETS.values())
    assert set(MODEL_TITLES) == set(MODELS)


def test_other_settings_names_what_a_page_leaves_out(tmp_path):
    sweep.write_profile(tmp_path, "gpu", shrunk=True)
    profile = profiles.get_profile("gpu", shrunk=True)
    table = pd.DataFrame([{"run": r.run_id, "dataset": r.dataset, "model": r.model}
                          for role in ("comparison", "length") for r in profile.runs_of(role)])
    shown = runs_for(tmp_path, "comparison", table, setting="first")
    # in the profile's order (shrink() makes one block per network)
    assert other_settings(tmp_path, "comparison", table, shown) == [
        "CIFAR-100 on ResNet-50", "CIFAR-10 on Wide-ResNet-26-10", "CIFAR-100 on Wide-ResNet-26-10"]
    assert other_settings(tmp_path, "comparison", table, runs_for(tmp_path, "comparison", table)) == []
    assert other_settings(tmp_path, "length", table, runs_for(tmp_path, "length", table, setting="first")) == []


def test_glue_values_glues_names_as_a_list_and_flags_as_words(monkeypatch):
    import numpy as np
    import torch
    from IPython.display import Markdown

    import myst_nb

    from focalcal_book.pages import glue_values

    glued = {}
    monkeypatch.setattr(myst_nb, "glue", lambda key, value, display=True: glued.__setitem__(key, value))
    glue_values(losses=["cross-entropy", "focal (gamma=3)"], none=[], index=pd.Index(["a", "b"]), flag=True,
                off=np.bool_(False), count=np.int64(3), value=torch.tensor(0.5), text="as is")
    md = {k: v.data for k, v in glued.items() if isinstance(v, Markdown)}
    assert md == {"losses": "cross-entropy, focal (gamma=3)", "none": "none", "index": "a, b", "flag": "yes",
                  "off": "no"}
    assert glued["count"] == 3 and type(glued["count"]) is int
    assert glued["value"] == 0.5 and type(glued["value"]) is float
    assert glued["text"] == "as is"


def test_optimizer_text_gives_a_momentum_to_sgd_only():
    """The trainer keeps a momentum setting whatever the optimiser; only SGD uses it (a page once
    read 'ADAM (momentum 0.9)')."""
    assert optimizer_text({"optimizer": "sgd", "momentum": 0.9}) == "SGD (momentum 0.9)"
    assert optimizer_text({"optimizer": "adam", "momentum": 0.9}) == "Adam"
    assert optimizer_text({"optimizer": "adamw", "momentum": 0.9}) == "AdamW"
