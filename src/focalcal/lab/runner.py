"""Executing one run: its two papermill templates in one kernel, then its result record.

1. ``train_classifier`` trains the model and saves its logits into the run folder (the trainer
   checkpoints every epoch, so a killed run resumes where it stopped);
2. ``posthoc_calibration`` fits the post-hoc calibrators on the validation logits and writes one
   row per calibration method.

Both run in one kernel, its namespace emptied between them (IPython's reset): the second template
sees nothing of the first but finds torch and the library already imported, which saves every run
a kernel start and about 2 s of imports. The files are :mod:`focalcal.lab.runfolder`'s; the sweep
(:mod:`focalcal.lab.sweep`) and the SLURM jobs (:mod:`focalcal.lab.slurm`) call :func:`execute_run`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from . import runfolder
from .io import atomic_write_text
from .spec import RunSpec

__all__ = ["TEMPLATES", "templates_dir", "RunError", "check_templates", "Kernel", "execute_run"]

TEMPLATES = ("train_classifier", "posthoc_calibration")


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


class Kernel:
    """A kernel kept for many runs (the sweep's local workers): started on first use, in the
    first run's folder, and started again if it died; :func:`execute_run` moves it to each run's
    folder and resets it. Its process-level output (not the cells') goes where the process's was
    when it started."""

    def __init__(self) -> None:
        self.km: Any = None

    def for_run(self, run_dir: Path) -> Any:
        from jupyter_client.manager import AsyncKernelManager
        from jupyter_core.utils import run_sync

        if self.km is not None and not run_sync(self.km.is_alive)():
            self.close()
        if self.km is None:
            self.km = AsyncKernelManager(kernel_name="python3")
            run_sync(self.km.start_kernel)(cwd=str(run_dir))
        return self.km

    def close(self) -> None:
        from jupyter_core.utils import run_sync

        if self.km is not None and self.km.has_kernel:
            run_sync(self.km.shutdown_kernel)(now=True)
        self.km = None


def _reset_namespace(km: Any, cwd: Path | None = None) -> None:
    """Empty the kernel's namespace and input history and restart its cell count at 1 (IPython's
    ``reset(new_session=True)``), so that the next template runs as in a new kernel; imported
    modules stay loaded. With ``cwd`` (a new run in a kept kernel) also close every figure,
    collect garbage and change to ``cwd``, leaving no name behind."""
    from jupyter_core.utils import run_sync

    code = "get_ipython().reset(new_session=True)"
    if cwd is not None:
        code += ("\n__import__('sys').modules.get('matplotlib.pyplot') and "
                 "__import__('sys').modules['matplotlib.pyplot'].close('all')"
                 f"\n__import__('gc').collect()\n__import__('os').chdir({str(cwd)!r})")

    async def reset() -> dict[str, Any]:
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=300)
            return await kc.execute_interactive(code, store_history=False, timeout=300,
                                                output_hook=lambda msg: None)
        finally:
            kc.stop_channels()

    reply = run_sync(reset)()
    if reply["content"]["status"] != "ok":
        raise RunError(f"could not reset the kernel: {reply['content']}")


def _execute_template(name: str, run_dir: Path, parameters: dict[str, Any], km: Any = None) -> None:
    import nbformat
    import papermill as pm

    nb = _read_template(name)
    staged = runfolder.notebook_path(run_dir, name, "input")
    atomic_write_text(staged, nbformat.writes(nb))
    partial = runfolder.notebook_path(run_dir, name, "partial")
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
    os.replace(partial, runfolder.notebook_path(run_dir, name))


def _run_templates(spec: RunSpec, run_dir: Path, km: Any) -> None:
    _execute_template("train_classifier", run_dir, spec.train_parameters(run_dir), km)
    _reset_namespace(km)
    _execute_template("posthoc_calibration", run_dir, spec.posthoc_parameters(run_dir), km)


def execute_run(spec: dict[str, Any] | RunSpec, out: str | os.PathLike, kernel: Kernel | None = None
                ) -> dict[str, Any]:
    """Execute one run's templates in its run folder of ``out`` and write its result record last.

    Returns the result record. A run that finished is not executed again. The templates run in
    ``kernel`` (kept across runs; reset and moved to the run's folder first) or, without one, in
    a kernel of their own.
    """
    spec = spec if isinstance(spec, RunSpec) else RunSpec.from_dict(spec)
    # absolute: the notebooks run with the run folder as their working directory
    run_dir = runfolder.run_path(Path(out).resolve(), spec.run_id)
    if runfolder.finished(run_dir):
        return runfolder.read_result(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    runfolder.remove_leftovers(run_dir)
    runfolder.write_spec(run_dir, spec.to_dict())
    t0 = time.perf_counter()
    if kernel is None:
        with _run_kernel(run_dir) as km:
            _run_templates(spec, run_dir, km)
    else:
        km = kernel.for_run(run_dir)
        _reset_namespace(km, cwd=run_dir)
        _run_templates(spec, run_dir, km)
    rows = runfolder.read_calibration(run_dir)
    if rows is None:
        raise RunError("posthoc_calibration finished without writing its rows")
    runfolder.write_result(run_dir, {"run": spec.run_id, "spec": spec.to_dict(), "rows": rows,
                                     "seconds": round(time.perf_counter() - t0, 2)})
    return runfolder.read_result(run_dir)
