"""The helpers of the Zhou et al. Fashion-MNIST page (``focalcal_book.zhou_fmnist``): which runs it
reads, the per-seed table, the verdict rules and the figures, on small hand-made inputs."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
import torch

from focalcal.lab import profiles, runfolder
from focalcal.lab.results.released import zhou_row
from focalcal_book import verdicts as vd
from focalcal_book import zhou_fmnist as zf


def frame(values: dict[str, list[float]], column: str = "ece_raw") -> pd.DataFrame:
    """A per-seed table: loss label -> one value per seed (seeds 0, 1, ...)."""
    return pd.DataFrame([{"loss_label": lab, "seed": s, column: v}
                         for lab, vs in values.items() for s, v in enumerate(vs)])


def test_losses_are_zhou_table1_from_the_sweep_constants():
    assert zf.LABELS == ("cross-entropy", "FLSD-53", "inverse focal", "dual focal", "KDE-XE", "AURC",
                         "selective-risk", "selective-risk (released)", "selective-risk (detached weights)")
    assert zf.TARGET == "selective-risk" and zf.BASELINE == "cross-entropy"
    assert zf.TARGETS == ("selective-risk", *zf.VARIANT_LABELS) and zf.BASELINES == zf.LABELS[:6]
    defined = {*profiles.TABLE1_LOSSES, *profiles.ZHOU_LOSSES, *profiles.CLIPPED_LOSSES}
    assert set(zf.ZHOU_TABLE_LOSSES) <= defined
    assert {"dual focal", "selective-risk"} <= zf.CLIPPED_LABELS


def test_loss_parameters_defaults_and_overrides():
    p = zf.loss_parameters("selective_risk")
    assert p["score"] == "msp" and p["coverage"] == 0.9 and p["nu"] == 0.1 and p["n_bins"] == 64
    assert p["variant"] == "paper" and zf.loss_parameters("selective_risk", {"variant": "released"})["nu"] == 0.05
    assert "reduction" not in p and "ignore_index" not in p
    assert zf.loss_parameters("dual_focal", {"gamma": 3.0})["gamma"] == 3.0
    assert zf.loss_parameters("ce") == {}
    with pytest.raises(ValueError, match="name"):
        zf.loss_parameters("no_such_loss")


def test_select_runs_filters_and_orders():
    rows = []
    for lab, loss, ds, model in [("selective-risk", "selective_risk", "fashion_mnist", "cnn"),
                                 ("cross-entropy", "ce", "fashion_mnist", "cnn"),
                                 ("cross-entropy", "ce", "gaussian_mixture", "mlp"),
                                 ("CE", "ce", "fashion_mnist", "cnn"),
                                 ("AURC", "aurc", "fashion_mnist", "mlp")]:
        for seed in (1, 0):
            for method in ("uncalibrated", "TS (NLL)"):  # results have one row per run x method
                rows.append({"run": f"{ds}-{model}-{lab}-{seed}", "method": method, "dataset": ds, "model": model,
                             "loss": loss, "loss_label": lab, "seed": seed, "epochs": 18})
    runs = zf.select_runs(pd.DataFrame(rows), dataset="fashion_mnist", model="cnn")
    assert list(runs["loss_label"]) == ["cross-entropy"] * 2 + ["selective-risk"] * 2
    assert len(zf.select_runs(pd.DataFrame(rows))) == 8  # no data set or network: every run of a label
    assert list(runs["seed"]) == [0, 1, 0, 1]
    assert runs["run"].is_unique
    with pytest.raises(ValueError, match="results"):
        zf.select_runs(pd.DataFrame({"run": ["a"]}))


def test_spread_table_one_row_per_loss():
    t = frame({"cross-entropy": [0.1, 0.2], "AURC": [0.3, 0.5]})
    out = zf.spread_table(t, {"ece_raw": "ECE (%)"})
    assert list(out["training loss"]) == ["cross-entropy", "AURC"]
    assert list(out["seeds"]) == [2, 2]
    assert out["ECE (%)"].iloc[1] == "40.00 (30.00–50.00)"


@pytest.mark.parametrize("target, verdict", [
    ([0.02, 0.025, 0.03], vd.HOLDS),            # within the best loss's range
    ([0.005, 0.01, 0.012], vd.HOLDS),           # below it
    ([0.04, 0.05, 0.06], vd.DOES_NOT_HOLD),     # every seed above the best loss's worst seed
    ([0.02, 0.03, 0.05], vd.NOT_RESOLVED),      # overlaps, extends above
])
def test_competitive_rules(target, verdict):
    t = frame({"cross-entropy": [0.08, 0.07, 0.09], "FLSD-53": [0.02, 0.03, 0.025], "selective-risk": target})
    c = zf.competitive(t, "ece_raw")
    assert c["verdict"] == verdict
    assert c["best"] == "FLSD-53"
    assert c["n_paired"] == 3 and c["below_baseline"] == sum(v < b for v, b in zip(target, [0.08, 0.07, 0.09]))


def test_competitive_without_runs_or_spread():
    assert zf.competitive(frame({"cross-entropy": [0.1, 0.2]}), "ece_raw")["verdict"] == vd.NOT_RUN
    assert zf.competitive(frame({"selective-risk": [0.1, 0.2]}), "ece_raw")["verdict"] == vd.NOT_RUN
    one = frame({"cross-entropy": [0.2], "selective-risk": [0.1]})
    assert zf.competitive(one, "ece_raw")["verdict"] == vd.NOT_RESOLVED
    with pytest.raises(ValueError, match="column"):
        zf.competitive(one, "nope")


@pytest.mark.parametrize("target, verdict, lower", [
    ([0.01, 0.02], vd.HOLDS, 2),
    ([0.045, 0.05], vd.DOES_NOT_HOLD, 0),
    ([0.04, 0.05], vd.NOT_RESOLVED, 0),                 # the ranges meet at 0.04: a tie decides nothing
    ([0.025, 0.045], vd.NOT_RESOLVED, 1),
])
def test_lower_than_rules(target, verdict, lower):
    t = frame({"cross-entropy": [0.03, 0.04], "selective-risk": target}, "aurc_msp")
    c = zf.lower_than(t, "aurc_msp")
    assert (c["verdict"], c["lower_paired"], c["n_paired"]) == (verdict, lower, 2)


def test_lower_than_not_run():
    assert zf.lower_than(frame({"cross-entropy": [0.03, 0.04]}, "aurc_msp"), "aurc_msp")["verdict"] == vd.NOT_RUN


def test_claim_lists():
    t = frame({"cross-entropy": [0.08, 0.09], "FLSD-53": [0.02, 0.03], "selective-risk": [0.05, 0.06]})
    t["cwece_raw"] = t["ece_raw"] / 4
    verdict, items = zf.calibration_claim(t, {"ece_raw": "ECE", "cwece_raw": "cwECE"})
    assert verdict == vd.DOES_NOT_HOLD
    assert items.count("\n- ") == 1 and items.startswith("- ECE: selective-risk 5.50 (5.00–6.00) %")
    assert "FLSD-53" in items and "on 2 of 2 seeds" in items
    t["aurc_msp"] = t["ece_raw"]
    verdict, items = zf.aurc_claim(t, {"msp": "MSP"})
    assert verdict == vd.HOLDS and "**holds**" in items and "lower on 2 of 2 seeds" in items
    verdict, items = zf.aurc_claim(t[t["loss_label"] != "selective-risk"], {"msp": "MSP"})
    assert verdict == vd.NOT_RUN and "no runs of selective-risk" in items
    with pytest.raises(ValueError):
        zf.aurc_claim(t, {})


def test_confidence_direction():
    t = frame({"cross-entropy": [0.05, 0.02], "FLSD-53": [-0.01, -0.02], "AURC": [0.01, -0.01]}, "confidence_gap")
    assert zf.confidence_direction(t) == {"over": ["cross-entropy"], "under": ["FLSD-53"], "mixed": ["AURC"]}


def fake_run(out: Path, name: str, loss: str, label: str, seed: int, clip: float | None, temp: float,
             params: dict | None = None) -> None:
    """A finished run folder as ``load_run`` reads it: logits drawn so that softmax(logits / temp) is
    the labels' distribution (over-confident for temp > 1)."""
    g = torch.Generator().manual_seed(seed)
    d = out / "runs" / name
    d.mkdir(parents=True)
    blob = {}
    for split in ("val", "test"):
        z = 3 * torch.randn(400, 4, generator=g)
        blob[f"{split}_logits"] = z
        blob[f"{split}_labels"] = torch.multinomial(torch.softmax(z / temp, 1), 1, generator=g).squeeze(1)
    torch.save(blob, d / "logits.pt")
    runfolder.write_config(d, {
        "config": {"dataset": "fashion_mnist", "model": "cnn", "loss": loss, "loss_params": json.dumps(params or {}),
                   "seed": seed},
        "trainer": {"clip_grad_norm": clip}})


