"""focalcal.lab.sweep: profiles, the smoke sweep end to end, SIGKILL + resume, the submitit executor."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from focalcal.lab import profiles, results, runfolder, runner, spec, sweep, template
from focalcal.lab.data import DATASETS
from focalcal.losses import LOSSES
from focalcal.lab.models import MODELS
from focalcal.lab.results.runs import build_facts, load_profile, runs_for
from focalcal.lab.train import SCHEDULES

ROOT = Path(__file__).resolve().parents[1]
LEFTOVERS = (".*.tmp", ".*.partial.ipynb", ".*.input.ipynb")


# ------------------------------------------------------------------------------------ profiles ---

def test_profiles_expand_to_unique_valid_runs():
    for name, profile in profiles.PROFILES.items():
        runs = profile.expand()
        ids = [r.run_id for r in runs]
        assert len(ids) == len(set(ids)), name
        assert ids == [r.run_id for r in profiles.get_profile(name).expand()]  # deterministic
        for r in runs:
            assert r.dataset in DATASETS and r.model in MODELS and r.loss.name in LOSSES, r
            schedule = dict(r.train).get("schedule")
            assert schedule is None or schedule in SCHEDULES, r
            assert spec.RunSpec.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    assert {lo.name for lo in profiles.ALL_LOSSES} == set(LOSSES)
    smoke = profiles.get_profile("smoke").expand()
    assert {r.loss.name for r in smoke} == set(LOSSES)
    assert {r.dataset for r in smoke} == {"gaussian_mixture", "charoenphakdee_1d", "fashion_mnist"}
    # each loss once (the pair twice) plus the curvature, training-length and Psi chapters' runs
    # (Psi: three settings x two gammas, and one run of the LS paradigm), one ablation run (a
    # confidence score), two of the selection grid (inverse focal gamma = 1 and 4) and two ResNet-8
    # runs of the architecture role (focal gamma = 0 and 3): short
    assert len(smoke) == (len(LOSSES) + len(profiles.SMOKE_PAIR) + len(profiles.SMOKE_CURVATURE_LOSSES)
                          + len(profiles.SMOKE_LENGTH_LOSSES) + 3 * 2 + 1 + 1 + 2 + 2)
    assert sorted(r.loss.label for r in smoke if r.model == "resnet8") == ["focal gamma=0", "focal gamma=3"]


def test_run_id_depends_on_every_setting():
    base = spec.RunSpec("gaussian_mixture", "mlp", spec.loss("focal", gamma=1.0), 0, (("epochs", 1),))
    variants = [
        spec.RunSpec("gaussian_mixture", "mlp", spec.loss("focal", gamma=2.0), 0, (("epochs", 1),)),
        spec.RunSpec("gaussian_mixture", "mlp", spec.loss("focal", gamma=1.0), 1, (("epochs", 1),)),
        spec.RunSpec("gaussian_mixture", "mlp", spec.loss("focal", gamma=1.0), 0, (("epochs", 2),)),
        spec.RunSpec("gaussian_mixture", "mlp", spec.loss("focal", gamma=1.0), 0, (("epochs", 1),),
                      (("fts_temperatures", 5),)),
    ]
    ids = {base.run_id} | {v.run_id for v in variants}
    assert len(ids) == 1 + len(variants)
    assert base.run_id.startswith("gaussian_mixture-mlp-focal-gamma-1.0--s0-")
    dup = spec.Profile("dup", [spec.Block(["gaussian_mixture"], ["mlp"], [spec.loss("ce")], [0])] * 2)
    with pytest.raises(ValueError, match="profile expands to duplicate runs"):
        dup.expand()


def test_train_settings_and_subsets():
    s = template.train_settings("paper_cifar", epochs=35)
    assert s["epochs"] == 35 and s["milestones"] == (15, 25) and s["lr"] == 0.1
    assert template.train_settings("paper_cifar")["milestones"] == (150, 250)
    s = template.train_settings("cpu_sgd", epochs=3, optimizer="adam", lr=0.5)
    assert (s["optimizer"], s["lr"], s["lr_schedule"], s["epochs"]) == ("adam", 0.5, "cosine", 3)
    assert template.train_settings(None, epochs=2) == {"epochs": 2}
    assert template.train_settings("", epochs=2) == {"epochs": 2}
    with pytest.raises(ValueError, match="schedule must be one of 'paper_cifar'"):
        template.train_settings("paper", epochs=3)
    with pytest.raises(ValueError, match="epochs must be given"):
        template.train_settings(None)
    with pytest.raises(ValueError, match="epochs must be an integer >= 1"):
        template.train_settings("cpu_sgd", epochs=0)
    assert template.subset_sizes(0, 0) is None
    assert template.subset_sizes(100, 0) == {"train": 100}
    assert template.subset_sizes(100, 50) == {"train": 100, "val": 50, "test": 50}
    with pytest.raises(ValueError, match="eval_subset"):
        template.subset_sizes(10, -1)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="profile must be one of smoke, cpu, gpu, paper"):
        sweep.run_sweep("nope", tmp_path)
    with pytest.raises(ValueError, match="executor must be 'local' or 'slurm'"):
        sweep.run_sweep("smoke", tmp_path, executor="pbs")
    with pytest.raises(ValueError, match="jobs must be a positive integer"):
        sweep.run_sweep("smoke", tmp_path, jobs=0)
    with pytest.raises(SystemExit) as err:
        sweep.main(["--profile", "nope", "--out", str(tmp_path)])
    assert err.value.code == 2
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_list_shows_each_run_and_its_status(tmp_path, capsys, monkeypatch):
    runs = profiles.get_profile("smoke").expand()
    done = tmp_path / "runs" / "smoke" / "runs" / runs[1].run_id
    done.mkdir(parents=True)
    runfolder.write_result(done, {})
    monkeypatch.chdir(tmp_path)  # --out defaults to runs/<profile> here
    assert sweep.main(["--profile", "smoke", "--list"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:6] == ["status", "role", "dataset", "network", "loss", "seed"]
    assert header.split()[-1] == "run"
    assert len(lines) == len(runs)
    for line, r in zip(lines, runs):
        status = "done" if r == runs[1] else "pending"
        assert line.split()[:1] + line.split()[2:4] == [status, r.dataset, r.model]
        assert line.endswith("  " + r.run_id) and f"  {sweep.loss_key(r.loss)}  " in line
    assert sweep.main(["--profile", "smoke", "--list", "--only", "gaussian_mixture-*-Brier-*"]) == 0
    (line,) = capsys.readouterr().out.splitlines()[1:]
    assert "brier" in line and line.startswith("pending  synthetic  gaussian_mixture")


def test_only_selects_runs_by_id():
    runs = profiles.get_profile("cpu").expand()
    assert sweep.select_runs("cpu") == runs
    seed0 = sweep.select_runs("cpu", "*-s0-*")
    assert seed0 == [r for r in runs if r.seed == 0] and 0 < len(seed0) < len(runs)
    (one,) = sweep.select_runs("cpu", runs[3].run_id)
    assert one == runs[3]
    with pytest.raises(ValueError, match=r"only='mnist-\*' matches none of the \d+ run ids of profile 'cpu'"):
        sweep.select_runs("cpu", "mnist-*")


def test_build_facts_of_runs_no_profile_holds(tmp_path):
    rows = []
    for i, (run, size) in enumerate((("a", 100), ("b", 300))):
        (tmp_path / "runs" / run).mkdir(parents=True)
        runfolder.write_config(tmp_path / "runs" / run, {"data": {"train": size}})
        rows += [{"run": run, "dataset": "gaussian_mixture", "model": "mlp", "seed": i, "epochs": 2 + i,
                  "method": m} for m in ("TS (NLL)", "Psi")]
    assert build_facts(tmp_path, pd.DataFrame(rows)) == {
        "runs": 2, "profile": "unnamed", "description": "", "data": ["`gaussian_mixture` (100 to 300 training samples)"],
        "networks": ["`mlp`"], "epochs": "2 to 3", "seeds": ["0", "1"]}


def test_runs_for_selects_a_role_in_the_profiles_order(tmp_path):
    assert sweep.write_profile(tmp_path, "gpu", shrunk=True) == tmp_path / "profile.json"
    info = load_profile(tmp_path)
    assert (info["profile"], info["shrunk"]) == ("gpu", True)
    profile = profiles.get_profile("gpu", shrunk=True)
    comparison, synthetic = profile.runs_of("comparison"), profile.runs_of("synthetic")
    # a results table in another order, with another role's runs, two rows (methods) per run
    table = pd.DataFrame([{"run": r.run_id, "dataset": r.dataset, "model": r.model, "method": m}
                          for r in reversed(comparison + synthetic) for m in ("uncalibrated", "TS (NLL)")])
    got = runs_for(tmp_path, "comparison", table)
    assert list(got["run"].drop_duplicates()) == [r.run_id for r in comparison] and len(got) == 2 * len(comparison)
    first = runs_for(tmp_path, "comparison", table, setting="first")
    assert set(zip(first["dataset"], first["model"])) == {("cifar10", "resnet50")}
    wrn = runs_for(tmp_path, "comparison", table, setting=("cifar100", "wide_resnet26_10"))
    assert set(wrn["run"]) == {r.run_id for r in comparison if (r.dataset, r.model) == ("cifar100", "wide_resnet26_10")}
    assert set(runs_for(tmp_path, "synthetic", table)["dataset"]) == {"gaussian_mixture", "charoenphakdee_1d"}
    with pytest.raises(ValueError, match="role must be one of comparison"):
        runs_for(tmp_path, "table1", table)
    with pytest.raises(ValueError, match="setting must be 'all', 'first' or a"):
        runs_for(tmp_path, "comparison", table, setting="best")
    with pytest.raises(ValueError, match=r"setting \('svhn', 'cnn'\) has no finished run of role 'comparison'"):
        runs_for(tmp_path, "comparison", table, setting=("svhn", "cnn"))
    with pytest.raises(ValueError, match="no finished run of role 'length'"):
        runs_for(tmp_path, "length", table)
    with pytest.raises(FileNotFoundError, match="profile.json does not exist"):
        runs_for(tmp_path / "older", "comparison", table)


def test_missing_template_is_reported_once_before_any_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FOCALCAL_NOTEBOOKS", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="papermill template .*train_classifier.md is missing"):
        sweep.run_sweep("smoke", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()  # no run started
    assert sweep.main(["--profile", "smoke", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("is missing") == 1 and err.startswith("error: papermill template")
    # a template without the parameters a profile passes
    (tmp_path / "nowhere").mkdir()
    for name in runner.TEMPLATES:
        text = (ROOT / "notebooks" / f"{name}.md").read_text()
        (tmp_path / "nowhere" / f"{name}.md").write_text(text.replace("\nn_bins = 15", "\nbins = 15"))
    monkeypatch.setitem(profiles.PROFILES, "binned", spec.Profile("test", [spec.Block(
        ["gaussian_mixture"], ["mlp"], [spec.loss("ce")], [0], posthoc={"n_bins": 10})]))
    with pytest.raises(ValueError, match="passes n_bins, which template posthoc_calibration does not declare"):
        sweep.run_sweep("binned", tmp_path / "out", progress=False)


# ----------------------------------------------------------------------------- smoke sweep ---

def test_smoke_folder_is_keyed_by_the_code(tmp_path):
    """The smoke sweep's folder changes with the library, the lab and the templates (conftest)."""
    from conftest import code_key

    src = tmp_path / "focalcal"
    shutil.copytree(ROOT / "src" / "focalcal", src, ignore=shutil.ignore_patterns("__pycache__"))
    key = code_key(src)
    assert key == code_key(ROOT / "src" / "focalcal")
    (src / "__init__.py").touch()
    (src / "lab" / "notes.txt").write_text("not code")
    (src / "lab" / "results" / "tables.py").write_text((src / "lab" / "results" / "tables.py").read_text()
                                                       + "# a comment\n")
    assert code_key(src) == key  # time stamps, comments and other files do not count
    for path, added in ((src / "lab" / "templates" / "train_classifier.md", "\n"),
                        (src / "lab" / "results" / "tables.py", "_X = 1\n"), (src / "__init__.py", "_X = 1\n")):
        before = code_key(src)
        path.write_text(path.read_text() + added)
        assert code_key(src) != before, path


