"""The verdicts of the experiment pages: one vocabulary and one set of rules for every page.

Each paper claim a page checks gets one of six verdicts (:data:`VERDICTS`): :data:`HOLDS`,
:data:`DOES_NOT_HOLD`, :data:`NOT_RESOLVED` ("not resolved at this scale": the spread cannot
decide it), :data:`PARTLY_TESTED` (a claim of several parts, some of them not run or not trained,
none of the tested ones failing), :data:`NOT_TRAINED` (the network the claim is about did not
train: :func:`untrained`) or :data:`NOT_RUN` (the build lacks the runs it needs). The rules:

- :func:`paired`: seeds paired by number, one difference per pair, every pair must agree;
- :func:`compare_ranges`: the seed ranges of two groups must separate;
- :func:`majority`: "generally", "mostly", "in the majority of cases": more than half of the cases;
- :func:`every_step`: "monotonically", "always": every step of a trend, each step judged alone
  (:func:`falling_steps` gives the steps of a falling trend);
- :func:`combine`: one verdict for a claim made of parts, never dropping a part silently;
- :func:`untrained`: the failed-experiment rule, which no calibration verdict may ignore;
- :func:`spread_text`: the mean and range over seeds (or the range alone) in prose;
  :func:`seed_summary`: the same statistics of a table's columns, per group.

Conventions shared by the rules (one rule for every page): a claim is strict ("lower" means
strictly lower); a tie supports neither side, so a comparison decided only by ties is
:data:`NOT_RESOLVED`, never :data:`DOES_NOT_HOLD`; fewer than two seeds, pairs or networks show no
spread, so such a comparison is never resolved either way; empty input is an error, not a verdict
(the caller says :data:`NOT_RUN`). Every threshold a rule takes is named where it is used: from the
paper when the paper gives one, otherwise as the book's choice, with the verdict's sensitivity to it
shown on the page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = ["HOLDS", "DOES_NOT_HOLD", "NOT_RESOLVED", "PARTLY_TESTED", "NOT_TRAINED", "NOT_RUN", "VERDICTS",
           "TRAINED_FRACTION", "paired", "every_seed", "compare_ranges", "majority", "every_step", "falling_steps", "combine", "untested",
           "untrained", "gate", "spread_text", "seed_summary"]

#: the claim holds on every seed (pair) or the seed ranges separate in its direction
HOLDS = "holds"
#: every seed (pair) contradicts the claim, or the ranges separate the other way
DOES_NOT_HOLD = "does not hold"
#: the seeds disagree, the ranges overlap or meet, or fewer than two seeds show no spread
NOT_RESOLVED = "not resolved at this scale"
#: some parts of a multi-part claim were tested (none of them fails), others were not
PARTLY_TESTED = "partly tested"
#: the network the claim is about did not train (:func:`untrained`): no calibration verdict
NOT_TRAINED = "not tested: the network did not train"
#: the build lacks the runs the claim needs
NOT_RUN = "not run in this build"
VERDICTS: tuple[str, ...] = (HOLDS, DOES_NOT_HOLD, NOT_RESOLVED, PARTLY_TESTED, NOT_TRAINED, NOT_RUN)
#: the failed-experiment rule's threshold (the book's choice): a loss trained when each of its
#: networks' test accuracies covers at least this fraction of the way from chance (1/K) to the best
#: loss of its setting (its mean over seeds)
TRAINED_FRACTION = 0.5


def _values(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    v = np.asarray(values, dtype=float).ravel()
    if v.size == 0:
        raise ValueError(f"{name} must hold at least one value")
    return v


def paired(differences: Sequence[float] | np.ndarray) -> str:
    """The claim "the first is lower than the second", seed by seed.

    ``differences``: per seed pair, the first value minus the second (1-D). :data:`HOLDS` when
    every difference is negative, :data:`DOES_NOT_HOLD` when every difference is positive,
    :data:`NOT_RESOLVED` when the pairs disagree, any pair ties (a zero difference supports
    neither side) or there are fewer than two. For a "higher" claim pass the negated differences.

    Raises
    ------
    ValueError
        ``differences`` is empty.
    """
    d = _values(differences, "differences")
    if d.size < 2:
        return NOT_RESOLVED
    return HOLDS if bool(np.all(d < 0)) else DOES_NOT_HOLD if bool(np.all(d > 0)) else NOT_RESOLVED


def every_seed(hits: Sequence[bool] | np.ndarray) -> str:
    """The claim "on every seed", from one yes/no per seed: :data:`HOLDS` when every seed agrees,
    :data:`DOES_NOT_HOLD` when none does, :data:`NOT_RESOLVED` when they disagree or there are
    fewer than two seeds (as :func:`paired` decides for differences).

    Raises
    ------
    ValueError
        ``hits`` is empty.
    """
    h = np.asarray(_values(hits, "hits"), dtype=bool)
    if h.size < 2:
        return NOT_RESOLVED
    return HOLDS if bool(h.all()) else DOES_NOT_HOLD if not bool(h.any()) else NOT_RESOLVED


def compare_ranges(lower: Sequence[float] | np.ndarray, higher: Sequence[float] | np.ndarray, *,
                   min_seeds: int = 2) -> str:
    """The claim "the values ``lower`` are below the values ``higher``", from the two seed ranges.

    :data:`HOLDS` when every value of ``higher`` is above every value of ``lower`` (the ranges
    separate in the claimed direction); :data:`DOES_NOT_HOLD` when every value of ``higher`` is
    below every value of ``lower`` (they separate the other way); :data:`NOT_RESOLVED` when they
    overlap or meet (a tie supports neither side), or when either side has fewer than
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
    if b.max() < a.min():
        return DOES_NOT_HOLD
    return NOT_RESOLVED