def test_per_seed_and_figures(tmp_path):
    specs = [("ce", "cross-entropy", None, 2.0), ("selective_risk", "selective-risk", 2.0, 1.0)]
    rows = []
    for loss, label, clip, temp in specs:
        for seed in (0, 1):
            name = f"{label}-{seed}"
            fake_run(tmp_path, name, loss, label, seed, clip, temp)
            rows.append({"run": name, "loss": loss, "loss_label": label, "seed": seed, "epochs": 1})
    table = zf.per_seed(tmp_path, pd.DataFrame(rows))
    assert list(table["loss_label"]) == ["cross-entropy"] * 2 + ["selective-risk"] * 2
    assert table["parameters"].iloc[0] == "none" and "coverage=0.9" in table["parameters"].iloc[2]
    assert np.isnan(table["clip_grad_norm"].iloc[0]) and table["clip_grad_norm"].iloc[2] == 2.0
    assert (table.loc[:1, "confidence_gap"] > 0).all()  # temp 2: over-confident by construction
    # the row is zhou_row of the test logits with T fitted on the validation logits
    blob = torch.load(tmp_path / "runs" / "cross-entropy-0" / "logits.pt")
    expected = zhou_row(blob["test_logits"], blob["test_labels"], blob["val_logits"], blob["val_labels"])
    for key, value in expected.items():
        assert table[key].iloc[0] == pytest.approx(value)
    figs = zf.reliability_figures(tmp_path, table, seed=0, per_row=1)
    assert len(figs) == 2
    assert zf.reliability_figures(tmp_path, table, seed=5) == []
    with pytest.raises(ValueError, match="per_row"):
        zf.reliability_figures(tmp_path, table, per_row=0)
    fig, axes = zf.aurc_ece_plot(table)
    assert len(axes) == 2 and axes[1].get_ylabel().startswith("test E-AURC")
    with pytest.raises(ValueError, match="score"):
        zf.aurc_ece_plot(table, score="nope")
    import matplotlib.pyplot as plt

    plt.close("all")


