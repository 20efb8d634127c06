"""A resumable, deterministic trainer that records what Mukhoti et al. (2020) plot.

A :class:`Trainer` runs one training run from :class:`TrainSettings`: SGD/Adam/AdamW with a step,
cosine or constant schedule, a tqdm bar per epoch, per-epoch records (Figs. 2-4 of Mukhoti et al.;
the fields are listed in :mod:`focalcal.lab.records`), checkpoints every ``checkpoint_every``
epochs, resume from the last checkpoint, and at the end the validation and test logits saved with
the run's configuration. Every file is written atomically (:mod:`focalcal.lab.io`). :func:`train`
is the same in one call::

    result = train(model, loss_fn, loaders.train, val_loader=loaders.val, epochs=10, out_dir="runs/a")
    # is
    trainer = Trainer(model, loss_fn, TrainSettings(epochs=10), out_dir="runs/a")
    result = trainer.fit(loaders.train, val_loader=loaders.val)

A loss is a callable ``loss_fn(logits, labels) -> scalar``; one that needs more from the trainer
(an epoch, the validation logits, the model) says so by its type (:class:`LossHooks`).

:data:`SCHEDULES` holds the papers' schedules (:data:`PAPER_SCHEDULE`: Mukhoti et al.'s CIFAR one,
which Komisarenko & Kull reuse) and cheap CPU ones: ``TrainSettings(**SCHEDULES[name])``. The
files in ``out_dir`` (checkpoint, history, logits, the record of the run) are written through
:mod:`focalcal.lab.runfolder`, which owns their names and formats.
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from .._validation import check_choice, check_int, check_positive
from . import runfolder
from .io import atomic_torch_save, torch_load
from .models import count_parameters, last_linear
from .records import (GRAD_NORM_EDGES, FeatureHook, evaluate, grad_norm_summary, hardware_record,
                      last_layer_grad_norms, loader_record, prediction_stats, prefixed, select_device,
                      split_batch, to_device)

# select_device, prediction_stats, evaluate and GRAD_NORM_EDGES are importable from here as well;
# they belong to (and are documented in) focalcal.lab.records
__all__ = ["Trainer", "TrainSettings", "TrainResult", "LossHooks", "EpochScheduled",
           "ValidationUpdated", "ModelAware", "train", "PAPER_SCHEDULE", "SCHEDULES", "seed_everything"]

#: Mukhoti et al. (2020) CIFAR-10/100 profile (batch size 128 goes on the loader)
PAPER_SCHEDULE: dict[str, Any] = {
    "epochs": 350, "optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4,
    "lr_schedule": "step", "milestones": (150, 250), "gamma_lr": 0.1,
}

SCHEDULES: dict[str, dict[str, Any]] = {
    "paper_cifar": PAPER_SCHEDULE,
    # Mukhoti et al. App. D (batch size 64)
    "paper_tiny_imagenet": {**PAPER_SCHEDULE, "epochs": 100, "milestones": (40, 60)},
    # Charoenphakdee et al. (2021) Sec. 6 (batch size 128)
    "charoenphakdee_cifar10": {**PAPER_SCHEDULE, "epochs": 200, "milestones": (80, 150)},
    "charoenphakdee_svhn": {**PAPER_SCHEDULE, "epochs": 50, "milestones": (25, 40)},
    # cheap profiles for CPU runs (small models, few epochs)
    "cpu_adam": {"epochs": 10, "optimizer": "adam", "lr": 1e-3, "weight_decay": 0.0,
                 "lr_schedule": "cosine"},
    "cpu_sgd": {"epochs": 15, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
                "weight_decay": 5e-4, "lr_schedule": "cosine"},
}

_CHECKPOINT_FORMAT = 1


# --------------------------------------------------------------------------- the loss hooks ---

@runtime_checkable
class EpochScheduled(Protocol):
    """A loss whose form depends on the epoch (e.g. :class:`focalcal.losses.ScheduledFocalLoss`)."""

    def set_epoch(self, epoch: int) -> None:
        """Called before every epoch with the 0-based epoch."""


@runtime_checkable
class ValidationUpdated(Protocol):
    """A loss refitted after every epoch on the validation predictions (e.g. AdaFocal)."""

    def update(self, val_logits: torch.Tensor, val_labels: torch.Tensor) -> Any:
        """Called after every epoch with the validation logits (N, K) and labels (N,)."""


@runtime_checkable
class ModelAware(Protocol):
    """A loss that needs the network and the batch (e.g. the Hessian-trace penalty).

    With ``requires_model`` true it is called as ``loss_fn(logits, labels, model=model, inputs=x)``.
    """

    requires_model: bool


@dataclass(frozen=True)
class LossHooks:
    """What the trainer calls besides the loss itself.

    A loss declares its needs by its type, one :class:`typing.Protocol` per need, read once when
    the trainer is built (:meth:`LossHooks.of`; pass ``hooks=LossHooks(...)`` to give other callables):
    :class:`EpochScheduled` (``set_epoch(epoch)``, before every epoch with the 0-based epoch: FLSc),
    :class:`ValidationUpdated` (``update(val_logits, val_labels)``, after every epoch, on the
    training device: AdaFocal; needs ``val_loader``) and :class:`ModelAware` (``requires_model =
    True``: called as ``loss_fn(logits, labels, model=model, inputs=x)``, the Hessian-trace
    penalty). An ``nn.Module`` loss is moved to the device and its ``state_dict()`` (e.g.
    AdaFocal's gammas) is checkpointed and restored.

    Attributes
    ----------
    on_epoch_start : callable ``(epoch) -> None``, optional
        Before every epoch, with the 0-based epoch.
    on_epoch_end : callable ``(val_logits, val_labels) -> Any``, optional
        After every epoch's evaluation, with the validation logits and labels on the training
        device; needs a ``val_loader``.
    needs_model : bool
        Call the loss as ``loss_fn(logits, labels, model=model, inputs=x)``.
    """

    on_epoch_start: Callable[[int], Any] | None = None
    on_epoch_end: Callable[[torch.Tensor, torch.Tensor], Any] | None = None
    needs_model: bool = False

    @classmethod
    def of(cls, loss_fn: Any) -> LossHooks:
        """The hooks a loss declares through :class:`EpochScheduled`, :class:`ValidationUpdated`
        and :class:`ModelAware`."""
        return cls(
            on_epoch_start=loss_fn.set_epoch if isinstance(loss_fn, EpochScheduled) else None,
            on_epoch_end=loss_fn.update if isinstance(loss_fn, ValidationUpdated) else None,
            needs_model=isinstance(loss_fn, ModelAware) and bool(loss_fn.requires_model))


# ------------------------------------------------------------------------------- settings ---

@dataclass(frozen=True)
class TrainSettings:
    """How to train: optimiser, schedule, device, checkpointing and what to record.

    Attributes
    ----------
    epochs : int
        Total number of epochs (a resumed run continues up to it).
    optimizer : {"sgd", "adam", "adamw"}
    lr, momentum, weight_decay, nesterov
        Optimiser settings (``momentum``/``nesterov`` only for SGD). Paper profile: 0.1, 0.9, 5e-4.
    lr_schedule : {"step", "cosine", "constant"}
        ``"step"``: multiply by ``gamma_lr`` at each epoch in ``milestones`` (none: constant);
        ``"cosine"``: cosine annealing to 0 over ``epochs``. Stepped once per epoch.
    device : {"auto", "cpu", "cuda", ...}
        ``"auto"`` picks CUDA when available (see :func:`focalcal.lab.records.select_device`).
    seed : int
        Seeds Python, NumPy, torch and the loader's generator (fresh runs only; a resumed run
        restores the checkpointed states instead, so it continues exactly as if never stopped).
    checkpoint_every : int
        Checkpoint after every this many epochs (and always after the last).
    amp : bool or "auto"
        bfloat16 autocast for the forward pass; ``"auto"``: on CUDA with bf16 support only. The loss
        always sees float32 logits.
    channels_last : bool or "auto"
        Channels-last layout of the model and its 4-D inputs. ``"auto"``: on CUDA, and on the CPU
        for a model with a 2-D convolution (training about 1.3x and evaluation about 2x faster
        there, ``bench/bench_train.py``). The layouts round differently, so a trajectory differs
        from the contiguous one's at float32 rounding and can end elsewhere on a loss at the edge
        of divergence.
    deterministic : bool
        On CUDA: deterministic algorithms and no cuDNN autotuning (slower). CPU runs are
        reproducible either way.
    grad_norms : bool
        Record the per-sample last-layer gradient norms (:mod:`focalcal.lab.records`).
    n_bins : int
        Bins of the recorded ECE.
    clip_grad_norm : float, optional
        Clip the total gradient norm to this value before every step. The papers do not mention
        clipping, but Mukhoti et al.'s released code clips at 2 (``clip_grad_norm(params, 2)``)
        and, by default, sums rather than averages the loss over the batch; pass
        ``clip_grad_norm=2`` with a sum-reduced loss to reproduce that code.
    logits_epochs : tuple of int
        After each of these (1-based) epochs, save the model's logits of that epoch into
        ``out_dir/logits_epoch_<n>.pt`` (the keys of ``logits.pt``, plus ``train_logits`` and
        ``train_labels`` when a ``train_eval_loader`` is given). Each must lie in ``1..epochs``.
        Empty (the default): nothing extra is written or recorded.
    record_subset : int
        At the epochs whose logits are not saved (neither the last nor one of ``logits_epochs``),
        evaluate the validation and test loaders on their first ``record_subset`` samples only: the
        per-epoch records then cost a fraction of a full pass (on a small CPU network the two
        evaluation passes cost twice the training pass), while the saved logits, and so every
        post-hoc result, still come from the whole splits. 0 (the default): always all of them.
    compile : bool
        Train through ``torch.compile(model)`` (the training forward passes only; evaluation, the
        checkpoints and the saved model use the eager module, whose parameters the compiled one
        shares). Worth it on a GPU over many epochs; the first steps pay the compilation. False
        (the default): eager, and nothing is recorded.

    Raises
    ------
    ValueError
        A value outside its domain (the message names the field).
    """

    epochs: int
    optimizer: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    nesterov: bool = False
    lr_schedule: str = "step"
    milestones: tuple[int, ...] | None = None
    gamma_lr: float = 0.1
    device: str | torch.device = "auto"
    seed: int = 0
    checkpoint_every: int = 1
    amp: bool | str = "auto"
    channels_last: bool | str = "auto"
    deterministic: bool = False
    grad_norms: bool = True
    n_bins: int = 15
    clip_grad_norm: float | None = None
    logits_epochs: tuple[int, ...] = ()
    record_subset: int = 0
    compile: bool = False

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("epochs", check_int(self.epochs, "epochs"))
        check_choice(self.optimizer, "optimizer", ("sgd", "adam", "adamw"))
        check_choice(self.lr_schedule, "lr_schedule", ("step", "cosine", "constant"))
        put("lr", check_positive(self.lr, "lr"))
        put("gamma_lr", check_positive(self.gamma_lr, "gamma_lr"))
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay}")
        if not (math.isfinite(self.momentum) and 0 <= self.momentum < 1):
            raise ValueError(f"momentum must lie in [0, 1), got {self.momentum}")
        put("checkpoint_every", check_int(self.checkpoint_every, "checkpoint_every"))
        put("n_bins", check_int(self.n_bins, "n_bins"))
        if self.clip_grad_norm is not None:
            put("clip_grad_norm", check_positive(self.clip_grad_norm, "clip_grad_norm"))
        check_choice(self.amp, "amp", (True, False, "auto"))
        check_choice(self.channels_last, "channels_last", (True, False, "auto"))
        check_choice(self.compile, "compile", (True, False))
        if self.milestones is not None:
            put("milestones", tuple(sorted(int(m) for m in self.milestones)))
        if isinstance(self.logits_epochs, (str, bytes)) or not isinstance(self.logits_epochs, Iterable):
            raise ValueError(f"logits_epochs must be a sequence of epochs, got {self.logits_epochs!r}")
        put("logits_epochs", tuple(sorted({check_int(e, "logits_epochs") for e in self.logits_epochs})))
        if any(e > self.epochs for e in self.logits_epochs):
            raise ValueError(f"logits_epochs must lie in 1..epochs ({self.epochs}), got {self.logits_epochs}")
        put("record_subset", check_int(self.record_subset, "record_subset", minimum=0))


# ------------------------------------------------------------------------------ RNG states ---

def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global RNG and torch (CPU and every CUDA device)."""
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _rng_state(loader_generator: torch.Generator | None) -> dict[str, Any]:
    keys, pos, has_gauss, cached = np.random.get_state()[1:]
    version, state, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        # NumPy's state as tensors and ints so that torch.load(weights_only=True) accepts it
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": version, "state": list(state), "gauss": gauss},
        "loader": loader_generator.get_state() if loader_generator is not None else None,
    }


