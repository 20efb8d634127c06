"""focalcal.lab.sweep on SLURM: job arrays and their dry run (no cluster), and the sweep on a real
single-node cluster (munged, slurmctld, slurmd started by a session fixture, tests/slurm_cluster.py):
the smoke profile's runs as the local executor computes them, a cancelled run finished by running
the sweep again, a signalled (timed-out or preempted) run requeued and resumed from its checkpoint."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from focalcal.lab import profiles, results, runfolder, slurm, spec, sweep
from slurm_cluster import SlurmCluster, why_not_startable
from test_sweep import TINY_TRAIN, processes_inside

ROOT = Path(__file__).resolve().parents[1]

# what the test cluster offers a job: no GPU, one of the machine's two cores (two jobs at a time)
SLURM_ARGS = ["--slurm-gpus", "0", "--slurm-cpus", "1", "--slurm-time", "30"]


# ------------------------------------------------------------------ job arrays (no cluster) ---

def test_paper_profile_is_a_handful_of_array_submissions(capsys, tmp_path):
    assert sweep.main(["--profile", "paper", "--executor", "slurm", "--dry-run", "--out", str(tmp_path),
                       "--slurm-partition", "gpu", "--slurm-array-parallelism", "20"]) == 0
    head, *sbatch = capsys.readouterr().out.splitlines()
    runs = profiles.get_profile("paper").expand()
    n = len(runs)
    assert head == f"profile 'paper': {n} runs, 0 already done, {n} to run (slurm) -> {tmp_path}"
    assert n == 1080                        # two sbatch calls: SLURM's default MaxArraySize is 1 000
    assert sbatch == [f"sbatch 1: 1000 runs (--array=0-999%20), per run: time=1440 min, gpus=1, cpus=8, "
                      f"partition=gpu; {runs[0].run_id} ... {runs[999].run_id}",
                      f"sbatch 2: {n - 1000} runs (--array=0-{n - 1001}%{min(20, n - 1000)}), per run: time=1440 min, gpus=1, "
                      f"cpus=8, partition=gpu; {runs[1000].run_id} ... {runs[-1].run_id}"]
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing was written
    # finished runs are not submitted again: 1 041 pending runs, two arrays still
    done = tmp_path / "runs" / runs[0].run_id
    done.mkdir(parents=True)
    runfolder.write_result(done, {})
    assert sweep.main(["--profile", "paper", "--executor", "slurm", "--dry-run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{n} runs, 1 already done, {n - 1} to run" in out and "1000 runs (--array=0-999%64)" in out
    assert f"{n - 1001} runs (--array=0-{n - 1002}%{min(64, n - 1001)})" in out  # never above the array


def test_arrays_hold_at_most_max_array_runs():
    runs = (profiles.get_profile("paper").expand() * 3)[:2787]
    chunks = slurm.arrays(runs)
    assert [len(c) for c in chunks] == [1000, 1000, 787] and sum(chunks, []) == runs
    lines = slurm.plan(runs, {"slurm_array_parallelism": 500, "timeout_min": 60})
    assert [line.split(",")[0] for line in lines] == [
        "sbatch 1: 1000 runs (--array=0-999%500)", "sbatch 2: 1000 runs (--array=0-999%500)",
        "sbatch 3: 787 runs (--array=0-786%500)"]
    (one,) = slurm.plan(runs[:1])
    assert one.startswith("sbatch 1: 1 run (one job (not an array)), per run: time=1440 min")
    assert slurm.parameters({"cpus_per_task": 2}) == {**slurm.DEFAULTS, "cpus_per_task": 2}
    assert "slurm_gpus_per_node" not in slurm.parameters({"slurm_gpus_per_node": 0})
    for name, bad in (("timeout_min", 0), ("cpus_per_task", 2.5), ("slurm_gpus_per_node", -1),
                      ("slurm_array_parallelism", 0)):
        with pytest.raises(ValueError, match=f"{name} must be an integer >= "):
            slurm.parameters({name: bad})


def test_bad_slurm_option_is_one_error_line(capsys, tmp_path):
    assert sweep.main(["--profile", "smoke", "--executor", "slurm", "--dry-run", "--out", str(tmp_path),
                       "--slurm-array-parallelism", "0"]) == 1
    assert capsys.readouterr().err == "error: slurm_array_parallelism must be an integer >= 1, got 0\n"


def test_local_dry_run_lists_no_submission(capsys, tmp_path):
    assert sweep.main(["--profile", "smoke", "--dry-run", "--out", str(tmp_path), "--only", "charoen*"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"profile 'smoke': 2 runs, 0 already done, 2 to run (local) -> {tmp_path}"]


class FakeJob:
    """What slurm.wait reads of a submitit job: its id, result file, log, result()."""

    def __init__(self, folder: Path, job_id: str, outcome: str | None) -> None:
        self.job_id, self.outcome = job_id, outcome
        self.paths = SimpleNamespace(result_pickle=folder / f"{job_id}_result.pkl", stderr=folder / f"{job_id}.err")

    def finish(self) -> None:
        self.paths.result_pickle.write_text(self.outcome or "")

    def result(self):
        if self.outcome == "error":  # submitit's message, the run's traceback between two rules
            raise RuntimeError("Job (task=0) failed during processing with trace:\n----------------------\n"
                               "Traceback (most recent call last):\n  ...\nValueError: gama is not a parameter\n"
                               "----------------------\nYou can check full logs ... at paths:\n  - a.err\n  - a.out")
        return {}


def test_wait_reports_each_job_as_it_ends(tmp_path):
    ok, failed, cancelled, requeued = jobs = [FakeJob(tmp_path, f"7_{i}", outcome) for i, outcome in
                                              enumerate(("success", "error", None, "success"))]
    polls = []

    def queue(ids):  # squeue: the cancelled job leaves after the first poll, the requeued one stays
        polls.append(sorted(ids))
        if len(polls) == 1:
            ok.finish()
            failed.finish()
            return {"7_0", "7_1", "7_2", "7_3"}
        if len(polls) == 4:
            requeued.finish()  # its result appears while squeue still lists it
        return {"7_3"}

    ended = []
    slurm.wait(jobs, True, lambda i, err: ended.append((i, err)), queue=queue, poll_s=0.01, max_poll_s=0.01)
    assert ended == [(0, None), (1, f"ValueError: gama is not a parameter (log: {failed.paths.stderr})"),
                     (2, f"SLURM job 7_2 left the queue without a result (cancelled, or killed at its "
                         f"time limit) (log: {cancelled.paths.stderr})"), (3, None)]
    # a job missing from one poll alone is not taken for gone; none is queried once it has ended
    assert polls == [["7_0", "7_1", "7_2", "7_3"], ["7_2", "7_3"], ["7_2", "7_3"], ["7_3"]]


# ------------------------------------------------------------------------- a real cluster ---

@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A single-node SLURM cluster on this machine for the session; every daemon it started is
    stopped at the end. Fails (never skips) where it cannot start: CI runs as root with
    `make system-deps`' packages."""
    why = why_not_startable()
    if why:
        pytest.fail(f"the SLURM tests need a local cluster: {why}")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except RuntimeError as err:
        pytest.fail(str(err))
    yield cluster
    assert cluster.stop() == [] and cluster.pids_alive() == [], "SLURM daemons still running"