def test_training_progress(tmp_path):
    fake_run(tmp_path, "sr-0", "selective_risk", "selective-risk", 0, 2.0, 1.0)
    records = [{"epoch": 1, "train_accuracy": 0.2, "train_nll": 2.2}, {"epoch": 2, "train_accuracy": 0.3,
                                                                        "train_nll": 2.0}]
    (tmp_path / "runs" / "sr-0" / "history.json").write_text(json.dumps({"records": records}))
    table = pd.DataFrame({"run": ["sr-0"], "loss_label": ["selective-risk"], "seed": [0]})
    assert zf.training_progress(tmp_path, table) == {"best_train_accuracy": 0.3, "final_train_nll_min": 2.0,
                                                     "final_train_nll_max": 2.0, "epochs": 2}
    assert zf.training_progress(tmp_path, table, label="AURC") == {}


def test_near_uniform_share():
    z = torch.tensor([[0.0, 0.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0]])
    assert zf.near_uniform_share(z) == pytest.approx(2 / 3)  # rows 0 and 2 below 2/4
    assert zf.near_uniform_share(z, factor=1.0) == 0.0
    for bad, match in ((torch.zeros(3), "logits"), (torch.zeros(0, 4), "logits")):
        with pytest.raises(ValueError, match=match):
            zf.near_uniform_share(bad)
    with pytest.raises(ValueError, match="factor"):
        zf.near_uniform_share(z, factor=0.5)


