"""Helpers of the page *Which calibrator?*: every post-hoc calibrator of
:data:`focalcal.lab.results.calibrators.METHODS` on two fields of networks, ranked per metric.

The computation is in the lab (:mod:`focalcal.lab.results.calibrators`: fits, metrics, ranks,
Friedman/Nemenyi, paired bootstrap, the per-network cache); here the page's tables, verdicts and
figure:

- :func:`released_results` / :func:`sweep_results`: one cached result per network, and :func:`warm`,
  which fills the cache before the book is built (the fits of every method on 77 networks take
  longer than a cell may run);
- :func:`rank_table` (the headline: mean rank per method and metric), :func:`metric_table` (means,
  mean ranks and bootstrap counts of one metric on both fields), :func:`warning_table` (the fits
  that warned), :func:`tests_table` (Friedman and
  Nemenyi per metric, the best method, the methods within the critical difference of it and the
  winner), :func:`accuracy_table` (the methods that can change the argmax), :func:`psi_table`;
- verdicts in the book's words (:mod:`focalcal_book.verdicts`): :func:`cd_verdict` (one method's
  mean rank below another's by more than the Nemenyi critical difference), :func:`winner`,
  :func:`worth_table` (is an accuracy-changing method better than every argmax-preserving one?),
  :func:`worth_summary` and :func:`field_verdict`;
- :func:`cd_figure`: the critical-difference diagram of every metric on one field.

Psi applies only to a network trained with a focal loss of one ``gamma``; it is missing on the
others, so it is left out of the ranks (which need every method on every network) and compared
with the baseline on its own networks (:func:`psi_table`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from focalcal.lab import runfolder
from focalcal.lab.results import calibrators as C
from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED

__all__ = ["RANKED", "SLUGS", "SCALE", "ALPHA", "CALIBRATION", "FIELD_TITLES", "METRIC_TITLES", "RANK_HEADERS",
           "RANK_FORMATS", "TEST_HEADERS", "TEST_FORMATS", "WORTH_HEADERS", "PSI_HEADERS", "ACCURACY_FORMATS",
           "KK_RULE", "scale", "metric_headers", "metric_formats", "accuracy_headers", "kk_verdict", "bootstrap_glue",
           "verdict_glue", "warning_table", "warning_headers", "cache_dir", "warm", "released_results", "sweep_results", "tables",
           "method_colors", "rank_table", "metric_table", "tests_table", "cd_verdict", "winner", "accuracy_table",
           "worth_table", "worth_summary", "psi_table", "field_verdict", "winner_glue", "cd_figure"]

#: the metrics the page ranks: the calibration metrics, accuracy and the time a fit takes
RANKED: tuple[str, ...] = (*C.METRICS, "fit seconds")
#: a metric's short key (glue names, column names)
SLUGS: dict[str, str] = {"ECE (width)": "ece_width", "ECE (mass)": "ece_mass", "smooth ECE": "smooth_ece",
                         "classwise ECE": "cw_ece", "NLL": "nll", "Brier": "brier", "accuracy": "accuracy",
                         "fit seconds": "fit_seconds"}
#: shown in percent
SCALE: dict[str, float] = {"ECE (width)": 100.0, "ECE (mass)": 100.0, "smooth ECE": 100.0,
                           "classwise ECE": 100.0, "accuracy": 100.0}
#: the level of the Friedman test and of the Nemenyi critical difference (the book's choice)
ALPHA = 0.05
#: the calibration metrics, on which an accuracy-changing method could be worth its accuracy change
CALIBRATION = ("ECE (width)", "ECE (mass)", "smooth ECE", "classwise ECE", "NLL", "Brier")
#: the two fields of networks, by the key a page uses for them
FIELD_TITLES = {"rel": "released networks", "sw": "sweep networks"}
#: a metric's caption over its table
METRIC_TITLES = {"ECE (width)": "ECE, 15 equal-width bins (%)", "ECE (mass)": "ECE, 15 equal-mass bins (%)",
                 "smooth ECE": "smooth ECE (%)", "classwise ECE": "classwise ECE, 15 equal-width bins (%)",
                 "NLL": "NLL (nats)", "Brier": "Brier score", "accuracy": "accuracy (%)",
                 "fit seconds": "fit time (seconds)"}
#: the headline table's headers and formats (:func:`rank_table`)
RANK_HEADERS = {"method": "method", "ece_width": "ECE width", "ece_mass": "ECE mass", "smooth_ece": "smooth ECE",
                "cw_ece": "cw ECE", "nll": "NLL", "brier": "Brier", "accuracy": "acc.", "fit_seconds": "fit time"}
RANK_FORMATS = {k: ".1f" for k in RANK_HEADERS if k != "method"}
#: :func:`tests_table`'s headers and formats
TEST_HEADERS = {"metric": "metric", "statistic": "Friedman $\\chi^2$", "p_value": "p", "cd": "CD",
                "best": "best", "best_rank": "its rank", "group": "not resolved from it", "winner": "winner"}
TEST_FORMATS = {"statistic": ".0f", "p_value": ".1e", "cd": ".2f", "best_rank": ".1f"}
#: :func:`worth_summary`'s headers
WORTH_HEADERS = {"method": "method", "better": "better than every argmax-preserving method on",
                 "worse": "the best argmax-preserving method better on", "unresolved": "unresolved"}
#: :func:`psi_table`'s headers
PSI_HEADERS = {"field": "field", "networks": "networks", "ece_width": "ECE width", "ece_mass": "ECE mass",
               "nll": "NLL", "brier": "Brier", "accuracy": "accuracy"}
ACCURACY_FORMATS = {k: "+.2f" for k in ("rel_mean", "rel_min", "rel_max", "sw_mean", "sw_min", "sw_max")}
#: the rule of the focal TS against TS verdict (:func:`kk_verdict`)
KK_RULE = ("on the test ECE (15 equal-mass bins), focal TS (ECE)'s mean rank over networks below TS (ECE)'s by "
           "more than the Nemenyi critical difference of all ranked methods, after Friedman's test rejects at 0.05 "
           "(Demšar 2006; the level is the book's choice); above by more: does not hold")


def cache_dir() -> Path | None:
    """``<book root>/_build/calibrator-cache`` (``None`` outside the book: nothing is cached)."""
    from focalcal_book.released import book_root

    root = book_root()
    return None if root is None else root / "_build" / "calibrator-cache"


def scale(results: Mapping[str, Mapping[str, Any]], field: str) -> dict[str, str]:
    """The size of a field for the page's scale paragraph: ``<field>_fit``, ``<field>_eval`` (images
    per network) and ``<field>_classes``, each one number or the range over networks."""
    if not results:  # no network in this field (e.g. none of the sweep's trained in a shrunk build)
        return {f"{field}_{k}": "–" for k in ("fit", "eval", "classes")}

    def span(key: str) -> str:
        lo, hi = min(int(r[key]) for r in results.values()), max(int(r[key]) for r in results.values())
        return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"

    return {f"{field}_fit": span("n_fit"), f"{field}_eval": span("n_eval"), f"{field}_classes": span("n_classes")}


def metric_headers(fields: Mapping[str, Any]) -> dict[str, str]:
    """:func:`metric_table`'s headers for the fields present."""
    out = {"method": "method"}
    for f in fields:
        out |= {f"{f}_mean": f"{FIELD_TITLES[f].split()[0]}: mean", f"{f}_rank": "rank",
                f"{f}_boot": "vs TS (NLL)"}
    return out


