"""The experiment pages' shared verdicts and rules (:mod:`focalcal_book.verdicts`)."""

from __future__ import annotations

import numpy as np
import pytest

from focalcal_book import verdicts as vd
from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_RUN, NOT_TRAINED, PARTLY_TESTED


def test_the_six_verdicts_are_the_pages_words():
    assert vd.VERDICTS == ("holds", "does not hold", "not resolved at this scale", "partly tested",
                           "not tested: the network did not train", "not run in this build")


@pytest.mark.parametrize("differences, verdict", [
    ([-1.0, -0.1], HOLDS),                 # every pair agrees
    ([1.0, 2.0], DOES_NOT_HOLD),           # every pair disagrees
    ([-1.0, 1.0], NOT_RESOLVED),           # the pairs disagree among themselves
    ([-1.0], NOT_RESOLVED),                # one pair: no spread
    ([3.0], NOT_RESOLVED),
    ([0.0, 0.0], NOT_RESOLVED),            # ties support neither side
    ([1.0, 0.0], NOT_RESOLVED),
    ([-1.0, 0.0], NOT_RESOLVED),           # one tie among agreeing pairs
    (np.array([-0.5, -0.2, -0.1]), HOLDS),
])
def test_paired(differences, verdict):
    assert vd.paired(differences) == verdict


@pytest.mark.parametrize("hits, verdict", [
    ([True, True, True], HOLDS), ([False, False], DOES_NOT_HOLD), ([True, False, True], NOT_RESOLVED),
    ([True], NOT_RESOLVED),              # one seed: no spread to judge
])
def test_every_seed(hits, verdict):
    assert vd.every_seed(hits) == verdict


def test_every_seed_needs_a_seed():
    with pytest.raises(ValueError, match="hits"):
        vd.every_seed([])


@pytest.mark.parametrize("lower, higher, verdict", [
    ([0, 0.5], [1, 2], HOLDS),             # the ranges separate in the claimed direction
    ([1, 2], [0, 0.5], DOES_NOT_HOLD),     # ... the other way
    ([1, 2], [0, 1], NOT_RESOLVED),        # they meet at one value: a tie decides nothing
    ([0, 0], [0, 0], NOT_RESOLVED),        # ties everywhere
    ([1, 2], [0, 0.9], DOES_NOT_HOLD),
    ([0, 1], [0.5, 2], NOT_RESOLVED),      # overlap
    ([0], [3], NOT_RESOLVED),              # one seed: no spread to judge
    ([0, 1], [3], NOT_RESOLVED),
])
def test_compare_ranges(lower, higher, verdict):
    assert vd.compare_ranges(lower, higher) == verdict


def test_compare_ranges_min_seeds_describes_single_values():
    assert vd.compare_ranges([0], [3], min_seeds=1) == HOLDS
    assert vd.compare_ranges([3], [3], min_seeds=1) == NOT_RESOLVED
    assert vd.compare_ranges([3], [2], min_seeds=1) == DOES_NOT_HOLD
    assert vd.compare_ranges([0, 1], [3, 4], min_seeds=3) == NOT_RESOLVED
    with pytest.raises(ValueError, match="min_seeds"):
        vd.compare_ranges([0], [3], min_seeds=0)


@pytest.mark.parametrize("verdicts, verdict", [
    ([HOLDS, HOLDS], HOLDS),
    ([HOLDS, NOT_RESOLVED], NOT_RESOLVED),
    ([HOLDS, DOES_NOT_HOLD, NOT_RESOLVED], DOES_NOT_HOLD),  # one run part fails: the claim fails
    ([DOES_NOT_HOLD, NOT_RESOLVED], DOES_NOT_HOLD),
    ([HOLDS, HOLDS, NOT_RUN], PARTLY_TESTED),               # a part not run is never dropped
    ([HOLDS, NOT_TRAINED], PARTLY_TESTED),                  # nor one that did not train
    ([NOT_RESOLVED, NOT_RUN], PARTLY_TESTED),
    ([HOLDS, PARTLY_TESTED], PARTLY_TESTED),
    ([NOT_RUN, DOES_NOT_HOLD], DOES_NOT_HOLD),              # a tested part that fails decides
    ([NOT_TRAINED, DOES_NOT_HOLD], DOES_NOT_HOLD),
    ([NOT_RUN, NOT_RUN], NOT_RUN),                          # nothing run
    ([NOT_RUN, NOT_TRAINED], NOT_TRAINED),
    ([NOT_RESOLVED], NOT_RESOLVED),
    ((v for v in [HOLDS]), HOLDS),                          # any iterable
])
def test_combine(verdicts, verdict):
    assert vd.combine(verdicts) == verdict


@pytest.mark.parametrize("bad", [[], ["maybe"], [HOLDS, None]])
def test_combine_rejects_empty_and_unknown(bad):
    with pytest.raises(ValueError, match="verdicts"):
        vd.combine(bad)


def test_spread_text_mean_and_range():
    assert vd.spread_text([0.01, 0.03, 0.02], scale=100) == "2.00 (1.00–3.00)"
    assert vd.spread_text([0.62, 0.58, 0.66]) == "0.62 (0.58–0.66)"
    assert vd.spread_text([0.5], digits=1) == "0.5 (one seed)"
    assert vd.spread_text([-0.01, 0.01], scale=100) == "0.00 (−1.00–1.00)"  # true minus signs
    assert vd.spread_text([2.0, 2.0]) == "2.00 (2.00–2.00)"                  # a tie is still two seeds