def test_target_facts(tmp_path):
    t = pd.DataFrame({"run": ["a", "b", "c", "d"], "loss_label": ["cross-entropy"] * 2 + ["selective-risk"] * 2,
                      "seed": [0, 1, 0, 1], "accuracy": [0.86, 0.87, 0.27, 0.33],
                      "near_uniform": [0.0, 0.01, 0.8, 0.6]})
    for name, loss, label, seed in t[["run", "loss_label", "loss_label", "seed"]].itertuples(index=False):
        fake_run(tmp_path, name, loss, label, seed, None, 1.0)  # no history.json: no training figures
    f = zf.target_facts(tmp_path, t, n_classes=10)
    assert f["present"] and f["far_below"] and f["mostly_uniform"]
    assert f["accuracy"].tolist() == pytest.approx([27.0, 33.0])
    assert (f["others_lo"], f["others_hi"]) == (pytest.approx(86.5), pytest.approx(86.5))
    assert (f["near_uniform_lo"], f["near_uniform_hi"]) == (pytest.approx(60.0), pytest.approx(80.0))
    assert f["others_near_uniform"] == pytest.approx(1.0) and f["near_uniform_at"] == pytest.approx(0.2)
    assert f["epochs"] == 0 and np.isnan(f["best_train_accuracy"]) and f["uniform_nll"] == pytest.approx(np.log(10))
    assert not zf.target_facts(tmp_path, t.assign(near_uniform=[0.0, 0.0, 0.1, 0.6]), n_classes=10)["mostly_uniform"]
    assert not zf.target_facts(tmp_path, t[t["loss_label"] != "selective-risk"], n_classes=10)["present"]
    assert not zf.target_facts(tmp_path, t[t["loss_label"] == "selective-risk"], n_classes=10)["present"]
    with pytest.raises(ValueError, match="n_classes"):
        zf.target_facts(tmp_path, t, n_classes=1)


def test_fig3_table():
    direction = {"over": ["inverse focal"], "under": ["FLSD-53"], "mixed": []}
    rows = zf.fig3_table(direction, {"FLSD-53": "under", "inverse focal": "under", "AURC": "under"})
    assert rows.to_dict("records") == [
        {"loss_label": "FLSD-53", "theirs": "under-confident", "here": "under-confident on every seed", "agrees": True},
        {"loss_label": "inverse focal", "theirs": "under-confident", "here": "over-confident on every seed",
         "agrees": False},
        {"loss_label": "AURC", "theirs": "under-confident", "here": vd.NOT_RUN, "agrees": False}]
    mixed = zf.fig3_table({"over": [], "under": [], "mixed": ["AURC"]}, {"AURC": "under"})
    assert "some seeds" in mixed.loc[0, "here"] and not mixed.loc[0, "agrees"]
    assert set(zf.FIG3_READING) <= set(zf.LABELS)
    with pytest.raises(ValueError, match="reading"):
        zf.fig3_table(direction, {"AURC": "sideways"})


# --------------------------------------------------------------------------------------------
# the mechanism: the logit gradient split into its CE part and its weight part
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["paper", "released", "detached"])
def test_gradient_decomposition_parts_sum_to_the_gradient(variant):
    from focalcal.losses import selective_risk_loss

    g = torch.Generator().manual_seed(5)
    z = torch.randn(48, 10, generator=g, dtype=torch.float64) * 0.5
    y = torch.randint(0, 10, (48,), generator=g)
    d = zf.gradient_decomposition(z, y, variant=variant, coverage=0.9)
    zz = z.clone().requires_grad_()
    selective_risk_loss(zz, y, variant=variant, coverage=0.9).backward()
    torch.testing.assert_close(d["ce_grad"] + d["weight_grad"], zz.grad, rtol=0, atol=1e-15)
    # the CE part is the detached-weights loss's gradient (same weights for paper and detached)
    if variant != "released":
        zd = z.clone().requires_grad_()
        selective_risk_loss(zd, y, variant="detached", coverage=0.9).backward()
        torch.testing.assert_close(d["ce_grad"], zd.grad, rtol=1e-12, atol=1e-15)
    assert d["total_norm"] == pytest.approx(float(zz.grad.norm()))
    assert (d["weight_norm"] < 1e-12) == (variant == "detached")  # rounding of beta = (beta CE) / CE
    correct = z.argmax(1) == y
    assert d["n"] == 48 and d["n_correct"] == int(correct.sum()) > 0
    assert d["pushed_down"] == int((correct & (zz.grad[torch.arange(48), y] > 0)).sum())
    if variant == "detached":  # beta_i (p_t - 1) / N < 0: a reweighted CE never pushes the label down
        assert d["pushed_down"] == 0
    with pytest.raises(ValueError, match="reduction"):
        zf.gradient_decomposition(z, y, reduction="sum")
    with pytest.raises(ValueError, match="logits must have shape"):
        zf.gradient_decomposition(z[0], y)