def squeue(cluster: SlurmCluster) -> list[str]:
    """Every job and array task the cluster holds (pending, running, completing)."""
    return cluster.run("squeue", "--noheader", "--array", "--format=%i %T").splitlines()


def queue_drains(cluster, timeout: float = 180.0) -> bool:
    """``squeue`` empty within ``timeout`` seconds: a job whose result is written still runs its
    batch script's last lines, and SLURM lists it until that exits (longer on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while squeue(cluster):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


SMOKE_PART = "charoenphakdee_1d-*"  # the 1-D synthetic task's two runs: cross-entropy and focal loss


@pytest.mark.notebooks
def test_smoke_runs_on_slurm_as_locally(slurm_cluster, smoke_runs, tmp_path):
    out = tmp_path / "slurm"
    proc = subprocess.run([sys.executable, "-m", "focalcal.lab.sweep", "--profile", "smoke", "--executor",
                           "slurm", "--only", SMOKE_PART, "--out", str(out), *SLURM_ARGS],
                          cwd=ROOT, env=slurm_cluster.env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = sweep.select_runs("smoke", SMOKE_PART)
    assert len(runs) == 2
    # one sbatch: one job array, its tasks 0 and 1
    assert "sbatch 1: 2 runs (--array=0-1%2)" in proc.stdout and "sbatch 2" not in proc.stdout
    folders = sorted(d.name for d in (out / "submitit").iterdir() if d.is_dir())
    (array,) = [f for f in folders if "_" not in f]
    assert folders == [array, f"{array}_0", f"{array}_1"]
    # the script submitit gave sbatch: the array, the resources, SLURM's signal before the time limit
    script = (out / "submitit" / array / f"{array}_submission.sh").read_text().splitlines()
    for option in ("--array=0-1%2", "--cpus-per-task=1", "--time=30", "--signal=USR2@90"):
        assert f"#SBATCH {option}" in script, option
    assert not [line for line in script if "gpus" in line]
    # the same results as the local executor's (the smoke sweep of conftest): the sweep is deterministic
    for r in runs:
        on_slurm = json.loads((out / "runs" / r.run_id / "result.json").read_text())
        local = json.loads((smoke_runs / "runs" / r.run_id / "result.json").read_text())
        assert on_slurm["spec"] == local["spec"] and on_slurm["rows"] == local["rows"], r.run_id
    table = pd.read_csv(out / "results.csv")
    assert len(table) == len(runs) * len(results.METHODS) and not table.duplicated(["run", "method"]).any()
    local = pd.read_csv(smoke_runs / "results.csv").set_index(["run", "method"]).loc[table.set_index(
        ["run", "method"]).index].reset_index()
    pd.testing.assert_frame_equal(table, local[table.columns], check_dtype=False, check_exact=True)
    assert queue_drains(slurm_cluster)


SLOW_EPOCHS = 200  # long enough that both runs are still training when the test signals them (idle: ~20 s)


def slow_profile() -> spec.Profile:
    """Two runs long enough to be stopped while training (seeds 0 and 1)."""
    return spec.Profile("test", [spec.Block(["gaussian_mixture"], ["mlp"], [spec.loss("focal", gamma=2.0)],
                                              [0, 1], train={**TINY_TRAIN, "epochs": SLOW_EPOCHS},
                                              posthoc={"fts_temperatures": 10})])


# the sweep with the test profile registered (the jobs get their run's specification and need none)
RUNNER = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(Path(__file__).parent)!r})
    from test_slurm import SLURM_ARGS, slow_profile
    from focalcal.lab import profiles, sweep

    profiles.PROFILES["slow"] = slow_profile()
    sys.exit(sweep.main(["--profile", "slow", "--out", sys.argv[1], "--executor", "slurm", *SLURM_ARGS]))
""")


