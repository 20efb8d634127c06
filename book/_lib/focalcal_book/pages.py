"""What keeps a chapter's code cells short: glue several values at once, and tables for a reader.

- :func:`glue_values` glues keyword arguments for ``{glue:text}`` references (no output);
- :func:`table` shows a ``pandas.DataFrame`` (or a list of dicts) as an HTML table with headers
  that may contain ``$...$`` TeX, numbers formatted per column, booleans as yes/no and no index;
- :func:`run_setting` says, for prose, what data and network a sweep's run trained on (the
  experiment pages read any profile's runs, so they never name a data set themselves), and
  :func:`build_values` what a page was built from (with :func:`other_settings`, the settings of
  the profile it leaves out), :func:`runs_label` names the folder without the builder's
  absolute path, and :func:`optimizer_text` names a run's optimiser.

The verdict tables themselves come from :meth:`focalcal_book.verify.Ledger.show`.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from focalcal_book.verify import tex_html

Format = str | Callable[[Any], str]

_TABLE_STYLE = "border-collapse:collapse;font-size:0.9em;margin:0.5em 0"
_HEAD_STYLE = "padding:0.3em 0.7em;border-bottom:1px solid #8c959f;text-align:right"
_CELL_STYLE = "padding:0.25em 0.7em;border-top:1px solid #eaeef2;text-align:right"


def _titles(dataset: str, model: str) -> tuple[str, str]:
    # the lab's prose names (imported here: the theory chapters use this module without the lab)
    from focalcal.lab.data import DATASETS
    from focalcal.lab.models import MODEL_TITLES

    return (DATASETS[dataset].title if dataset in DATASETS else dataset, MODEL_TITLES.get(model, model))


def run_setting(out: str | Path, run: str) -> dict[str, Any]:
    """What run ``run`` of the sweep folder ``out`` trained on, read from its ``config.json``:
    ``dataset`` and ``network`` (their names in prose: ``DatasetInfo.title`` and
    :data:`focalcal.lab.models.MODEL_TITLES`; a name the lab does not know stays as it is),
    ``n_params`` (the network's parameters), ``n_train``, ``n_val``, ``n_test`` (images used),
    ``config`` (the template's parameters) and ``trainer`` (the optimiser's settings)."""
    from focalcal.lab import runfolder

    blob = runfolder.read_config(runfolder.run_path(out, run))
    cfg = blob["config"]
    dataset, network = _titles(cfg["dataset"], cfg["model"])
    return {"dataset": dataset, "network": network,
            "n_params": int(blob["model"]["parameters"]), "n_train": int(blob["data"]["train"]),
            "n_val": int(blob["data"]["val"]), "n_test": int(blob["data"]["test"]),
            "config": cfg, "trainer": blob["trainer"]}


def other_settings(out: str | Path, role: str, results, shown) -> list[str]:
    """The settings (data set on network, in prose) that the folder's profile trained for ``role``
    besides those of ``shown`` (the rows a page shows); empty where there are none. A page that
    shows one setting (``runs_for(..., setting="first")``) says what it leaves out."""
    from focalcal.lab.results import runs_for

    every = runs_for(out, role, results)
    here = set(zip(shown["dataset"], shown["model"]))
    return [" on ".join(_titles(d, m)) for d, m in dict.fromkeys(zip(every["dataset"], every["model"]))
            if (d, m) not in here]


def build_values(out: str | Path, shown, *, role: str | None = None, results=None) -> dict[str, Any]:
    """What a page was built from, as ``build_<key>`` values for :func:`glue_values`: the facts of
    ``focalcal.lab.results.runs.build_facts`` about the rows ``shown`` (text as Markdown), and
    with ``role`` (and the folder's ``results``) ``build_others``, the settings of that role the
    page leaves out (:func:`other_settings`)."""
    from IPython.display import Markdown

    from focalcal.lab.results.runs import build_facts

    values = {f"build_{k}": Markdown(v or "–") if isinstance(v, str) else v
              for k, v in build_facts(out, shown).items()}
    if role is not None:
        values["build_others"] = other_settings(out, role, results, shown)
    return values


_OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}


def optimizer_text(trainer: Mapping[str, Any]) -> str:
    """A run's optimiser for prose (Markdown), from its trainer settings: ``SGD (momentum 0.9)``,
    ``Adam``; the momentum is an SGD setting, which the trainer ignores for the others."""
    name = _OPTIMIZERS.get(trainer["optimizer"], f"`{trainer['optimizer']}`")
    return f"{name} (momentum {trainer['momentum']:g})" if trainer["optimizer"] == "sgd" else name


def runs_label(out: str | Path) -> str:
    """How a page names the sweep folder it read, without the builder's absolute path: the path
    relative to the working directory when the folder lies below it (``runs/cpu``), else the
    profile's name from its ``profile.json`` (``the `cpu` profile's folder``), else the folder's name."""
    out = Path(out).resolve()
    try:
        return str(out.relative_to(Path.cwd().resolve()))
    except ValueError:
        pass
    from focalcal.lab import runfolder

    if runfolder.has_profile(out):
        return f"the `{runfolder.read_profile(out)['profile']}` profile's folder `{out.name}`"
    return f"the folder `{out.name}`"


def glue_values(**values: Any) -> None:
    """``myst_nb.glue(key, value, display=False)`` for every keyword argument.

    Numbers are glued as Python scalars (a tensor or numpy scalar becomes ``float``/``int``); a
    list, tuple or pandas ``Index`` of names as Markdown, its items joined by commas (``none``
    when empty), and a bool as ``yes`` or ``no``, for ``{glue:md}`` in the prose.
    """
    from IPython.display import Markdown
    from myst_nb import glue

    for key, value in values.items():
        if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
            value = value.item()
        if isinstance(value, bool):
            value = Markdown("yes" if value else "no")
        elif isinstance(value, (list, tuple)) or type(value).__name__ == "Index":
            value = Markdown(", ".join(str(v) for v in value) or "none")
        glue(key, value, display=False)


def _cell(value: Any, fmt: Format | None) -> str:
    if callable(fmt):
        return tex_html(fmt(value))
    if isinstance(value, bool) or (hasattr(value, "dtype") and str(getattr(value, "dtype", "")) == "bool"):
        return "yes" if bool(value) else "no"
    if isinstance(value, str):
        return tex_html(value)
    if isinstance(value, numbers.Integral):
        return format(int(value), fmt or "d")
    if isinstance(value, numbers.Real):
        v = float(value)
        if math.isnan(v):
            return "&ndash;"
        return format(v, fmt or ".4g").replace("-", "&minus;")
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        items = value.tolist() if hasattr(value, "tolist") else value
        return "(" + ", ".join(_cell(x, fmt) for x in items) + ")"
    return html.escape(str(value))


def table(data: Any, *, columns: Mapping[str, str] | None = None,
          formats: Mapping[str, Format] | None = None, caption: str | None = None):
    """Display ``data`` (a DataFrame or a sequence of dicts) as a table for a reader.

    ``columns`` picks and renames columns in order (``{"gamma": "$\\gamma$"}``); ``formats``
    maps a column (its original name) to a format spec (``".2e"``) or a function returning text;
    unformatted floats get 4 significant digits. Text cells and headers may contain ``$...$``.
    """
    from IPython.display import HTML

    rows: Sequence[Mapping[str, Any]]
    if hasattr(data, "to_dict"):
        rows = data.to_dict("records")
        names = list(data.columns)
    else:
        rows = list(data)
        names = list(rows[0]) if rows else []
    columns = dict(columns) if columns is not None else {c: c for c in names}
    formats = dict(formats or {})
    head = "".join(f'<th style="{_HEAD_STYLE}">{tex_html(h)}</th>' for h in columns.values())
    body = "".join(
        "<tr>" + "".join(f'<td style="{_CELL_STYLE}">{_cell(r[c], formats.get(c))}</td>'
                         for c in columns) + "</tr>" for r in rows)
    cap = f'<caption style="caption-side:top;text-align:left">{tex_html(caption)}</caption>' \
        if caption else ""
    return HTML(f'<table class="reader-table" style="{_TABLE_STYLE}">{cap}<thead><tr>{head}'
                f"</tr></thead><tbody>{body}</tbody></table>")
