"""A sweep's runs on a SLURM cluster through submitit: job arrays, requeue, waiting without ``sacct``.

What :func:`focalcal.lab.sweep.run_sweep` does with ``executor="slurm"``:

- **Job arrays.** The pending runs go to SLURM as job arrays of at most :data:`MAX_ARRAY` runs
  (SLURM's default ``MaxArraySize`` is 1001), one ``sbatch`` per array, each with a concurrency
  limit (``sbatch --array=0-N%P``, ``array_parallelism``): the paper profile's 929 runs are one
  submission. :func:`plan` says what would be submitted (``--dry-run``).
- **Requeue.** Each run is a :class:`RunJob`, a ``submitit.helpers.Checkpointable``: SLURM signals
  a job (``USR2``, ``signal_delay_s`` before its time limit, or when it is preempted), submitit
  calls :meth:`RunJob.checkpoint` and requeues the job, and the requeued job executes the run
  again, which resumes from the trainer's per-epoch checkpoint in the run folder (a finished run
  is not executed again).
- **Waiting.** A job is finished when submitit's result file exists (written when the run
  returns or raises); a job that left the queue (``squeue``) without one was cancelled or killed
  (``scancel``, its time limit without a requeue, a node failure) and is reported as failed. No
  ``sacct``: a cluster without accounting (slurmdbd) works as well as one with it.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import submitit

from .spec import RunSpec

#: runs per job array (SLURM's default MaxArraySize of 1001 allows array indices 0-1000)
MAX_ARRAY = 1000

#: what a job asks for unless told otherwise: a day, one GPU, 8 cores, 64 array tasks at a time
DEFAULTS: dict[str, Any] = {"timeout_min": 24 * 60, "slurm_gpus_per_node": 1, "cpus_per_task": 8,
                            "slurm_array_parallelism": 64}


class RunJob(submitit.helpers.Checkpointable):
    """One run as a submitit job: ``RunJob()(spec, out)`` executes it
    (:func:`focalcal.lab.runner.execute_run`) with the job's cores as its thread budget.

    Checkpointable: when SLURM stops the job (time limit, preemption), :meth:`checkpoint` hands
    submitit the same call to requeue; it resumes from the trainer's checkpoint.
    """

    def __call__(self, spec: dict[str, Any], out: str) -> dict[str, Any]:
        from .runner import execute_run

        cpus = os.environ.get("SLURM_CPUS_PER_TASK")
        if cpus:  # the notebooks' kernels inherit this: as many threads as the job has cores
            os.environ.update(OMP_NUM_THREADS=cpus, MKL_NUM_THREADS=cpus)
        os.environ.setdefault("MPLBACKEND", "Agg")
        return execute_run(spec, out)

    def checkpoint(self, spec: dict[str, Any], out: str) -> submitit.helpers.DelayedSubmission:
        # Nothing to save here: the trainer checkpoints every epoch into the run folder, and
        # execute_run, called again by the requeued job, resumes from that checkpoint.
        return submitit.helpers.DelayedSubmission(RunJob(), spec, out)


def parameters(slurm: dict[str, Any] | None = None) -> dict[str, Any]:
    """submitit's ``update_parameters`` keywords: :data:`DEFAULTS` updated by ``slurm`` (no GPU
    option at all for ``slurm_gpus_per_node=0``: a CPU-only job asks for none). Raises
    ``ValueError`` naming a count or time that is not a positive integer (GPUs: >= 0)."""
    from .._validation import check_int

    params = {**DEFAULTS, **(slurm or {})}
    for name, minimum in (("timeout_min", 1), ("cpus_per_task", 1), ("slurm_gpus_per_node", 0),
                          ("slurm_array_parallelism", 1)):
        params[name] = check_int(params[name], name, minimum=minimum)
    if not params["slurm_gpus_per_node"]:
        params.pop("slurm_gpus_per_node", None)
    return params


def arrays(todo: Sequence[RunSpec], size: int = MAX_ARRAY) -> list[list[RunSpec]]:
    """``todo`` in profile order, cut into job arrays of at most ``size`` runs."""
    return [list(todo[i:i + size]) for i in range(0, len(todo), size)]


def plan(todo: Sequence[RunSpec], slurm: dict[str, Any] | None = None) -> list[str]:
    """What :func:`submit` would submit, one line per ``sbatch``: its runs, its ``--array``
    option and the resources of each run (``--dry-run`` prints these lines)."""
    p = parameters(slurm)
    resources = (f"per run: time={p['timeout_min']} min, gpus={p.get('slurm_gpus_per_node') or 0}, "
                 f"cpus={p['cpus_per_task']}, partition={p.get('slurm_partition') or '(the default)'}")
    lines = []
    for i, chunk in enumerate(arrays(todo), 1):
        n = len(chunk)
        how = (f"--array=0-{n - 1}%{min(n, p['slurm_array_parallelism'])}" if n > 1
               else "one job (not an array)")
        lines.append(f"sbatch {i}: {n} run{'s' * (n != 1)} ({how}), {resources}; "
                     f"{chunk[0].run_id}{f' ... {chunk[-1].run_id}' if n > 1 else ''}")
    return lines


def submit(todo: Sequence[RunSpec], out: Path, slurm: dict[str, Any] | None = None,
           cluster: str | None = None) -> tuple[list[submitit.Job], bool]:
    """Submit ``todo`` as job arrays (:func:`arrays`); returns the jobs, in the order of ``todo``,
    and whether they went to SLURM (``cluster="local"``: local processes, for tests)."""
    executor = submitit.AutoExecutor(folder=Path(out) / "submitit" / "%j", cluster=cluster)
    params = parameters(slurm)
    on_slurm = executor.cluster == "slurm"
    if not on_slurm:  # the local cluster knows no slurm_* options
        params = {k: v for k, v in params.items() if not k.startswith("slurm_")}
    executor.update_parameters(**params)
    jobs: list[submitit.Job] = []
    for chunk in arrays(todo):
        with executor.batch():  # one sbatch per array
            chunk_jobs = [executor.submit(RunJob(), r.to_dict(), str(out)) for r in chunk]
        jobs += chunk_jobs
    return jobs, on_slurm


def in_queue(job_ids: Sequence[str]) -> set[str] | None:
    """The ids among ``job_ids`` (``"123"`` or an array task's ``"123_4"``) that ``squeue`` still
    lists (pending, running, requeued, completing), or ``None`` when squeue did not answer."""
    arrays_ = sorted({j.split("_")[0] for j in job_ids})
    proc = subprocess.run(["squeue", "--noheader", "--array", "--format=%i", f"--jobs={','.join(arrays_)}"],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        # jobs that ended long enough ago (MinJobAge) are unknown to slurmctld
        return set() if "Invalid job id" in proc.stderr else None
    return set(proc.stdout.split()) & set(job_ids)


def _cause(err: Exception) -> str:
    """The last line of the run's traceback in submitit's error (between its two rules of
    dashes), else the error's last line."""
    text = str(err)
    parts = text.split("\n----------------------\n")
    lines = [line.strip() for line in (parts[1] if len(parts) >= 3 else text).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


def wait(jobs: Sequence[submitit.Job], on_slurm: bool, finished: Callable[[int, str | None], None],
         *, queue: Callable[[Sequence[str]], set[str] | None] = in_queue, poll_s: float = 1.0,
         max_poll_s: float = 30.0) -> None:
    """Wait for every job; call ``finished(index, error)`` as each ends (``error`` ``None`` for a
    run that completed, else its one-line cause).

    A job has ended when submitit's result file exists; on SLURM also when it has been missing
    from ``squeue`` at two polls in a row without one (cancelled or killed). The poll interval
    grows from ``poll_s`` to ``max_poll_s``.
    """
    left = dict(enumerate(jobs))
    gone_once: set[int] = set()
    t0 = time.monotonic()
    while left:
        for i, job in list(left.items()):
            if job.paths.result_pickle.exists() or (not on_slurm and job.done()):
                del left[i]
                try:
                    job.result()
                except Exception as err:  # noqa: BLE001 - a failed run is reported, the others go on
                    finished(i, f"{_cause(err)} (log: {job.paths.stderr})")
                else:
                    finished(i, None)
        if on_slurm and left:
            listed = queue([job.job_id for job in left.values()])
            if listed is not None:
                gone = {i for i, job in left.items() if job.job_id not in listed}
                for i in gone & gone_once:
                    # the result file may have appeared since the loop above looked
                    if not left[i].paths.result_pickle.exists():
                        job = left.pop(i)
                        finished(i, f"SLURM job {job.job_id} left the queue without a result "
                                    f"(cancelled, or killed at its time limit) (log: {job.paths.stderr})")
                gone_once = gone
        if left:
            time.sleep(min(max_poll_s, max(poll_s, (time.monotonic() - t0) / 20)))
