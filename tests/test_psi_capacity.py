"""The Psi-across-capacity chapter's helpers (book/_lib/focalcal_book/psi_capacity.py)."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from focalcal.lab import profiles, results, runfolder, spec
from focalcal.metrics import ece
from focalcal.posthoc import PsiCorrection, TemperatureScaling
from focalcal_book import psi_capacity as pc
from focalcal_book import verdicts as vd

NR, H, DNH = vd.NOT_RESOLVED, vd.HOLDS, vd.DOES_NOT_HOLD


def test_share_verdict():
    assert pc.share_verdict(3, 3) == H and pc.share_verdict(2, 3) == NR
    assert pc.share_verdict(1, 2) == DNH and pc.share_verdict(1, 1) == NR
    with pytest.raises(ValueError, match="hits"):
        pc.share_verdict(4, 3)


def test_confidence_classes():
    # two clearly under-confident networks that Psi helps, one calibrated that it hurts,
    # one over-confident that it helps
    out = pc.confidence_classes(gap=[-0.10, -0.05, 0.001, 0.05], gap_se=[0.01] * 4,
                                change=[-0.02, -0.01, 0.01, -0.01], seeds=[0, 1, 0, 1])
    assert (out["under"], out["under_helped"], out["rest"], out["rest_hurt"]) == (2, 2, 2, 1)
    assert out["under_verdict"] == H and out["rest_verdict"] == DNH and out["verdict"] == DNH
    # a gap within two standard errors of zero counts as calibrated
    assert pc.confidence_classes([-0.015], [0.01], [0.01], [0])["under"] == 0
    # one seed: no spread, nothing resolved; no network of a kind: not run
    one = pc.confidence_classes([-0.1, -0.2], [0.01, 0.01], [-0.01, -0.02], [0, 0])
    # ... and a claim with a part not run is partly tested, never decided on the other part alone
    assert one["under_verdict"] == NR and one["rest_verdict"] == vd.NOT_RUN and one["verdict"] == vd.PARTLY_TESTED
    with pytest.raises(ValueError, match="same length"):
        pc.confidence_classes([0.1], [0.1, 0.1], [0.1], [0])
    with pytest.raises(ValueError, match="z must be"):
        pc.confidence_classes([0.1], [0.1], [0.1], [0], z=0)


def test_setting_name():
    assert pc.setting_name([64], 4000) == "784-64-10 MLP, 4,000 images"
    assert pc.setting_name((512, 512), 400, in_features=20, n_classes=3) == "20-512-512-3 MLP, 400 images"


def _frame():
    rows = []
    small, large, large400 = (pc.setting_name(h, n) for h, n in (([64], 4000), ([512, 512], 4000),
                                                                 ([512, 512], 400)))
    # seed -> gamma -> raw ECE; small: best 0.5 / 1; large: best 2 / 3; large at 400: best 3 / 3
    ece_by = {small: {0: [0.05, 0.02, 0.03], 1: [0.05, 0.03, 0.02]},
              large: {0: [0.09, 0.05, 0.04], 1: [0.09, 0.06, 0.05]},
              large400: {0: [0.20, 0.10, 0.05], 1: [0.20, 0.12, 0.06]}}
    params = {small: 50890, large: 669706, large400: 669706}
    for s, by_seed in ece_by.items():
        gammas = {small: (0.0, 0.5, 1.0), large: (0.0, 2.0, 3.0), large400: (0.0, 2.0, 3.0)}[s]
        for seed, values in by_seed.items():
            for g, v in zip(gammas, values):
                rows.append({"setting": s, "loss": "focal", "gamma": g, "seed": seed, "ece_raw": v,
                             "ece_psi": v - 0.01 * g, "n_params": params[s],
                             "n_train": 400 if s == large400 else 4000, "hidden": (64,) if s == small
                             else (512, 512), "ece_tsfl": 0.02 + 0.01 * g, "ece_tsfl_psi": 0.02})
            rows.append({"setting": s, "loss": "label_smoothing", "gamma": 0.0, "seed": seed,
                         "ece_raw": 0.0, "ece_psi": 0.0, "n_params": params[s],
                         "n_train": 400 if s == large400 else 4000,
                         "hidden": (64,) if s == small else (512, 512), "ece_tsfl": 0.0, "ece_tsfl_psi": 0.0})
    return pd.DataFrame(rows), small, large, large400


def test_settings_roles_best_gammas_and_claims():
    tab, small, large, large400 = _frame()
    assert list(pc.settings(tab)["setting"]) == [small, large, large400]
    assert pc.roles(tab) == {"small": small, "large": large, "large_small_data": large400}
    assert pc.roles(tab[tab["setting"] == large]) == {"small": None, "large": large, "large_small_data": None}
    # label smoothing (ECE 0) never counts as the best gamma
    assert pc.best_gammas(tab, small) == {0: 0.5, 1: 1.0}
    assert pc.best_gammas(tab, large) == {0: 3.0, 1: 3.0}
    c1 = pc.best_gamma_claim(tab, small, large)
    assert c1["verdict"] == H and c1["lower"] == {0: 0.5, 1: 1.0} and c1["higher"] == {0: 3.0, 1: 3.0}
    assert pc.per_seed_table({small: c1["lower"], large: c1["higher"]}).to_dict("records") == [
        {"setting": small, "seed 0": 0.5, "seed 1": 1.0}, {"setting": large, "seed 0": 3.0, "seed 1": 3.0}]
    assert pc.best_gamma_claim(tab, large, large400)["verdict"] == NR     # 3 -> 3: a tie decides nothing
    assert pc.best_gamma_claim(tab, None, large)["verdict"] == "not run in this build"
    # Psi's gain: mean over gamma > 0 of 0.01 * gamma
    assert pc.psi_gain(tab, small) == pytest.approx({0: 0.0075, 1: 0.0075})
    assert pc.less_effective_claim(tab, small, large)["verdict"] == DNH   # gain grows with gamma here
    t = pc.tsfl_claim(tab, large)
    assert (t["worsens"], t["mitigates"]) == (H, H)
    assert pc.tsfl_claim(tab[tab["gamma"] == 0], large)["worsens"] == "not run in this build"
    # "always worse": every step between neighbouring gammas, not the two ends
    bumpy = tab.copy()
    mid = (bumpy["setting"] == large) & (bumpy["gamma"] == 2.0)
    bumpy.loc[mid, "ece_tsfl"] = 0.06                     # 0.02 -> 0.06 -> 0.05: the last step falls
    assert pc.tsfl_claim(bumpy, large)["worsens"] == DNH
    t = pc.tsfl_claim(bumpy, large)
    assert (t["steps_rising"], t["steps"], t["gamma_max"]) == (1, 2, 3.0)


def test_sec_6_1_claims_psi_improves_most_and_tsfl_degrades():
    tab, small, large, large400 = _frame()
    # Psi lowers the ECE by 0.01 * gamma on every seed of every (setting, gamma > 0): 6 of 6 cases
    most = pc.improves_most(tab)
    assert (most["verdict"], most["agree"], most["cases"]) == (H, 6, 6)
    worse = tab.assign(ece_psi=tab["ece_raw"] + 0.01)
    assert pc.improves_most(worse)["verdict"] == DNH
    # TS_FL's ECE 0.02 + 0.01 gamma against raw ECEs of 0.02-0.12: above on some cases only
    d = pc.tsfl_degrades(tab)
    assert d["cases"] == 6 and d["verdict"] in (DNH, NR)
    assert pc.tsfl_degrades(tab.assign(ece_tsfl=tab["ece_raw"] + 0.01))["verdict"] == H
    assert pc.improves_most(tab[tab["loss"] == "label_smoothing"])["verdict"] == "not run in this build"


def _write_run(out, name, *, hidden, n_train, loss, loss_params, seed, label=None):
    d = out / "runs" / name
    d.mkdir(parents=True)
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(400, 10, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(0.5 * z, 1), 1, generator=g).squeeze(1)
    torch.save({"val_logits": z[:200].float(), "val_labels": y[:200], "test_logits": z[200:].float(),
                "test_labels": y[200:]}, d / "logits.pt")
    mp = {"hidden": hidden, "in_features": 784}
    runfolder.write_config(d, {
        "config": {"dataset": "fashion_mnist", "model": "mlp", "loss": loss, "loss_params": json.dumps(loss_params),
                   "epochs": 2, "seed": seed, "train_subset": n_train, "model_params": json.dumps(mp)},
        "data": {"train": n_train, "val": 200, "test": 200}})
    train = {"epochs": 2, "train_subset": n_train}
    (d / "spec.json").write_text(json.dumps({"train": train, "model_params": mp}))
    gamma = float(loss_params.get("gamma", 0.0)) if loss == "focal" else 0.0
    cal = results.calibrate(z[:200], y[:200], z[200:], y[200:], train_gamma=gamma,
                            temperatures=results.temperature_grid(50), gammas=(0.0, 1.0))
    return [{"run": name, "dataset": "fashion_mnist", "model": "mlp", "loss": loss,
             "loss_label": label or f"focal gamma={gamma:g}", "seed": seed, "epochs": 2, **row}
            for row in cal.rows]


def test_psi_runs_and_table(tmp_path):
    rows = []
    rows += _write_run(tmp_path, "a", hidden=[64], n_train=100, loss="focal", loss_params={"gamma": 0.0}, seed=0)
    rows += _write_run(tmp_path, "b", hidden=[64], n_train=100, loss="focal", loss_params={"gamma": 2.0}, seed=1)
    rows += _write_run(tmp_path, "c", hidden=[64], n_train=100, loss="label_smoothing",
                       loss_params={"alpha": 0.1}, seed=0, label="label smoothing (0.1)")
    # a run of another loss (the page passes the psi role's runs; its losses are LOSSES)
    rows += _write_run(tmp_path, "e", hidden=[64], n_train=100, loss="hessian_trace",
                       loss_params={"lamda": 0.01}, seed=0, label="CE + tau Tr(H)")
    res = pd.DataFrame(rows)
    runs = pc.psi_runs(tmp_path, res)
    assert list(runs["run"]) == ["a", "b", "c"]
    assert list(runs["gamma"]) == [0.0, 2.0, 0.0]
    assert runs["setting"].unique().tolist() == ["784-64-10 MLP, 100 images"]
    assert runs["n_params"].iloc[0] == 784 * 64 + 64 + 64 * 10 + 10
    tab = pc.psi_table(tmp_path, runs, res).set_index("run")
    run = results.load_run(tmp_path / "runs" / "b")
    z, y = run.test_logits.double(), run.test_labels
    # ECE-Psi is the results' Psi row, i.e. Psi with the training gamma
    assert tab.loc["b", "ece_psi"] == pytest.approx(float(ece(PsiCorrection(2.0).predict_proba(z), y)))
    assert tab.loc["b", "ece_raw"] == pytest.approx(float(ece(logits=z, labels=y)))
    # TS_FL: the focal-criterion temperature, evaluated without and with Psi
    ts = TemperatureScaling("focal", gamma=2.0).fit(run.val_logits.double(), run.val_labels)
    assert tab.loc["b", "t_fl"] == pytest.approx(ts.temperature_)
    assert tab.loc["b", "ece_tsfl"] == pytest.approx(float(ece(ts.predict_proba(z), y)))
    ts.set_params(psi=True)
    assert tab.loc["b", "ece_tsfl_psi"] == pytest.approx(float(ece(ts.predict_proba(z), y)))
    # gamma = 0: Psi is the identity, and so is TS_FL + Psi
    assert tab.loc["a", "ece_psi"] == pytest.approx(tab.loc["a", "ece_raw"])
    assert tab.loc["a", "ece_tsfl_psi"] == pytest.approx(tab.loc["a", "ece_tsfl"])
    conf = torch.softmax(z, 1).amax(1)
    assert tab.loc["b", "gap"] == pytest.approx(float(conf.mean() - (z.argmax(1) == y).double().mean()))
    assert 0 < tab.loc["b", "gap_se"] < 0.1
    assert tab.loc["b", "confidence_psi"] > tab.loc["b", "confidence"]  # Psi raises the top probability
    assert np.isfinite(tab[["ece_raw", "ece_psi", "ece_tsfl", "ece_tsfl_psi"]].to_numpy()).all()
    # Fig. 4: one column per focal gamma > 0, Standard and TS_FL rows, raw and Psi curves, labelled
    fig = pc.plot_reliability_grid(tmp_path, tab.reset_index(), "784-64-10 MLP, 100 images")
    axes = fig.axes
    assert len(axes) == 2 and all(ax.get_ylabel() == "accuracy" or ax.get_ylabel() == "" for ax in axes)
    assert [len(ax.get_lines()) for ax in axes] == [3, 3]  # diagonal, raw, Psi
    assert "ECE raw" in axes[0].get_title() and "TS" in axes[1].get_title()
    assert axes[-1].get_xlabel() == "confidence"


def test_psi_runs_split_the_ls_paradigm(tmp_path):
    """Focal loss on smoothed labels is their LS paradigm, not a point of the standard curves; the
    label-smoothing network is the paradigm's gamma = 0 in the settings the paradigm trains."""
    rows = []
    rows += _write_run(tmp_path, "a", hidden=[64], n_train=100, loss="focal", loss_params={"gamma": 2.0}, seed=0)
    rows += _write_run(tmp_path, "b", hidden=[64], n_train=100, loss="focal",
                       loss_params={"gamma": 2.0, "label_smoothing": 0.1}, seed=0, label="focal gamma=2, LS 0.1")
    rows += _write_run(tmp_path, "c", hidden=[64], n_train=100, loss="label_smoothing",
                       loss_params={"alpha": 0.1}, seed=0, label="label smoothing (0.1)")
    rows += _write_run(tmp_path, "d", hidden=[512, 512], n_train=100, loss="label_smoothing",
                       loss_params={"alpha": 0.1}, seed=0, label="label smoothing (0.1)")
    res = pd.DataFrame(rows)
    assert list(pc.psi_runs(tmp_path, res)["run"]) == ["a", "c", "d"]
    ls = pc.psi_runs(tmp_path, res, paradigm="LS")
    assert list(ls["run"]) == ["b", "c"] and list(ls["gamma"]) == [2.0, 0.0]
    with pytest.raises(ValueError, match="paradigm"):
        pc.psi_runs(tmp_path, res, paradigm="ls")