def metric_formats(metric: str) -> dict[str, str]:
    """:func:`metric_table`'s number formats for ``metric``."""
    digits = ".3f" if metric in ("NLL", "Brier") else ".2f"
    return {f"{f}_{c}": (digits if c == "mean" else ".1f") for f in FIELD_TITLES for c in ("mean", "rank")}


def accuracy_headers(fields: Mapping[str, Any]) -> dict[str, str]:
    """:func:`accuracy_table`'s headers for the fields present."""
    out = {"method": "method"}
    for f in fields:
        word = FIELD_TITLES[f].split()[0]
        out |= {f"{f}_mean": f"{word}: mean", f"{f}_min": "min", f"{f}_max": "max", f"{f}_higher": "higher",
                f"{f}_lower": "lower"}
    return out


def released_results(names: Sequence[str] | None = None, *, cache: str | Path | None = None,
                     n_resamples: int = 1000) -> dict[str, dict[str, Any]]:
    """:func:`~focalcal.lab.results.calibrators.released_result` of every released network (default: all 17)."""
    from focalcal.lab.data import RELEASED

    return {n: C.released_result(n, cache=cache, n_resamples=n_resamples) for n in (names or RELEASED)}


def sweep_results(runs: str | Path, run_ids: Sequence[str], *, cache: str | Path | None = None,
                  n_resamples: int = 1000) -> dict[str, dict[str, Any]]:
    """:func:`~focalcal.lab.results.calibrators.run_result` of every run of ``run_ids`` in the sweep folder ``runs``."""
    return {r: C.run_result(runfolder.run_path(runs, r), cache=cache, n_resamples=n_resamples)
            for r in dict.fromkeys(run_ids)}


