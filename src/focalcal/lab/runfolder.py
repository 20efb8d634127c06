"""A run on disk: the one module that knows the files of a sweep folder and of a run folder.

No other module or page builds these paths or parses these files (``tests/test_runfolder.py``
greps for their names). A sweep folder ``out``::

    out/profile.json            the profile that ran: name, shrunk, description, roles -> run ids
    out/results.csv             one row per run x post-hoc method
    out/runs/<run id>/          one folder per run (:func:`run_path`, :func:`run_id`)

and a run folder::

    spec.json                   the run as the sweep ran it (``RunSpec.to_dict()``)
    config.json                 at the end of training: the format, the template's parameters
                                (``config``), the trainer's settings, model, loss, data sizes,
                                loader, hardware and versions
    history.json                the trainer's per-epoch records, rewritten after every epoch
    checkpoint.pt               every state a resume needs
    logits.pt                   validation and test logits and labels of the final model
    logits_epoch_<n>.pt         the same after epoch ``n`` (``TrainSettings.logits_epochs``)
    curvature.json, calibration.json   Hessian traces; the post-hoc template's rows
    result.json                 the sweep's record that the run finished
    run.log, <template>.ipynb   the run's output and its executed templates

``config.json`` and ``result.json`` carry :data:`FORMAT`; a folder of another format is refused
with a message that says to run it again, and the sweep reruns it (:func:`finished`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .io import atomic_torch_save, atomic_write_json, atomic_write_text, torch_load

__all__ = ["FORMAT", "run_id", "default_out", "run_path", "runs_root", "Run", "load_run", "read_config",
           "write_config", "read_history", "write_history", "grad_norm_edges", "logits_path", "save_logits", "read_logits", "logits_after",
           "saved_epochs", "checkpoint_path", "read_calibration", "write_calibration", "read_result",
           "write_result", "finished", "finished_records", "remove_leftovers", "write_spec", "read_curvature", "write_curvature", "log_path",
           "notebook_path", "read_results", "write_results", "read_profile", "write_profile",
           "has_profile"]

#: the format of the run folders this code writes and reads (recorded in config.json and result.json)
FORMAT = 1

_PROFILE, _RESULTS, _RUNS = "profile.json", "results.csv", "runs"
_SPEC, _CONFIG, _HISTORY, _CHECKPOINT = "spec.json", "config.json", "history.json", "checkpoint.pt"
_LOGITS, _CURVATURE, _CALIBRATION, _RESULT, _LOG = ("logits.pt", "curvature.json", "calibration.json",
                                                     "result.json", "run.log")
_EPOCH = re.compile(r"logits_epoch_(\d+)\.pt")


# --------------------------------------------------------------------------------------------
# where things are
# --------------------------------------------------------------------------------------------

def run_id(spec: Mapping[str, Any], label: str) -> str:
    """The id of a run: ``<dataset>-<model>-<label slug>-s<seed>-<digest>``, the digest the first
    8 hex digits of the SHA-1 of ``spec`` as sorted JSON (``RunSpec.to_dict()``), so that runs
    with other settings get other folders. ``label`` is the loss's display name."""
    digest = hashlib.sha1(json.dumps(dict(spec), sort_keys=True).encode()).hexdigest()[:8]
    slug = "".join(c if c.isalnum() or c in "-." else "-" for c in label)
    return f"{spec['dataset']}-{spec['model']}-{slug}-s{spec['seed']}-{digest}"


def default_out(profile: str, shrunk: bool = False) -> Path:
    """The sweep folder of ``profile`` under the working directory: ``runs/<profile>``, or
    ``runs/<profile>-shrunk`` for its :func:`~focalcal.lab.profiles.shrink` version."""
    return Path(_RUNS, f"{profile}-shrunk" if shrunk else profile)


def runs_root(out: str | os.PathLike) -> Path:
    """The folder of a sweep folder's run folders."""
    return Path(out) / _RUNS


def run_path(out: str | os.PathLike, run: str) -> Path:
    """The folder of run ``run`` (its id) in the sweep folder ``out``."""
    return runs_root(out) / run


def checkpoint_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / _CHECKPOINT