def test_gradient_decomposition_at_initialisation_on_fashion_mnist():
    """The cpu profile's selective-risk network before its first step, on its first batch of 32:
    the printed loss's weight part outweighs its CE part and pushes the true-class logit of the
    correctly classified samples down; the released variant's weight part is the smaller one."""
    z, y = zf.initial_network_state(seed=0)
    assert z.shape == (32, 10) and y.shape == (32,)
    paper = zf.gradient_decomposition(z, y, variant="paper")
    released = zf.gradient_decomposition(z, y, variant="released")
    detached = zf.gradient_decomposition(z, y, variant="detached")
    assert paper["weight_norm"] > 1.5 * paper["ce_norm"]
    assert paper["n_correct"] >= 1 and paper["pushed_down_fraction"] == 1.0
    assert released["weight_norm"] < released["ce_norm"]
    assert detached["weight_norm"] < 1e-12 and detached["pushed_down"] == 0
    with pytest.raises(ValueError, match="no run"):
        zf.initial_network_state(seed=7)


def _claims_table(accuracy: dict[str, float]) -> pd.DataFrame:
    """Two seeds per loss: the selective-risk variants calibrated best, the baselines worse."""
    rows = []
    for i, lab in enumerate(zf.LABELS):
        for seed in (0, 1):
            low = lab in zf.TARGETS
            rows.append({"loss_label": lab, "seed": seed, "accuracy": accuracy.get(lab, 0.88),
                         "ece_raw": (0.01 if low else 0.05 + 0.01 * i) + 0.001 * seed,
                         "cwece_raw": (0.002 if low else 0.01 + 0.001 * i) + 0.0001 * seed,
                         "cwece_ts": 0.001 + 0.0001 * seed})
    return pd.DataFrame(rows)


def test_no_calibration_verdict_for_a_network_that_did_not_train(monkeypatch):
    table = _claims_table({"selective-risk": 0.29})       # the printed loss near chance (10 classes)
    failed = zf.failed_losses(table, 10)
    assert failed == ["selective-risk"]

    def computed(*args, **kwargs):
        raise AssertionError("a calibration verdict was computed for a network that did not train")

    with monkeypatch.context() as m:
        m.setattr(zf, "competitive", computed)
        m.setattr(zf, "compare_ranges", computed)
        m.setattr(zf, "paired", computed)
        assert zf.good_calibration(table, "selective-risk", failed) == vd.NOT_TRAINED
        assert zf.best_cwece(table, "selective-risk", failed)["verdict"] == vd.NOT_TRAINED
        assert zf.ts_improves(table, "selective-risk", failed) == vd.NOT_TRAINED
    # the variants that trained are judged: best in calibration on every seed
    released = "selective-risk (released)"
    assert zf.good_calibration(table, released, failed) == vd.HOLDS
    assert zf.ts_improves(table, released, failed) == vd.HOLDS
    best = zf.best_cwece(table, released, failed)
    assert best["case"] == vd.HOLDS and best["verdict"] == vd.NOT_RESOLVED   # one case: no majority