def _set_rng_state(s: Mapping[str, Any], loader_generator: torch.Generator | None) -> None:
    torch.set_rng_state(s["torch"])
    if s["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])
    n = s["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["cached_gaussian"]))
    p = s["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
    if loader_generator is not None and s["loader"] is not None:
        loader_generator.set_state(s["loader"])


# ------------------------------------------------------------------ optimiser and schedule ---

def _make_optimizer(name: str, params: Iterable[torch.nn.Parameter], lr: float, momentum: float,
                    weight_decay: float, nesterov: bool) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay,
                               nesterov=nesterov)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def _make_scheduler(opt: torch.optim.Optimizer, schedule: str, epochs: int,
                    milestones: Iterable[int] | None, gamma_lr: float
                    ) -> torch.optim.lr_scheduler.LRScheduler:
    if schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    ms = [] if schedule == "constant" or milestones is None else sorted(int(m) for m in milestones)
    return torch.optim.lr_scheduler.MultiStepLR(opt, milestones=ms, gamma=gamma_lr)


# --------------------------------------------------------------------------------- results ---

@dataclass
class TrainResult:
    """What :meth:`Trainer.fit` returns (the same content is in ``out_dir`` when one was given).

    ``val_logits``/``test_logits`` (float32, CPU) are those of the final model; ``None`` for a
    loader that was not given. ``resumed_from`` is the number of epochs the run found already done
    in its checkpoint (0 for a fresh run).
    """

    model: nn.Module
    history: list[dict[str, Any]]
    val_logits: torch.Tensor | None
    val_labels: torch.Tensor | None
    test_logits: torch.Tensor | None
    test_labels: torch.Tensor | None
    out_dir: Path | None
    device: str
    resumed_from: int = 0
    grad_norm_edges: list[float] = field(default_factory=lambda: list(GRAD_NORM_EDGES))
    settings: dict[str, Any] = field(default_factory=dict)


def _json_normalise(obj: Any) -> Any:
    try:
        return json.loads(json.dumps(obj, allow_nan=False, default=str))
    except ValueError as err:
        raise ValueError(f"config must be JSON-serialisable without NaN/inf: {err}") from err


@dataclass
class _Loaders:
    train: Iterable
    val: Iterable | None
    test: Iterable | None
    train_eval: Iterable | None


@dataclass
class _Epoch:
    """What one pass over the training data leaves behind."""

    loss: float
    logits: torch.Tensor
    labels: torch.Tensor
    grad_norms: torch.Tensor | None
    #: training images per second of the pass (data loading, forward, backward and steps)
    throughput: float | None = None


# --------------------------------------------------------------------------------- trainer ---

class Trainer:
    """One training run: ``Trainer(model, loss_fn, settings, ...).fit(train_loader, ...)``.

    Parameters
    ----------
    model : nn.Module
        Maps a batch of inputs to logits ``(B, K)``; its last :class:`~torch.nn.Linear` is found by
        :func:`focalcal.lab.models.last_linear`.
    loss_fn : callable
        ``loss_fn(logits, labels) -> scalar`` (mean over the batch); see the module docstring for
        the hooks a loss may declare.
    settings : TrainSettings
    out_dir : path, optional
        Where checkpoints and results go; nothing is written without it.
    config : mapping, optional
        The run's configuration (JSON-serialisable); stored in ``config.json`` and the checkpoint.
    resume : bool
        Continue from ``out_dir/checkpoint.pt`` when it exists (its ``config`` must equal
        ``config``; otherwise ``ValueError``). The model, optimiser (learning rates included),
        scheduler, RNG and loss states come from the checkpoint; ``epochs`` may be raised to extend
        a finished run. ``False`` starts afresh and overwrites.
    keep_checkpoint : bool
        Keep ``checkpoint.pt`` after the run (lets a later run extend ``epochs``).
    progress : bool
        Print one line per epoch (training loss, validation NLL, ECE and accuracy, seconds) and,
        on a terminal, show a tqdm bar over each epoch's batches (a count: the steps read nothing
        back from the device).
    hooks : LossHooks, optional
        Default: :meth:`LossHooks.of` ``(loss_fn)``.

    Raises
    ------
    ValueError
        ``config`` is not JSON-serialisable; ``amp=True`` without CUDA; a bad device.
    """

    def __init__(self, model: nn.Module, loss_fn: nn.Module | Callable[..., torch.Tensor],
                 settings: TrainSettings, *, out_dir: str | os.PathLike | None = None,
                 config: Mapping[str, Any] | None = None, resume: bool = True,
                 keep_checkpoint: bool = True, progress: bool = True,
                 hooks: LossHooks | None = None) -> None:
        self.model, self.loss_fn, self.settings = model, loss_fn, settings
        self.hooks = LossHooks.of(loss_fn) if hooks is None else hooks
        self.config = _json_normalise(dict(config) if config is not None else {})
        self.out = Path(out_dir) if out_dir is not None else None
        self.resume, self.keep_checkpoint, self.progress = resume, keep_checkpoint, progress
        s = settings
        self.device = select_device(s.device)
        cuda = self.device.type == "cuda"
        self.amp = (cuda and torch.cuda.is_bf16_supported()) if s.amp == "auto" else bool(s.amp)
        if self.amp and not cuda:
            raise ValueError("amp=True needs a CUDA device (bfloat16 autocast is used on GPU only)")
        self.channels_last = ((cuda or any(isinstance(m, nn.Conv2d) for m in model.modules()))
                              if s.channels_last == "auto" else bool(s.channels_last))

    def recorded_settings(self) -> dict[str, Any]:
        """The settings as ``config.json`` and the checkpoint record them (device resolved)."""
        s = self.settings
        return {
            "epochs": s.epochs, "optimizer": s.optimizer, "lr": s.lr, "momentum": s.momentum,
            "weight_decay": s.weight_decay, "nesterov": s.nesterov, "lr_schedule": s.lr_schedule,
            "milestones": list(s.milestones) if s.milestones is not None else None,
            "gamma_lr": s.gamma_lr, "seed": int(s.seed), "device": str(self.device),
            "amp_bf16": self.amp, "channels_last": self.channels_last,
            "deterministic": s.deterministic, "checkpoint_every": s.checkpoint_every,
            "n_bins": s.n_bins, "clip_grad_norm": s.clip_grad_norm,
            "logits_epochs": list(s.logits_epochs), "record_subset": s.record_subset, "compile": s.compile,
        }

    # ------------------------------------------------------------------------------ fit ---

    def fit(self, train_loader: Iterable, *, val_loader: Iterable | None = None,
            test_loader: Iterable | None = None, train_eval_loader: Iterable | None = None
            ) -> TrainResult:
        """Train; record, checkpoint, resume; save the final logits.

        Parameters
        ----------
        train_loader, val_loader, test_loader : iterables of ``(inputs, labels, ...)`` batches
            If ``train_loader`` has a ``generator`` (as from
            :func:`focalcal.lab.data.make_loaders`), it is re-seeded with ``seed`` for a fresh run
            and checkpointed, so shuffling is reproducible.
        train_eval_loader : iterable, optional
            An extra eval-mode pass over training data (records ``train_eval_*``): every epoch, or,
            when ``logits_epochs`` is set, after those epochs only (its logits then go into their
            ``logits_epoch_<n>.pt``, e.g. for Mukhoti et al.'s training-set reliability diagrams).

        Returns
        -------
        TrainResult

        Raises
        ------
        ValueError
            A loss with an ``on_epoch_end`` hook without ``val_loader``; a checkpoint of another
            config; a loader that yields no batch.
        FloatingPointError
            The mean training loss of an epoch is not finite (the run stops; the last checkpoint
            stays).
        """
        if self.hooks.on_epoch_end is not None and val_loader is None:
            raise ValueError("val_loader is needed: the loss has an on_epoch_end hook that takes the "
                             "validation logits (e.g. AdaFocal's update(val_logits, val_labels))")
        self.loaders = _Loaders(train_loader, val_loader, test_loader, train_eval_loader)
        self._prepare()
        start = self._restore_or_seed()
        self.resumed_from = start
        if self.out is not None:
            # written first as well, so that an interrupted run's directory says what it was
            self._write_config()
        self.fc = last_linear(self.model)
        self.features = FeatureHook(self.fc)
        self.val_out = self.test_out = self.train_eval_out = None
        try:
            for epoch in range(start, self.settings.epochs):
                self._run_epoch(epoch)
        finally:
            self.features.remove()
        return self._finish()

    def _prepare(self) -> None:
        s, dev = self.settings, self.device
        if dev.type == "cuda":
            torch.backends.cudnn.benchmark = not s.deterministic
            if s.deterministic:
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
                torch.use_deterministic_algorithms(True, warn_only=True)
        self.loader_gen = getattr(self.loaders.train, "generator", None)
        self.model.to(dev)
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)
        # the compiled module shares the eager one's parameters and hooks (the feature hook is
        # registered before its first call, so it is traced); state_dict, checkpoints and
        # evaluation stay on the eager module, so a compiled run's files are an eager run's
        self.forward = torch.compile(self.model) if s.compile else self.model
        if isinstance(self.loss_fn, nn.Module):
            self.loss_fn.to(dev)
        self.opt = _make_optimizer(s.optimizer, self.model.parameters(), s.lr, s.momentum,
                                   s.weight_decay, s.nesterov)
        self.sched = _make_scheduler(self.opt, s.lr_schedule, s.epochs, s.milestones, s.gamma_lr)
        self.history: list[dict[str, Any]] = []
        self.autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if self.amp else nullcontext

    @property
    def _checkpoint_path(self) -> Path | None:
        return runfolder.checkpoint_path(self.out) if self.out is not None else None

    def _restore_or_seed(self) -> int:
        """Load the checkpoint (returns the epochs it had done) or seed a fresh run (returns 0)."""
        path = self._checkpoint_path
        if path is None or not self.resume or not path.is_file():
            seed_everything(self.settings.seed)
            if self.loader_gen is not None:
                self.loader_gen.manual_seed(int(self.settings.seed))
            return 0
        ck = torch_load(path, map_location="cpu")
        if ck.get("format") != _CHECKPOINT_FORMAT:
            raise ValueError(f"{path} has checkpoint format {ck.get('format')!r}, "
                             f"expected {_CHECKPOINT_FORMAT}")
        if ck["config"] != self.config:
            raise ValueError(f"{path} belongs to a run with another config "
                             f"({ck['config']!r} != {self.config!r}); use another out_dir or "
                             f"resume=False")
        self.model.load_state_dict(ck["model"])
        self.opt.load_state_dict(ck["optimizer"])
        self.sched.load_state_dict(ck["scheduler"])
        if ck["loss"] is not None and hasattr(self.loss_fn, "load_state_dict"):
            self.loss_fn.load_state_dict(ck["loss"])
        _set_rng_state(ck["rng"], self.loader_gen)
        self.history = list(ck["history"])
        return int(ck["epoch"])

    def _save_checkpoint(self, epoch_done: int) -> None:
        atomic_torch_save({
            "format": _CHECKPOINT_FORMAT, "epoch": epoch_done, "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
            "loss": self.loss_fn.state_dict() if hasattr(self.loss_fn, "state_dict") else None,
            "rng": _rng_state(self.loader_gen), "history": self.history, "config": self.config,
            "settings": self.recorded_settings(),
        }, self._checkpoint_path)

    # ---------------------------------------------------------------------------- epochs ---

    def _run_epoch(self, epoch: int) -> None:
        """Train one epoch, evaluate, call the hooks, record, checkpoint."""
        t0 = time.perf_counter()
        if self.hooks.on_epoch_start is not None:
            self.hooks.on_epoch_start(epoch)
        lr_now = float(self.opt.param_groups[0]["lr"])
        done = self._train_pass(epoch)
        if not math.isfinite(done.loss):
            raise FloatingPointError(f"mean training loss is {done.loss} in epoch {epoch + 1}; "
                                     f"lower lr (last checkpoint kept)")
        self.sched.step()
        record = self._record(epoch, lr_now, done)
        record["time_s"] = time.perf_counter() - t0
        self.history.append(_json_normalise(record))
        if self.progress:
            msg = f"epoch {epoch + 1}/{self.settings.epochs}  train loss {done.loss:.4f}"
            if self.loaders.val is not None:
                msg += (f"  val NLL {record['val_nll']:.4f}  val ECE {record['val_ece']:.4f}"
                        f"  val acc {record['val_accuracy']:.3f}")
            # a plain line (the epoch's bar is closed): papermill's --log-output and a sweep
            # run's run.log show it as it comes
            print(f"{msg}  {record['time_s']:.1f} s", flush=True)
        if self.out is not None:
            n = epoch + 1
            if n in self.settings.logits_epochs:
                # before the checkpoint: a run killed between the two redoes the epoch and the file
                self._save_logits(n, train=True)
            if n % self.settings.checkpoint_every == 0 or n == self.settings.epochs:
                self._save_checkpoint(n)
            runfolder.write_history(self.out, GRAD_NORM_EDGES, self.history)

    def _train_pass(self, epoch: int) -> _Epoch:
        """One pass over the training loader: a step per batch; the batches' logits kept."""
        s, dev, model = self.settings, self.device, self.model
        model.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
        n_batches = 0
        logit_chunks, label_chunks, gnorm_chunks = [], [], []
        try:
            total = len(self.loaders.train)  # type: ignore[arg-type]
        except TypeError:
            total = None
        # a bar only on a terminal: elsewhere (a notebook's output, a log file) its redraws pile up.
        # It counts batches only: the step loop never reads a tensor back to the host (no .item(),
        # float(), .cpu(), .tolist()), so a CUDA step is queued without waiting for the last one;
        # the loss, the logits and the gradient norms stay on the device and are read once, after
        # the pass (the epoch's line shows the loss)
        show_bar = self.progress and sys.stderr.isatty()
        bar = tqdm(self.loaders.train, total=total, disable=not show_bar, leave=False,
                   desc=f"epoch {epoch + 1}/{s.epochs}", dynamic_ncols=True)
        t0, n_images = time.perf_counter(), 0
        for batch in bar:
            x, y = split_batch(batch)
            x = to_device(x, dev, self.channels_last)
            y = y.to(dev, non_blocking=True).long()
            n_images += len(y)
            logits, loss = self._step(x, y)
            with torch.no_grad():
                loss_sum += loss.detach().double()
                n_batches += 1
                logit_chunks.append(logits.detach())
                label_chunks.append(y)
                if s.grad_norms and logits.grad is not None and self.features.features is not None:
                    gnorm_chunks.append(last_layer_grad_norms(logits.grad, self.features.features))
        bar.close()
        if dev.type == "cuda":  # the queued kernels belong to this pass's time
            torch.cuda.synchronize(dev)
        seconds = time.perf_counter() - t0
        if n_batches == 0:
            raise ValueError("train_loader yielded no batches")
        gnorms = None
        if s.grad_norms:
            gnorms = torch.cat(gnorm_chunks) if gnorm_chunks else torch.zeros(0)
        return _Epoch(float(loss_sum) / n_batches, torch.cat(logit_chunks), torch.cat(label_chunks),
                      gnorms, n_images / seconds if seconds > 0 else None)

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward, loss, backward, clip, optimiser step; returns the float32 logits and the loss."""
        self.features.reset()
        with self.autocast():
            out_logits = self.forward(x)
        logits = out_logits.float()
        if self.settings.grad_norms:
            logits.retain_grad()
        if self.hooks.needs_model:
            loss = self.loss_fn(logits, y, model=self.model, inputs=x)
        else:
            loss = self.loss_fn(logits, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.settings.clip_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.clip_grad_norm)
        self.opt.step()
        return logits, loss

    def _evaluate(self, loader: Iterable, limit: int | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, float | None]:
        return evaluate(self.model, loader, device=self.device, amp=self.amp,
                        channels_last=self.channels_last, limit=limit)

    def _record(self, epoch: int, lr_now: float, done: _Epoch) -> dict[str, Any]:
        """The epoch's record (:mod:`focalcal.lab.records`); calls ``on_epoch_end``."""
        s, ld = self.settings, self.loaders
        n_bins, n = s.n_bins, epoch + 1
        saved = n == s.epochs or n in s.logits_epochs
        limit = None if saved or not s.record_subset else s.record_subset
        record: dict[str, Any] = {"epoch": n, "lr": lr_now, "train_loss": done.loss,
                                  "throughput": done.throughput}
        record.update(prefixed("train", prediction_stats(done.logits, done.labels, n_bins=n_bins)))
        if ld.train_eval is not None and (not s.logits_epochs or n in s.logits_epochs):
            self.train_eval_out = self._evaluate(ld.train_eval)
            record.update(prefixed("train_eval", prediction_stats(*self.train_eval_out[:2], n_bins=n_bins)))
        fnorm = None  # the feature norm of the test split, else of the validation split
        if ld.val is not None:
            self.val_out = self._evaluate(ld.val, limit)
            record.update(prefixed("val", prediction_stats(*self.val_out[:2], n_bins=n_bins)))
            fnorm = self.val_out[2]
        if ld.test is not None:
            self.test_out = self._evaluate(ld.test, limit)
            record.update(prefixed("test", prediction_stats(*self.test_out[:2], n_bins=n_bins)))
            fnorm = self.test_out[2]
        if self.hooks.on_epoch_end is not None:
            self.hooks.on_epoch_end(self.val_out[0].to(self.device), self.val_out[1].to(self.device))
        record["weight_norm"] = float(self.fc.weight.detach().float().norm())
        record["feature_norm"] = fnorm
        if done.grad_norms is not None:
            record.update(grad_norm_summary(done.grad_norms))
        return record

    # ---------------------------------------------------------------------------- finish ---

    def _finish(self) -> TrainResult:
        # a run resumed after its last epoch still returns (and saves) its final logits
        if self.loaders.val is not None and self.val_out is None:
            self.val_out = self._evaluate(self.loaders.val)
        if self.loaders.test is not None and self.test_out is None:
            self.test_out = self._evaluate(self.loaders.test)
        val, test = self.val_out, self.test_out
        if self.out is not None:
            self._save_logits(None)
            self._write_config()
            runfolder.write_history(self.out, GRAD_NORM_EDGES, self.history)
            if not self.keep_checkpoint and self._checkpoint_path.is_file():
                self._checkpoint_path.unlink()
        return TrainResult(
            model=self.model, history=self.history,
            val_logits=val[0] if val else None, val_labels=val[1] if val else None,
            test_logits=test[0] if test else None, test_labels=test[1] if test else None,
            out_dir=self.out, device=str(self.device), resumed_from=self.resumed_from,
            settings=self.recorded_settings())

    def _save_logits(self, epoch: int | None, *, train: bool = False) -> None:
        """The latest evaluation's logits and labels, atomically (:func:`runfolder.save_logits`)."""
        blob = {}
        for split, out in (("train", self.train_eval_out if train else None), ("val", self.val_out),
                           ("test", self.test_out)):
            if out is not None:
                blob.update({f"{split}_logits": out[0], f"{split}_labels": out[1]})
        runfolder.save_logits(self.out, blob, epoch)

    def _write_config(self) -> None:
        ld = self.loaders
        runfolder.write_config(self.out, _json_normalise({
            "config": self.config, "trainer": self.recorded_settings(),
            "model": {"class": type(self.model).__name__, "parameters": count_parameters(self.model)},
            "loss": {"class": type(self.loss_fn).__name__, "repr": repr(self.loss_fn)},
            "data": {name: _dataset_size(loader) for name, loader in
                     (("train", ld.train), ("val", ld.val), ("test", ld.test))},
            **loader_record(ld.train),
            "hardware": hardware_record(self.device, self.history),
            "versions": _versions(),
        }))


def _dataset_size(loader: Iterable | None) -> int | None:
    ds = getattr(loader, "dataset", None)
    try:
        return len(ds) if ds is not None else None  # type: ignore[arg-type]
    except TypeError:
        return None


def _versions() -> dict[str, str]:
    from .. import __version__
    v = {"focalcal": __version__, "torch": torch.__version__, "python": platform.python_version()}
    try:
        import torchvision
        v["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    return v


# ----------------------------------------------------------------------------------- train ---

def train(model: nn.Module, loss_fn: nn.Module | Callable[..., torch.Tensor], train_loader: Iterable, *,
          val_loader: Iterable | None = None, test_loader: Iterable | None = None,
          train_eval_loader: Iterable | None = None, out_dir: str | os.PathLike | None = None,
          config: Mapping[str, Any] | None = None, resume: bool = True, keep_checkpoint: bool = True,
          progress: bool = True, hooks: LossHooks | None = None, **settings: Any) -> TrainResult:
    """Train ``model`` on ``loss_fn`` in one call: :class:`Trainer` ``(...).fit(...)``.

    Parameters
    ----------
    model, loss_fn, out_dir, config, resume, keep_checkpoint, progress, hooks
        As for :class:`Trainer`.
    train_loader, val_loader, test_loader, train_eval_loader
        As for :meth:`Trainer.fit`.
    **settings
        The fields of :class:`TrainSettings` (``epochs`` is required).

    Returns
    -------
    TrainResult
    """
    trainer = Trainer(model, loss_fn, TrainSettings(**settings), out_dir=out_dir, config=config,
                      resume=resume, keep_checkpoint=keep_checkpoint, progress=progress, hooks=hooks)
    return trainer.fit(train_loader, val_loader=val_loader, test_loader=test_loader,
                       train_eval_loader=train_eval_loader)