def majority(hits: Sequence[bool] | np.ndarray, *, decided: Sequence[bool] | np.ndarray | None = None) -> str:
    """A claim worded "generally", "mostly" or "in the majority of cases", over cases (steps, seeds, networks).

    ``hits``: per case, whether the case agrees with the claim; ``decided`` (default: every case):
    whether the case could be decided at all (e.g. its seed ranges separate). :data:`HOLDS` when
    more than half of all cases agree, :data:`DOES_NOT_HOLD` when more than half disagree (decided
    against), :data:`NOT_RESOLVED` otherwise or with fewer than two cases. The majority is of all
    cases, decided or not, so undecided cases cannot make a claim hold.

    Raises
    ------
    ValueError
        ``hits`` is empty, or ``decided`` has another length.
    """
    h = np.asarray(_values(hits, "hits"), dtype=bool)
    d = np.ones_like(h) if decided is None else np.asarray(decided, dtype=bool).ravel()
    if d.shape != h.shape:
        raise ValueError(f"decided must have one entry per case ({h.size}), got {d.size}")
    if h.size < 2:
        return NOT_RESOLVED
    agree, disagree = int(np.sum(h & d)), int(np.sum(~h & d))
    return HOLDS if agree > h.size / 2 else DOES_NOT_HOLD if disagree > h.size / 2 else NOT_RESOLVED


def every_step(steps: Sequence[str]) -> str:
    """A claim worded "monotonically" or "always", judged on every step of a trend.

    ``steps``: per step, the verdict of that step alone (:func:`compare_ranges` or :func:`paired`).
    :data:`HOLDS` when every step holds, :data:`DOES_NOT_HOLD` when any step goes the other way,
    :data:`NOT_RESOLVED` otherwise (some step cannot be resolved). Never judged on the two ends.

    Raises
    ------
    ValueError
        ``steps`` is empty or holds something other than :data:`VERDICTS`.
    """
    steps = _checked(steps, "steps")
    if DOES_NOT_HOLD in steps:
        return DOES_NOT_HOLD
    return HOLDS if all(v == HOLDS for v in steps) else NOT_RESOLVED


def falling_steps(levels: Sequence[Sequence[float] | np.ndarray]) -> list[str]:
    """Per step between neighbouring levels of a trend (``levels`` in the order of the
    parameter, each the values over seeds at that level), the verdict that the value falls:
    :func:`compare_ranges` of the later level below the earlier one. For :func:`every_step`.

    Raises
    ------
    ValueError
        fewer than two levels, or an empty level.
    """
    levels = [_values(v, "levels") for v in levels]
    if len(levels) < 2:
        raise ValueError(f"levels must hold at least two levels of the parameter, got {len(levels)}")
    return [compare_ranges(b, a) for a, b in zip(levels[:-1], levels[1:])]


def _checked(verdicts, name: str) -> list[str]:
    verdicts = list(verdicts)
    if not verdicts or set(verdicts) - set(VERDICTS):
        raise ValueError(f"{name} must be a non-empty sequence of {list(VERDICTS)}; got {verdicts}")
    return verdicts


