"""focalcal_book.which_calibrator: the tables, verdicts and figure of the page *Which calibrator?*."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from focalcal.lab.results import calibrators as C
from focalcal_book import which_calibrator as wc
from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED

matplotlib.use("Agg")


def fake_result(rng, *, psi: bool = False, strong: bool = True) -> dict:
    """One network's result: "Dirichlet" best and "uncalibrated" worst on every metric when
    ``strong``, the rest in random order; Dirichlet's accuracy 1 point higher, significantly."""
    methods = [m for m in C.METHODS if psi or m != "Psi"]
    rows, ivs = {}, {}
    for i, m in enumerate(methods):
        base = 1.0 + rng.random()
        if strong and m == "Dirichlet":
            base = 0.0
        if strong and m == "uncalibrated":
            base = 5.0
        rows[m] = {k: base for k in wc.RANKED}
        rows[m]["accuracy"] = 0.9 + (0.01 if m == "Dirichlet" else 0.0)
        ivs[m] = {k: {"estimate": 0.01 if (m == "Dirichlet" and k == "accuracy") else 0.0, "low": -1.0, "high": 1.0,
                      "verdict": "better" if m == "Dirichlet" else "indistinguishable"}
                  for k in C.BOOTSTRAP_METRICS}
    return {"rows": rows, "intervals": ivs}


@pytest.fixture
def field():
    rng = np.random.default_rng(0)
    return {f"net{i}": fake_result(rng, psi=i < 3) for i in range(30)}


def test_cd_verdict_and_winner_by_hand():
    ranks = {"a": 1.0, "b": 2.0, "c": 4.5}
    test = {"p_value": 0.01, "critical_difference": 1.5}
    assert wc.cd_verdict(ranks, test, "a", "c") == HOLDS
    assert wc.cd_verdict(ranks, test, "c", "a") == DOES_NOT_HOLD
    assert wc.cd_verdict(ranks, test, "a", "b") == NOT_RESOLVED
    assert wc.winner(ranks, test) == (NOT_RESOLVED, ["a", "b"])
    assert wc.winner({"a": 1.0, "b": 3.0}, test) == ("a", ["a"])
    # Friedman does not reject (or cannot test): nothing is resolved, every method is in the group
    assert wc.cd_verdict(ranks, {"p_value": 0.2, "critical_difference": 0.1}, "a", "c") == NOT_RESOLVED
    assert wc.winner(ranks, {"p_value": float("nan"), "critical_difference": 0.1}) == (NOT_RESOLVED, ["a", "b", "c"])


def test_tables_of_a_field(field):
    ranks = wc.rank_table(field)
    assert "Psi" not in set(ranks["method"])  # missing on most networks: not ranked
    assert list(ranks.columns) == ["method", *wc.SLUGS.values()]
    assert ranks.set_index("method").loc["Dirichlet", "nll"] == 1.0
    tests = wc.tests_table(field)
    nll = tests.set_index("metric").loc["NLL"]
    assert nll["winner"] == "Dirichlet" and nll["n_group"] == 1 and nll["p_value"] < 0.05
    acc = tests.set_index("metric").loc["accuracy"]
    assert acc["best"] == "Dirichlet"
    table = wc.metric_table({"a": field, "b": field}, "ECE (mass)")
    row = table.set_index("method").loc["Dirichlet"]
    assert row["a_mean"] == 0.0 and row["a_boot"] == "30 / 0 / 0" and row["b_rank"] == 1.0
    assert table.set_index("method").loc["TS (NLL)", "a_mean"] > 100  # in percent
    assert wc.metric_table({"a": field}, "smooth ECE").set_index("method").loc["Dirichlet", "a_boot"] == "–"


def test_accuracy_worth_and_psi(field):
    acc = wc.accuracy_table({"a": field}).set_index("method")
    assert set(acc.index) == set(C.METHODS) - set(C.ARGMAX_PRESERVING)
    assert acc.loc["Dirichlet", "a_mean"] == pytest.approx(1.0) and acc.loc["Dirichlet", "a_higher"] == 30
    worth = wc.worth_table(field)
    assert set(worth["metric"]) == set(wc.CALIBRATION)
    assert (worth[worth["method"] == "Dirichlet"]["verdict"] == HOLDS).all()
    assert wc.field_verdict(worth) == HOLDS
    summary = wc.worth_summary(worth).set_index("method")
    assert summary.loc["Dirichlet", "better"] == ", ".join(wc.CALIBRATION)
    assert summary.loc["Dirichlet", "worse"] == "none" and summary.loc["Dirichlet", "unresolved"] == 0
    assert wc.field_verdict(worth.assign(verdict=DOES_NOT_HOLD)) == DOES_NOT_HOLD
    assert wc.field_verdict(worth.assign(verdict=[HOLDS] + [NOT_RESOLVED] * (len(worth) - 1))) == HOLDS
    with pytest.raises(ValueError):
        wc.field_verdict(worth.iloc[:0])
    psi = wc.psi_table({"a": field}).iloc[0]
    assert psi["networks"] == 3 and psi["nll"] == "0 / 3 / 0"


