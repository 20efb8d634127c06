"""Run a profile of experiments as papermill notebooks, locally or on SLURM, and collect the results.

::

    python -m focalcal.lab.sweep [--profile {smoke,cpu,gpu,paper}] [--out DIR] [--executor local|slurm]
                                 [--jobs N] [--only PATTERN] [--list] [--shrink]
                                 [--dry-run] [--slurm-partition P] [--slurm-time MINUTES]
                                 [--slurm-gpus N] [--slurm-cpus N] [--slurm-array-parallelism N]

A *profile* is a small table of runs (datasets x models x losses x seeds, see :data:`PROFILES`,
defined in :mod:`focalcal.lab.profiles`). Each run executes two papermill templates from
``notebooks/``:

1. ``train_classifier``: trains the model and saves validation/test logits into the run folder
   (the trainer checkpoints every epoch, so a killed run resumes where it stopped);
2. ``posthoc_calibration``: fits the post-hoc calibrators on the validation logits and writes one
   row per calibration method into ``calibration.json``.

Both run in one kernel, its namespace emptied between them (IPython's reset): the second template
sees nothing of the first but finds torch and the library already imported, which saves every run
a kernel start and about 2 s of imports.

``--profile`` defaults to ``cpu`` and ``DIR`` to ``runs/<profile>`` under the working directory;
``--only`` runs the runs whose id matches an ``fnmatch`` pattern, ``--list`` shows each run and
whether it is done, ``--dry-run`` what would be submitted. With ``--executor slurm`` the runs go to
SLURM as job arrays, one ``sbatch`` per array, and a job stopped by its time limit or by preemption
is requeued and resumes from its checkpoint (:mod:`focalcal.lab.slurm`). Layout of ``DIR``::

    DIR/runs/<run>/spec.json                   what the run is
    DIR/runs/<run>/train_classifier.ipynb      executed notebooks (kept for inspection)
    DIR/runs/<run>/posthoc_calibration.ipynb
    DIR/runs/<run>/run.log                     the run's output, its cells' included (local executor)
    DIR/runs/<run>/result.json                 written last, atomically: the run is complete
    DIR/results.csv                            one row per run x calibration method
    DIR/profile.json                           the profile's name, description and the run ids of
                                               each role (what the book's pages select by)

Resuming: a run whose ``result.json`` exists is skipped, so after a crash or SIGKILL the same
command finishes the remaining runs without repeating a finished one; every file is written
atomically, so nothing half-written is ever taken for a result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from .io import atomic_write_json, atomic_write_text
# the runs and profiles live in focalcal.lab.profiles; every name of it stays importable from here
from .profiles import *  # noqa: F401,F403
from .profiles import PROFILE_FILE, Loss, RunSpec, get_profile

TEMPLATES = ("train_classifier", "posthoc_calibration")
RESULT = "result.json"


def templates_dir() -> Path:
    """The papermill templates shipped with the package (``$FOCALCAL_NOTEBOOKS`` overrides).

    They are package data of ``focalcal.lab`` (``templates/*.md``), found through
    ``importlib.resources``, so an installed wheel finds them as an editable checkout does; the
    repository's ``notebooks/`` is a link to the same folder.
    """
    env = os.environ.get("FOCALCAL_NOTEBOOKS")
    if env:
        return Path(env)
    return Path(str(resources.files("focalcal.lab") / "templates"))


# --------------------------------------------------------------------------------------------
# what the train_classifier template turns its parameters into
# --------------------------------------------------------------------------------------------

def train_settings(schedule: str | None = None, *, epochs: int | None = None,
                   optimizer: str | None = None, lr: float | None = None) -> dict[str, Any]:
    """Fields of :class:`focalcal.lab.train.TrainSettings` for a named schedule plus overrides.

    Parameters
    ----------
    schedule : str or None
        A key of :data:`focalcal.lab.train.SCHEDULES` (``"paper_cifar"``, ``"cpu_sgd"``, ...): the
        optimiser, learning rate, momentum, weight decay and learning-rate schedule of a profile.
        ``None`` or ``""``: no profile, the trainer's defaults.
    epochs, optimizer, lr : optional
        Override the profile's values when given. If ``epochs`` differs from the profile's, the
        profile's step ``milestones`` are rescaled by ``epochs / profile_epochs`` (rounded, at
        least 1), so that a shortened run keeps the proportions of the schedule (a cosine
        schedule scales by itself).

    Returns
    -------
    dict
        For ``TrainSettings(**settings)`` (or ``train(..., **settings)``); always contains
        ``epochs``.

    Raises
    ------
    ValueError
        Unknown ``schedule`` (the message lists the valid ones), or no ``epochs`` at all.
    """
    from .._validation import check_choice, check_int
    from .train import SCHEDULES

    base: dict[str, Any] = {}
    if schedule:
        check_choice(schedule, "schedule", tuple(SCHEDULES))
        base = dict(SCHEDULES[schedule])
    if epochs is not None:
        epochs = check_int(epochs, "epochs")
        if base.get("milestones") and base.get("epochs") and epochs != base["epochs"]:
            scale = epochs / base["epochs"]
            base["milestones"] = tuple(sorted({max(1, round(m * scale)) for m in base["milestones"]}))
        base["epochs"] = epochs
    if optimizer is not None:
        base["optimizer"] = optimizer
    if lr is not None:
        base["lr"] = lr
    if "epochs" not in base:
        raise ValueError("epochs must be given (or a schedule that sets it); got schedule="
                         f"{schedule!r}, epochs=None")
    return base


def subset_sizes(train_subset: int = 0, eval_subset: int = 0) -> dict[str, int] | None:
    """The ``subset=`` argument of :func:`focalcal.lab.data.make_loaders` for the template's parameters.

    ``train_subset`` caps the training split, ``eval_subset`` the validation and the test split;
    ``0`` keeps a split whole. Returns ``None`` when nothing is capped.
    """
    from .._validation import check_int

    sizes = {"train": check_int(train_subset, "train_subset", minimum=0),
             "val": check_int(eval_subset, "eval_subset", minimum=0)}
    sizes["test"] = sizes["val"]
    sizes = {k: v for k, v in sizes.items() if v > 0}
    return sizes or None


# --------------------------------------------------------------------------------------------
# executing one run
# --------------------------------------------------------------------------------------------

class RunError(RuntimeError):
    """A template of a run stopped; the message is the template's name and the cell's error."""


def _read_template(name: str) -> Any:
    import jupytext

    src = templates_dir() / f"{name}.md"
    if not src.is_file():
        raise FileNotFoundError(f"papermill template {src} is missing (templates_dir() is "
                                f"{templates_dir()}; $FOCALCAL_NOTEBOOKS overrides it)")
    return jupytext.read(src)


def check_templates(runs: Iterable[RunSpec] = ()) -> dict[str, list[str]]:
    """The parameters each template declares; raises ``FileNotFoundError`` (a template is
    missing) or ``ValueError`` (not one ``parameters`` cell, or a parameter ``runs`` pass that
    a template does not declare), once, before any run starts."""
    from .template import assigned_names

    declared = {}
    for name in TEMPLATES:
        cells = [c for c in _read_template(name).cells
                 if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
        if len(cells) != 1:
            raise ValueError(f"papermill template {name} must have one cell tagged 'parameters'; "
                             f"it has {len(cells)}")
        declared[name] = assigned_names(cells[0].source)
    for spec in runs:
        for name, given in (("train_classifier", spec.train_parameters(Path())),
                            ("posthoc_calibration", spec.posthoc_parameters(Path()))):
            unknown = sorted(set(given) - set(declared[name]))
            if unknown:
                raise ValueError(f"run {spec.run_id} passes {', '.join(unknown)}, which template "
                                 f"{name} does not declare; its parameters are {', '.join(declared[name])}")
    return declared


@contextmanager
def _run_kernel(run_dir: Path) -> Iterator[Any]:
    """A Python kernel started in ``run_dir`` for a run's templates, shut down on leaving."""
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync

    km = AsyncKernelManager(kernel_name="python3")
    run_sync(km.start_kernel)(cwd=str(run_dir))
    try:
        yield km
    finally:
        run_sync(km.shutdown_kernel)(now=True)


def _reset_namespace(km: Any) -> None:
    """Empty the kernel's namespace and input history and restart its cell count at 1 (IPython's
    ``reset(new_session=True)``), so that the next template runs as in a new kernel; imported
    modules stay loaded."""
    from jupyter_core.utils import run_sync

    async def reset() -> dict[str, Any]:
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=300)
            return await kc.execute_interactive("get_ipython().reset(new_session=True)",
                                                store_history=False, timeout=300,
                                                output_hook=lambda msg: None)
        finally:
            kc.stop_channels()

    reply = run_sync(reset)()
    if reply["content"]["status"] != "ok":
        raise RunError(f"could not reset the kernel between templates: {reply['content']}")


def _execute_template(name: str, run_dir: Path, parameters: dict[str, Any], km: Any = None) -> None:
    import nbformat
    import papermill as pm

    nb = _read_template(name)
    staged = run_dir / f".{name}.input.ipynb"
    atomic_write_text(staged, nbformat.writes(nb))
    partial = run_dir / f".{name}.partial.ipynb"
    try:
        # the cells' output goes on to this process's stdout and stderr (a run's run.log)
        # start_timeout: papermill's 60 s default was too short for a kernel to start on 2 cores
        # loaded 4-fold (a shrunk gpu sweep beside a running cpu sweep lost a run that way)
        pm.execute_notebook(str(staged), str(partial), parameters=parameters, kernel_name="python3",
                            progress_bar=False, cwd=str(run_dir), stdout_file=sys.stdout,
                            stderr_file=sys.stderr, start_timeout=300, km=km)
    except pm.PapermillExecutionError as err:
        raise RunError(f"{name} stopped: {err.ename}: {err.evalue}") from err
    finally:
        staged.unlink(missing_ok=True)
    os.replace(partial, run_dir / f"{name}.ipynb")


def _remove_leftovers(run_dir: Path) -> None:
    # What a killed attempt may have left: temporary files of atomic writes, papermill's staged
    # and partial notebooks, and a calibration.json that must come from *this* attempt's
    # posthoc_calibration (never read a stale one into result.json). The checkpoint, history and
    # logits stay: the trainer resumes from them.
    for pattern in (".*.tmp", ".*.partial.ipynb", ".*.input.ipynb", "calibration.json"):
        for path in run_dir.glob(pattern):
            path.unlink(missing_ok=True)


def execute_run(spec: dict[str, Any] | RunSpec, out: str | os.PathLike) -> dict[str, Any]:
    """Execute one run's templates in ``out/runs/<run>/`` and write its ``result.json`` last.

    Returns the result record. A run whose ``result.json`` already exists is not executed again.
    """
    spec = spec if isinstance(spec, RunSpec) else RunSpec.from_dict(spec)
    # absolute: the notebooks run with the run folder as their working directory
    run_dir = Path(out).resolve() / "runs" / spec.run_id
    result_path = run_dir / RESULT
    if result_path.is_file():
        return json.loads(result_path.read_text())
    run_dir.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(run_dir)
    atomic_write_json(run_dir / "spec.json", spec.to_dict())
    t0 = time.perf_counter()
    with _run_kernel(run_dir) as km:
        _execute_template("train_classifier", run_dir, spec.train_parameters(run_dir), km)
        _reset_namespace(km)
        _execute_template("posthoc_calibration", run_dir, spec.posthoc_parameters(run_dir), km)
    rows = json.loads((run_dir / "calibration.json").read_text())
    record = {"run": spec.run_id, "spec": spec.to_dict(), "rows": rows,
              "seconds": round(time.perf_counter() - t0, 2)}
    atomic_write_json(result_path, record)
    return record


# --------------------------------------------------------------------------------------------
# the sweep
# --------------------------------------------------------------------------------------------

def pending(runs: Iterable[RunSpec], out: Path) -> list[RunSpec]:
    return [r for r in runs if not (out / "runs" / r.run_id / RESULT).is_file()]


# Not focalcal.lab.sweep itself: under `python -m focalcal.lab.sweep` each run's process executes it again
# as its main module, and runpy warns when that module is already imported.
_PRELOAD = ("focalcal.lab.io", "papermill", "jupytext", "nbformat")
_CONTEXT = None


def _process_context():
    # One process per run (a crash, leak or kill stays inside it), forked from a fork server that
    # has imported papermill and torch once: a run then starts in milliseconds instead of paying
    # about 3 s of imports, a sixth of a smoke run. The server is single-threaded, so forking it
    # is safe (forking this multi-threaded parent would not be); "spawn" where there is no fork.
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing

        if "forkserver" in multiprocessing.get_all_start_methods():
            _CONTEXT = multiprocessing.get_context("forkserver")
            _CONTEXT.set_forkserver_preload(list(_PRELOAD))
        else:  # pragma: no cover - Windows
            _CONTEXT = multiprocessing.get_context("spawn")
    return _CONTEXT


def _run_child(spec: dict[str, Any], out: str, threads: int) -> None:
    """Body of a run's process: execute the run, its output going to ``<run>/run.log``."""
    import traceback

    # the kernels that papermill starts inherit this environment: the per-run thread budget
    os.environ.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), MPLBACKEND="Agg")
    run_dir = Path(out).resolve() / "runs" / RunSpec.from_dict(spec).run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    log = os.open(run_dir / "run.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    try:
        execute_run(spec, out)
    except Exception as err:  # noqa: BLE001 - reported in run.log, ended by the exit status
        traceback.print_exc()
        # the last line of the log: what the parent reports
        print(f"{_CAUSE}{err if isinstance(err, RunError) else f'{type(err).__name__}: {err}'}",
              file=sys.stderr, flush=True)
        sys.exit(1)


_CAUSE = "error: "


def _cause(log: str) -> str:
    """The last ``error: ...`` line of a run's log (the run's one-line cause), else its last line."""
    lines = [line for line in log.splitlines() if line.strip()]
    causes = [line[len(_CAUSE):] for line in lines if line.startswith(_CAUSE)]
    return causes[-1] if causes else (lines[-1] if lines else "no output")


def _run_process(spec: RunSpec, out: Path, threads: int) -> tuple[RunSpec, int, str]:
    import importlib

    # the target by its module name, so that it pickles the same under `python -m focalcal.lab.sweep`
    target = importlib.import_module("focalcal.lab.sweep")._run_child
    proc = _process_context().Process(target=target, args=(spec.to_dict(), str(out), threads),
                                      name=f"run {spec.run_id}")
    proc.start()
    proc.join()
    log_path = out.resolve() / "runs" / spec.run_id / "run.log"
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    return spec, proc.exitcode, _cause(log) if proc.exitcode else ""


class _Progress:
    """A tqdm bar on a terminal, else one line per finished run; both estimate the time left
    from the mean time per finished run (runs differ in cost: the last few alone mislead)."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm.auto import tqdm

        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.lines = enabled and not sys.stderr.isatty()
        self.bar = tqdm(total=total, desc="runs", unit="run", smoothing=0,
                        disable=not enabled or self.lines)

    def write(self, message: str) -> None:
        self.bar.write(message)

    def finished(self, spec: RunSpec) -> None:
        self.done += 1
        self.bar.update(1)
        if self.lines:
            from tqdm import tqdm

            elapsed = time.monotonic() - self.t0
            left = elapsed / self.done * (self.total - self.done)
            print(f"{self.done}/{self.total} runs finished (last: {spec.run_id}), "
                  f"{tqdm.format_interval(elapsed)} elapsed, about {tqdm.format_interval(left)} left",
                  flush=True)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


def _run_local(todo: list[RunSpec], out: Path, jobs: int, progress: bool) -> list[tuple[RunSpec, str]]:
    threads = max(1, (os.cpu_count() or 1) // jobs)
    failures = []
    with ThreadPoolExecutor(max_workers=jobs) as pool, _Progress(len(todo), progress) as bar:
        futures = [pool.submit(_run_process, r, out, threads) for r in todo]
        for fut in as_completed(futures):
            spec, rc, cause = fut.result()
            if rc != 0:
                failures.append((spec, cause))
                bar.write(f"FAILED {spec.run_id}: {cause} (log: {out / 'runs' / spec.run_id / 'run.log'})")
            bar.finished(spec)
    return failures


def _run_submitit(todo: list[RunSpec], out: Path, progress: bool, cluster: str | None,
                  slurm: dict[str, Any]) -> list[tuple[RunSpec, str]]:
    # job arrays, requeue from the trainer's checkpoint, waiting without sacct: focalcal.lab.slurm
    from . import slurm as slurm_

    jobs, on_slurm = slurm_.submit(todo, out, slurm, cluster)
    if progress:
        for line in slurm_.plan(todo, slurm) if on_slurm else ():
            print(line, flush=True)
    failures = []
    with _Progress(len(jobs), progress) as bar:
        def finished(i: int, error: str | None) -> None:
            if error is not None:
                failures.append((todo[i], error))
                bar.write(f"FAILED {todo[i].run_id}: {error}")
            bar.finished(todo[i])

        slurm_.wait(jobs, on_slurm, finished)
    return failures


def collect(out: str | os.PathLike, runs: Iterable[RunSpec] | None = None):
    """Gather every finished run under ``out`` into one tidy table (also saved as results.csv).

    One row per run x calibration method, with the columns ``run``, ``method``, the run's
    specification (``dataset``, ``model``, ``loss``, ``loss_label``, ``seed``, loss parameters
    as ``param_<name>``) and the metrics that ``posthoc_calibration`` reported.
    """
    import pandas as pd

    out = Path(out)
    wanted = None if runs is None else {r.run_id for r in runs}
    rows = []
    for path in sorted((out / "runs").glob(f"*/{RESULT}")):
        rec = json.loads(path.read_text())
        if wanted is not None and rec["run"] not in wanted:
            continue
        spec = rec["spec"]
        base = {"run": rec["run"], "dataset": spec["dataset"], "model": spec["model"],
                "loss": spec["loss"], "loss_label": spec["loss_label"], "seed": spec["seed"],
                "epochs": spec["train"].get("epochs"),
                **{f"param_{k}": v for k, v in spec["loss_params"].items()}}
        for row in rec["rows"]:
            rows.append({**base, **row})
    table = pd.DataFrame(rows)
    if len(table):
        front = ["run", "method"]
        table = table[front + [c for c in table.columns if c not in front]]
    atomic_write_text(out / "results.csv", table.to_csv(index=False))
    return table


def select_runs(profile: str, only: str | None = None, *, shrunk: bool = False) -> list[RunSpec]:
    """The runs of ``profile`` (its :func:`~focalcal.lab.profiles.shrink` version with ``shrunk``), or those whose run id
    matches the ``fnmatch`` pattern ``only``."""
    import fnmatch

    runs = get_profile(profile, shrunk=shrunk).expand()
    if only is None:
        return runs
    chosen = [r for r in runs if fnmatch.fnmatchcase(r.run_id, only)]
    if not chosen:
        raise ValueError(f"only={only!r} matches none of the {len(runs)} run ids of profile "
                         f"{profile!r} (see --list); e.g. 'gaussian_mixture-*' or '*-s0-*'")
    return chosen


def run_sweep(profile: str, out: str | os.PathLike | None = None, *, executor: str = "local",
              jobs: int = 1, progress: bool = True, only: str | None = None,
              submitit_cluster: str | None = None, slurm: dict[str, Any] | None = None,
              shrunk: bool = False):
    """Execute every pending run of ``profile`` and return the collected results table.

    ``out`` defaults to ``runs/<profile>`` under the working directory (``runs/<profile>-shrunk``
    with ``shrunk``: the profile's :func:`~focalcal.lab.profiles.shrink` version, e.g. the gpu profile's runs on a CPU in
    minutes); ``only`` (an ``fnmatch`` pattern on the run id) restricts the sweep to the runs it
    matches.
    ``executor="local"`` runs ``jobs`` runs at a time, each in its own process (started by
    the fork server of ``multiprocessing``, its output in ``<run>/run.log``), with
    ``cpu_count // jobs`` threads per run; ``"slurm"`` submits the runs through submitit as job
    arrays (:mod:`focalcal.lab.slurm`; ``slurm`` holds submitit's parameters, e.g.
    ``{"timeout_min": 60, "slurm_partition": "gpu", "slurm_array_parallelism": 8}``;
    ``submitit_cluster="local"`` runs them as local processes, for tests). A script that calls
    this function must do so under ``if __name__ == "__main__":``, as multiprocessing requires
    (each run's process imports the main module again). The templates are checked
    (:func:`check_templates`) before any run starts.

    Raises ``RuntimeError`` listing the failed runs with their causes (after the others finished
    and the table of the finished ones was written).
    """
    if executor not in ("local", "slurm"):
        raise ValueError(f"executor must be 'local' or 'slurm'; got {executor!r}")
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer; got {jobs!r}")
    runs = select_runs(profile, only, shrunk=shrunk)
    out = default_out(profile, shrunk) if out is None else Path(out)
    todo = pending(runs, out)
    if todo:
        check_templates(todo)
    out.mkdir(parents=True, exist_ok=True)
    write_profile(out, profile, shrunk=shrunk)
    if progress:
        subset = f" matching {only!r}" if only is not None else ""
        print(f"profile {profile!r}: {len(runs)} runs{subset}, {len(runs) - len(todo)} already done, "
              f"{len(todo)} to run ({executor}{f', {jobs} at a time' if executor == 'local' else ''}) -> {out}",
              flush=True)
    if todo and executor == "local":
        failures = _run_local(todo, out, jobs, progress)
    elif todo:
        failures = _run_submitit(todo, out, progress, submitit_cluster, slurm or {})
    else:
        failures = []
    table = collect(out, runs)
    if failures:
        msg = "\n".join(f"- {s.run_id}: {cause}" for s, cause in failures)
        logs = f"{out / 'runs'}/<run>/run.log" if executor == "local" else f"{out / 'submitit'}/<job>/"
        raise RuntimeError(f"{len(failures)} of {len(todo)} runs failed (their logs: {logs}):\n{msg}")
    return table


def write_profile(out: str | os.PathLike, profile: str, *, shrunk: bool = False) -> Path:
    """Write ``out/profile.json``: which profile the folder holds (``profile``, ``shrunk``), its
    description, and the run ids of each of its roles (:meth:`~focalcal.lab.profiles.Profile.roles`),
    which is how the book's pages find their runs (:func:`focalcal.lab.results.runs_for`)."""
    p = get_profile(profile, shrunk=shrunk)
    path = Path(out) / PROFILE_FILE
    atomic_write_json(path, {"profile": profile, "shrunk": shrunk, "description": p.description,
                             "roles": p.roles()})
    return path


def default_out(profile: str, shrunk: bool = False) -> Path:
    """``runs/<profile>``, or ``runs/<profile>-shrunk`` for the :func:`~focalcal.lab.profiles.shrink` version."""
    return Path("runs", f"{profile}-shrunk" if shrunk else profile)


def _setting(value: Any) -> str:
    """A setting as one token of the listing (no spaces): 3.0 -> '3', [5, 13] -> '[5,13]'."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def loss_key(lo: Loss) -> str:
    """The one label of a loss in the listing, whatever a profile's role calls it: its
    ``make_loss`` name and parameters, e.g. ``ce``, ``focal(gamma=3)``."""
    if not lo.params:
        return lo.name
    return lo.name + "(" + ",".join(f"{k}={_setting(v)}" for k, v in lo.params) + ")"


def list_table(runs: Sequence[RunSpec], out: Path, roles: dict[str, list[str]] | None = None
               ) -> list[tuple[str, ...]]:
    """The rows of ``--list`` (a header first): status, role, dataset, network, loss
    (:func:`loss_key`), seed, each training setting and network parameter whose value differs
    between the listed runs, and the run id; so that no two rows read the same but for their id."""
    role_of: dict[str, list[str]] = {}
    for role, ids in (roles or {}).items():
        for run_id in ids:
            role_of.setdefault(run_id, []).append(role)

    def varying(dicts: list[dict[str, Any]]) -> list[str]:
        keys = sorted({k for d in dicts for k in d})
        return [k for k in keys if len({_setting(d.get(k, "-")) for d in dicts}) > 1]

    trains = [dict(r.train) for r in runs]
    nets = [dict(r.model_params) for r in runs]
    train_keys, net_keys = varying(trains), varying(nets)
    rows = [("status", "role", "dataset", "network", "loss", "seed", *train_keys, *net_keys, "run")]
    for r, train, net in zip(runs, trains, nets):
        done = "done" if (out / "runs" / r.run_id / RESULT).is_file() else "pending"
        rows.append((done, ",".join(role_of.get(r.run_id, ["-"])), r.dataset, r.model, loss_key(r.loss),
                     str(r.seed), *(_setting(train.get(k, "-")) for k in train_keys),
                     *(_setting(net.get(k, "-")) for k in net_keys), r.run_id))
    return rows


def _list_runs(runs: list[RunSpec], out: Path, roles: dict[str, list[str]] | None = None) -> None:
    rows = list_table(runs, out, roles)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)) + "  " + row[-1])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m focalcal.lab.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", choices=sorted(PROFILES), default="cpu",
                   help="which table of runs to execute (default: cpu)")
    p.add_argument("--out", default=None,
                   help="results folder, resumed if it exists (default: runs/<profile>)")
    p.add_argument("--executor", choices=("local", "slurm"), default="local")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (local executor)")
    p.add_argument("--only", metavar="PATTERN", default=None,
                   help="only the runs whose id matches this fnmatch pattern, e.g. 'fashion_mnist-*-s0-*'")
    p.add_argument("--list", action="store_true",
                   help="print the runs (done or pending, role, dataset, network, loss, seed, the "
                        "training settings that differ between them) and exit")
    p.add_argument("--shrink", action="store_true",
                   help="run the profile's tiny version (1 epoch, a few batches, small networks; "
                        "sweep.shrink): every code path of e.g. the gpu profile on a CPU in minutes "
                        "(default --out: runs/<profile>-shrunk)")
    p.add_argument("--slurm-partition", default=None)
    p.add_argument("--slurm-time", type=int, default=None, metavar="MINUTES",
                   help="time limit of each SLURM job (default 1440); a job stopped by it is requeued "
                        "and resumes from its checkpoint")
    p.add_argument("--slurm-gpus", type=int, default=None, metavar="N", help="GPUs per SLURM job (default 1)")
    p.add_argument("--slurm-cpus", type=int, default=None, metavar="N", help="cores per SLURM job (default 8)")
    p.add_argument("--slurm-array-parallelism", type=int, default=None, metavar="N",
                   help="runs of a SLURM job array running at a time (default 64)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would run (with --executor slurm: each sbatch, its job array and "
                        "resources) and exit")
    args = p.parse_args(argv)
    out = Path(args.out) if args.out is not None else default_out(args.profile, args.shrink)
    slurm = {key: value for key, value in (
        ("slurm_partition", args.slurm_partition), ("timeout_min", args.slurm_time),
        ("slurm_gpus_per_node", args.slurm_gpus), ("cpus_per_task", args.slurm_cpus),
        ("slurm_array_parallelism", args.slurm_array_parallelism)) if value is not None}
    try:
        if args.list:
            _list_runs(select_runs(args.profile, args.only, shrunk=args.shrink), out,
                       get_profile(args.profile, shrunk=args.shrink).roles())
            return 0
        if args.dry_run:
            runs = select_runs(args.profile, args.only, shrunk=args.shrink)
            todo = pending(runs, out)
            print(f"profile {args.profile!r}: {len(runs)} runs, {len(runs) - len(todo)} already done, "
                  f"{len(todo)} to run ({args.executor}) -> {out}")
            if args.executor == "slurm":
                from .slurm import plan

                print("\n".join(plan(todo, slurm)))
            return 0
        table = run_sweep(args.profile, out, executor=args.executor, jobs=args.jobs, only=args.only,
                          slurm=slurm, shrunk=args.shrink)
    except (RuntimeError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{len(table)} result rows -> {out / 'results.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