def test_ls_paradigm_claim():
    tab, small, large, large400 = _frame()
    tab = tab.assign(gap_val=-0.05, gap_val_se=0.01, confidence=0.8, confidence_psi=0.85)
    # the LS table: raw ECE rising with gamma, Psi below it; label smoothing is gamma = 0
    ls = tab[tab["setting"] == large].assign(ece_raw=lambda t: 0.05 + 0.1 * t["gamma"],
                                              ece_psi=lambda t: 0.05 + 0.001 * t["gamma"])
    ls = ls[(ls["loss"] == "label_smoothing") | (ls["gamma"] > 0)]
    found = pc.claims(tab, [small, large, large400], ls)
    assert found["verdicts"]["charoen_ls_always"] == H
    assert [(r["steps_rising"], r["steps"], r["psi_lower"], r["runs"]) for r in found["ls"]] == [(2, 2, 4, 4)]
    flat = ls.assign(ece_raw=0.05)
    assert pc.claims(tab, [small, large, large400], flat)["verdicts"]["charoen_ls_always"] == DNH
    assert pc.claims(tab, [small, large, large400])["verdicts"]["charoen_ls_always"] == "not run in this build"


def test_profile_plan(monkeypatch):
    cpu = pc.profile_plan("cpu")
    assert cpu["gammas"] == list(profiles.PSI_GAMMAS) and cpu["ls_alpha"] == 0.1
    assert cpu["runs"] == 3 * len(profiles.PSI_LOSSES) * cpu["seeds"] and len(cpu["settings"]) == 3
    assert cpu["ls_paradigm"] == len(profiles.PSI_LS_LOSSES) * cpu["seeds"]
    # the curvature chapter's MLPs (same network, focal labels, another role) are not counted
    assert all("64 MLP" not in s or "4,000" in s for s in cpu["settings"])
    assert pc.profile_plan("smoke")["ls_alpha"] is None
    # the gpu profile's MLPs read CIFAR-10's 3 072 inputs; its full setting uses every training image
    gpu = pc.profile_plan("gpu")
    assert gpu["settings"][0] == "3072-64-10 MLP, all images" and gpu["settings"][2].endswith("4,500 images")
    assert pc.profile_plan("gpu", shrunk=True)["epochs"] == 1
    monkeypatch.setitem(profiles.PROFILES, "psi-less", spec.Profile("no Psi runs", [profiles.SYNTHETIC_BLOCK]))
    with pytest.raises(ValueError, match="profile 'psi-less' has no runs of the Psi chapter"):
        pc.profile_plan("psi-less")
