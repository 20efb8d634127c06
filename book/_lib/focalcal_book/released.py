"""Helpers of the "Released models" pages: the data check, the cache, comparisons with the papers'
printed numbers, verdicts, and the figures.

The protocols themselves are in the lab (:mod:`focalcal.lab.results.released`); the papers' numbers
in :mod:`focalcal_book.printed`. Here:

- :func:`data_check` loads every file the pages need (or downloads it) and, when that is impossible,
  shows the note a reader without the data sees instead of the numbers;
- :func:`cache_dir`: ``_build/released-cache`` of the book, where the deterministic rows are kept
  (:func:`warm` fills it in parallel before the build);
- :func:`compare` / :func:`comparison` / :func:`comparison_grid`: a computed value against the printed
  one, to the printed rounding ("exact"), within 0.01 ("close") or not ("differs"), shown as a
  coloured table;
- :func:`loss_verdicts`: the focal TS vs TS verdicts per training loss;
- figures: :func:`forest_plot`, :func:`reliability_row`, :func:`aurc_plot`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd


from focalcal import plotting
from focalcal.lab.data import RELEASED, DataUnavailableError, released_path
from focalcal_book.verdicts import DOES_NOT_HOLD, HOLDS, NOT_RESOLVED, combine

__all__ = ["NOTE", "VERDICT_COLORS", "MUKHOTI_COLUMNS", "MUKHOTI_CODE_COLUMNS", "MUKHOTI_HEADERS", "ZHOU_COLUMNS", "ZHOU_HEADERS", "book_root", "cache_dir", "local_networks", "warm", "data_check", "network_label", "compare",
           "comparison", "comparison_grid", "counts", "kk_summary", "KK_SUMMARY_HEADERS", "KK_SUMMARY_FORMATS", "KK_CHOICE_GAINS", "SELECTION_HEADERS",
           "SELECTION_FORMATS", "compared_with", "loss_verdicts", "forest_plot",
           "reliability_row", "aurc_plot", "pp", "confidence_gap"]

#: the sentence a page shows instead of its numbers when the logits are neither local nor downloadable
NOTE = ("**The released networks' logits are not available on this machine** ({err}). Set "
        "`FOCALCAL_LOGITS_ROOT` to a directory holding `mukhoti-pretrained-logits/` and "
        "`cifar10-resnet50-logits/` (e.g. `../shared/data`), or build with network access, to see "
        "this page's numbers and figures.")
#: background of a compared cell, by verdict (with a symbol, so the table reads in grey print too)
VERDICT_COLORS = {"exact": "#dff3e4", "close": "#fff1c2", "differs": "#fbd5d2"}
_SYMBOL = {"exact": "✓", "close": "≈", "differs": "✗"}

_PCT = ("ece_pre", "ece_post", "adaece_pre", "adaece_post", "error", "top1", "top5", "nll_pre", "nll_post",
        "mce_pre", "mce_post",
        "s99_pre", "s99_acc_pre", "s99_post", "s99_acc_post")
#: Mukhoti et al.'s printed quantities -> (column of ``mukhoti_table``, scale to the printed unit: %)
MUKHOTI_COLUMNS: dict[str, tuple[str, float]] = {"temperature": ("temperature", 1.0),
                                                  "temperature_adaece": ("temperature", 1.0),
                                                  **{q: (q, 100.0) for q in _PCT}}
#: the same, with the AdaECE as Mukhoti et al.'s released code computes it
MUKHOTI_CODE_COLUMNS: dict[str, tuple[str, float]] = {**MUKHOTI_COLUMNS, "adaece_pre": ("adaece_code_pre", 100.0),
                                                       "adaece_post": ("adaece_code_post", 100.0)}
#: column headers of the comparison tables, by group of Mukhoti et al.'s tables
MUKHOTI_HEADERS: dict[str, dict[str, str]] = {
    "tables 1, 2, 4": {"temperature": "T", "ece_pre": "ECE pre T", "ece_post": "ECE post T",
                       "adaece_pre": "AdaECE pre T", "adaece_post": "AdaECE post T", "error": "error"},
    "tables 9-12": {"nll_pre": "NLL pre T", "nll_post": "NLL post T", "mce_pre": "MCE pre T",
                    "mce_post": "MCE post T"},
    "table 8": {"top1": "top-1 accuracy", "top5": "top-5 accuracy"},
    "table 13": {"s99_pre": "|S99| pre T", "s99_acc_pre": "accuracy on S99 pre T", "s99_post": "|S99| post T",
                 "s99_acc_post": "accuracy on S99 post T"},
    "adaece": {"temperature_adaece": "T", "adaece_pre": "AdaECE pre T", "adaece_post": "AdaECE post T"},
}

#: Zhou et al.'s printed quantities -> (column of ``zhou_table``, scale: % and "x 10^2" alike)
ZHOU_COLUMNS: dict[str, tuple[str, float]] = {
    "accuracy": ("accuracy", 100.0), "ece": ("ece_raw", 100.0), "cwece_raw": ("cwece_raw", 100.0),
    "cwece_ts": ("cwece_ts", 100.0), "temperature_cw": ("temperature", 1.0), "adaece_raw": ("adaece_raw", 100.0),
    "adaece_ts": ("adaece_ts", 100.0), "temperature_ada": ("temperature", 1.0)}
ZHOU_HEADERS: dict[str, str] = {"accuracy": "accuracy", "ece": "ECE", "cwece_raw": "cwECE", "cwece_ts": "cwECE, TS",
                                "temperature_cw": "T", "adaece_raw": "AdaECE", "adaece_ts": "AdaECE, TS",
                                "temperature_ada": "T (App. Table 4)"}


def book_root(start: str | Path | None = None) -> Path | None:
    """The repository root above ``start`` (default: the working directory): the folder with ``_toc.yml``."""
    here = Path(start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "_toc.yml").is_file():
            return d
    return None


def cache_dir() -> Path | None:
    """``<book root>/_build/released-cache`` (``None`` outside the book: nothing is cached)."""
    root = book_root()
    return None if root is None else root / "_build" / "released-cache"


def local_networks() -> list[str]:
    """The released networks whose every file is here (or downloadable), in registry order."""
    names = []
    for name, net in RELEASED.items():
        try:
            [released_path(f) for fs in net.files.values() for f in fs]
        except DataUnavailableError:
            continue
        names.append(name)
    return names


def _warm_one(task: tuple[str, str, str]) -> str:
    from focalcal.lab.results import released as protocols

    kind, name, cache = task
    if kind == "kk":
        protocols.kk_tables([name], cache=cache)
    elif kind == "mukhoti":
        protocols.mukhoti_table([name], cache=cache)
    else:
        protocols.zhou_table([name], cache=cache, paper_protocol=kind == "zhou-paper")
    return f"{kind} {name}"


def warm(*, jobs: int = 1) -> list[str]:
    """Fill :func:`cache_dir` before the book executes its pages (``make calibrator-cache``): the
    rows of the three released-network pages, one table of one network per task, in ``jobs``
    processes (the pages then read them; cold, K&K's page alone took 80 s in one process). Networks
    whose files are not local are left to their page (which shows :data:`NOTE`). Returns the tasks."""
    from concurrent.futures import ProcessPoolExecutor

    cache = str(cache_dir())
    tasks = []
    for name in local_networks():
        net = RELEASED[name]
        tasks += [("kk", name, cache), ("zhou", name, cache)]
        tasks += [("mukhoti", name, cache)] if net.source == "mukhoti2020" else [("zhou-paper", name, cache)]
    tasks.sort(key=lambda t: t[0] != "kk")  # the longest first
    with ProcessPoolExecutor(max_workers=max(1, int(jobs))) as pool:
        return list(pool.map(_warm_one, tasks))


def data_check(names: Iterable[str] | None = None, splits: Mapping[str, Sequence[str]] | None = None) -> bool:
    """Whether every file of ``names`` (default: all released networks) is local or downloadable.

    On failure the page's note (:data:`NOTE`) is displayed and ``False`` returned; nothing raises.
    ``splits`` restricts a network to some of its splits.
    """
    from IPython.display import Markdown, display

    try:
        for name in names or RELEASED:
            net = RELEASED[name]
            for split in (splits or {}).get(name, net.splits):
                for f in net.files[split]:
                    released_path(f)
    except DataUnavailableError as err:
        display(Markdown(NOTE.format(err=str(err).replace("`", "'"))))
        return False
    return True


def network_label(name: str, *, loss: bool = True) -> str:
    """``"CIFAR-10 ResNet-50, Brier"`` (the registry's label) or without the loss; Zhou et al.'s runs
    are marked "(Zhou)" to tell their ResNet-50 from Mukhoti et al.'s."""
    net = RELEASED[name]
    text = net.label if loss else net.label.rsplit(",", 1)[0]
    return text.replace("ResNet-50", "ResNet-50 (Zhou)", 1) if net.source == "zhou2025" else text


def pp(value: float) -> str:
    """A fraction as percentage points with two decimals and a true minus sign."""
    return f"{100 * value:+.2f}".replace("-", "−")


def confidence_gap(logits: Any, labels: Any) -> float:
    """Mean top-class confidence minus accuracy of ``logits`` (a fraction; > 0: over-confident)."""
    import torch

    p = torch.softmax(torch.as_tensor(logits, dtype=torch.float64), dim=-1)
    conf, pred = p.max(dim=-1)
    return float(conf.mean() - (pred == torch.as_tensor(labels)).double().mean())


# --------------------------------------------------------------------------------------------
# computed against printed
# --------------------------------------------------------------------------------------------

def compare(ours: float, printed: str) -> str:
    """``"exact"`` when ``ours`` rounded to the decimals of ``printed`` equals it, ``"close"`` when
    within 0.01 of it, else ``"differs"`` (NaN: ``"differs"``)."""
    if ours is None or (isinstance(ours, float) and math.isnan(ours)):
        return "differs"
    d = len(printed.split(".", 1)[1]) if "." in printed else 0
    value = float(printed)
    if abs(round(float(ours), d) - value) < 0.5 * 10 ** -(d + 3):
        return "exact"
    return "close" if abs(float(ours) - value) <= 0.01 + 1e-12 else "differs"


def comparison(computed: pd.DataFrame, printed: Mapping[str, Mapping[str, tuple[str, str]]],
               columns: Mapping[str, tuple[str, float]]) -> pd.DataFrame:
    """Every printed number beside the computed one: one row per (network, quantity).

    Parameters
    ----------
    computed : DataFrame
        One row per network (column ``network``), as :func:`focalcal.lab.results.released.mukhoti_table`.
    printed : mapping
        network -> quantity -> (printed text, source key), as :data:`focalcal_book.printed.MUKHOTI`.
    columns : mapping
        quantity -> (column of ``computed``, scale to the printed unit, e.g. 100 for %).

    Returns
    -------
    DataFrame
        ``network``, ``quantity``, ``printed`` (text), ``source``, ``ours`` (in the printed unit),
        ``verdict`` (:func:`compare`).
    """
    from focalcal_book.printed import SOURCES

    by_name = computed.set_index("network")
    rows = []
    for net, quantities in printed.items():
        if net not in by_name.index:
            continue
        for q, (text, key) in quantities.items():
            if q not in columns:
                continue
            col, scale = columns[q]
            ours = float(by_name.loc[net, col]) * scale
            rows.append({"network": net, "quantity": q, "printed": text, "source": SOURCES[key].cite,
                         "ours": ours, "verdict": compare(ours, text)})
    return pd.DataFrame(rows)


def counts(frame: pd.DataFrame, column: str = "verdict") -> dict[str, int]:
    """How many rows are ``exact``, ``close`` and ``differs`` (all three keys present)."""
    c = frame[column].value_counts()
    return {k: int(c.get(k, 0)) for k in ("exact", "close", "differs")}


def comparison_grid(long: pd.DataFrame, headers: Mapping[str, str], *, verdict: str = "verdict",
                    ours: str = "ours"):
    """A wide table of :func:`comparison`'s rows: one row per network, one column per quantity.

    A cell shows our value with the printed decimals and a symbol (✓ exact, ≈ within 0.01,
    ✗ differs), the printed value in brackets unless exact; its background shows the verdict
    (:data:`VERDICT_COLORS`).
    """
    sub = long[long["quantity"].isin(list(headers))]
    nets = list(dict.fromkeys(sub["network"]))
    text = pd.DataFrame("", index=nets, columns=list(headers))
    style = pd.DataFrame("", index=nets, columns=list(headers))
    for r in sub.itertuples(index=False):
        d = len(r.printed.split(".", 1)[1]) if "." in r.printed else 0
        v = getattr(r, verdict)
        value = getattr(r, ours)
        shown = "–" if value != value else f"{value:.{d}f}"
        text.loc[r.network, r.quantity] = f"{shown} {_SYMBOL[v]}" + ("" if v == "exact" else f" ({r.printed})")
        style.loc[r.network, r.quantity] = f"background-color: {VERDICT_COLORS[v]}"
    text.insert(0, "network", [network_label(n) for n in nets])
    style.insert(0, "network", "")
    text = text.rename(columns=dict(headers))
    style.columns = text.columns
    return (text.style.apply(lambda _: style, axis=None).hide(axis="index")
            .set_properties(**{"text-align": "right"}).set_properties(subset=["network"], **{"text-align": "left"}))


# --------------------------------------------------------------------------------------------
# focal TS against TS
# --------------------------------------------------------------------------------------------

#: a network's bootstrap interval (better / worse / indistinguishable) as a verdict on "focal TS is better"
_INTERVAL_VERDICT = {"better": HOLDS, "worse": DOES_NOT_HOLD, "indistinguishable": NOT_RESOLVED}


def loss_verdicts(intervals: pd.DataFrame) -> pd.DataFrame:
    """Per training loss: networks, how many intervals say focal TS is better, worse or
    indistinguishable, and ``verdict``, K&K's claim for that loss by the book's one rule: each
    network's interval is a part (:func:`focalcal_book.verdicts.combine`: a network where focal
    TS is worse decides against it), and a single network never resolves a claim that holds (one
    network, like one seed, shows no spread between networks)."""
    order = list(dict.fromkeys(intervals["loss"]))
    c = pd.crosstab(intervals["loss"], intervals["verdict"]).reindex(index=order, fill_value=0)
    for v in ("better", "worse", "indistinguishable"):
        if v not in c:
            c[v] = 0
    out = c[["better", "worse", "indistinguishable"]].reset_index()
    out.insert(1, "networks", out[["better", "worse", "indistinguishable"]].sum(axis=1))

    def verdict(loss: str) -> str:
        v = combine([_INTERVAL_VERDICT[x] for x in intervals.loc[intervals["loss"] == loss, "verdict"]])
        return NOT_RESOLVED if v == HOLDS and int((intervals["loss"] == loss).sum()) < 2 else v

    out["verdict"] = [verdict(lo) for lo in out["loss"]]
    return out


def kk_summary(rows: pd.DataFrame, intervals: pd.DataFrame) -> pd.DataFrame:
    """One row per network: TS (ECE), focal TS (ECE) and its line search, with the bootstrap interval.

    Columns (ECE: 15 equal-mass bins, in %): ``network`` (label), ``loss``, ``split``, ``t_ts``,
    ``ece_ts``, ``gamma``, ``t_fts``, ``ece_fts``, ``ece_line``, ``interval`` (text, percentage
    points) and ``verdict``.
    """
    by = rows.set_index(["network", "method"])
    out = []
    for r in intervals.itertuples(index=False):
        ts, fts = by.loc[(r.network, "TS (ECE)")], by.loc[(r.network, "focal TS (ECE)")]
        line = by.loc[(r.network, "focal TS (ECE, 3m line)")]
        out.append({"network": network_label(r.network, loss=False), "loss": r.loss,
                    "split": "val / test" if r.protocol.startswith("validation") else "test halves",
                    "t_ts": ts["temperature"], "ece_ts": 100 * ts["ece_mass"], "gamma": fts["gamma_ev"],
                    "t_fts": fts["temperature"], "ece_fts": 100 * fts["ece_mass"], "ece_line": 100 * line["ece_mass"],
                    "interval": f"[{pp(r.low)}, {pp(r.high)}]", "verdict": r.verdict})
    return pd.DataFrame(out)


#: headers of :func:`kk_summary` for :func:`focalcal.lab.results.styled`
KK_SUMMARY_HEADERS = {"network": "network", "loss": "training loss", "split": "fit / evaluate",
                      "t_ts": "T (TS)", "ece_ts": "ECE, TS (%)", "gamma": "γ_ev (focal TS)",
                      "t_fts": "T (focal TS)", "ece_fts": "ECE, focal TS (%)", "ece_line": "ECE, 3m line (%)",
                      "interval": "95 % interval of the difference (pp)", "verdict": "focal TS vs TS"}
KK_SUMMARY_FORMATS = {"t_ts": "{:.2f}", "ece_ts": "{:.2f}", "gamma": "{:g}", "t_fts": "{:.2f}", "ece_fts": "{:.2f}",
                      "ece_line": "{:.2f}"}

#: Komisarenko & Kull's relative gains of the selection criterion, in percent (Sec. 5.2): an extra
#: 20 % lower test ECE when (gamma_ev, T) are selected by ECE, about 1 % lower log-loss by log-loss
KK_CHOICE_GAINS = {"ece": 20.0, "nll": 1.0}
#: headers of :func:`focalcal.lab.results.selection_gain` (ECE and gains in percent)
SELECTION_HEADERS = {"network": "network", "ece_by_ece": "ECE, selected by ECE (%)",
                     "ece_by_nll": "ECE, selected by NLL (%)", "ece_gain": "ECE gain (%)",
                     "nll_by_nll": "NLL, selected by NLL", "nll_by_ece": "NLL, selected by ECE",
                     "nll_gain": "NLL gain (%)"}
SELECTION_FORMATS = {"ece_by_ece": "{:.2f}", "ece_by_nll": "{:.2f}", "ece_gain": "{:+.1f}", "nll_by_nll": "{:.4f}",
                     "nll_by_ece": "{:.4f}", "nll_gain": "{:+.2f}"}


def compared_with(ours: float, theirs: float) -> str:
    """``"above"``, ``"below"`` or ``"equal to"``: where a measured value lies against a paper's."""
    return "above" if ours > theirs else "below" if ours < theirs else "equal to"


def forest_plot(intervals: pd.DataFrame):
    """The paired bootstrap intervals of ``ECE(focal TS) - ECE(TS)`` (percentage points), grouped by
    training loss, one colour per loss; the line search's estimate as a hollow marker."""
    import matplotlib.pyplot as plt

    order = list(dict.fromkeys(intervals["loss"]))
    rows = intervals.assign(_o=intervals["loss"].map(order.index)).sort_values("_o", kind="stable")
    fig, ax = plt.subplots(figsize=(7.6, 0.34 * len(rows) + 0.35 * len(order) + 1.2))
    y, ticks, labels = 0.0, [], []
    for loss in order:
        grp = rows[rows["loss"] == loss]
        col = plotting.color(loss)
        ax.text(-0.01, y + 0.15, loss, transform=ax.get_yaxis_transform(), ha="right", va="center",
                fontsize=9, fontweight="bold", color=col)
        y -= 0.8
        for r in grp.itertuples(index=False):
            ax.plot([100 * r.low, 100 * r.high], [y, y], color=col, lw=2.2, solid_capstyle="butt")
            ax.plot(100 * r.estimate, y, "o", color=col, ms=5)
            ax.plot(100 * r.line_estimate, y, "o", mfc="none", mec=col, ms=7, mew=1.0)
            ticks.append(y)
            labels.append(network_label(r.network, loss=False))
            y -= 1.0
        y -= 0.4
    ax.axvline(0, color=plotting.color("identity"), ls="--", lw=1.2)
    ax.set_yticks(ticks, labels, fontsize=9)
    ax.set_ylim(y + 0.6, 0.8)
    ax.set_xlabel("ECE(focal TS) − ECE(TS), percentage points (15 equal-mass bins; < 0: focal TS better)")
    ax.set_ylabel("")
    ax.grid(axis="y", visible=False)
    handles = [plt.Line2D([], [], color="k", marker="o", lw=2.2, ms=5, label="full grid: estimate, 95 % interval"),
               plt.Line2D([], [], color="k", marker="o", mfc="none", lw=0, ms=7, label="3m line search: estimate")]
    ax.legend(handles=handles, loc="lower right", fontsize=9, frameon=True, framealpha=0.9)
    fig.tight_layout()
    return fig, ax


def reliability_row(panels: Sequence[tuple[Any, Any, str, str]], *, n_bins: int = 15):
    """Reliability diagrams side by side (Mukhoti et al.'s Fig. 1 style, 15 equal-width bins).

    ``panels``: ``(logits, labels, method, title)`` per panel, titles distinct; ``method`` picks
    the colour (:func:`focalcal.plotting.color`). Drawn by
    :func:`focalcal.lab.results.plot_reliability_panel`: one legend below the panels, where it
    covers no bar.
    """
    from focalcal.lab.results import plot_reliability_panel

    titles = [title for *_, title in panels]
    if len(set(titles)) != len(titles):
        raise ValueError(f"panels must have distinct titles, got {titles}")
    return plot_reliability_panel({title: logits for logits, _, _, title in panels},
                                  {title: labels for _, labels, _, title in panels}, n_bins=n_bins,
                                  binning="width", colors={title: method for _, _, method, title in panels})


def aurc_plot(table: pd.DataFrame, scores: Sequence[str], names: Mapping[str, str]):
    """E-AURC (percent) of every network under each confidence score: one row per network, one marker
    shape per score, one colour per training loss."""
    import matplotlib.pyplot as plt

    markers = ("o", "s", "^", "D")
    fig, ax = plt.subplots(figsize=(7.2, 0.3 * len(table) + 1.4))
    ys = list(range(len(table)))[::-1]
    for y, r in zip(ys, table.itertuples(index=False)):
        col = plotting.color(r.loss)
        vals = [100 * getattr(r, f"eaurc_{s}") for s in scores]
        ax.plot([min(vals), max(vals)], [y, y], color=col, lw=1.0, alpha=0.6)
        for i, (v, m) in enumerate(zip(vals, markers)):
            ax.plot(v, y, m, color=col, mfc=col if i == 0 else "none", ms=6, zorder=3 if i == 0 else 2)
    ax.set_yticks(ys, [network_label(n) for n in table["network"]], fontsize=9)
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20) if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("E-AURC (%, log scale), evaluation images; lower: the score ranks the errors lower")
    handles = [plt.Line2D([], [], color="k", marker=m, mfc="k" if i == 0 else "none", lw=0, label=names[s])
               for i, (s, m) in enumerate(zip(scores, markers))]
    ax.legend(handles=handles, loc="lower right", fontsize=9, frameon=True, framealpha=0.9)
    ax.grid(axis="y", visible=False)
    fig.tight_layout()
    return fig, ax