def combine(verdicts: Sequence[str]) -> str:
    """One verdict for a claim made of parts (per loss, setting, score or half), all of which must hold.

    A part that was run and fails decides the claim: :data:`DOES_NOT_HOLD`. Otherwise a part that
    was not run or not trained (:data:`NOT_RUN`, :data:`NOT_TRAINED`) or only partly tested makes
    the claim :data:`PARTLY_TESTED`, never :data:`HOLDS`: no part is dropped silently
    (:func:`untested` names them for the page). With every part tested, :data:`HOLDS` if all hold
    and :data:`NOT_RESOLVED` otherwise. With no part tested: :data:`NOT_TRAINED` if some part did
    not train, else :data:`NOT_RUN`.

    Raises
    ------
    ValueError
        ``verdicts`` is empty or holds something other than :data:`VERDICTS`.
    """
    verdicts = _checked(verdicts, "verdicts")
    missing = {NOT_RUN, NOT_TRAINED}
    tested = [v for v in verdicts if v not in missing]
    if not tested:
        return NOT_TRAINED if NOT_TRAINED in verdicts else NOT_RUN
    if DOES_NOT_HOLD in tested:
        return DOES_NOT_HOLD
    if len(tested) < len(verdicts) or PARTLY_TESTED in tested:
        return PARTLY_TESTED
    return HOLDS if all(v == HOLDS for v in tested) else NOT_RESOLVED


def untested(parts: Mapping[str, str]) -> list[str]:
    """The names of the parts (name -> verdict) that were not run, did not train or were partly tested."""
    return [name for name, v in parts.items() if v in (NOT_RUN, NOT_TRAINED, PARTLY_TESTED)]


def untrained(accuracy: Mapping[str, float | Sequence[float]], n_classes: int, *,
              fraction: float = TRAINED_FRACTION) -> list[str]:
    """The failed-experiment rule: the losses whose networks did not train.

    ``accuracy`` maps each loss of one setting to the test accuracies in [0, 1] of its networks
    (one per seed; a single number is one network). The bar is ``1/K + fraction * (best - 1/K)``,
    the point ``fraction`` of the way from chance to the best loss's mean accuracy (the book's
    rule; ``fraction`` is :data:`TRAINED_FRACTION`, one half). A loss did not train when *one* of
    its networks falls short of the bar: a near-uniform network can score a low ECE, and a mean
    over seeds would hide a dead seed among trained ones, so no calibration or selective-risk
    verdict is computed for such a loss (pages pass its comparisons through :func:`gate`).

    Raises
    ------
    ValueError
        ``accuracy`` is empty, maps a loss to no value or holds a value outside [0, 1],
        ``n_classes < 2`` or ``fraction`` outside (0, 1).
    """
    if not accuracy:
        raise ValueError("accuracy must map at least one loss to its test accuracies")
    acc = {k: np.atleast_1d(np.asarray(v, dtype=float)).ravel() for k, v in accuracy.items()}
    if any(v.size == 0 or not np.all((v >= 0.0) & (v <= 1.0)) for v in acc.values()):
        shown = {k: v.tolist() for k, v in acc.items()}
        raise ValueError("accuracy must map every loss to values in [0, 1] (fractions, not percent); "
                         f"got {shown}")
    if int(n_classes) < 2:
        raise ValueError(f"n_classes must be at least 2, got {n_classes}")
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction}")
    chance = 1.0 / int(n_classes)
    bar = chance + fraction * (max(float(v.mean()) for v in acc.values()) - chance)
    return [k for k, v in acc.items() if float(v.min()) < bar]


def gate(losses: Sequence[str], failed: Sequence[str], verdict: Callable[[], str]) -> str:
    """``verdict()`` unless one of ``losses`` is in ``failed`` (:func:`untrained`): then
    :data:`NOT_TRAINED`, and ``verdict`` is never called."""
    if set(losses) & set(failed):
        return NOT_TRAINED
    return verdict()


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


def seed_summary(table, columns: Sequence[str], by: Sequence[str] = ("loss_label",),
                 order: Sequence[object] | None = None):
    """Mean, standard deviation, least and largest value over seeds of ``columns`` per group of ``by``.

    Columns ``<c>_mean``, ``<c>_sd``, ``<c>_min``, ``<c>_max`` for every ``c`` and ``seeds`` (the
    group's rows); indexed by ``by``, groups in the order they first appear, or, with ``order``, in
    that order (the groups of a one-key ``by`` that are present; others left out).
    """
    g = table.groupby(list(by), sort=False)
    out = g[list(columns)].agg(["mean", "std", "min", "max"])
    out.columns = [f"{c}_{'sd' if s == 'std' else s}" for c, s in out.columns]
    out["seeds"] = g.size()
    return out if order is None else out.loc[[k for k in order if k in out.index]]