def log_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / _LOG


def notebook_path(run_dir: str | os.PathLike, template: str, stage: str = "") -> Path:
    """The executed template ``template`` in ``run_dir``; ``stage`` ``"input"`` or ``"partial"``
    names the hidden files of an execution in progress."""
    return Path(run_dir) / (f".{template}.{stage}.ipynb" if stage else f"{template}.ipynb")


# --------------------------------------------------------------------------------------------
# the files of a run
# --------------------------------------------------------------------------------------------

def _format_error(path: Path, found: Any) -> ValueError:
    return ValueError(f"{path} is in run-folder format {found!r}, this code reads format {FORMAT}: "
                      f"run it again (the sweep counts it as not finished and replaces it)")


def write_config(run_dir: str | os.PathLike, record: Mapping[str, Any]) -> Path:
    """Write ``config.json`` (the trainer's record of a finished run) with :data:`FORMAT`."""
    return atomic_write_json(Path(run_dir) / _CONFIG, {"format": FORMAT, **record})


def read_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The whole ``config.json`` of a finished run (``config``: the template's parameters,
    ``trainer``, ``model``, ``loss``, ``data``, ``hardware``, ``versions``).

    Raises
    ------
    FileNotFoundError
        No ``config.json``: training has not finished in ``run_dir``.
    ValueError
        The file is in another format than :data:`FORMAT`.
    """
    path = Path(run_dir) / _CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run_dir must be the folder of a finished "
                                f"train_classifier run")
    record = json.loads(path.read_text())
    if record.get("format") != FORMAT:
        raise _format_error(path, record.get("format"))
    return record


def write_history(run_dir: str | os.PathLike, edges: list[float], records: list[dict[str, Any]]) -> Path:
    """Write ``history.json``: the gradient-norm histogram's edges and the per-epoch records."""
    return atomic_write_json(Path(run_dir) / _HISTORY, {"grad_norm_edges": edges, "records": records})


def read_history(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The per-epoch records of ``history.json``; ``[]`` when there is none yet."""
    path = Path(run_dir) / _HISTORY
    return json.loads(path.read_text())["records"] if path.is_file() else []


def grad_norm_edges(run_dir: str | os.PathLike) -> list[float]:
    """The edges of the per-sample gradient-norm histograms in ``history.json``'s records."""
    return json.loads((Path(run_dir) / _HISTORY).read_text())["grad_norm_edges"]


def logits_path(run_dir: str | os.PathLike, epoch: int | None = None) -> Path:
    """``logits.pt`` (the final model), or ``logits_epoch_<epoch>.pt``."""
    return Path(run_dir) / (_LOGITS if epoch is None else f"logits_epoch_{int(epoch)}.pt")


def save_logits(run_dir: str | os.PathLike, blob: Mapping[str, torch.Tensor], epoch: int | None = None) -> Path:
    """Save logits and labels (``<split>_logits``, ``<split>_labels``) at :func:`logits_path`."""
    return atomic_torch_save(dict(blob), logits_path(run_dir, epoch))


def read_logits(run_dir: str | os.PathLike, epoch: int | None = None) -> dict[str, torch.Tensor]:
    """The logits and labels saved at :func:`logits_path` (``FileNotFoundError`` if none)."""
    path = logits_path(run_dir, epoch)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: "
                                + ("the run has not finished" if epoch is None else
                                   f"epoch {epoch} is not among the run's saved epochs {saved_epochs(run_dir)}"))
    return torch_load(path)


def logits_after(run_dir: str | os.PathLike, epoch: int, last: int) -> dict[str, torch.Tensor] | None:
    """The logits and labels saved after ``epoch``: its epoch file, else the final logits when
    ``epoch`` is the run's ``last``; ``None`` when the run kept neither."""
    if epoch in saved_epochs(run_dir):
        return read_logits(run_dir, epoch)
    return read_logits(run_dir) if epoch == last else None


def saved_epochs(run_dir: str | os.PathLike) -> list[int]:
    """The epochs whose logits the run saved (``logits_epoch_<n>.pt``), in order."""
    found = (_EPOCH.fullmatch(p.name) for p in Path(run_dir).glob("logits_epoch_*.pt"))
    return sorted(int(m.group(1)) for m in found if m)