@pytest.mark.notebooks
def test_smoke_sweep_end_to_end(smoke_runs):
    from conftest import code_key

    assert smoke_runs.name == f"runs-smoke-{code_key()}"
    assert (smoke_runs / "CODE_KEY").read_text().strip() == code_key()
    runs = profiles.get_profile("smoke").expand()
    table = pd.read_csv(smoke_runs / "results.csv")
    assert list(table.columns[:2]) == ["run", "method"]
    # one row per run x method, nothing missing, nothing twice
    assert len(table) == len(runs) * len(results.METHODS)
    assert not table.duplicated(["run", "method"]).any()
    assert set(table["run"]) == {r.run_id for r in runs}
    assert set(table["method"]) == set(results.METHODS)
    assert set(LOSSES) <= set(table["loss"])
    for col in ("dataset", "model", "loss_label", "seed", "epochs", *results.METRICS, "temperature", "gamma_ev"):
        assert col in table.columns, col
    assert table[list(results.METRICS)].map(math.isfinite).all().all()
    assert ((table["accuracy"] >= 0) & (table["accuracy"] <= 1)).all()
    # post-hoc maps never change the argmax: one accuracy per run
    assert (table.groupby("run")["accuracy"].nunique() == 1).all()
    # Psi has the training gamma exactly for the plain focal loss
    psi = table[table["method"] == "Psi"].groupby("loss_label")["gamma_ev"].agg(set)
    assert psi["focal (gamma=3)"] == {3.0} and psi["cross-entropy"] == {0.0} and psi["FLSD-53"] == {0.0}
    for r in runs:
        d = smoke_runs / "runs" / r.run_id
        for name in runner.TEMPLATES:
            assert (d / f"{name}.ipynb").stat().st_size > 0, (r.run_id, name)
        rec = json.loads((d / "result.json").read_text())
        assert rec["spec"] == r.to_dict()
        # the cells' output reaches the run's log: the trainer's line for its one epoch
        assert re.search(r"^epoch 1/1  train loss .*  val NLL .*  val ECE .* s$",
                         (d / "run.log").read_text(), re.M), r.run_id
        assert rec["rows"] == json.loads((d / "calibration.json").read_text())
        for pattern in LEFTOVERS:
            assert not list(d.glob(pattern)), (r.run_id, pattern)
    # what a page says it was built from, read from the runs
    n = profiles.SMOKE_TRAIN["train_subset"]
    # the runs the Fashion-MNIST page reads: the Table 1 losses there
    fmnist = table[(table["dataset"] == "fashion_mnist")
                   & table["loss_label"].isin([lo.display for lo in profiles.TABLE1_LOSSES])]
    assert build_facts(smoke_runs, fmnist) == {
        "runs": fmnist["run"].nunique(), "profile": "`smoke`", "description": profiles.PROFILES["smoke"].description,
        "data": [f"`fashion_mnist` ({n} training samples)"], "networks": ["`cnn`"], "epochs": "1", "seeds": ["0"]}
    every = build_facts(smoke_runs, table.sort_values("model"))
    assert f"`gaussian_mixture` ({n} training samples)" in every["data"]
    assert every["networks"] == ["`cnn`", "`mlp`", "`resnet8`"]
    # a second invocation finds everything done and runs nothing
    before = {r.run_id: (smoke_runs / "runs" / r.run_id / "result.json").stat().st_mtime_ns for r in runs}
    again = sweep.run_sweep("smoke", smoke_runs, progress=False)
    assert len(again) == len(table)
    assert before == {r.run_id: (smoke_runs / "runs" / r.run_id / "result.json").stat().st_mtime_ns
                      for r in runs}