def test_a_weak_field_resolves_nothing():
    rng = np.random.default_rng(1)
    weak = {f"n{i}": fake_result(rng, strong=False) for i in range(3)}
    tests = wc.tests_table(weak)
    assert (tests["winner"] == NOT_RESOLVED).all()
    glue = wc.winner_glue(tests, "rel")
    assert glue["group_rel_nll"] == tests.set_index("slug").loc["nll", "n_group"]
    assert "not resolved" in glue["win_rel_nll"].data


def test_cd_figure_draws_every_metric_and_method(field):
    fig, axes = wc.cd_figure(field, "a field")
    assert axes.size == len(wc.RANKED)
    assert len(axes.ravel()[0].lines) == len(C.common_methods(wc.tables(field)))
    assert all(ax.get_xlabel() for ax in axes[-1])
    matplotlib.pyplot.close(fig)


def test_page_glue_and_headers(field):
    for r in field.values():
        r.update(n_fit=5000, n_eval=10000, n_classes=10)
    next(iter(field.values()))["n_eval"] = 5000
    assert wc.scale(field, "rel") == {"rel_fit": "5,000", "rel_eval": "5,000–10,000", "rel_classes": "10"}
    assert list(wc.metric_headers({"rel": 0, "sw": 0})) == ["method", "rel_mean", "rel_rank", "rel_boot",
                                                            "sw_mean", "sw_rank", "sw_boot"]
    assert wc.metric_formats("NLL")["sw_mean"] == ".3f" and wc.metric_formats("NLL")["sw_rank"] == ".1f"
    assert set(wc.accuracy_headers({"sw": 0})) == {"method", "sw_mean", "sw_min", "sw_max", "sw_higher", "sw_lower"}
    # the fake field ranks every method but Dirichlet and uncalibrated at random: no focal TS verdict
    assert wc.kk_verdict(field) == NOT_RESOLVED
    assert wc.bootstrap_glue({"rel": field}, "Dirichlet", "NLL") == {"boot_rel_better": 30, "boot_rel_worse": 0}
    glue = wc.verdict_glue({"rel": wc.worth_table(field)})
    assert glue["worth_rel"].data == f"**{HOLDS}**"


def test_kk_verdict_holds_when_focal_ts_ranks_far_better():
    rng = np.random.default_rng(2)
    field = {}
    for i in range(40):
        r = fake_result(rng)
        r["rows"]["focal TS (ECE)"]["ECE (mass)"] = 0.5
        r["rows"]["TS (ECE)"]["ECE (mass)"] = 4.0
        field[f"n{i}"] = r
    assert wc.kk_verdict(field) == HOLDS


def test_warning_table_counts_networks_per_fit_and_kind():
    fields = {"rel": {"a": {"warnings": ["UserWarning: DirichletCalibration.fit: L-BFGS stopped after 1000 iterations",
                                         "SearchRangeWarning: FocalTemperatureScaling.fit: the selected gamma_ev = 5 "
                                         "is at the upper edge of its search range"]},
                      "b": {"warnings": []}},
              "sw": {"c": {"warnings": ["UserWarning: DirichletCalibration.fit: L-BFGS stopped after 1000 iterations"]}}}
    table = wc.warning_table(fields).set_index(["fit", "kind"])
    assert table.loc[("DirichletCalibration.fit", "iteration limit")].tolist() == [1, 1]
    assert table.loc[("FocalTemperatureScaling.fit", "edge of the search range")].tolist() == [1, 0]
    assert list(wc.warning_table({"sw": {"c": {"warnings": []}}}).columns) == ["fit", "kind", "sw"]
    assert wc.warning_headers({"sw": 0}) == {"fit": "fit", "kind": "warning", "sw": "sweep networks"}


def test_scale_of_a_field_without_networks():
    # a shrunk build can leave the sweep's field empty (no network trained): the page then shows "–"
    assert wc.scale({}, "sw") == {"sw_fit": "–", "sw_eval": "–", "sw_classes": "–"}
