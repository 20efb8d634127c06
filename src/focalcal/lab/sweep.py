"""Run a profile of experiments as papermill notebooks, locally or on SLURM, and collect the results.

::

    python -m focalcal.lab.sweep [--profile {smoke,cpu,gpu,paper}] [--out DIR] [--executor local|slurm]
                                 [--jobs N] [--only PATTERN] [--list] [--shrink]
                                 [--dry-run] [--slurm-partition P] [--slurm-time MINUTES]
                                 [--slurm-gpus N] [--slurm-cpus N] [--slurm-array-parallelism N]

A *profile* is a small table of runs (datasets x models x losses x seeds, see
:data:`focalcal.lab.profiles.PROFILES`). Each run is executed by :func:`focalcal.lab.runner.execute_run`
(its two papermill templates, in one process of its own here, or as a SLURM job).

``--profile`` defaults to ``cpu`` and ``DIR`` to ``runs/<profile>`` under the working directory;
``--only`` runs the runs whose id matches an ``fnmatch`` pattern, ``--list`` shows each run and
whether it is done, ``--dry-run`` what would be submitted. With ``--executor slurm`` the runs go to
SLURM as job arrays, one ``sbatch`` per array, and a job stopped by its time limit or by preemption
is requeued and resumes from its checkpoint (:mod:`focalcal.lab.slurm`). The layout of ``DIR`` is
:mod:`focalcal.lab.runfolder`'s.

Resuming: a run that finished (its ``result.json``, in this format) is skipped, so after a crash or SIGKILL the same
command finishes the remaining runs without repeating a finished one; every file is written
atomically, so nothing half-written is ever taken for a result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import runfolder
from .profiles import PROFILES, get_profile
from .runner import RunError, check_templates, execute_run
from .spec import Loss, RunSpec

# --------------------------------------------------------------------------------------------
# the sweep
# --------------------------------------------------------------------------------------------

def pending(runs: Iterable[RunSpec], out: Path) -> list[RunSpec]:
    return [r for r in runs if not runfolder.finished(runfolder.run_path(out, r.run_id))]


# Not focalcal.lab.sweep itself: under `python -m focalcal.lab.sweep` each worker process executes it again
# as its main module, and runpy warns when that module is already imported.
_PRELOAD = ("focalcal.lab.io", "papermill", "jupytext", "nbformat")
_CONTEXT = None


def _process_context():
    # Worker processes forked from a fork server that has imported papermill and torch once: a
    # worker then starts in milliseconds instead of paying about 3 s of imports. The server is
    # single-threaded, so forking it is safe (forking this multi-threaded parent would not be);
    # "spawn" where there is no fork.
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing

        if "forkserver" in multiprocessing.get_all_start_methods():
            _CONTEXT = multiprocessing.get_context("forkserver")
            _CONTEXT.set_forkserver_preload(list(_PRELOAD))
        else:  # pragma: no cover - Windows
            _CONTEXT = multiprocessing.get_context("spawn")
    return _CONTEXT


_CAUSE = "error: "


def _one_line(err: BaseException) -> str:
    return str(err) if isinstance(err, RunError) else f"{type(err).__name__}: {err}"


def _worker_main(conn: Any, out: str, threads: int) -> None:
    """Body of a local worker: execute the runs it is sent, one after the other, in one kernel
    kept across them (:class:`focalcal.lab.runner.Kernel`), each run's output in its run log;
    answer ``(0, "")`` or ``(1, cause)`` per run, stop on ``None`` or when the sweep is gone."""
    import traceback

    from .runner import Kernel

    # the kernel inherits this environment: the per-run thread budget
    os.environ.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), MPLBACKEND="Agg")
    kernel = Kernel()
    try:
        while True:
            try:
                spec = conn.recv()
            except EOFError:  # the sweep is gone
                return
            if spec is None:
                return
            run_dir = runfolder.run_path(Path(out).resolve(), RunSpec.from_dict(spec).run_id)
            run_dir.mkdir(parents=True, exist_ok=True)
            log = os.open(runfolder.log_path(run_dir), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            try:
                execute_run(spec, out, kernel)
                answer = (0, "")
            except Exception as err:  # noqa: BLE001 - reported in the run's log and to the sweep
                traceback.print_exc()
                print(f"{_CAUSE}{_one_line(err)}", file=sys.stderr, flush=True)
                answer = (1, _one_line(err))
            sys.stdout.flush()
            sys.stderr.flush()
            conn.send(answer)
    finally:
        kernel.close()


def _cause(log: str) -> str:
    """The last ``error: ...`` line of a run's log (the run's one-line cause), else its last line."""
    lines = [line for line in log.splitlines() if line.strip()]
    causes = [line[len(_CAUSE):] for line in lines if line.startswith(_CAUSE)]
    return causes[-1] if causes else (lines[-1] if lines else "no output")


class _Worker:
    """A local worker process and its end of the pipe (:func:`_worker_main`)."""

    def __init__(self, out: Path, threads: int) -> None:
        import importlib

        ctx = _process_context()
        self.conn, child = ctx.Pipe()
        # the target by its module name, so that it pickles the same under `python -m focalcal.lab.sweep`
        target = importlib.import_module("focalcal.lab.sweep")._worker_main
        self.proc = ctx.Process(target=target, args=(child, str(out), threads), name="sweep worker")
        self.proc.start()
        child.close()

    def run(self, spec: RunSpec, out: Path) -> tuple[int, str]:
        """Execute ``spec``; ``(exit status, cause)``. A worker that died is not used again."""
        try:
            self.conn.send(spec.to_dict())
            while not self.conn.poll(1.0):
                if not self.proc.is_alive():
                    raise EOFError
            return self.conn.recv()
        except (EOFError, OSError):
            self.proc.join()
            log_path = runfolder.log_path(runfolder.run_path(out.resolve(), spec.run_id))
            log = log_path.read_text(errors="replace") if log_path.is_file() else ""
            return (self.proc.exitcode or 1), f"the worker died (exit {self.proc.exitcode}): {_cause(log)}"

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def stop(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.proc.join()
        self.conn.close()


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
    # ``jobs`` workers, each executing runs one after the other in one kernel kept across them
    # (a run's kernel start and imports, about 3.5 s, paid once per worker); a worker that died
    # is replaced for the next run
    import queue as queue_

    threads = max(1, (os.cpu_count() or 1) // jobs)
    waiting: queue_.Queue = queue_.Queue()
    for spec in todo:
        waiting.put(spec)
    done: queue_.Queue = queue_.Queue()

    def slot() -> None:
        worker = None
        try:
            while True:
                try:
                    spec = waiting.get_nowait()
                except queue_.Empty:
                    return
                try:
                    if worker is None:
                        worker = _Worker(out, threads)
                    rc, cause = worker.run(spec, out)
                except Exception as err:  # noqa: BLE001 - the run fails, the sweep goes on
                    rc, cause = 1, f"could not run it in a worker: {_one_line(err)}"
                if worker is not None and not worker.alive:
                    worker = None
                done.put((spec, rc, cause))
        finally:
            if worker is not None:
                worker.stop()

    failures = []
    with ThreadPoolExecutor(max_workers=jobs) as pool, _Progress(len(todo), progress) as bar:
        slots = [pool.submit(slot) for _ in range(min(jobs, len(todo)))]
        for _ in todo:
            while True:
                try:
                    spec, rc, cause = done.get(timeout=5)
                    break
                except queue_.Empty:
                    if all(f.done() for f in slots) and done.empty():
                        for f in slots:
                            f.result()  # a slot's own error, else:
                        raise RuntimeError("the sweep's workers stopped before every run was done")
            if rc != 0:
                failures.append((spec, cause))
                bar.write(f"FAILED {spec.run_id}: {cause} (log: {runfolder.log_path(runfolder.run_path(out, spec.run_id))})")
            bar.finished(spec)
        for fut in slots:
            fut.result()
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
    for rec in runfolder.finished_records(out):
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
    runfolder.write_results(out, table)
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
    ``executor="local"`` runs ``jobs`` runs at a time in ``jobs`` worker processes (started by
    the fork server of ``multiprocessing``), each executing its runs one after the other in one
    kernel kept across them and reset between them (each run's output in its run log), with
    ``cpu_count // jobs`` threads per run; ``"slurm"`` submits the runs through submitit as job
    arrays (:mod:`focalcal.lab.slurm`; ``slurm`` holds submitit's parameters, e.g.
    ``{"timeout_min": 60, "slurm_partition": "gpu", "slurm_array_parallelism": 8}``;
    ``submitit_cluster="local"`` runs them as local processes, for tests). A script that calls
    this function must do so under ``if __name__ == "__main__":``, as multiprocessing requires
    (each worker process imports the main module again). The templates are checked
    (:func:`focalcal.lab.runner.check_templates`) before any run starts.

    Raises ``RuntimeError`` listing the failed runs with their causes (after the others finished
    and the table of the finished ones was written).
    """
    if executor not in ("local", "slurm"):
        raise ValueError(f"executor must be 'local' or 'slurm'; got {executor!r}")
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer; got {jobs!r}")
    runs = select_runs(profile, only, shrunk=shrunk)
    out = runfolder.default_out(profile, shrunk) if out is None else Path(out)
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
        logs = f"{runfolder.log_path(runfolder.run_path(out, '<run>'))}" if executor == "local" else f"{out / 'submitit'}/<job>/"
        raise RuntimeError(f"{len(failures)} of {len(todo)} runs failed (their logs: {logs}):\n{msg}")
    return table


def write_profile(out: str | os.PathLike, profile: str, *, shrunk: bool = False) -> Path:
    """Write ``out/profile.json``: which profile the folder holds (``profile``, ``shrunk``), its
    description, and the run ids of each of its roles (:meth:`~focalcal.lab.spec.Profile.roles`),
    which is how the book's pages find their runs (:func:`focalcal.lab.results.runs_for`)."""
    p = get_profile(profile, shrunk=shrunk)
    return runfolder.write_profile(out, {"profile": profile, "shrunk": shrunk,
                                         "description": p.description, "roles": p.roles()})


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
        done = "done" if runfolder.finished(runfolder.run_path(out, r.run_id)) else "pending"
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
                        "profiles.shrink): every code path of e.g. the gpu profile on a CPU in minutes "
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
    out = Path(args.out) if args.out is not None else runfolder.default_out(args.profile, args.shrink)
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
    print(f"{len(table)} result rows -> the results table of {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