@pytest.mark.notebooks
def test_a_runs_templates_share_a_kernel_not_a_namespace(tmp_path):
    # a run's two templates execute in one kernel (the second finds torch and the library
    # imported), its namespace, history and cell count reset in between
    import nbformat
    import papermill as pm

    def notebook(name: str, source: str) -> Path:
        path = tmp_path / f"{name}.ipynb"
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        path.write_text(nbformat.writes(nb))
        return path

    first = notebook("first", "import os, sys\nimport focalcal\nleft_over = os.getpid()\nprint(left_over)")
    second = notebook("second", "import os, sys\nprint(os.getpid(), 'left_over' in dir(), "
                                "any(('import ' + 'focalcal') in cell for cell in In), 'focalcal' in sys.modules, "
                                "os.getcwd())")
    with runner._run_kernel(tmp_path) as km:
        done = [pm.execute_notebook(str(first), str(tmp_path / "a.ipynb"), kernel_name="python3",
                                    progress_bar=False, km=km)]
        runner._reset_namespace(km)
        done.append(pm.execute_notebook(str(second), str(tmp_path / "b.ipynb"), kernel_name="python3",
                                        progress_bar=False, km=km))
    pid = done[0].cells[0].outputs[0]["text"].strip()
    assert done[1].cells[0].outputs[0]["text"].split() == [pid, "False", "False", "True", str(tmp_path)]
    assert [nb.cells[0].execution_count for nb in done] == [1, 1]
    assert not km.has_kernel  # shut down on leaving


