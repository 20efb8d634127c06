"""Reading a sweep's folders: one run (:func:`load_run`), the results table, the training histories.

A sweep folder holds ``runs/<run>/`` (the layout is in ``focalcal.lab.results``' docstring) and
``results.csv`` (one row per run x post-hoc method). Where it is comes from an argument or the
environment (:func:`runs_dir`), never from where this file lies.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..io import torch_load
from ..profiles import PROFILE_FILE, ROLES

__all__ = ["RUNS_ENV", "runs_dir", "Run", "load_run", "load_results", "load_profile", "runs_for",
           "load_histories", "describe_build"]

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
    return Path.cwd() / "runs" / "cpu"



@dataclass
class Run:
    """A finished training run as :func:`load_run` reads it.

    Attributes
    ----------
    run_dir : Path
    config : dict
        The ``train_classifier`` parameters (``dataset``, ``model``, ``loss``, ``loss_params``
        as a JSON string, ``epochs``, ``seed``, ...).
    val_logits, test_logits : Tensor, shape (N, K), float32
    val_labels, test_labels : Tensor, shape (N,), int64
    history : list of dict
        The trainer's per-epoch records (see :mod:`focalcal.lab.train`).
    calibration : list of dict or None
        The rows of ``calibration.json`` once ``posthoc_calibration`` has run.
    """

    run_dir: Path
    config: dict[str, Any]
    val_logits: torch.Tensor
    val_labels: torch.Tensor
    test_logits: torch.Tensor
    test_labels: torch.Tensor
    history: list[dict[str, Any]] = field(default_factory=list)
    calibration: list[dict[str, Any]] | None = None

    @property
    def loss_params(self) -> dict[str, Any]:
        """The loss parameters as a dict (the template receives them as a JSON string)."""
        p = self.config.get("loss_params", {})
        return json.loads(p) if isinstance(p, str) else dict(p)


def load_run(run_dir: str | os.PathLike) -> Run:
    """Read a run folder written by the ``train_classifier`` template.

    Raises
    ------
    FileNotFoundError
        ``run_dir`` has no ``logits.pt`` or ``config.json`` (training has not finished there);
        the message says which file is missing.
    ValueError
        ``logits.pt`` lacks the validation or the test logits.
    """
    d = Path(run_dir)
    for name in ("config.json", "logits.pt"):
        if not (d / name).is_file():
            raise FileNotFoundError(f"{d / name} does not exist: run_dir must be the out_dir of a "
                                    f"finished train_classifier run")
    config = json.loads((d / "config.json").read_text())["config"]
    blob = torch_load(d / "logits.pt")
    missing = [k for k in ("val_logits", "val_labels", "test_logits", "test_labels") if k not in blob]
    if missing:
        raise ValueError(f"{d / 'logits.pt'} lacks {missing}; the run was trained without a "
                         f"validation or test loader")
    history = json.loads((d / "history.json").read_text())["records"] if (d / "history.json").is_file() else []
    cal = json.loads((d / "calibration.json").read_text()) if (d / "calibration.json").is_file() else None
    return Run(d, config, blob["val_logits"], blob["val_labels"], blob["test_logits"],
               blob["test_labels"], history, cal)



def load_results(out: str | os.PathLike):
    """The sweep's ``results.csv`` (one row per run x method) as a :class:`pandas.DataFrame`.

    Raises
    ------
    FileNotFoundError
        No ``results.csv`` under ``out``; the message says how to produce it.
    """
    import pandas as pd

    path = Path(out) / "results.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run `python -m focalcal.lab.sweep --profile cpu "
                                f"--out {out}` (or `make sweep`) first")
    return pd.read_csv(path)



def load_profile(out: str | os.PathLike) -> dict[str, Any]:
    """The sweep folder's ``profile.json`` (written by :func:`focalcal.lab.sweep.run_sweep`):
    ``profile`` (its name), ``shrunk``, ``description`` and ``roles`` (role -> run ids).

    Raises
    ------
    FileNotFoundError
        ``out`` has no ``profile.json`` (a folder of an older sweep): running the sweep again
        writes it and skips every finished run.
    """
    path = Path(out) / PROFILE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run `python -m focalcal.lab.sweep --profile <name> "
                                f"--out {out}` again: it writes profile.json and skips the finished runs")
    return json.loads(path.read_text())


def runs_for(out: str | os.PathLike, role: str, results=None, *, setting: str | tuple[str, str] = "all"):
    """The rows of ``results`` (default: ``out``'s results table) of the runs that the folder's
    profile ran for ``role`` (:data:`focalcal.lab.profiles.ROLES`), in the profile's order.

    ``setting`` narrows them to one data set and network: ``"all"`` keeps every run, ``"first"``
    those of the role's first finished run (the profiles list the main setting first, e.g.
    CIFAR-10 on ResNet-50 before CIFAR-100 and Wide-ResNet), a ``(dataset, model)`` pair that one.
    A page that shows one setting says which (``describe_build``).

    Raises
    ------
    ValueError
        ``role`` is not one of :data:`~focalcal.lab.profiles.ROLES`, ``setting`` is none of the
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
        path = Path(out) / "runs" / r["run"] / "history.json"
        records = json.loads(path.read_text())["records"]
        scalar = [{k: v for k, v in rec.items() if not isinstance(v, (list, dict))} for rec in records]
        f = pd.DataFrame(scalar)
        for col in ("run", "dataset", "model", "loss_label", "seed"):
            f.insert(0, col, r[col])
        frames.append(f)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def _span(values: list[int], unit: str) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:,} {unit}{'' if lo == 1 else 's'}" if lo == hi else f"{lo:,} to {hi:,} {unit}s"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def describe_build(out: str | os.PathLike, results) -> str:
    """What a page was built from, in Markdown, read from the runs themselves.

    The sweep profile of the folder (its ``profile.json``; "shrunk" for a
    :func:`~focalcal.lab.profiles.shrink` version) and its description, the number of runs, the
    datasets with their training-set sizes (each run's ``config.json``), the networks, the epochs
    and the seeds.
    """
    runs = results.drop_duplicates("run")
    info = load_profile(out) if (Path(out) / PROFILE_FILE).is_file() else None
    profile = info["profile"] if info else None
    sizes: dict[str, list[int]] = {}
    for _, r in runs.iterrows():
        config = json.loads((Path(out) / "runs" / r["run"] / "config.json").read_text())
        sizes.setdefault(r["dataset"], []).append(int(config["data"]["train"]))
    nets = [f"`{m}`" for m in dict.fromkeys(runs["model"])]
    seeds = sorted({int(s) for s in runs["seed"]})
    source = (f"the sweep profile `{profile}`{' (shrunk)' if info.get('shrunk') else ''}" if profile
              else "a sweep folder without a profile.json")
    data = _and([f"`{d}` ({_span(n, 'training sample')})" for d, n in sizes.items()])
    text = (f"This page was built from {len(runs)} run{'s' if len(runs) != 1 else ''} of {source}: {data}, "
            f"network{'s' if len(nets) > 1 else ''} {_and(nets)}, "
            f"{_span([int(e) for e in runs['epochs']], 'epoch')}, "
            f"seed{'s' if len(seeds) > 1 else ''} {_and([str(s) for s in seeds])}.")
    return text + (f" The `{profile}` profile: {info['description']}." if profile else "")