def write_calibration(run_dir: str | os.PathLike, rows: list[dict[str, Any]]) -> Path:
    return atomic_write_json(Path(run_dir) / _CALIBRATION, rows)


def read_calibration(run_dir: str | os.PathLike) -> list[dict[str, Any]] | None:
    """The post-hoc template's rows, ``None`` before it has run."""
    path = Path(run_dir) / _CALIBRATION
    return json.loads(path.read_text()) if path.is_file() else None


def write_curvature(run_dir: str | os.PathLike, record: Mapping[str, Any]) -> Path:
    return atomic_write_json(Path(run_dir) / _CURVATURE, dict(record))


def read_curvature(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The run's Hessian traces, ``None`` when it computed none."""
    path = Path(run_dir) / _CURVATURE
    return json.loads(path.read_text()) if path.is_file() else None


def write_spec(run_dir: str | os.PathLike, spec: Mapping[str, Any]) -> Path:
    return atomic_write_json(Path(run_dir) / _SPEC, dict(spec))


def write_result(run_dir: str | os.PathLike, record: Mapping[str, Any]) -> Path:
    """Write ``result.json``, the sweep's record that the run finished, with :data:`FORMAT`."""
    return atomic_write_json(Path(run_dir) / _RESULT, {"format": FORMAT, **record})


def read_result(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The sweep's record of a finished run (its spec, ``seconds``, the post-hoc rows).

    Raises
    ------
    FileNotFoundError
        The run has not finished.
    ValueError
        The record is in another format than :data:`FORMAT`.
    """
    path = Path(run_dir) / _RESULT
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: the run has not finished")
    record = json.loads(path.read_text())
    if record.get("format") != FORMAT:
        raise _format_error(path, record.get("format"))
    return record


def finished_records(out: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The :func:`read_result` records of every run of ``out`` that finished in this format."""
    for path in sorted(runs_root(out).glob(f"*/{_RESULT}")):
        if finished(path.parent):
            yield read_result(path.parent)


def remove_leftovers(run_dir: str | os.PathLike) -> None:
    """Remove what a killed attempt may have left in ``run_dir``: temporary files of atomic
    writes, the staged and partial notebooks of an execution, and the post-hoc rows, which must
    come from the next attempt (a stale one is never read into ``result.json``). The checkpoint,
    history and logits stay: the trainer resumes from them."""
    for pattern in (".*.tmp", ".*.partial.ipynb", ".*.input.ipynb", _CALIBRATION):
        for path in Path(run_dir).glob(pattern):
            path.unlink(missing_ok=True)


def finished(run_dir: str | os.PathLike) -> bool:
    """Whether the run finished in this format (a folder in another format counts as not)."""
    try:
        read_result(run_dir)
    except (FileNotFoundError, ValueError):
        return False
    return True


# --------------------------------------------------------------------------------------------
# the files of a sweep folder
# --------------------------------------------------------------------------------------------

def write_results(out: str | os.PathLike, table) -> Path:
    """Write the sweep's ``results.csv`` (a :class:`pandas.DataFrame`)."""
    return atomic_write_text(Path(out) / _RESULTS, table.to_csv(index=False))


def read_results(out: str | os.PathLike):
    """The sweep's ``results.csv`` (one row per run x method) as a :class:`pandas.DataFrame`.

    Raises
    ------
    FileNotFoundError
        No ``results.csv`` under ``out``; the message says how to produce it.
    """
    import pandas as pd

    path = Path(out) / _RESULTS
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run `python -m focalcal.lab.sweep --profile cpu "
                                f"--out {out}` (or `make sweep`) first")
    return pd.read_csv(path)


def write_profile(out: str | os.PathLike, record: Mapping[str, Any]) -> Path:
    return atomic_write_json(Path(out) / _PROFILE, dict(record))


def has_profile(out: str | os.PathLike) -> bool:
    return (Path(out) / _PROFILE).is_file()


def read_profile(out: str | os.PathLike) -> dict[str, Any]:
    """The sweep folder's ``profile.json``: ``profile`` (its name), ``shrunk``, ``description``
    and ``roles`` (role -> run ids).

    Raises
    ------
    FileNotFoundError
        ``out`` has no ``profile.json``: running the sweep again writes it and skips every
        finished run.
    """
    path = Path(out) / _PROFILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run `python -m focalcal.lab.sweep --profile <name> "
                                f"--out {out}` again: it writes profile.json and skips the finished runs")
    return json.loads(path.read_text())


# --------------------------------------------------------------------------------------------
# a run as a page reads it
# --------------------------------------------------------------------------------------------

@dataclass
class Run:
    """A finished training run as :func:`load_run` reads it.

    Attributes
    ----------
    run_dir : Path
    config : dict
        The ``train_classifier`` parameters (``dataset``, ``model``, ``loss``, ``loss_params``,
        ``epochs``, ``seed``, ``clip_grad_norm``, ...).
    val_logits, test_logits : Tensor, shape (N, K), float32
    val_labels, test_labels : Tensor, shape (N,), int64
    history : list of dict
        The trainer's per-epoch records (see :mod:`focalcal.lab.records`).
    calibration : list of dict or None
        The rows of the post-hoc template once it has run.
    record : dict
        The rest of the trainer's record: ``trainer`` (its settings), ``model``, ``loss``,
        ``data``, ``hardware``, ``versions`` (the properties below read it).
    """

    run_dir: Path
    config: dict[str, Any]
    val_logits: torch.Tensor
    val_labels: torch.Tensor
    test_logits: torch.Tensor
    test_labels: torch.Tensor
    history: list[dict[str, Any]] = field(default_factory=list)
    calibration: list[dict[str, Any]] | None = None
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def loss_params(self) -> dict[str, Any]:
        """The loss's keyword arguments as values (the template receives them as JSON)."""
        p = self.config.get("loss_params", {})
        return json.loads(p) if isinstance(p, str) else dict(p)

    @property
    def trainer(self) -> dict[str, Any]:
        """The trainer's settings as it ran (device resolved)."""
        return self.record.get("trainer", {})

    @property
    def data_sizes(self) -> dict[str, int | None]:
        """Images per split: ``train``, ``val``, ``test``."""
        return self.record.get("data", {})

    @property
    def n_params(self) -> int:
        return int(self.record["model"]["parameters"])

    @property
    def hardware(self) -> dict[str, Any]:
        return self.record.get("hardware", {})

    @property
    def n_classes(self) -> int:
        return int(self.test_logits.shape[1])

    @property
    def saved_epochs(self) -> list[int]:
        return saved_epochs(self.run_dir)

    def logits_at(self, epoch: int) -> dict[str, torch.Tensor]:
        """:func:`focalcal.lab.runfolder.logits_after` ``epoch`` of this run (its last epoch: ``config["epochs"]``)."""
        blob = logits_after(self.run_dir, epoch, int(self.config.get("epochs", -1)))
        if blob is None:
            return read_logits(self.run_dir, epoch)  # the message names the saved epochs
        return blob

    @property
    def curvature(self) -> dict[str, Any] | None:
        return read_curvature(self.run_dir)


def load_run(run_dir: str | os.PathLike) -> Run:
    """Read a run folder written by the ``train_classifier`` template.

    Raises
    ------
    FileNotFoundError
        ``run_dir`` has no ``config.json`` or ``logits.pt`` (training has not finished there);
        the message says which file is missing.
    ValueError
        The folder is in another format (:data:`FORMAT`), or ``logits.pt`` lacks the validation or
        the test logits.
    """
    d = Path(run_dir)
    record = read_config(d)
    blob = read_logits(d)
    missing = [k for k in ("val_logits", "val_labels", "test_logits", "test_labels") if k not in blob]
    if missing:
        raise ValueError(f"{logits_path(d)} lacks {missing}; the run was trained without a "
                         f"validation or test loader")
    rest = {k: v for k, v in record.items() if k not in ("config", "format")}
    return Run(d, record["config"], blob["val_logits"], blob["val_labels"], blob["test_logits"],
               blob["test_labels"], read_history(d), read_calibration(d), rest)