@pytest.mark.notebooks
def test_a_kernel_kept_across_runs_computes_what_fresh_kernels_do(tmp_path):
    # the local workers keep one kernel for many runs, reset and moved between them; a run must
    # not see its predecessor: the same logits, records and post-hoc rows to the bit as a run in a
    # kernel of its own, whatever ran before it
    import torch

    first, second = [spec.Block(["gaussian_mixture"], ["mlp"], [lo], [0],
                                train={"train_subset": 600, "eval_subset": 300, "batch_size": 64,
                                       "schedule": "cpu_adam", "device": "cpu", "epochs": 2},
                                posthoc={"fts_temperatures": 10}).expand()[0]
                     for lo in (spec.loss("focal", gamma=2.0), spec.loss("ce"))]
    kernel = runner.Kernel()
    try:
        for run in (first, second):
            runner.execute_run(run, tmp_path / "kept", kernel)
        km = kernel.km
        assert km is not None and km.has_kernel  # one kernel, still up for the next run
    finally:
        kernel.close()
    for run in (second, first):  # each alone, in the other order
        runner.execute_run(run, tmp_path / "fresh")
    for run in (first, second):
        kept, fresh = (runfolder.run_path(tmp_path / d, run.run_id) for d in ("kept", "fresh"))
        a, b = runfolder.read_logits(kept), runfolder.read_logits(fresh)
        assert all(torch.equal(a[k], b[k]) for k in a), run.run_id
        drop = ("time_s", "throughput")
        strip = lambda records: [{k: v for k, v in r.items() if k not in drop} for r in records]  # noqa: E731
        assert strip(runfolder.read_history(kept)) == strip(runfolder.read_history(fresh))
        assert runfolder.read_calibration(kept) == runfolder.read_calibration(fresh)
        nb = json.loads(runfolder.notebook_path(kept, "train_classifier").read_text())
        assert [c["execution_count"] for c in nb["cells"] if c["cell_type"] == "code"][0] == 1