def test_spread_text_range_alone():
    assert vd.spread_text([0.011, 0.0125], scale=100, mean=False) == "1.10–1.25"
    assert vd.spread_text([0.02], scale=100, mean=False) == "2.00"
    assert vd.spread_text([1.001, 1.002], mean=False) == "1.00"             # the rounded ends agree
    assert vd.spread_text([-0.3, 0.2], digits=1, mean=False) == "−0.3–0.2"


@pytest.mark.parametrize("call, name", [
    (lambda: vd.paired([]), "differences"),
    (lambda: vd.compare_ranges([], [1.0]), "lower"),
    (lambda: vd.compare_ranges([1.0], []), "higher"),
    (lambda: vd.spread_text([]), "values"),
])
def test_empty_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_untested_names_the_parts_left_out():
    parts = {"FL-3": HOLDS, "FLSD-53": NOT_RUN, "MMCE": NOT_TRAINED, "LS": NOT_RESOLVED}
    assert vd.untested(parts) == ["FLSD-53", "MMCE"]


@pytest.mark.parametrize("hits, decided, verdict", [
    ([True, True, False], None, HOLDS),                     # 2 of 3: a majority
    ([True, False], None, NOT_RESOLVED),                    # half is not a majority
    ([False, False, True], None, DOES_NOT_HOLD),
    ([True, True, False, False, False], [1, 1, 0, 0, 0], NOT_RESOLVED),   # undecided cases count
    ([True, True, True, False], [1, 1, 1, 0], HOLDS),
    ([True], None, NOT_RESOLVED),                           # one case: no majority
])
def test_majority(hits, decided, verdict):
    assert vd.majority(hits, decided=decided) == verdict


def test_majority_rejects_bad_input():
    with pytest.raises(ValueError, match="hits"):
        vd.majority([])
    with pytest.raises(ValueError, match="decided"):
        vd.majority([True, False], decided=[True])


@pytest.mark.parametrize("steps, verdict", [
    ([HOLDS, HOLDS, HOLDS], HOLDS),
    ([HOLDS, NOT_RESOLVED, HOLDS], NOT_RESOLVED),           # one unresolved step: not resolved
    ([HOLDS, DOES_NOT_HOLD, HOLDS], DOES_NOT_HOLD),         # the ends agreeing does not rescue it
])
def test_every_step(steps, verdict):
    assert vd.every_step(steps) == verdict
    with pytest.raises(ValueError, match="steps"):
        vd.every_step([])


def test_untrained_flags_a_network_near_chance():
    acc = {"CE": 0.88, "FL-3": 0.87, "selective-risk": 0.29, "MMCE": 0.60}
    # chance 0.1, best 0.88: the bar is 0.1 + 0.5 * 0.78 = 0.49
    assert vd.untrained(acc, 10) == ["selective-risk"]
    assert vd.untrained(acc, 10, fraction=0.75) == ["selective-risk", "MMCE"]
    assert vd.untrained({"CE": 0.88}, 10) == []
    for bad, match in [({}, "accuracy"), ({"CE": 88.0}, "accuracy"), ({"CE": 0.8}, "n_classes")]:
        with pytest.raises(ValueError, match=match):
            vd.untrained(bad, 10 if match != "n_classes" else 1)
    with pytest.raises(ValueError, match="fraction"):
        vd.untrained(acc, 10, fraction=1.0)


def test_untrained_judges_every_network_not_a_mean_over_seeds():
    # KDE-XE's mean (0.61) clears the bar (0.1 + 0.5 * (0.88 - 0.1) = 0.49), its seed 1 does not
    per_seed = {"CE": [0.88, 0.87, 0.89], "KDE-XE": [0.85, 0.104, 0.87], "FL-3": [0.86, 0.87, 0.88]}
    assert vd.untrained(per_seed, 10) == ["KDE-XE"]
    assert vd.untrained({k: float(np.mean(v)) for k, v in per_seed.items()}, 10) == []
    assert vd.untrained({"CE": [0.88], "one": 0.80}, 10) == []  # a number is one network
    for bad in ({"CE": []}, {"CE": [0.9, 1.2]}, {"CE": [0.9, float("nan")]}):
        with pytest.raises(ValueError, match="accuracy"):
            vd.untrained(bad, 10)


def test_gate_computes_no_verdict_for_a_network_that_did_not_train():
    def never():
        raise AssertionError("a calibration verdict was computed for a network that did not train")

    assert vd.gate(["selective-risk", "CE"], ["selective-risk"], never) == NOT_TRAINED
    assert vd.gate(["FL-3", "CE"], ["selective-risk"], lambda: HOLDS) == HOLDS


def test_falling_steps_judge_each_step_alone():
    levels = [[5.0, 5.2], [4.0, 4.1], [4.05, 4.2], [1.0, 1.1]]
    assert vd.falling_steps(levels) == [HOLDS, NOT_RESOLVED, HOLDS]
    assert vd.every_step(vd.falling_steps(levels)) == NOT_RESOLVED        # the ends alone would say "holds"
    assert vd.falling_steps([[1.0, 1.1], [2.0, 2.1]]) == [DOES_NOT_HOLD]
    with pytest.raises(ValueError, match="levels"):
        vd.falling_steps([[1.0]])