def test_a_baseline_that_did_not_train_leaves_the_comparison_partly_tested():
    table = _claims_table({"KDE-XE": 0.12})
    failed = zf.failed_losses(table, 10)
    assert failed == ["KDE-XE"]
    assert zf.good_calibration(table, "selective-risk", failed) == vd.PARTLY_TESTED
    assert set(zf.versus_baselines(table, "selective-risk", failed)["loss_label"]) == {
        "selective-risk", *(b for b in zf.BASELINES if b != "KDE-XE")}
    assert zf.good_calibration(table[table["loss_label"] != "selective-risk"], "selective-risk", []) == vd.NOT_RUN


# ------------------------------------------------------------------- App. E: cross-validation ---

def test_selection_table_and_the_selected_values(tmp_path):
    from focalcal import metrics

    rows = []
    for gamma, temp in ((1.0, 1.0), (4.0, 3.0)):  # gamma 4's logits are over-confident: higher NLL
        for seed in (0, 1):
            name = f"inverse-{gamma:g}-{seed}"
            fake_run(tmp_path, name, "inverse_focal", f"inverse focal gamma={gamma:g}", seed, None, temp, {"gamma": gamma})
            rows.append({"run": name, "loss_label": f"inverse focal gamma={gamma:g}", "seed": seed})
    table = zf.selection_table(tmp_path, pd.DataFrame(rows))
    assert list(table["value"]) == [1.0, 1.0, 4.0, 4.0] and set(table["parameter"]) == {"gamma"}
    assert set(table["family"]) == {"inverse_focal"}
    blob = torch.load(tmp_path / "runs" / "inverse-4-1" / "logits.pt")
    assert table["val_nll"].iloc[3] == pytest.approx(metrics.nll(logits=blob["val_logits"], labels=blob["val_labels"]))
    assert table["val_aurc"].iloc[3] == pytest.approx(metrics.aurc(logits=blob["val_logits"], labels=blob["val_labels"]))
    assert (table["val_nll"].iloc[2:].to_numpy() > table["val_nll"].iloc[:2].to_numpy()).all()
    chosen = zf.selected(table)
    assert chosen.to_dict("records") == [{
        "training loss": "inverse focal", "parameter": "gamma", "grid": "1, 4", "selected": 1.0, "per seed": "1, 1",
        "Zhou et al. (Tables 2-3)": "1 to 3", "Zhou et al., CIFAR-10 ResNet-50": 2.0}]
    assert zf.large_gamma_underperforms(table) == vd.HOLDS
    fig = zf.plot_selection(table, {"val_nll": "validation NLL"})
    assert fig.axes[0].get_xlabel() == r"$\gamma$" and fig.axes[0].get_ylabel() == "validation NLL"
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize(("big", "verdict"), [((3.0, 4.0), vd.HOLDS), ((1.0, 1.5), vd.DOES_NOT_HOLD),
                                              ((3.0, 1.5), vd.NOT_RESOLVED)])
def test_large_gamma_rule(big, verdict):
    # the least NLL of gamma < 4 is 2.0 on both seeds; gamma 5's per seed is `big`
    table = pd.DataFrame({"family": "inverse_focal", "seed": [0, 0, 0, 1, 1, 1], "value": [1.0, 2.0, 5.0] * 2,
                          "val_nll": [2.0, 2.5, big[0], 2.0, 2.5, big[1]]})
    assert zf.large_gamma_underperforms(table) == verdict
    assert zf.large_gamma_underperforms(table[table["value"] < 4]) == vd.NOT_RUN
    assert zf.large_gamma_underperforms(table.iloc[:3]) == vd.NOT_RESOLVED  # one seed shows no spread


def test_paper_selected_values_are_their_tables(shared_data_root):
    from focalcal_book.claims import paper_text

    text = paper_text("zhou2025", shared_data_root.parent / "papers")
    for row, family in (("Dual", "dual_focal"), ("Inv. FL", "inverse_focal")):
        assert f"{row} ".lower() + " ".join(f"{v:.1f}" for v in zf.PAPER_SELECTED[family].values()) in text, row
    coverage = " ".join(f"{v:g}" for v in zf.PAPER_SELECTED["selective_risk"].values())
    assert "swin-tiny " + coverage in text  # the text is normalised to lower case