# --------------------------------------------------------------------------- SIGKILL + resume ---

TINY_TRAIN = {"train_subset": 2000, "eval_subset": 500, "batch_size": 128, "schedule": "cpu_adam",
              "device": "cpu"}

# enough epochs that the slow run cannot finish in the second an orphaned kernel takes to notice
# that its parent was killed (ipykernel polls its parent once a second)
SLOW_EPOCHS = 60


def tiny_profile() -> spec.Profile:
    """A test-only profile: a quick run first, then one long enough to be killed while training."""
    return spec.Profile("test", [
        spec.Block(["gaussian_mixture"], ["mlp"], [spec.loss("ce")], [0],
                    train={**TINY_TRAIN, "epochs": 1}, posthoc={"fts_temperatures": 10}),
        spec.Block(["gaussian_mixture"], ["mlp"], [spec.loss("focal", gamma=2.0)], [0],
                    train={**TINY_TRAIN, "epochs": SLOW_EPOCHS}, posthoc={"fts_temperatures": 10}),
    ])


# the sweep in a subprocess, with the test profile registered (the per-run subprocesses it
# starts get their run's specification on the command line and need no profile)
RUNNER = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(Path(__file__).parent)!r})
    from test_sweep import tiny_profile
    from focalcal.lab import profiles, sweep

    profiles.PROFILES["tiny"] = tiny_profile()
    if __name__ == "__main__":  # the runs' processes import this script again (multiprocessing)
        sys.exit(sweep.main(["--profile", "tiny", "--out", sys.argv[1], "--jobs", "1"]))