def _one(task: tuple[str, str, str | None]) -> str:
    import torch

    torch.set_num_threads(1)  # the fits are small: one thread is faster than several that contend
    kind, where, cache = task
    if kind == "released":
        C.released_result(where, cache=cache)
    else:
        C.run_result(where, cache=cache)
    return where


def warm(runs: str | Path | None = None, *, cache: str | Path | None = None, jobs: int = 1) -> list[str]:
    """Fill the page's cache (``make calibrator-cache``) outside the book's execution, whose cells
    time out: every released network whose logits are here, and every run of the role
    ``comparison`` of the first setting of the sweep folder ``runs`` (default
    :func:`focalcal.lab.results.runs_dir`), in ``jobs`` processes. Returns what it computed or read."""
    from concurrent.futures import ProcessPoolExecutor

    from focalcal.lab import results
    from focalcal_book.released import local_networks

    cache = str(cache or cache_dir())
    tasks = [("released", name, cache) for name in local_networks()]
    runs = Path(runs or results.runs_dir())
    chosen = results.runs_for(runs, "comparison", results.load_results(runs), setting="first")
    tasks += [("run", str(runfolder.run_path(runs, r)), cache) for r in dict.fromkeys(chosen["run"])]
    with ProcessPoolExecutor(max_workers=max(1, int(jobs))) as pool:
        return list(pool.map(_one, tasks))


def tables(results: Mapping[str, Mapping[str, Any]]) -> list[dict[str, dict[str, float]]]:
    """The per-network ``rows`` (method -> metric -> value) of ``results``, for the rank functions."""
    return [r["rows"] for r in results.values()]


def method_colors() -> dict[str, Any]:
    """One colour per method of :data:`~focalcal.lab.results.calibrators.METHODS` (matplotlib's
    ``tab20``, the same on every figure)."""
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    return {m: cmap(i % 20) for i, m in enumerate(C.METHODS)}


