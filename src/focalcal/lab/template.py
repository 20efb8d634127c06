"""What the papermill templates call: their parameters checked, their errors shown, their run folders.

- :func:`check_parameters`: a parameter papermill passed that the template does not declare is an
  error (papermill itself only warns and runs on with the defaults);
- :func:`check_names`: the ``dataset``, ``model``, ``loss`` and ``schedule`` parameters are
  registered names, or an error names the template parameter and lists its choices;
- :func:`reported_errors`: around a template's checks, an error stops the notebook with its cause
  as the first line of what papermill shows;
- :func:`default_run_dir` and :func:`latest_run`: a run's folder under ``runs/`` of the working
  directory when no ``out_dir`` or ``run_dir`` is given;
- :func:`loss_parameters`: the ``loss_params`` JSON parameter as a dict;
- :func:`train_settings` and :func:`subset_sizes`: the training parameters as the trainer's
  settings and the loaders' subset sizes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import runfolder
from .spec import RunSpec, loss

__all__ = ["check_parameters", "check_names", "reported_errors", "default_run_dir", "latest_run", "loss_parameters",
           "train_settings", "subset_sizes", "assigned_names"]


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


def loss_parameters(loss_params: str) -> dict[str, Any]:
    """The template's ``loss_params`` (a JSON object, as papermill passes it) as a dict."""
    try:
        params = json.loads(loss_params)
    except (TypeError, ValueError):
        params = None
    if not isinstance(params, dict):
        raise ValueError("loss_params must be a JSON object of the loss's keyword arguments, such as "
                         f"'{{\"gamma\": 3.0}}' or '{{}}'; got {loss_params!r}")
    return params


# the train_classifier parameters that make a run's id (besides dataset, model, loss and seed):
# what changes the trained model; device, out_dir, resume and keep_checkpoint do not
_RUN_KEYS = ("epochs", "train_subset", "eval_subset", "batch_size", "schedule", "optimizer", "lr",
             "clip_grad_norm", "logits_epochs", "train_logits", "record_subset")


def default_run_dir(parameters: dict[str, Any], root: str | os.PathLike | None = None) -> Path:
    """Where ``train_classifier`` puts a run when no ``out_dir`` is given: ``<root>/runs/<run id>``.

    ``parameters`` are the template's (``dataset``, ``model``, ``loss``, ``loss_params`` as JSON,
    ``seed`` and the training settings); the id is :attr:`focalcal.lab.spec.RunSpec.run_id` of that run, so runs
    with other parameters land in other folders. ``root`` defaults to the working directory.
    """
    spec = RunSpec(parameters["dataset"], parameters["model"],
                   loss(parameters["loss"], **loss_parameters(parameters["loss_params"])),
                   int(parameters["seed"]),
                   tuple(sorted((k, parameters[k]) for k in _RUN_KEYS if parameters.get(k) is not None)),
                   model_params=tuple(sorted(json.loads(parameters.get("model_params") or "{}").items())))
    return runfolder.run_path(Path.cwd() if root is None else root, spec.run_id)


def latest_run(root: str | os.PathLike | None = None) -> Path:
    """The run folder under ``<root>/runs/`` (default: the working directory) trained last;
    ``FileNotFoundError`` if there is none (no folder with a ``logits.pt``)."""
    base = runfolder.runs_root(Path.cwd() if root is None else root)
    done = sorted((d for d in base.glob("*") if runfolder.logits_path(d).is_file()),
                  key=lambda d: runfolder.logits_path(d).stat().st_mtime_ns)
    if not done:
        raise FileNotFoundError(f"no finished train_classifier run in {base}: run train_classifier "
                                f"first, or pass run_dir")
    return done[-1]


# papermill puts the parameters it was given into a cell of its own right after the parameters
# cell, and that cell's source starts with this comment (papermill.parameterize)
_INJECTED = "# Parameters\n"


def assigned_names(source: str) -> list[str]:
    import ast

    return [t.id for node in ast.parse(source).body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)]


def check_parameters(history: Sequence[str] | None = None) -> None:
    """Raise ``ValueError`` naming a parameter papermill passed that the template does not declare.

    papermill only warns ("Passed unknown parameter") and runs on with the defaults. The check
    reads the kernel's input history (IPython's ``In``): the cell papermill injected and the one
    executed just before it, the ``parameters`` cell; without an injected cell there is none.
    """
    import difflib

    if history is None:
        from IPython import get_ipython

        shell = get_ipython()
        history = shell.user_ns.get("In", []) if shell is not None else []
    for i in range(len(history) - 1, 0, -1):
        if history[i].startswith(_INJECTED):
            declared = assigned_names(history[i - 1])
            unknown = [name for name in assigned_names(history[i]) if name not in declared]
            if unknown:
                close = difflib.get_close_matches(unknown[0], declared, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown parameter {unknown[0]!r}{hint}; the parameters are "
                                 f"{', '.join(declared)}")
            return


def check_names(*, dataset: str | None = None, model: str | None = None, loss: str | None = None,
                schedule: str | None = None) -> None:
    """Raise ``ValueError`` naming the template parameter (``dataset``, ``model``, ``loss`` or
    ``schedule``) whose value is not a registered name, and listing its choices.

    Checked before anything uses them, so that the error names the parameter the user set rather
    than the argument of the library function it reaches (``get_dataset``'s ``name``). ``None``
    (not a parameter of the template) and an empty ``schedule`` (the trainer's defaults) pass.
    """
    from .._validation import check_choice
    from ..losses import LOSSES
    from .data import DATASETS
    from .models import MODELS
    from .train import SCHEDULES

    for name, value, choices in (("dataset", dataset, DATASETS), ("model", model, MODELS),
                                 ("loss", loss, LOSSES), ("schedule", schedule or None, SCHEDULES)):
        if value is not None:
            check_choice(value, name, tuple(choices))


@contextmanager
def reported_errors(*kinds: type[Exception]) -> Iterator[None]:
    """Around a template's checks: an error stops the notebook with its cause as the first line.

    The cause (``error: ValueError: epochs must be ...``) goes to stderr, where papermill's
    ``--log-output`` and a sweep run's ``run.log`` show it before anything else, and it replaces
    the kernel's traceback (IPython's ``_render_traceback_``) by itself and the place it was
    raised: a bad parameter is not a bug, and papermill prints that traceback after its own.
    ``kinds`` defaults to ``ValueError`` and ``FileNotFoundError``.
    """
    import traceback

    try:
        yield
    except (kinds or (ValueError, FileNotFoundError)) as err:
        cause = f"{type(err).__name__}: {err}"
        print(f"error: {cause}", file=sys.stderr, flush=True)
        frame = traceback.extract_tb(err.__traceback__)[-1]
        where = f"(raised by {frame.name} in {frame.filename}, line {frame.lineno})"
        err._render_traceback_ = lambda: [cause, where]  # type: ignore[attr-defined]
        raise