""")


def processes_inside(folder: Path) -> list[int]:
    """Pids whose working directory lies in ``folder`` (papermill's kernels run in the run folder)."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if Path(os.readlink(p / "cwd")).is_relative_to(folder):
                    pids.append(int(p.name))
            except OSError:
                continue
    return pids


@pytest.mark.notebooks
def test_sigkill_then_resume(tmp_path):
    out = tmp_path / "out"
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    quick, slow = [r.run_id for r in tiny_profile().expand()]
    quick_dir, slow_dir = out / "runs" / quick, out / "runs" / slow

    proc = subprocess.Popen([sys.executable, str(script), str(out)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        # in flight: the quick run is complete and the slow one has checkpointed an epoch
        while not ((quick_dir / "result.json").is_file() and (slow_dir / "checkpoint.pt").is_file()):
            assert proc.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline, "the sweep did not reach the slow run in time"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # the kernels live in their own sessions and exit once they see their parent gone
    deadline = time.monotonic() + 60
    while processes_inside(out):
        assert time.monotonic() < deadline, "orphaned kernels still running after 60 s"
        time.sleep(0.2)

    assert not (slow_dir / "result.json").exists()
    epochs_done = len(json.loads((slow_dir / "history.json").read_text())["records"])
    assert 0 < epochs_done < SLOW_EPOCHS
    done = (quick_dir / "result.json").stat()
    quick_nb = (quick_dir / "train_classifier.ipynb").stat().st_mtime_ns
    # what a crash between the two templates could leave: a stale calibration.json and temporary
    # files; none of it may be taken for a result
    (slow_dir / "calibration.json").write_text('[{"method": "stale"}]')
    (slow_dir / ".result.json.abc.tmp").write_text("{")

    rerun = subprocess.run([sys.executable, str(script), str(out)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "2 runs, 1 already done, 1 to run" in rerun.stdout

    again = (quick_dir / "result.json").stat()
    assert (again.st_ino, again.st_mtime_ns) == (done.st_ino, done.st_mtime_ns)  # not re-executed
    assert (quick_dir / "train_classifier.ipynb").stat().st_mtime_ns == quick_nb
    rec = json.loads((slow_dir / "result.json").read_text())
    assert [r["method"] for r in rec["rows"]] == list(results.METHODS)
    history = json.loads((slow_dir / "history.json").read_text())["records"]
    assert [h["epoch"] for h in history] == list(range(1, SLOW_EPOCHS + 1))
    # the trainer continued from its checkpoint instead of starting over
    nb = (slow_dir / "train_classifier.ipynb").read_text()
    assert "resumed after" in nb and f"of {SLOW_EPOCHS} epochs" in nb
    for pattern in LEFTOVERS:
        assert not list(slow_dir.glob(pattern)), pattern
    table = pd.read_csv(out / "results.csv")
    assert sorted(set(table["run"])) == sorted([quick, slow]) and "stale" not in set(table["method"])


@pytest.mark.notebooks
def test_failed_run_is_reported_and_the_others_finish(tmp_path, monkeypatch):
    good = spec.Block(["gaussian_mixture"], ["mlp"], [spec.loss("ce")], [0],
                       train={**TINY_TRAIN, "epochs": 1}, posthoc={"fts_temperatures": 10})
    bad = spec.Block(["gaussian_mixture"], ["mlp"], [spec.loss("focal", gama=2.0)], [0],
                      train={**TINY_TRAIN, "epochs": 1})
    monkeypatch.setitem(profiles.PROFILES, "mixed", spec.Profile("test", [good, bad]))
    with pytest.raises(RuntimeError, match="1 of 2 runs failed") as err:
        sweep.run_sweep("mixed", tmp_path, jobs=2, progress=False)
    (bad_spec,) = bad.expand()
    # one line per failed run: its id and the cause, as the template's cell raised it
    cause = next(line for line in str(err.value).splitlines() if line.startswith("- "))
    assert cause.startswith(f"- {bad_spec.run_id}: train_classifier stopped: ValueError: ")
    assert "valid parameters: gamma" in cause
    assert cause.removeprefix(f"- {bad_spec.run_id}: ") in (
        tmp_path / "runs" / bad_spec.run_id / "run.log").read_text().splitlines()[-1]
    assert not (tmp_path / "runs" / bad_spec.run_id / "result.json").exists()
    table = pd.read_csv(tmp_path / "results.csv")  # the finished run is collected all the same
    assert set(table["run"]) == {good.expand()[0].run_id}


# --------------------------------------------------------------------------- submitit (SLURM) ---

@pytest.mark.notebooks
def test_slurm_executor_through_submitit_local(tmp_path, monkeypatch):
    profile = spec.Profile("test", [spec.Block(["gaussian_mixture"], ["mlp"], [spec.loss("brier")],
                                                 [0], train={**TINY_TRAIN, "epochs": 1},
                                                 posthoc={"fts_temperatures": 10})])
    monkeypatch.setitem(profiles.PROFILES, "one", profile)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    table = sweep.run_sweep("one", tmp_path, executor="slurm", submitit_cluster="local", progress=False)
    (run,) = profile.expand()
    assert list(table["run"].unique()) == [run.run_id]
    assert list(table["method"]) == list(results.METHODS)
    assert runfolder.finished(runfolder.run_path(tmp_path, run.run_id))
    assert list((tmp_path / "submitit").glob("*/*_result.pkl"))  # it really went through submitit
