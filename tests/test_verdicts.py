"""The experiment pages' shared verdicts and rules (:mod:`focalcal_book.verdicts`)."""

from __future__ import annotations

import numpy as np
import pytest

from focalcal_book import verdicts as vd
from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, NOT_RUN


def test_the_four_verdicts_are_the_pages_words():
    assert vd.VERDICTS == ("holds", "does not hold", "not resolved at this scale", "not run in this build")


@pytest.mark.parametrize("differences, verdict", [
    ([-1.0, -0.1], HOLDS),                 # every pair agrees
    ([1.0, 2.0], DOES_NOT_HOLD),           # every pair disagrees
    ([-1.0, 1.0], NOT_RESOLVED),           # the pairs disagree among themselves
    ([-1.0], NOT_RESOLVED),                # one pair: no spread
    ([3.0], NOT_RESOLVED),
    ([0.0, 0.0], DOES_NOT_HOLD),           # ties: not lower
    ([-1.0, 0.0], NOT_RESOLVED),           # one tie among agreeing pairs
    (np.array([-0.5, -0.2, -0.1]), HOLDS),
])
def test_paired(differences, verdict):
    assert vd.paired(differences) == verdict


@pytest.mark.parametrize("lower, higher, verdict", [
    ([0, 0.5], [1, 2], HOLDS),             # the ranges separate in the claimed direction
    ([1, 2], [0, 0.5], DOES_NOT_HOLD),     # ... the other way
    ([1, 2], [0, 1], DOES_NOT_HOLD),       # they meet at one value: not above
    ([0, 0], [0, 0], DOES_NOT_HOLD),       # ties everywhere
    ([0, 1], [0.5, 2], NOT_RESOLVED),      # overlap
    ([0], [3], NOT_RESOLVED),              # one seed: no spread to judge
    ([0, 1], [3], NOT_RESOLVED),
])
def test_compare_ranges(lower, higher, verdict):
    assert vd.compare_ranges(lower, higher) == verdict


def test_compare_ranges_min_seeds_describes_single_values():
    assert vd.compare_ranges([0], [3], min_seeds=1) == HOLDS
    assert vd.compare_ranges([3], [3], min_seeds=1) == DOES_NOT_HOLD
    assert vd.compare_ranges([0, 1], [3, 4], min_seeds=3) == NOT_RESOLVED
    with pytest.raises(ValueError, match="min_seeds"):
        vd.compare_ranges([0], [3], min_seeds=0)


@pytest.mark.parametrize("verdicts, verdict", [
    ([HOLDS, HOLDS], HOLDS),
    ([HOLDS, NOT_RESOLVED], NOT_RESOLVED),
    ([HOLDS, DOES_NOT_HOLD, NOT_RESOLVED], DOES_NOT_HOLD),  # one run part fails: the claim fails
    ([DOES_NOT_HOLD, NOT_RESOLVED], DOES_NOT_HOLD),
    ([HOLDS, HOLDS, NOT_RUN], HOLDS),                       # parts not run are left out
    ([NOT_RUN, DOES_NOT_HOLD], DOES_NOT_HOLD),
    ([NOT_RUN, NOT_RUN], NOT_RUN),                          # nothing run
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