def epochs_in(run_dir: Path) -> list[int]:
    return [h["epoch"] for h in json.loads((run_dir / "history.json").read_text())["records"]]


@pytest.mark.notebooks
def test_cancelled_and_requeued_runs_resume_from_their_checkpoints(slurm_cluster, tmp_path):
    out = tmp_path / "out"
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    env = slurm_cluster.env({**os.environ, "MPLBACKEND": "Agg"})
    cancelled, requeued = slow_profile().expand()  # array tasks 0 and 1, in this order
    cancelled_dir, requeued_dir = out / "runs" / cancelled.run_id, out / "runs" / requeued.run_id
    log = open(tmp_path / "sweep.log", "w")
    proc = subprocess.Popen([sys.executable, str(script), str(out)], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 600
        # both jobs training: each has checkpointed an epoch
        while not all((d / "checkpoint.pt").is_file() for d in (cancelled_dir, requeued_dir)):
            assert proc.poll() is None, (tmp_path / "sweep.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the jobs did not start training in time"
            time.sleep(0.1)
        (array,) = {line.split("_")[0] for line in squeue(slurm_cluster)}
        # scancel one; send the other what SLURM sends before its time limit or on preemption
        # (sbatch --signal=USR2@90, as submitit asks): submitit checkpoints and requeues it
        slurm_cluster.run("scancel", f"{array}_0")
        slurm_cluster.run("scancel", "--signal=USR2", f"{array}_1")
        assert proc.wait(timeout=600) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    first = (tmp_path / "sweep.log").read_text()
    assert f"1 of 2 runs failed (their logs: {out / 'submitit'}/<job>/)" in first, first[-3000:]
    # the cancelled run's cause (SLURM's SIGTERM killed its kernel first) and its log
    assert re.search(rf"^- {re.escape(cancelled.run_id)}: .+ \(log: \S+/{array}_0_0_log\.err\)$", first, re.M), first
    # the signalled run: requeued once by submitit, resumed from its checkpoint, finished
    # the run's result is written before the job's batch script exits: SLURM marks the job
    # COMPLETED a moment after the sweep saw the result (longer on a loaded machine)
    deadline = time.monotonic() + 180
    while "JobState=COMPLETED" not in (show := slurm_cluster.run("scontrol", "show", "job", f"{array}_1")):
        assert "JobState=RUNNING" in show or "JobState=COMPLETING" in show, show
        assert time.monotonic() < deadline, show
        time.sleep(0.5)
    assert "Restarts=1" in show, show
    submitit_log = "".join(p.read_text() for p in (out / "submitit").glob(f"{array}_1/*_log.*"))
    assert "Calling checkpoint method" in submitit_log and f"Requeued job {array}_1" in submitit_log
    assert epochs_in(requeued_dir) == list(range(1, SLOW_EPOCHS + 1))
    nb = (requeued_dir / "train_classifier.ipynb").read_text()
    assert "resumed after" in nb and f"of {SLOW_EPOCHS} epochs" in nb
    # the cancelled run: stopped mid-training, no result
    assert not (cancelled_dir / "result.json").exists()
    assert 0 < len(epochs_in(cancelled_dir)) < SLOW_EPOCHS
    assert queue_drains(slurm_cluster)
    deadline = time.monotonic() + 60
    while processes_inside(out):  # SLURM killed the cancelled job's kernel as well
        assert time.monotonic() < deadline, "processes of the cancelled job still running"
        time.sleep(0.2)

    done = (requeued_dir / "result.json").stat()
    rerun = subprocess.run([sys.executable, str(script), str(out)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "2 runs, 1 already done, 1 to run" in rerun.stdout
    assert "sbatch 1: 1 run (one job (not an array))" in rerun.stdout
    again = (requeued_dir / "result.json").stat()
    assert (again.st_ino, again.st_mtime_ns) == (done.st_ino, done.st_mtime_ns)  # not executed again
    # nothing lost, nothing twice: every epoch once, from the checkpoint on
    assert epochs_in(cancelled_dir) == list(range(1, SLOW_EPOCHS + 1))
    nb = (cancelled_dir / "train_classifier.ipynb").read_text()
    assert "resumed after" in nb and f"of {SLOW_EPOCHS} epochs" in nb
    table = pd.read_csv(out / "results.csv")
    assert len(table) == 2 * len(results.METHODS) and not table.duplicated(["run", "method"]).any()
    assert set(table["run"]) == {cancelled.run_id, requeued.run_id}
    assert queue_drains(slurm_cluster)
