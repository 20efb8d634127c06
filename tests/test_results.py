"""focalcal.lab.results: run loading, the post-hoc protocol, Table-1 aggregation, training histories, figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

from focalcal import metrics
from focalcal.lab import results, runfolder
from focalcal.lab.io import atomic_torch_save, atomic_write_json
from focalcal.posthoc import KK_TEMPERATURES, PsiCorrection

matplotlib.use("Agg")


def overconfident_logits(n: int, k: int = 5, scale: float = 3.0, seed: int = 0):
    """Logits drawn from a known model, then sharpened by ``scale`` (over-confident)."""
    g = torch.Generator().manual_seed(seed)
    true = torch.randn(n, k, generator=g, dtype=torch.float64) * 1.5
    y = torch.multinomial(torch.softmax(true, -1), 1, generator=g).squeeze(1)
    return true * scale, y


# ------------------------------------------------------------------------------ small helpers ---

def test_temperature_grid_is_kk_grid_and_validates():
    assert results.temperature_grid() == KK_TEMPERATURES
    assert results.temperature_grid(50) == tuple(k / 10 for k in range(1, 51))
    assert results.temperature_grid(4, 2.0) == (0.5, 1.0, 1.5, 2.0)
    with pytest.raises(ValueError, match="n must be an integer"):
        results.temperature_grid(0)
    with pytest.raises(ValueError, match="t_max"):
        results.temperature_grid(10, -1.0)


def test_training_gamma_only_for_plain_focal():
    assert results.training_gamma("focal", {"gamma": 2.0}) == 2.0
    assert results.training_gamma("focal") == 3.0  # FocalLoss's default
    for name in ("ce", "inverse_focal", "flsd53", "dual_focal", "brier", "flsc531", "adafocal"):
        assert results.training_gamma(name) == 0.0, name
    with pytest.raises(ValueError, match="loss must be one of ce, focal"):
        results.training_gamma("focall")
    with pytest.raises(ValueError, match="loss_params of 'focal'.*valid parameters: gamma"):
        results.training_gamma("focal", {"gama": 1.0})


def test_runs_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FOCALCAL_RUNS", str(tmp_path))
    assert results.runs_dir() == tmp_path
    monkeypatch.delenv("FOCALCAL_RUNS")
    assert results.runs_dir().parts[-2:] == ("runs", "cpu")
    assert results.runs_dir("elsewhere") == Path("elsewhere")


# ---------------------------------------------------------------------------------- metrics ---

def test_metric_row_matches_direct_formulas():
    z, y = overconfident_logits(600, k=4, seed=1)
    row = results.metric_row(z, y)
    p = torch.softmax(z, -1).numpy()
    yn = y.numpy()
    n = len(yn)
    assert row["accuracy"] == pytest.approx(np.mean(p.argmax(1) == yn), abs=1e-12)
    assert row["nll"] == pytest.approx(-np.mean(np.log(p[np.arange(n), yn])), rel=1e-10)
    onehot = np.eye(4)[yn]
    assert row["brier"] == pytest.approx(np.mean(((p - onehot) ** 2).sum(1)), rel=1e-10)
    # slow equal-width and equal-mass ECE: loop over bins
    conf, correct = p.max(1), (p.argmax(1) == yn).astype(float)
    width = 0.0
    for b in range(15):
        lo, hi = b / 15, (b + 1) / 15
        m = (conf > lo) & (conf <= hi) if b else (conf >= 0) & (conf <= hi)
        if m.any():
            width += m.sum() / n * abs(conf[m].mean() - correct[m].mean())
    order = np.argsort(conf, kind="stable")
    mass = 0.0
    for b in range(15):
        idx = order[b * n // 15:(b + 1) * n // 15]  # n = 600 is a multiple of 15: no ties issue
        mass += len(idx) / n * abs(conf[idx].mean() - correct[idx].mean())
    assert row["ece_width"] == pytest.approx(width, abs=1e-12)
    assert row["ece_mass"] == pytest.approx(mass, abs=1e-12)
    assert row["classwise_ece"] == pytest.approx(metrics.classwise_ece(logits=z, labels=y), abs=1e-12)
    with pytest.raises(ValueError, match="log_probs"):
        results.metric_row(z[None], y)


# -------------------------------------------------------------------------------- calibrate ---

@pytest.fixture(scope="module")
def calibrated():
    zv, yv = overconfident_logits(1500, seed=2)
    zt, yt = overconfident_logits(1500, seed=3)
    temps = results.temperature_grid(60, 6.0)
    cal = results.calibrate(zv, yv, zt, yt, train_gamma=2.0, temperatures=temps,
                           gammas=(-0.25, 0.0, 0.5, 1.0))
    return cal, (zv, yv, zt, yt, temps)


def test_calibrate_rows_protocol(calibrated):
    cal, (zv, yv, zt, yt, temps) = calibrated
    rows = {r["method"]: r for r in cal.rows}
    assert [r["method"] for r in cal.rows] == list(results.METHODS)
    json.dumps(cal.rows, allow_nan=False)  # strict JSON: what calibration.json must hold
    # no calibrator changes the argmax
    assert len({r["accuracy"] for r in cal.rows}) == 1
    # TS (NLL): the grid temperature of least validation NLL (direct search)
    nlls = [metrics.nll(logits=zv / t, labels=yv) for t in temps]
    assert rows["TS (NLL)"]["temperature"] == temps[int(np.argmin(nlls))]
    assert rows["TS (NLL)"]["val_score"] == pytest.approx(min(nlls), rel=1e-9)
    eces = [metrics.ece(logits=zv / t, labels=yv, binning="mass") for t in temps]
    assert rows["TS (ECE)"]["val_score"] == pytest.approx(min(eces), abs=1e-12)
    assert rows["TS (ECE)"]["gamma_ev"] == 0.0 and rows["TS (NLL)"]["criterion"] == "nll"
    # the focal-TS grid contains gamma = 0, so it can only do at least as well on validation
    for crit in ("NLL", "ECE"):
        assert rows[f"focal TS ({crit})"]["val_score"] <= rows[f"TS ({crit})"]["val_score"] + 1e-12
    # the logits are 3x sharpened: TS must soften (T > 1) and lower the test NLL and ECE a lot
    assert rows["TS (NLL)"]["temperature"] > 2.0
    assert rows["TS (NLL)"]["nll"] < 0.8 * rows["uncalibrated"]["nll"]
    assert rows["TS (ECE)"]["ece_mass"] < 0.5 * rows["uncalibrated"]["ece_mass"]
    assert rows["Psi"]["gamma_ev"] == 2.0 and rows["Psi"]["temperature"] == 1.0
    assert rows["uncalibrated"]["n_val"] == 1500 and rows["uncalibrated"]["n_test"] == 1500
    assert cal.frame().loc["TS (ECE)", "family"] == "TS"


def test_calibrate_log_probs_match_rows_and_apply_calibration(calibrated):
    cal, (zv, yv, zt, yt, temps) = calibrated
    psi = PsiCorrection(2.0)(zt)
    torch.testing.assert_close(cal.log_probs["Psi"], psi)
    for row in cal.rows:
        lp = cal.log_probs[row["method"]]
        assert lp.dtype == torch.float64 and lp.shape == zt.shape
        assert torch.isfinite(lp).all()
        assert results.metric_row(lp, yt) == pytest.approx({k: row[k] for k in results.METRICS}, abs=1e-12)
        # a stored row reproduces its predictions without refitting
        again = results.apply_calibration(row, zt.float())
        torch.testing.assert_close(again.exp(), lp.exp(), atol=1e-6, rtol=0)


def test_calibrate_float32_and_psi_identity():
    zv, yv = overconfident_logits(400, seed=4)
    zt, yt = overconfident_logits(300, seed=5)
    temps = results.temperature_grid(20, 4.0)
    c64 = results.calibrate(zv, yv, zt, yt, temperatures=temps, gammas=(0.0, 1.0))
    c32 = results.calibrate(zv.float(), yv, zt.float(), yt, temperatures=temps, gammas=(0.0, 1.0))
    for a, b in zip(c64.rows, c32.rows):
        assert a["temperature"] == b["temperature"] and a["gamma_ev"] == b["gamma_ev"]
        assert a["nll"] == pytest.approx(b["nll"], rel=1e-5)
    rows = {r["method"]: r for r in c64.rows}
    # train_gamma = 0: Psi is the identity
    assert {k: rows["Psi"][k] for k in results.METRICS} == pytest.approx(
        {k: rows["uncalibrated"][k] for k in results.METRICS}, abs=1e-12)


def test_calibrate_extreme_logits_stay_finite():
    zv, yv = overconfident_logits(300, seed=6)
    zt, yt = overconfident_logits(300, seed=7)
    cal = results.calibrate(zv * 1e3, yv, zt * 1e3, yt, train_gamma=3.0,
                           temperatures=results.temperature_grid(10), gammas=(0.0, 5.0))
    json.dumps(cal.rows, allow_nan=False)
    assert all(math.isfinite(r["nll"]) for r in cal.rows)


def test_calibrate_bad_input():
    z, y = overconfident_logits(50)
    with pytest.raises(ValueError, match="val_logits and test_logits must have shapes"):
        results.calibrate(z, y, z[:, :3], y.clamp(max=2))
    with pytest.raises(ValueError, match="val_labels"):
        results.calibrate(z, y[:10], z, y)
    with pytest.raises(ValueError, match="test_logits"):
        results.calibrate(z, y, z * float("nan"), y)


# --------------------------------------------------------------------------------- run folder ---

def write_run(d, *, history=True):
    z, y = overconfident_logits(120, seed=8)
    runfolder.write_config(d, {"config": {"dataset": "gaussian_mixture", "model": "mlp",
                                                     "loss": "focal", "loss_params": '{"gamma": 1.0}',
                                                     "seed": 0}})
    atomic_torch_save({"val_logits": z[:60].float(), "val_labels": y[:60],
                       "test_logits": z[60:].float(), "test_labels": y[60:]}, d / "logits.pt")
    if history:
        atomic_write_json(d / "history.json", {"grad_norm_edges": [], "records": [{"epoch": 1}]})


def test_load_run_roundtrip_and_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        results.load_run(tmp_path)
    write_run(tmp_path)
    run = results.load_run(tmp_path)
    assert run.loss_params == {"gamma": 1.0}
    assert run.val_logits.shape == (60, 5) and run.test_labels.shape == (60,)
    assert run.history == [{"epoch": 1}] and run.calibration is None
    atomic_torch_save({"val_logits": run.val_logits, "val_labels": run.val_labels}, tmp_path / "logits.pt")
    with pytest.raises(ValueError, match="test_logits"):
        results.load_run(tmp_path)


# ---------------------------------------------------------------------------------- Table 1 ---

def fake_results() -> pd.DataFrame:
    """Two losses x two seeds (one loss with a single seed) with known numbers."""
    rows = []
    spec = {"dataset": "fashion_mnist", "model": "cnn", "epochs": 3}
    for label, seeds in (("cross-entropy", (0, 1)), ("focal (gamma=3)", (0,))):
        for s in seeds:
            run = f"{label}-{s}"
            base = {"run": run, "loss_label": label, "seed": s, **spec}
            acc = 0.90 + 0.01 * s
            for method, nll, ece, t, g in (
                    ("uncalibrated", 0.40 + s * 0.02, 0.050, 1.0, 0.0),
                    ("TS (NLL)", 0.30 + s * 0.02, 0.030, 1.2 + 0.2 * s, 0.0),
                    ("TS (ECE)", 0.31, 0.020 + 0.004 * s, 1.3, 0.0),
                    ("focal TS (NLL)", 0.29, 0.025, 1.1, 0.5),
                    ("focal TS (ECE)", 0.32, 0.010 + 0.002 * s, 1.4, -0.25 if s == 0 else 0.5),
                    ("Psi", 0.40, 0.050, 1.0, 0.0)):
                if label.startswith("focal"):
                    ece = ece * 2 if method == "focal TS (ECE)" else ece  # focal TS worse here
                rows.append({**base, "method": method, "accuracy": acc, "nll": nll, "ece_mass": ece,
                             "temperature": t, "gamma_ev": g})
    return pd.DataFrame(rows)


def test_table1_means_stds_and_selected_parameters():
    t = results.table1(fake_results())
    assert list(t["calibration"]) == ["uncalibrated", "TS", "focal TS"] * 2
    ce = t[t["loss_label"] == "cross-entropy"].set_index("calibration")
    assert ce.loc["TS", "n_seeds"] == 2
    assert ce.loc["TS", "accuracy_mean"] == pytest.approx(0.905)
    assert ce.loc["TS", "accuracy_std"] == pytest.approx(np.std([0.90, 0.91], ddof=1))
    assert ce.loc["TS", "nll_mean"] == pytest.approx(0.31)           # from TS (NLL)
    assert ce.loc["TS", "nll_temperature"] == pytest.approx(1.3)     # mean of 1.2, 1.4
    assert ce.loc["TS", "ece_mean"] == pytest.approx(0.022)          # from TS (ECE)
    assert ce.loc["TS", "ece_std"] == pytest.approx(np.std([0.020, 0.024], ddof=1))
    # gamma_ev selected -0.25 and 0.5 once each: the tie goes to the smaller |gamma|
    assert ce.loc["focal TS", "ece_gamma_ev"] == -0.25
    assert ce.loc["focal TS", "nll_gamma_ev"] == 0.5
    fo = t[t["loss_label"] == "focal (gamma=3)"].set_index("calibration")
    assert fo.loc["TS", "n_seeds"] == 1 and math.isnan(fo.loc["TS", "ece_std"])
    # filtering and ordering by losses; unknown labels skipped
    t2 = results.table1(fake_results(), losses=["focal (gamma=3)", "nope", "cross-entropy"])
    assert list(dict.fromkeys(t2["loss_label"])) == ["focal (gamma=3)", "cross-entropy"]
    assert results.table1(fake_results(), dataset="cifar10").empty


def test_format_table1_and_compare():
    t = results.table1(fake_results())
    f = results.format_table1(t)
    assert list(f.columns) == ["approach", "accuracy (%)", "log-loss (T)", "ECE (%) (T)"]
    assert f.loc[1, "approach"] == "cross-entropy + TS"
    assert f.loc[1, "accuracy (%)"] == f"90.50 ± {100 * np.std([0.90, 0.91], ddof=1):.2f}"
    assert f.loc[1, "log-loss (T)"].endswith("(1.30)")
    assert f.loc[2, "approach"] == "  + focal TS, γ_ev = -0.25"
    assert "±" not in f.loc[4, "ECE (%) (T)"]  # a single seed has no spread
    cmp = results.compare_calibrations(t)
    assert list(cmp["loss_label"]) == ["cross-entropy", "focal (gamma=3)"]
    assert list(cmp["lower"]) == [True, False]
    assert cmp.loc[0, "difference"] == pytest.approx(0.011 - 0.022)
    with pytest.raises(ValueError, match="metric must be one of"):
        results.compare_calibrations(t, metric="brier")


def test_selection_gain_pairs_the_two_selections_of_focal_ts():
    rows = pd.DataFrame([
        {"run": "a", "method": "focal TS (ECE)", "ece_mass": 0.02, "nll": 0.33},
        {"run": "a", "method": "focal TS (NLL)", "ece_mass": 0.04, "nll": 0.30},
        {"run": "a", "method": "TS (ECE)", "ece_mass": 0.05, "nll": 0.31},
        {"run": "b", "method": "focal TS (NLL)", "ece_mass": 0.01, "nll": 0.20},
        {"run": "b", "method": "focal TS (ECE)", "ece_mass": 0.02, "nll": 0.25},
        {"run": "c", "method": "focal TS (ECE)", "ece_mass": 0.03, "nll": 0.40},  # no NLL selection: left out
    ])
    g = results.selection_gain(rows).set_index("run")
    assert list(g.index) == ["a", "b"]
    assert g.loc["a", "ece_gain"] == pytest.approx(1 - 0.02 / 0.04)
    assert g.loc["a", "nll_gain"] == pytest.approx(1 - 0.30 / 0.33)
    assert g.loc["b", "ece_gain"] == pytest.approx(1 - 0.02 / 0.01)  # selecting by ECE can lose on ECE
    assert g.loc["b", ["ece_by_ece", "ece_by_nll", "nll_by_nll", "nll_by_ece"]].tolist() == [0.02, 0.01, 0.20, 0.25]
    with pytest.raises(ValueError, match="by must be a column"):
        results.selection_gain(rows, by="network")
    # no run has the NLL selection (e.g. a profile without it): an empty table, not a KeyError
    none = results.selection_gain(rows[rows["method"] != "focal TS (NLL)"])
    assert none.empty and list(none.columns) == ["run", "ece_by_ece", "ece_by_nll", "nll_by_nll", "nll_by_ece",
                                                 "ece_gain", "nll_gain"]


def test_describe_and_representative_runs():
    r = fake_results()
    d = results.describe_runs(r)
    assert list(d["runs"]) == [2, 1] and list(d["seeds"]) == ["0, 1", "0"]
    assert results.representative_runs(r) == {"cross-entropy": "cross-entropy-0",
                                             "focal (gamma=3)": "focal (gamma=3)-0"}


def test_load_results_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="focalcal.lab.sweep"):
        results.load_results(tmp_path)


# -------------------------------------------------------------------------------- histories ---

def fake_histories() -> pd.DataFrame:
    rows = []
    for run, nll, err in (("a", [1.0, 0.5, 0.6, 0.7], [0.5, 0.3, 0.25, 0.2]),
                          ("b", [1.0, 0.8, 0.6, 0.5], [0.5, 0.4, 0.3, 0.2]),
                          ("c", [1.0, 0.5, 0.6, 0.7], [0.5, 0.2, 0.25, 0.3])):
        for e, (v, r) in enumerate(zip(nll, err), start=1):
            rows.append({"run": run, "loss_label": "cross-entropy" if run != "b" else "focal (gamma=3)",
                         "seed": 0, "epoch": e, "test_nll": v, "test_error": r, "test_ece": 0.01 * e})
    return pd.DataFrame(rows)


def test_nll_overfitting():
    o = results.nll_overfitting(fake_histories()).set_index("run")
    assert o.loc["a", "best_epoch"] == 2 and o.loc["a", "nll_rise"] == pytest.approx(0.2)
    assert o.loc["a", "error_drop"] == pytest.approx(0.1) and o.loc["a", "overfits"]
    assert o.loc["b", "best_epoch"] == 4 and o.loc["b", "nll_rise"] == 0 and not o.loc["b", "overfits"]
    assert not o.loc["c", "overfits"]  # NLL rises but so does the error: ordinary overfitting
    assert o.loc["a", "ece_final"] == pytest.approx(0.04)


def test_load_histories(tmp_path):
    for run in ("r1", "r2"):
        d = tmp_path / "runs" / run
        d.mkdir(parents=True)
        atomic_write_json(d / "history.json", {"grad_norm_edges": [1], "records": [
            {"epoch": 1, "test_nll": 1.0, "grad_norm_hist": [1, 2]}, {"epoch": 2, "test_nll": 0.5}]})
    res = pd.DataFrame({"run": ["r1", "r1", "r2"], "dataset": "d", "model": "m",
                        "loss_label": ["x", "x", "y"], "seed": [0, 0, 1]})
    h = results.load_histories(tmp_path, res)
    assert len(h) == 4 and "grad_norm_hist" not in h.columns
    assert list(h[h["run"] == "r2"]["test_nll"]) == [1.0, 0.5]


def test_figures_have_labels():
    import matplotlib.pyplot as plt

    fig, axes = results.plot_training_curves(fake_histories(), panels=("nll", "error"))
    assert [ax.get_xlabel() for ax in axes] == ["epoch", "epoch"]
    assert axes[0].get_ylabel() == "test NLL (nats)"
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["cross-entropy", "focal (gamma=3)"]
    plt.close(fig)
    z, y = overconfident_logits(200, seed=9)
    fig, axes = results.plot_reliability_panel({"uncalibrated": z, "TS (ECE)": z / 3}, y, title="t")
    assert axes.shape == (2, 2) and "confidence" in fig.get_supxlabel()
    assert axes[0, 0].get_ylabel() == "accuracy" and axes[1, 0].get_ylabel()
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) >= 2
    assert "TS (ECE)" in axes[0, 1].get_title()
    plt.close(fig)
    with pytest.raises(ValueError, match="log_probs must name at least one method"):
        results.plot_reliability_panel({}, y)


# --------------------------------------------------------------- synthetic: true posterior ---

def write_synthetic_run(d, log_probs, labels, rows, *, dataset="charoenphakdee_1d"):
    d.mkdir(parents=True)
    runfolder.write_config(d, {"config": {
        "dataset": dataset, "model": "mlp", "loss": "focal", "loss_params": '{"gamma": 3.0}', "seed": 0,
        "train_subset": 0, "eval_subset": 0}})
    atomic_torch_save({"val_logits": log_probs[:10].float(), "val_labels": labels[:10],
                       "test_logits": log_probs.float(), "test_labels": labels}, d / "logits.pt")
    atomic_write_json(d / "calibration.json", rows)


def test_posterior_kl_against_the_true_posterior(tmp_path):
    from focalcal import maps
    from focalcal.lab.data import SyntheticDataset, charoenphakdee_1d_task

    # an independent draw of the test split, and the focal risk minimiser of its posterior
    truth = SyntheticDataset(charoenphakdee_1d_task(), 10_000, seed=0, split="test")
    q = maps.inverse_focal_map(truth.posterior, 3.0)
    rows = [{"method": "uncalibrated", "temperature": 1.0, "gamma_ev": 0.0},
            {"method": "TS (NLL)", "temperature": 0.5, "gamma_ev": 0.0},
            {"method": "Psi", "temperature": 1.0, "gamma_ev": 3.0}]
    write_synthetic_run(tmp_path / "runs" / "r", q.log(), truth.targets, rows)
    table = pd.DataFrame({"run": "r", "dataset": "charoenphakdee_1d", "loss": "focal",
                          "loss_label": "focal (gamma=3)", "seed": 0, "param_gamma": 3.0,
                          "method": [r["method"] for r in rows]})
    kl = results.posterior_kl(tmp_path, table)
    assert list(kl["method"]) == [r["method"] for r in rows] and (kl["run"] == "r").all()
    assert (kl["param_gamma"] == 3.0).all() and (kl["family"] == ["uncalibrated", "TS", "Psi"]).all()
    kl = kl.set_index("method")["kl_posterior"]
    eta = truth.posterior

    def direct(log_p):  # mean_i sum_k eta log(eta / p), p from the stored float32 logits
        log_p = torch.log_softmax(log_p, -1)
        return float((eta * (eta.log() - log_p)).sum(-1).mean())

    stored = q.log().float().double()
    assert kl["uncalibrated"] == pytest.approx(direct(stored), rel=1e-9)
    assert kl["uncalibrated"] > 0.05  # the focal minimiser is far from the posterior ...
    assert kl["Psi"] < 1e-8           # ... and Psi maps it back (Charoenphakdee et al., Thm. 11)
    assert kl["TS (NLL)"] == pytest.approx(direct(stored / 0.5), rel=1e-9)

    test = results.synthetic_test_set(results.load_run(tmp_path / "runs" / "r"))
    assert torch.equal(test.labels, truth.targets) and torch.equal(test.posterior, eta)
    assert test.x.shape == (10_000, 1)


def test_synthetic_test_set_refuses_other_runs(tmp_path):
    write_run(tmp_path)  # gaussian_mixture, but its labels are not that task's
    with pytest.raises(ValueError, match="run: the regenerated test labels"):
        results.synthetic_test_set(results.load_run(tmp_path))
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["config"]["dataset"] = "fashion_mnist"
    atomic_write_json(tmp_path / "config.json", cfg)
    with pytest.raises(ValueError, match="run: .* is on dataset 'fashion_mnist'; only the synthetic tasks"):
        results.synthetic_test_set(results.load_run(tmp_path))


def test_posterior_figures_have_labels():
    import matplotlib.pyplot as plt

    from focalcal.lab.data import SyntheticDataset, charoenphakdee_1d_task
    from focalcal.plotting import color

    truth = SyntheticDataset(charoenphakdee_1d_task(), 500, seed=1, split="test")
    lp = truth.posterior.log()
    fig, axes = results.plot_posterior_1d(truth.x, truth.posterior, {"a": (lp, "cross-entropy"),
                                                                     "b": (lp / 2, "Psi")})
    assert [ax.get_title() for ax in axes] == ["a", "b"]
    assert axes[0].get_xlabel() == "input x" and axes[0].get_ylabel() == "p(y | x)"
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["true posterior", "class 1", "class 2",
                                                                  "class 3"]
    assert axes[1].get_lines()[1].get_color() == color("Psi")
    plt.close(fig)
    with pytest.raises(ValueError, match="x and posterior must have shapes"):
        results.plot_posterior_1d(truth.x[:10], truth.posterior, {"a": (lp, "Psi")})
    kl = pd.DataFrame({"dataset": "d", "loss_label": ["x", "x", "y", "y"],
                       "method": ["uncalibrated", "Psi"] * 2, "kl_posterior": [0.1, 0.01, 0.2, 0.02]})
    fig, axes = results.plot_posterior_kl(kl, methods=("uncalibrated", "Psi"))
    assert axes[0].get_yscale() == "log" and "KL" in axes[0].get_ylabel()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["uncalibrated", "Psi"]
    heights = sorted(round(p.get_height(), 6) for p in axes[0].patches)
    assert heights == [0.01, 0.02, 0.1, 0.2]
    plt.close(fig)
    with pytest.raises(ValueError, match="kl has no rows"):
        results.plot_posterior_kl(kl.iloc[:0])


def test_confidence_row_is_metric_row_plus_mean_confidence():
    g = torch.Generator().manual_seed(3)
    z = 3 * torch.randn(400, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 6, (400,), generator=g)
    row = results.confidence_row(z, y)
    assert list(row) == ["accuracy", "confidence", "ece_width", "ece_mass", "nll"]
    assert row["confidence"] == pytest.approx(float(torch.softmax(z, 1).amax(1).mean()), abs=1e-15)
    assert row["ece_mass"] == metrics.ece(logits=z, labels=y, binning="mass")
    assert row["nll"] == metrics.nll(logits=z, labels=y)
    with pytest.raises(ValueError, match="^logits must have shape"):
        results.confidence_row(z[0], y)
