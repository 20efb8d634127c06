"""The helpers of the Mukhoti-on-Fashion-MNIST page (``focalcal_book.mukhoti_fmnist``), on tiny
hand-made run folders and tables (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

from focalcal.lab import profiles, runfolder
from focalcal.lab.records import GRAD_NORM_EDGES, prediction_stats
from focalcal_book import mukhoti_fmnist as mf
from focalcal_book import verdicts as vd

matplotlib.use("Agg")


def test_losses_come_from_the_sweep():
    labels = [lo.display for lo in profiles.FMNIST_LOSSES]
    assert set(mf.LOSSES) <= set(labels) and len(set(mf.LOSSES)) == len(mf.LOSSES)
    assert mf.LOSSES[:4] == mf.TABLE1_COLUMNS[:4] and mf.FLSD53 in mf.LOSSES
    assert mf.FIG3 == tuple(lo.display for lo in profiles.FIG3_LOSSES) and set(mf.FIG3) <= set(mf.LOSSES)
    assert (mf.CE, mf.FL3) == (mf.FIG3[0], mf.FIG3[-1])
    # Zhou et al.'s and K&K's extra losses are not Mukhoti's
    assert not {lo.display for lo in profiles.ZHOU_LOSSES + profiles.KK_EXTRA_LOSSES} & set(mf.LOSSES)


def _results(labels_seeds):
    return pd.DataFrame([{"run": f"{lo}-s{s}", "dataset": "fashion_mnist", "model": "cnn", "loss_label": lo, "seed": s}
                         for lo, s in labels_seeds])


def test_select_and_missing():
    res = _results([(mf.CE, 0), ("AURC", 0), (mf.CE, 1)])
    assert list(mf.select_runs(res)["loss_label"]) == [mf.CE, mf.CE]
    assert mf.missing_losses(res) == list(mf.LOSSES[1:])


def test_seed_summary_and_cells():
    t = pd.DataFrame({"loss_label": [mf.FL3, mf.CE, mf.CE], "seed": [0, 0, 1], "ece": [0.02, 0.05, 0.07]})
    s = vd.seed_summary(t, ["ece"], order=mf.LOSSES)
    assert list(s.index) == [mf.CE, mf.FL3]  # the order of LOSSES, not of the table
    assert s.loc[mf.CE, "ece_mean"] == pytest.approx(0.06) and s.loc[mf.CE, "seeds"] == 2
    cells = mf.range_cells(s, {"ece": (100.0, 1)})
    assert cells.loc[mf.CE, "ece"].startswith("6.0<br>") and "5.0&ndash;7.0" in cells.loc[mf.CE, "ece"]
    assert cells.loc[mf.FL3, "ece"] == "2.0"  # one seed: no range
    s.loc[mf.FL3, "ece_mean"] = np.nan
    assert mf.range_cells(s, {"ece": (1.0, 2)}).loc[mf.FL3, "ece"] == "&ndash;"


def _values(a, b, col="x"):
    return pd.DataFrame([{"loss_label": "A", "seed": i, col: v} for i, v in enumerate(a)]
                        + [{"loss_label": "B", "seed": i, col: v} for i, v in enumerate(b)])


def test_compare_seeds():
    c = mf.compare_seeds(_values([1, 2, 3], [2, 3, 4]), "x", "A", "B")
    assert c["verdict"] == vd.HOLDS and (c["agree"], c["pairs"]) == (3, 3) and not c["separate"]
    assert c["lower_range"] == (1, 3) and c["higher_range"] == (2, 4)
    assert mf.compare_seeds(_values([1, 2], [5, 6]), "x", "A", "B")["separate"]
    assert mf.compare_seeds(_values([3, 4], [1, 2]), "x", "A", "B")["verdict"] == vd.DOES_NOT_HOLD
    assert mf.compare_seeds(_values([1, 4], [2, 3]), "x", "A", "B")["verdict"] == vd.NOT_RESOLVED
    assert mf.compare_seeds(_values([2, 2], [2, 2]), "x", "A", "B")["verdict"] == vd.NOT_RESOLVED  # ties decide nothing
    assert mf.compare_seeds(_values([1], [2]), "x", "A", "B")["verdict"] == vd.NOT_RESOLVED  # one seed
    assert mf.compare_seeds(_values([1], []), "x", "A", "B")["verdict"] == vd.NOT_RUN


def _frame(col="x", **per_loss):
    """Rows ``loss_label``, ``seed``, ``col`` from ``label=[per-seed values]``."""
    return pd.DataFrame([{"loss_label": lo, "seed": i, col: v} for lo, vals in per_loss.items()
                         for i, v in enumerate(vals)])


FL1, FL2 = mf.FIG3[1], mf.FIG3[2]


def test_near_one_is_a_majority_of_seeds_in_the_papers_band():
    assert mf.NEAR_ONE == 0.1 and mf.BASELINE_T_LOW == 2.0  # the paper's "0.9 and 1.1" and "2.0 to 2.8"
    assert mf.near_one_verdict([0.9, 1.1, 1.5]) == vd.HOLDS  # "mostly": 2 of 3
    assert mf.near_one_verdict([0.9, 1.3, 1.5]) == vd.DOES_NOT_HOLD
    assert mf.near_one_verdict([0.9, 1.3]) == vd.NOT_RESOLVED  # 1 of 2 is no majority
    assert mf.near_one_verdict([1.0]) == vd.NOT_RESOLVED and mf.near_one_verdict([]) == vd.NOT_RUN
    assert mf.near_one_verdict([0.8, 0.8], near=0.2) == vd.HOLDS


def test_baseline_temperature_from_the_papers_lower_end():
    assert mf.at_least_verdict([2.0, 2.3]) == vd.HOLDS
    assert mf.at_least_verdict([1.6, 1.9]) == vd.DOES_NOT_HOLD  # the book's old 1.5 would have said "holds"
    assert mf.at_least_verdict([1.6, 1.9], bound=1.5) == vd.HOLDS
    assert mf.at_least_verdict([0.2, 2.1]) == vd.NOT_RESOLVED
    assert mf.at_least_verdict([2.5]) == vd.NOT_RESOLVED and mf.at_least_verdict([]) == vd.NOT_RUN


def test_failed_losses_flag_a_network_near_chance():
    t = pd.DataFrame({"loss_label": [mf.CE, mf.CE, "MMCE", "MMCE"], "error": [0.1, 0.12, 0.8, 0.85]})
    assert mf.failed_losses(t, 10) == ["MMCE"]
    assert mf.failed_losses(t.assign(error=[0.1, 0.12, 0.3, 0.3]), 10) == []


def test_against_baseline_gates_a_loss_that_did_not_train():
    v = _frame(**{mf.CE: [3, 4], FL1: [1, 2], FL2: [5, 6]})
    verdict, ev = mf.against_baseline(v, "x", [FL1, FL2])
    assert verdict == vd.DOES_NOT_HOLD and list(ev["verdict"]) == [vd.HOLDS, vd.DOES_NOT_HOLD]
    assert list(ev["agree"]) == ["2 of 2", "0 of 2"] and ev["against"].iloc[0] == "3.000–4.000"
    # FL2 flagged: its part is not computed, and the claim is only partly tested
    verdict, ev = mf.against_baseline(v, "x", [FL1, FL2], failed=[FL2])
    assert verdict == vd.PARTLY_TESTED and list(ev["verdict"]) == [vd.HOLDS, vd.NOT_TRAINED]
    assert mf.against_baseline(v, "x", [FL1, FL2], failed=[mf.CE])[0] == vd.NOT_TRAINED
    assert mf.against_baseline(v, "x", [FL1], higher=True)[0] == vd.DOES_NOT_HOLD
    assert mf.against_baseline(v, "x", [mf.FL3])[0] == vd.NOT_RUN


def test_every_epoch_needs_every_epoch():
    h = pd.concat([_frame(**{mf.CE: [1, 1], FL1: [2, 2]}).assign(epoch=1),
                   _frame(**{mf.CE: [1, 1], FL1: [0, 3]}).assign(epoch=2)])
    verdict, ev = mf.every_epoch(h, "x", [FL1], higher=True)
    assert verdict == vd.NOT_RESOLVED and ev["agree"].iloc[0] == "1 of 2 epochs"
    h.loc[h["epoch"] == 2, "x"] = [1, 1, 2, 3]
    assert mf.every_epoch(h, "x", [FL1], higher=True)[0] == vd.HOLDS
    assert mf.every_epoch(h, "x", [FL1], higher=True, failed=[FL1])[0] == vd.NOT_TRAINED


def test_ordered_steps():
    v = _frame(**{FL1: [3, 3.1], FL2: [2, 2.1], mf.FL3: [1, 1.1]})
    verdict, ev = mf.ordered(v, "x", [FL1, FL2, mf.FL3])
    assert verdict == vd.HOLDS and len(ev) == 2
    v.loc[v["loss_label"] == mf.FL3, "x"] = [2.5, 2.6]  # gamma 3 worse than gamma 2 on every seed
    assert mf.ordered(v, "x", [FL1, FL2, mf.FL3])[0] == vd.DOES_NOT_HOLD
    assert mf.ordered(v, "x", [FL1, FL2, mf.FL3], failed=[FL2])[0] == vd.NOT_TRAINED
    assert mf.ordered(v[v["loss_label"] != FL1], "x", [FL1, FL2, mf.FL3])[0] == vd.NOT_RUN


def test_lowest_cases_is_a_majority_of_cases():
    brier = mf.TABLE1_COLUMNS[1]
    rows = {mf.FLSD53: [1, 1.1], mf.CE: [2, 2.1], brier: [3, 3.1]}
    t = _frame("a", **rows).merge(_frame("b", **rows)).merge(_frame("c", **rows))
    t = t.merge(_frame("d", **{mf.FLSD53: [2, 2], mf.CE: [1, 1], brier: [3, 3]}))
    verdict, ev = mf.lowest_cases(t, mf.FLSD53, [mf.CE, brier], ["a", "b", "c", "d"])
    assert verdict == vd.HOLDS  # 3 of 4 cases
    assert list(ev["verdict"]) == [vd.HOLDS] * 3 + [vd.DOES_NOT_HOLD] and ev["against"].iloc[3] == mf.CE
    assert mf.lowest_cases(t, mf.FLSD53, [mf.CE, brier], ["a", "d"])[0] == vd.NOT_RESOLVED  # 1 of 2
    assert mf.lowest_cases(t, mf.FLSD53, [mf.CE, brier], ["d"])[0] == vd.NOT_RESOLVED
    # a baseline that did not train is left out: at best partly tested
    assert mf.lowest_cases(t, mf.FLSD53, [mf.CE, brier], ["a", "b", "c"], failed=[brier])[0] == vd.PARTLY_TESTED
    assert mf.lowest_cases(t, mf.FLSD53, [mf.CE, brier], ["a"], failed=[mf.FLSD53])[0] == vd.NOT_TRAINED
    assert mf.lowest_cases(t, mf.FLSD53, ["MMCE"], ["a"])[0] == vd.NOT_RUN


def test_rise_and_rise_after_drop():
    h = pd.DataFrame({"run": ["r0"] * 4 + ["r1"] * 4, "loss_label": mf.CE, "seed": [0] * 4 + [1] * 4,
                      "epoch": [1, 2, 3, 4] * 2, "lr": [0.1, 0.1, 0.01, 0.01] * 2,
                      "test_ece": [0.05, 0.02, 0.03, 0.04, 0.05, 0.03, 0.02, 0.035]})
    r = mf.rise(h, "test_ece")
    assert r["rise"].tolist() == pytest.approx([0.02, 0.015])
    verdict, rises, epoch = mf.rise_after_drop(h, mf.CE)
    assert verdict == vd.HOLDS and epoch == 2 and rises["rise"].tolist() == pytest.approx([0.02, 0.005])
    h.loc[7, "test_ece"] = 0.01
    assert mf.rise_after_drop(h, mf.CE)[0] == vd.NOT_RESOLVED
    assert mf.rise_after_drop(h.assign(lr=0.1), mf.CE)[0] == vd.NOT_RUN  # no drop
    assert mf.rise_after_drop(h, mf.CE, failed=[mf.CE])[0] == vd.NOT_TRAINED


def test_falls_throughout_checks_every_quarter_on_every_seed():
    epochs = list(range(1, 10))
    fall = [1.0 - 0.1 * e for e in epochs]
    h = pd.DataFrame({"run": ["r0"] * 9 + ["r1"] * 9, "loss_label": mf.CE, "seed": [0] * 9 + [1] * 9,
                      "epoch": epochs * 2, "a": fall * 2, "b": fall * 2})
    verdict, ev = mf.falls_throughout(h, mf.CE, ["a", "b"])
    assert verdict == vd.HOLDS and ev["agree"].tolist() == ["8 of 8 steps fall"] * 2
    bump = h.copy()
    bump.loc[6, "b"] = 2.0  # seed 0, epoch 7: the 75 % mark is above the 50 % mark
    assert mf.falls_throughout(bump, mf.CE, ["a", "b"])[0] == vd.NOT_RESOLVED
    assert mf.falls_throughout(h.assign(a=h["a"][::-1].to_numpy()), mf.CE, ["a"])[0] == vd.DOES_NOT_HOLD
    assert mf.falls_throughout(h[h["epoch"] == 1], mf.CE, ["a"])[0] == vd.NOT_RESOLVED  # one epoch: no step
    assert mf.falls_throughout(h, mf.CE, ["a"], failed=[mf.CE])[0] == vd.NOT_TRAINED
    assert mf.falls_throughout(h, mf.FL3, ["a"])[0] == vd.NOT_RUN


def test_only_misclassified_rise():
    h = pd.DataFrame({"run": ["r0"] * 4 + ["r1"] * 4, "loss_label": mf.CE, "seed": [0] * 4 + [1] * 4,
                      "epoch": [1, 2, 3, 4] * 2, "lr": [0.1, 0.1, 0.01, 0.01] * 2,
                      "test_nll_correct": [0.5, 0.3, 0.2, 0.1] * 2, "test_nll_incorrect": [2.0, 1.5, 1.8, 2.5] * 2})
    verdict, ev = mf.only_misclassified_rise(h, mf.CE)
    assert verdict == vd.HOLDS and ev["part"].tolist() == ["test_nll_correct", "test_nll_incorrect"]
    h.loc[:3, "test_nll_correct"] = [0.5, 0.3, 0.4, 0.6]  # seed 0: the correct samples' NLL rises too
    assert mf.only_misclassified_rise(h, mf.CE)[0] == vd.NOT_RESOLVED
    assert mf.only_misclassified_rise(h, mf.CE, failed=[mf.CE])[0] == vd.NOT_TRAINED


def test_scaled_epochs_and_late_epochs():
    assert mf.scaled_epochs(18) == [1, 5, 10]
    assert mf.scaled_epochs(350) == [10, 100, 200]
    assert mf.scaled_epochs(1) == [1]
    with pytest.raises(ValueError, match="epochs"):
        mf.scaled_epochs(0)
    h = pd.DataFrame({"epoch": [1, 2, 3, 4], "lr": [0.1, 0.01, 0.001, 0.001]})
    assert mf.late_epochs(h) == [3, 4]


def _run(tmp_path: Path, name: str, *, subset: int, epochs: int = 2, train_logits: bool = True) -> Path:
    """A run folder: config, a history whose last epoch was evaluated on all 8 images, logits."""
    g = torch.Generator().manual_seed(len(name))
    d = tmp_path / "runs" / name
    d.mkdir(parents=True)
    runfolder.write_config(d, {"config": {"record_subset": subset}})
    blobs = {}
    for e in range(1, epochs + 1):
        blobs[e] = {f"{s}_{k}": v for s in ("val", "test", "train")
                    for k, v in (("logits", 3 * torch.randn(8, 3, generator=g)),
                                 ("labels", torch.randint(0, 3, (8,), generator=g)))}
        if not train_logits:
            blobs[e] = {k: v for k, v in blobs[e].items() if not k.startswith("train")}
        torch.save(blobs[e], d / f"logits_epoch_{e}.pt")
    torch.save(blobs[epochs], d / "logits.pt")
    hist = [1, 2, 3] + [0] * (len(GRAD_NORM_EDGES) - 4)
    records = [{"epoch": e, "lr": 0.1, "grad_norm_hist": hist, "grad_norm_quantiles": {"50": 0.5 * e}}
               for e in range(1, epochs + 1)]
    (d / "history.json").write_text(json.dumps({"grad_norm_edges": GRAD_NORM_EDGES, "records": records}))
    return d


def test_prefix_histories_recompute_the_full_epochs_on_the_subset(tmp_path):
    d = _run(tmp_path, "a", subset=4)
    h = pd.DataFrame({"run": ["a", "a"], "epoch": [1, 2], "test_n": [4, 8], "val_n": [4, 8],
                      "test_nll": [9.0, 9.0], "val_nll": [9.0, 9.0]})
    out = mf.prefix_histories(tmp_path, h)
    assert list(out["recomputed"]) == [False, True]
    blob = torch.load(d / "logits.pt")
    want = prediction_stats(blob["test_logits"][:4], blob["test_labels"][:4])
    assert out.loc[1, "test_nll"] == pytest.approx(want["nll"]) and out.loc[1, "test_n"] == 4
    assert out.loc[0, "test_nll"] == 9.0  # already on the subset: untouched
    # without record_subset nothing changes
    _run(tmp_path, "b", subset=0)
    assert not mf.prefix_histories(tmp_path, h.assign(run="b"))["recomputed"].any()


def test_final_stat_and_figures(tmp_path):
    d = _run(tmp_path, "a", subset=0)
    res = pd.DataFrame({"run": ["a", "a"], "loss_label": [mf.CE, mf.CE], "seed": [0, 0]})
    blob = torch.load(d / "logits.pt")
    got = mf.final_stat(tmp_path, res, "nll")
    assert len(got) == 1 and got["nll"].iloc[0] == pytest.approx(prediction_stats(blob["test_logits"],
                                                                                  blob["test_labels"])["nll"])
    fig, rows = mf.plot_train_reliability(tmp_path, "a", mf.CE)
    assert [r["epoch"] for r in rows] == [1, 2] and fig is not None
    assert 0 <= rows[0]["top_bin"] <= 100 and 0 <= rows[0]["accuracy"] <= 1
    fig, medians = mf.plot_grad_norm_hists(tmp_path, res, [mf.CE, mf.FL3], [1, 2])
    assert medians == {mf.CE: {1: 0.5, 2: 1.0}}  # FL3 has no run
    med = mf.grad_norm_medians(tmp_path, res, [2])
    assert med.to_dict("records") == [{"loss_label": mf.CE, "seed": 0, "epoch": 2, "median": 1.0}]
    _run(tmp_path, "c", subset=0, train_logits=False)
    assert mf.plot_train_reliability(tmp_path, "c", mf.CE) == (None, [])
    matplotlib.pyplot.close("all")


def test_confident_examples_regenerate_the_test_images(tmp_path):
    from focalcal.lab.data import FASHION_MNIST_CLASSES, make_loaders

    test = make_loaders("fashion_mnist", seed=3, subset={"train": 16, "val": 60, "test": 60}).test.dataset
    images, y = test.dataset.images[test.indices], test.dataset.targets[test.indices]
    rows = []
    for name, label, scale, temp in (("ce", mf.CE, 8.0, 2.0), ("fl", mf.FL3, 2.0, 1.0)):
        z = torch.zeros(60, 10, dtype=torch.float64)
        pred = torch.where(torch.arange(60) < 40, y, (y + 1) % 10)  # the last 20 misclassified by both
        z[torch.arange(60), pred] = scale * (1 + torch.arange(60, dtype=torch.float64) / 60)  # later: more confident
        d = tmp_path / "runs" / name
        d.mkdir(parents=True)
        torch.save({"val_logits": z.float(), "val_labels": y, "test_logits": z.float(), "test_labels": y},
                   d / "logits.pt")
        runfolder.write_config(d, {"config": {"dataset": "fashion_mnist", "seed": 3, "train_subset": 16,
                                              "eval_subset": 60}})
        rows.append({"run": name, "loss_label": label, "seed": 3, "temperature": temp})
    table = pd.DataFrame(rows)
    got_images, ex = mf.confident_examples(tmp_path, table, [mf.CE, mf.FL3], n=2)
    # the two most confident of each group under cross-entropy: test positions 39, 38 and 59, 58
    assert torch.equal(got_images, images[[39, 38, 59, 58]])
    assert ex["group"].tolist() == ["correct"] * 4 + ["misclassified"] * 4
    first = ex[(ex["image"] == 2) & (ex["loss_label"] == mf.CE)].iloc[0]
    assert first["label"] == int(y[59]) and first["predicted"] == (int(y[59]) + 1) % 10
    p = torch.softmax(torch.zeros(10, dtype=torch.float64).index_fill(0, torch.tensor(first["predicted"]),
                                                                     8.0 * (1 + 59 / 60)), 0)
    assert first["conf_pre"] == pytest.approx(float(p.max()), rel=1e-6)
    assert first["conf_post"] < first["conf_pre"]  # T = 2 softens
    assert first["label_name"] == FASHION_MNIST_CLASSES[int(y[59])]
    wide = mf.examples_table(ex)
    assert list(wide.columns) == ["image", "label", mf.CE, mf.FL3] and wide["image"].tolist()[0] == "#1"
    fig = mf.plot_examples(got_images, ex)
    assert [ax.get_title() for ax in fig.axes if ax.get_title()][0].startswith("#1: ")
    # no seed with every loss: nothing to show
    none, empty = mf.confident_examples(tmp_path, table.iloc[:1], [mf.CE, mf.FL3])
    assert none is None and empty.empty
