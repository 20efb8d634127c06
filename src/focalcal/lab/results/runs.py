"""Reading a sweep's folders: one run (:func:`load_run`), the results table, the training histories.

The files and their formats are :mod:`focalcal.lab.runfolder`'s; this module selects and
summarises. Where a sweep folder is comes from an argument or the environment
(:func:`runs_dir`), never from where this file lies.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .. import runfolder
from ..spec import ROLES
from ..runfolder import Run, load_run

__all__ = ["RUNS_ENV", "runs_dir", "Run", "load_run", "load_results", "load_profile", "runs_for",
           "load_histories", "build_facts", "test_set"]

#: the environment variable naming the sweep folder a page reads
RUNS_ENV = "FOCALCAL_RUNS"


def runs_dir(default: str | os.PathLike | None = None) -> Path:
    """The sweep folder a book chapter reads: ``$FOCALCAL_RUNS``, else ``default``, else
    ``runs/cpu`` under the current directory (where ``make book`` runs the ``cpu`` profile)."""
    env = os.environ.get(RUNS_ENV)
    if env:
        return Path(env)
    if default is not None:
        return Path(default)
    return Path.cwd() / runfolder.default_out("cpu")



def load_results(out: str | os.PathLike):
    """The sweep's results table (one row per run x method): :func:`focalcal.lab.runfolder.read_results`."""
    return runfolder.read_results(out)


def load_profile(out: str | os.PathLike) -> dict[str, Any]:
    """The sweep folder's profile record: :func:`focalcal.lab.runfolder.read_profile`."""
    return runfolder.read_profile(out)


def runs_for(out: str | os.PathLike, role: str, results=None, *, setting: str | tuple[str, str] = "all"):
    """The rows of ``results`` (default: ``out``'s results table) of the runs that the folder's
    profile ran for ``role`` (:data:`focalcal.lab.spec.ROLES`), in the profile's order.

    ``setting`` narrows them to one data set and network: ``"all"`` keeps every run, ``"first"``
    those of the role's first finished run (the profiles list the main setting first, e.g.
    CIFAR-10 on ResNet-50 before CIFAR-100 and Wide-ResNet), a ``(dataset, model)`` pair that one.
    A page that shows one setting says which (``build_facts``).

    Raises
    ------
    ValueError
        ``role`` is not one of :data:`~focalcal.lab.spec.ROLES`, ``setting`` is none of the
        above, or no finished run has the role (or the setting); the message names what there is.
    FileNotFoundError
        ``out`` has no ``profile.json`` (:func:`load_profile`).
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
    if results is None:
        results = load_results(out)
    info = load_profile(out)
    order = {run: i for i, run in enumerate(info["roles"].get(role, []))}
    rows = results[results["run"].isin(order.keys())]
    rows = rows.iloc[rows["run"].map(order).argsort(kind="stable")]
    name = f"{info['profile']}{' (shrunk)' if info.get('shrunk') else ''}"
    if rows.empty:
        raise ValueError(f"no finished run of role {role!r} in {out} (profile {name!r} has "
                         f"{len(order)} such runs; roles there: {', '.join(info['roles'])})")
    if isinstance(setting, str) and setting == "all":
        return rows
    if isinstance(setting, str) and setting == "first":
        setting = (rows["dataset"].iloc[0], rows["model"].iloc[0])
    if not (isinstance(setting, tuple) and len(setting) == 2):
        raise ValueError(f"setting must be 'all', 'first' or a (dataset, model) pair; got {setting!r}")
    chosen = rows[(rows["dataset"] == setting[0]) & (rows["model"] == setting[1])]
    if chosen.empty:
        there = sorted(set(zip(rows["dataset"], rows["model"])))
        raise ValueError(f"setting {setting!r} has no finished run of role {role!r} in {out}; there are {there}")
    return chosen


def load_histories(out: str | os.PathLike, results=None):
    """Per-epoch training records of every run in ``results`` (default: all of ``out``'s results).

    Returns
    -------
    DataFrame
        One row per run x epoch: ``run``, ``dataset``, ``model``, ``loss_label``, ``seed`` and
        the scalar fields of the trainer's records (``epoch``, ``test_nll``, ``test_error``,
        ``train_nll``, ...; see :mod:`focalcal.lab.train`).
    """
    import pandas as pd

    if results is None:
        results = load_results(out)
    runs = results.drop_duplicates("run")
    frames = []
    for _, r in runs.iterrows():
        records = runfolder.read_history(runfolder.run_path(out, r["run"]))
        scalar = [{k: v for k, v in rec.items() if not isinstance(v, (list, dict))} for rec in records]
        f = pd.DataFrame(scalar)
        for col in ("run", "dataset", "model", "loss_label", "seed"):
            f.insert(0, col, r[col])
        frames.append(f)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def _span(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"


def build_facts(out: str | os.PathLike, results) -> dict[str, Any]:
    """What a page was built from, read from the runs themselves: the values of the page's own
    sentence about it.

    ``runs`` (their number), ``profile`` (the name in the folder's ``profile.json`` as Markdown code,
    with "(shrunk)" for a :func:`~focalcal.lab.profiles.shrink` version; "unnamed" without one),
    ``description`` (the profile's; "" without one), ``data`` (per data set its name and training-set
    sizes, from each run's ``config.json``), ``networks``, ``epochs`` (one number or a range) and
    ``seeds``; lists of Markdown strings where a page lists them.
    """
    runs = results.drop_duplicates("run")
    info = load_profile(out) if runfolder.has_profile(out) else None
    sizes: dict[str, list[int]] = {}
    for _, r in runs.iterrows():
        config = runfolder.read_config(runfolder.run_path(out, r["run"]))
        sizes.setdefault(r["dataset"], []).append(int(config["data"]["train"]))
    profile = (f"`{info['profile']}`" + (" (shrunk)" if info.get("shrunk") else "")) if info else "unnamed"
    return {"runs": len(runs), "profile": profile, "description": info["description"] if info else "",
            "data": [f"`{d}` ({_span(n)} training samples)" for d, n in sizes.items()],
            "networks": [f"`{m}`" for m in dict.fromkeys(runs["model"])],
            "epochs": _span([int(e) for e in runs["epochs"]]),
            "seeds": [str(s) for s in sorted({int(s) for s in runs["seed"]})]}


def test_set(run: Run) -> tuple[Any, torch.Tensor]:
    """The test split ``run`` was evaluated on, regenerated from its config: ``(dataset, indices)``.

    ``dataset`` is the whole test split of the run's dataset (:func:`focalcal.lab.data.get_dataset`:
    items ``(x, y)``, ``.targets``; image datasets also ``.images``) and ``indices`` the run's
    seeded subset of it, in the order of the run's test logits.

    Raises
    ------
    ValueError
        The regenerated labels differ from the stored ones (the data code changed since the run:
        run it again).
    """
    from torch.utils.data import Subset

    from ..data import make_loaders
    from ..template import subset_sizes

    subset = subset_sizes(run.config.get("train_subset", 0), run.config.get("eval_subset", 0))
    test = make_loaders(run.config["dataset"], seed=int(run.config["seed"]), subset=subset,
                        augment=False).test.dataset
    base = test.dataset if isinstance(test, Subset) else test
    idx = torch.as_tensor(test.indices) if isinstance(test, Subset) else torch.arange(len(base))
    if not torch.equal(base.targets[idx], run.test_labels):
        raise ValueError(f"run: the regenerated test labels of {run.run_dir} differ from the stored "
                         f"ones: the data code changed since the run; run it again")
    return base, idx