def rank_table(results: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Mean rank (1 = best) of every method common to all networks, one column per metric of :data:`RANKED`."""
    t = tables(results)
    out = pd.DataFrame({SLUGS[k]: C.mean_ranks(t, k) for k in RANKED})
    return out.rename_axis("method").reset_index()


def _counts(results: Mapping[str, Mapping[str, Any]], method: str, metric: str) -> str:
    if metric not in C.BOOTSTRAP_METRICS:
        return "–"
    words = [r["intervals"][method][metric]["verdict"] for r in results.values() if method in r["intervals"]]
    if not words:
        return "–"
    return f"{words.count('better')} / {words.count('indistinguishable')} / {words.count('worse')}"


def metric_table(fields: Mapping[str, Mapping[str, Mapping[str, Any]]], metric: str) -> pd.DataFrame:
    """One metric on every field (name -> results): per method common to all networks, the mean over
    networks (in percent where :data:`SCALE` says so), the mean rank, and for the metrics of
    :data:`~focalcal.lab.results.calibrators.BOOTSTRAP_METRICS` the networks on which its paired
    bootstrap interval against the baseline is better / indistinguishable / worse. Columns
    ``<field>_mean``, ``<field>_rank``, ``<field>_boot``."""
    out: dict[str, dict[str, Any]] = {}
    for field, results in fields.items():
        t = tables(results)
        ranks = C.mean_ranks(t, metric)
        for m in ranks:
            row = out.setdefault(m, {"method": m})
            row[f"{field}_mean"] = SCALE.get(metric, 1.0) * float(np.mean([x[m][metric] for x in t]))
            row[f"{field}_rank"] = ranks[m]
            row[f"{field}_boot"] = _counts(results, m, metric)
    return pd.DataFrame([out[m] for m in C.METHODS if m in out])


def cd_verdict(ranks: Mapping[str, float], test: Mapping[str, float], a: str, b: str, *,
               alpha: float = ALPHA) -> str:
    """The claim "``a`` ranks better than ``b``" by the Nemenyi test: :data:`HOLDS` when Friedman's
    test rejects at ``alpha`` and ``a``'s mean rank is below ``b``'s by more than the critical
    difference, :data:`DOES_NOT_HOLD` when it is above by more, else :data:`NOT_RESOLVED`
    (Demšar 2006: no post-hoc test where Friedman's does not reject)."""
    p, cd = test["p_value"], test["critical_difference"]
    if not p < alpha:  # NaN: nothing to test
        return NOT_RESOLVED
    if ranks[a] + cd < ranks[b]:
        return HOLDS
    if ranks[b] + cd < ranks[a]:
        return DOES_NOT_HOLD
    return NOT_RESOLVED


def winner(ranks: Mapping[str, float], test: Mapping[str, float], *, alpha: float = ALPHA) -> tuple[str, list[str]]:
    """The method with the best mean rank when it beats every other by the Nemenyi test
    (:func:`cd_verdict`), else :data:`NOT_RESOLVED`; and the methods not resolved from the best
    (within the critical difference of it, or all where Friedman's test does not reject), best first."""
    order = sorted(ranks, key=ranks.get)
    best = order[0]
    group = [m for m in order if m == best or cd_verdict(ranks, test, best, m, alpha=alpha) != HOLDS]
    return (best if group == [best] else NOT_RESOLVED), group


def tests_table(results: Mapping[str, Mapping[str, Any]], *, alpha: float = ALPHA) -> pd.DataFrame:
    """Per metric of :data:`RANKED`: Friedman's statistic and p-value, the Nemenyi critical difference,
    the best mean rank and its method, the methods within the critical difference of it and the winner."""
    t = tables(results)
    rows = []
    for k in RANKED:
        ranks, test = C.mean_ranks(t, k), C.friedman_nemenyi(t, k, alpha=alpha)
        won, group = winner(ranks, test, alpha=alpha)
        rows.append({"metric": k, "slug": SLUGS[k], "statistic": test["statistic"], "p_value": test["p_value"],
                     "cd": test["critical_difference"], "best": group[0], "best_rank": ranks[group[0]],
                     "n_group": len(group), "group": ", ".join(group), "winner": won})
    return pd.DataFrame(rows)


def accuracy_table(fields: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> pd.DataFrame:
    """The methods that can change the argmax: per field, the mean accuracy change against the
    baseline (which keeps the network's accuracy) in percentage points, its range over networks, and
    the networks where the paired bootstrap finds it higher / lower."""
    out: dict[str, dict[str, Any]] = {}
    for field, results in fields.items():
        for m in C.METHODS:
            if m in C.ARGMAX_PRESERVING:
                continue
            ivs = [r["intervals"][m]["accuracy"] for r in results.values()]
            d = 100 * np.array([iv["estimate"] for iv in ivs])
            row = out.setdefault(m, {"method": m})
            row[f"{field}_mean"], row[f"{field}_min"], row[f"{field}_max"] = d.mean(), d.min(), d.max()
            row[f"{field}_higher"] = sum(iv["verdict"] == "better" for iv in ivs)
            row[f"{field}_lower"] = sum(iv["verdict"] == "worse" for iv in ivs)
    return pd.DataFrame(list(out.values()))


def worth_table(results: Mapping[str, Mapping[str, Any]], *, alpha: float = ALPHA) -> pd.DataFrame:
    """Per method that can change the argmax and per calibration metric: :func:`cd_verdict` of
    "it ranks better than the best argmax-preserving method" (the one with the best mean rank on
    that metric), and that method. One row per (method, metric)."""
    t = tables(results)
    rows = []
    for k in CALIBRATION:
        ranks, test = C.mean_ranks(t, k), C.friedman_nemenyi(t, k, alpha=alpha)
        keep = min((m for m in ranks if m in C.ARGMAX_PRESERVING), key=ranks.get)
        for m in ranks:
            if m not in C.ARGMAX_PRESERVING:
                rows.append({"method": m, "metric": k, "rank": ranks[m], "preserving": keep,
                             "preserving_rank": ranks[keep], "verdict": cd_verdict(ranks, test, m, keep, alpha=alpha)})
    return pd.DataFrame(rows)


def worth_summary(worth: pd.DataFrame) -> pd.DataFrame:
    """:func:`worth_table` per method: the metrics on which it ranks better than every
    argmax-preserving method (``better``), those on which the best argmax-preserving method ranks
    better than it (``worse``), both by the Nemenyi test, and the count of the rest (``unresolved``)."""
    rows = []
    for m, grp in worth.groupby("method", sort=False):
        rows.append({"method": m, "better": ", ".join(grp.loc[grp["verdict"] == HOLDS, "metric"]) or "none",
                     "worse": ", ".join(grp.loc[grp["verdict"] == DOES_NOT_HOLD, "metric"]) or "none",
                     "unresolved": int((grp["verdict"] == NOT_RESOLVED).sum())})
    return pd.DataFrame(rows)


def field_verdict(worth: pd.DataFrame) -> str:
    """Whether some accuracy-changing method is worth it on some metric: :data:`HOLDS` when one
    (method, metric) pair of :func:`worth_table` holds, :data:`DOES_NOT_HOLD` when every pair does
    not hold, else :data:`NOT_RESOLVED`."""
    words = list(worth["verdict"])
    if not words:
        raise ValueError("worth must hold at least one (method, metric) pair")
    if HOLDS in words:
        return HOLDS
    return DOES_NOT_HOLD if all(w == DOES_NOT_HOLD for w in words) else NOT_RESOLVED


def psi_table(fields: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> pd.DataFrame:
    """Psi against the baseline on the networks where it applies: per field and bootstrap metric,
    the networks where Psi is better / indistinguishable / worse; ``networks``: how many it applies to."""
    rows = []
    for field, results in fields.items():
        have = {n: r for n, r in results.items() if "Psi" in r["intervals"]}
        rows.append({"field": FIELD_TITLES.get(field, field), "networks": len(have),
                     **{SLUGS[k]: _counts(have, "Psi", k) for k in C.BOOTSTRAP_METRICS}})
    return pd.DataFrame(rows)


def kk_verdict(results: Mapping[str, Mapping[str, Any]], *, alpha: float = ALPHA) -> str:
    """Komisarenko & Kull's focal TS against TS on one field (:data:`KK_RULE`): :func:`cd_verdict`
    of "focal TS (ECE) ranks better than TS (ECE)" on the equal-mass ECE."""
    t = tables(results)
    return cd_verdict(C.mean_ranks(t, "ECE (mass)"), C.friedman_nemenyi(t, "ECE (mass)", alpha=alpha),
                      "focal TS (ECE)", "TS (ECE)", alpha=alpha)


def bootstrap_glue(fields: Mapping[str, Mapping[str, Mapping[str, Any]]], method: str, metric: str) -> dict[str, int]:
    """``boot_<field>_better`` and ``boot_<field>_worse``: the networks of each field on which
    ``method``'s paired bootstrap interval against the baseline on ``metric`` is better / worse."""
    out = {}
    for field, results in fields.items():
        words = [r["intervals"][method][metric]["verdict"] for r in results.values()]
        out[f"boot_{field}_better"], out[f"boot_{field}_worse"] = words.count("better"), words.count("worse")
    return out


def verdict_glue(worth: Mapping[str, pd.DataFrame]) -> dict[str, Any]:
    """``worth_<field>``: :func:`field_verdict` of each field's :func:`worth_table`, in bold."""
    from IPython.display import Markdown

    return {f"worth_{field}": Markdown(f"**{field_verdict(t)}**") for field, t in worth.items()}


def warning_table(fields: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> pd.DataFrame:
    """The warnings the fits raised (``network_result``'s ``warnings``): per fitting routine and kind
    (an optimiser stopped at its iteration limit, a parameter at the edge of its search range, other)
    the networks of each field on which it warned. Columns ``fit``, ``kind`` and one per field."""
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for field, results in fields.items():
        for r in results.values():
            for w in dict.fromkeys(_warning_key(w) for w in r.get("warnings", [])):
                counts.setdefault(w, {f: 0 for f in fields})[field] += 1
    return pd.DataFrame([{"fit": k[0], "kind": k[1], **v} for k, v in sorted(counts.items())],
                        columns=["fit", "kind", *fields])


def warning_headers(fields: Mapping[str, Any]) -> dict[str, str]:
    """:func:`warning_table`'s headers for the fields present."""
    return {"fit": "fit", "kind": "warning", **{f: FIELD_TITLES[f] for f in fields}}


def _warning_key(message: str) -> tuple[str, str]:
    parts = message.split(": ")
    caller = parts[1] if len(parts) > 2 else parts[0]
    kind = ("iteration limit" if "iterations" in message else "edge of the search range" if "edge" in message
            else "other")
    return caller, kind


def winner_glue(tests: pd.DataFrame, field: str) -> dict[str, Any]:
    """The glue values of a :func:`tests_table` for the decision guide: per metric slug
    ``win_<field>_<slug>`` (the winner or the verdict word, in bold), ``best_<field>_<slug>`` (the
    best-ranked method) and ``group_<field>_<slug>`` (how many methods are within the critical
    difference of it)."""
    from IPython.display import Markdown

    out: dict[str, Any] = {}
    for r in tests.itertuples(index=False):
        out[f"win_{field}_{r.slug}"] = Markdown(f"**{r.winner}**")
        out[f"best_{field}_{r.slug}"] = r.best
        out[f"group_{field}_{r.slug}"] = int(r.n_group)
    return out


def cd_figure(results: Mapping[str, Mapping[str, Any]], title: str, *, alpha: float = ALPHA):
    """The critical-difference diagram of every metric of :data:`RANKED` on one field: per metric a
    panel with each method's mean rank (one colour per method, the same in every panel), and a grey
    band from the best mean rank to the best plus the Nemenyi critical difference: a method whose
    dot lies in the band is not resolved from the best (no band where Friedman's test does not reject)."""
    import matplotlib.pyplot as plt

    t = tables(results)
    colors = method_colors()
    names = C.common_methods(t)
    fig, axes = plt.subplots(len(RANKED) // 2, 2, figsize=(8.2, 1.75 * len(RANKED) // 2 + 1.6), sharex=True)
    k = len(names)
    for ax, metric in zip(axes.ravel(), RANKED):
        ranks, test = C.mean_ranks(t, metric), C.friedman_nemenyi(t, metric, alpha=alpha)
        best = min(ranks.values())
        if test["p_value"] < alpha:
            ax.axvspan(best, best + test["critical_difference"], color="0.85", lw=0)
        for i, m in enumerate(names):
            ax.plot(ranks[m], k - i, "o", color=colors[m], ms=6, label=m)
        ax.set_title(metric)
        ax.set_yticks([])
        ax.set_ylim(0, k + 1)
        ax.set_xlim(0.5, k + 0.5)
        ax.grid(axis="y", visible=False)
    for ax in axes[-1]:
        ax.set_xlabel("mean rank (1 = best)")
    for ax in axes[:, 0]:
        ax.set_ylabel("method")
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    fig.suptitle(title)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, frameon=False)
    fig.tight_layout()
    return fig, axes
