"""The verdicts of the experiment pages: one vocabulary and one set of rules for every page.

Each paper claim a page checks gets one of four verdicts (:data:`VERDICTS`): :data:`HOLDS`,
:data:`DOES_NOT_HOLD`, :data:`NOT_RESOLVED` ("not resolved at this scale": the seeds' spread
cannot decide it) or :data:`NOT_RUN` (the build lacks the runs it needs). The rules:

- :func:`paired`: seeds paired by number (same initial weights, same training images), one
  difference per pair;
- :func:`compare_ranges`: the seed ranges of two groups;
- :func:`combine`: one verdict for a claim made of parts (several losses, settings or scores);
- :func:`spread_text`: the mean and range over seeds (or the range alone) in prose.

Conventions shared by the rules: a claim is strict ("lower" means strictly lower), so a tie
counts against it; fewer than two seeds (or pairs) show no spread, so such a comparison is never
resolved either way; empty input is an error, not a verdict (the caller says :data:`NOT_RUN`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["HOLDS", "DOES_NOT_HOLD", "NOT_RESOLVED", "NOT_RUN", "VERDICTS", "paired", "compare_ranges",
           "combine", "spread_text"]

#: the claim holds on every seed (pair) or the seed ranges separate in its direction
HOLDS = "holds"
#: every seed (pair) contradicts the claim, or the ranges separate the other way
DOES_NOT_HOLD = "does not hold"
#: the seeds disagree, the ranges overlap, or fewer than two seeds show no spread
NOT_RESOLVED = "not resolved at this scale"
#: the build lacks the runs the claim needs
NOT_RUN = "not run in this build"
VERDICTS: tuple[str, ...] = (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED, NOT_RUN)


def _values(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    v = np.asarray(values, dtype=float).ravel()
    if v.size == 0:
        raise ValueError(f"{name} must hold at least one value")
    return v


def paired(differences: Sequence[float] | np.ndarray) -> str:
    """The claim "the first is lower than the second", seed by seed.

    ``differences``: per seed pair, the first value minus the second (1-D). :data:`HOLDS` when
    every difference is negative, :data:`DOES_NOT_HOLD` when none is (a zero difference counts
    against the claim), :data:`NOT_RESOLVED` when the pairs disagree or there are fewer than two.
    For a "higher" claim pass the negated differences.

    Raises
    ------
    ValueError
        ``differences`` is empty.
    """
    d = _values(differences, "differences")
    agree = int(np.sum(d < 0))
    if d.size < 2:
        return NOT_RESOLVED
    return HOLDS if agree == d.size else DOES_NOT_HOLD if agree == 0 else NOT_RESOLVED


def compare_ranges(lower: Sequence[float] | np.ndarray, higher: Sequence[float] | np.ndarray, *,
                   min_seeds: int = 2) -> str:
    """The claim "the values ``lower`` are below the values ``higher``", from the two seed ranges.

    :data:`HOLDS` when every value of ``higher`` is above every value of ``lower`` (the ranges
    separate in the claimed direction); :data:`DOES_NOT_HOLD` when every value of ``higher`` is
    at most every value of ``lower`` (they separate the other way, or meet at one value);
    :data:`NOT_RESOLVED` when they overlap otherwise, or when either side has fewer than
    ``min_seeds`` values (``min_seeds=1`` only describes how two ranges lie, e.g. one step of a
    trend, without judging the spread).

    Raises
    ------
    ValueError
        ``lower`` or ``higher`` is empty, or ``min_seeds < 1``.
    """
    a, b = _values(lower, "lower"), _values(higher, "higher")
    if min_seeds < 1:
        raise ValueError(f"min_seeds must be at least 1, got {min_seeds}")
    if min(a.size, b.size) < min_seeds:
        return NOT_RESOLVED
    if b.min() > a.max():
        return HOLDS
    if b.max() <= a.min():
        return DOES_NOT_HOLD
    return NOT_RESOLVED


def combine(verdicts: Sequence[str]) -> str:
    """One verdict for a claim made of parts (per loss, setting, score or half), all of which must hold.

    :data:`NOT_RUN` if no part was run; else :data:`DOES_NOT_HOLD` if any part that was run does
    not hold; :data:`HOLDS` if every part that was run holds; :data:`NOT_RESOLVED` otherwise.
    Parts that were not run are left out: the verdict speaks for the parts this build has (the
    pages list the parts, so a missing one is visible).

    Raises
    ------
    ValueError
        ``verdicts`` is empty or holds something other than :data:`VERDICTS`.
    """
    verdicts = list(verdicts)
    if not verdicts or set(verdicts) - set(VERDICTS):
        raise ValueError(f"verdicts must be a non-empty sequence of {list(VERDICTS)}; got {verdicts}")
    run = [v for v in verdicts if v != NOT_RUN]
    if not run:
        return NOT_RUN
    if DOES_NOT_HOLD in run:
        return DOES_NOT_HOLD
    return HOLDS if all(v == HOLDS for v in run) else NOT_RESOLVED


def spread_text(values: Sequence[float] | np.ndarray, *, scale: float = 1.0, digits: int = 2,
                mean: bool = True) -> str:
    """Per-seed values in prose, times ``scale`` (100 for percentages), ``digits`` decimals.

    ``mean=True``: ``"1.23 (0.98–1.50)"``, the mean and in brackets the range over seeds
    (``"1.23 (one seed)"`` for one value). ``mean=False``: the range alone, ``"0.98–1.50"``, one
    number where the rounded ends agree. Minus signs are true minus signs, so that
    ``"−0.10–0.20"`` reads as a range.

    Raises
    ------
    ValueError
        ``values`` is empty.
    """
    v = scale * _values(values, "values")

    def fmt(x: float) -> str:
        return f"{x:.{digits}f}".replace("-", "−")

    lo, hi = fmt(v.min()), fmt(v.max())
    if not mean:
        return lo if lo == hi else f"{lo}–{hi}"
    if v.size == 1:
        return f"{fmt(v.mean())} (one seed)"
    return f"{fmt(v.mean())} ({lo}–{hi})"
