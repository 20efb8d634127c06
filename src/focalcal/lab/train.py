"""A resumable, deterministic trainer that records what Mukhoti et al. (2020) plot.

:func:`train` runs one training run: SGD/Adam with a step or cosine schedule, a tqdm bar per epoch,
per-epoch records (Figs. 2-4 of Mukhoti et al.), checkpoints every ``checkpoint_every`` epochs,
resume from the last checkpoint, and at the end the validation and test logits saved with the run's
configuration. Every file is written atomically (:mod:`focalcal.lab.io`).

Schedules
---------
:data:`PAPER_SCHEDULE` is the CIFAR profile of Mukhoti et al. (2020, Sec. 3 and App. D) that Komisarenko
& Kull (2024) reuse: SGD, momentum 0.9, weight decay 5e-4, 350 epochs, learning rate 0.1, 0.01 from
epoch 150, 0.001 from epoch 250 (batch size 128, set on the loader). :data:`SCHEDULES` holds it and
the other papers' profiles plus cheap CPU profiles; pass one as ``train(..., **SCHEDULES[name])``.

Records (one dict per epoch in ``history``)
-------------------------------------------
For every evaluated split ``s`` in ``train``, ``val``, ``test``: ``s_nll``, ``s_nll_correct``,
``s_nll_incorrect`` (mean NLL over correctly / incorrectly classified samples, Figs. 2a-b, 3b-c),
``s_entropy``, ``s_entropy_correct``, ``s_entropy_incorrect`` (entropy of the softmax in nats,
Figs. 2, 3d), ``s_accuracy``, ``s_error``, ``s_confidence`` (mean max-probability), ``s_ece``
(15-bin equal-width ECE, :func:`focalcal.metrics.ece`, Fig. 2c), and ``s_n``. The ``train_*`` values
come from the logits of the training forward passes themselves (train mode, augmented inputs, weights
changing within the epoch), at no extra cost; pass ``train_eval_loader`` for an extra clean pass,
recorded as ``train_eval_*``. Means over an empty group are ``None``.

Also: ``epoch`` (1-based), ``lr`` (used during the epoch), ``train_loss`` (mean training
objective), ``time_s``, ``weight_norm`` (Frobenius norm of the last linear layer's weight, Fig. 3e),
``feature_norm`` (mean L2 norm of the last layer's input on the test split, else validation;
Mukhoti et al. Fig. 10), and the per-sample gradient norms of the last layer over all training
samples of the epoch (Fig. 4b-d): ``grad_norm_hist`` (counts in the log-spaced bins
:data:`GRAD_NORM_EDGES`, values outside clamped into the end bins), ``grad_norm_mean`` and
``grad_norm_quantiles`` (5, 25, 50, 75, 95 %).

The per-sample gradient norm is computed in closed form. With last layer ``z = W h + b`` and a batch
loss ``L = (1/B) sum_i l_i``, autograd gives ``G = dL/dz`` (one row per sample, ``G_i = (1/B)
dl_i/dz_i``); the gradient of ``l_i`` with respect to ``(W, b)`` is ``(dl_i/dz_i) [h_i^T, 1]``, whose
norm is ``B ||G_i|| sqrt(||h_i||^2 + 1)``. This is exact for every loss that is a mean of per-sample
terms of the logits (cross-entropy, focal losses); for batch-coupled losses (MMCE, ECE-KDE, AURC) it
is each sample's share of the batch gradient through the logits.

Files in ``out_dir``
--------------------
``checkpoint.pt`` (model, optimiser, scheduler, every RNG state incl. the loader's generator, loss
state, history), ``history.json`` (``{"grad_norm_edges": [...], "records": [...]}``, rewritten
every epoch), and at the end ``logits.pt`` (``val_logits``, ``val_labels``, ``test_logits``,
``test_labels``; float32 / int64) and ``config.json`` (the caller's ``config``, the trainer's
settings, model, loss, data sizes, versions).
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import time
from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from .._validation import check_choice, check_int, check_labels, check_logits, check_positive
from .io import atomic_torch_save, atomic_write_json, torch_load
from ..metrics import ece
from .models import count_parameters, last_linear

__all__ = ["train", "TrainResult", "PAPER_SCHEDULE", "SCHEDULES", "GRAD_NORM_EDGES",
           "select_device", "seed_everything", "prediction_stats", "evaluate"]

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

#: bin edges of the per-sample gradient-norm histograms: 4 bins per decade, 1e-8 .. 1e3
GRAD_NORM_EDGES: list[float] = [float(10.0 ** (e / 4)) for e in range(-32, 13)]
_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
_CHECKPOINT_FORMAT = 1


# ------------------------------------------------------------------------------------ helpers ---

def select_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"``: CUDA when available, else CPU; otherwise ``torch.device(device)``."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} requested but CUDA is not available")
    return dev


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


def _none_if_nan(v: float) -> float | None:
    return None if not math.isfinite(v) else float(v)


def prediction_stats(logits: Any, labels: Any, *, n_bins: int = 15) -> dict[str, float | None]:
    """The quantities of Mukhoti et al.'s Figs. 2-3 for one set of predictions.

    Parameters
    ----------
    logits : Tensor, shape (N, K)
    labels : Tensor, shape (N,)
    n_bins : int
        Bins of the equal-width ECE.

    Returns
    -------
    dict
        ``nll``, ``nll_correct``, ``nll_incorrect``, ``entropy``, ``entropy_correct``,
        ``entropy_incorrect`` (nats), ``accuracy``, ``error``, ``confidence``, ``ece``, ``n``.
        A mean over an empty group (no misclassified sample, say) is ``None``.
    """
    z = check_logits(logits).to(torch.float64)
    if z.dim() != 2:
        raise ValueError(f"logits must have shape (N, K), got {tuple(z.shape)}")
    y = check_labels(labels, z.shape[1], z.shape[0]).to(z.device)
    logp = torch.log_softmax(z, dim=-1)
    nll = -logp.gather(1, y[:, None]).squeeze(1)
    p = logp.exp()
    # xlogy(0, 0) = 0: saturated probabilities give a finite entropy
    ent = -torch.special.xlogy(p, p).sum(-1)
    correct = logp.argmax(-1) == y
    n, n_c = y.numel(), int(correct.sum())

    def mean(v: torch.Tensor, m: torch.Tensor, k: int) -> float | None:
        return float(v[m].sum() / k) if k else None

    acc = n_c / n
    return {
        "nll": float(nll.mean()), "nll_correct": mean(nll, correct, n_c),
        "nll_incorrect": mean(nll, ~correct, n - n_c),
        "entropy": float(ent.mean()), "entropy_correct": mean(ent, correct, n_c),
        "entropy_incorrect": mean(ent, ~correct, n - n_c),
        "accuracy": acc, "error": 1.0 - acc, "confidence": float(p.max(-1).values.mean()),
        "ece": float(ece(y, logits=z, n_bins=n_bins)), "n": n,
    }


class _FeatureHook:
    """Keeps the input of the last linear layer from the first forward pass after ``reset``."""

    def __init__(self, layer: nn.Linear) -> None:
        self.features: torch.Tensor | None = None
        self.handle = layer.register_forward_hook(self._hook)

    def _hook(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        # a loss with requires_model may run the network again; the first pass is the one whose
        # logits the step differentiates
        if self.features is None:
            self.features = inputs[0].detach()

    def reset(self) -> None:
        self.features = None

    def remove(self) -> None:
        self.handle.remove()


def _split_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        return batch[0], batch[1]
    raise ValueError("each batch must be a tuple (inputs, labels, ...); got "
                     f"{type(batch).__name__}")


def _to_device(x: torch.Tensor, device: torch.device, channels_last: bool) -> torch.Tensor:
    x = x.to(device, non_blocking=True)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable, *, device: str | torch.device = "auto",
             amp: bool = False, channels_last: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor, float | None]:
    """Logits of ``model`` (eval mode) over ``loader``.

    Returns
    -------
    logits : Tensor, shape (N, K), float32, on the CPU
    labels : Tensor, shape (N,), int64, on the CPU
    feature_norm : float or None
        Mean L2 norm of the last linear layer's input (``None`` if the model has none).
    """
    dev = select_device(device)
    was_training = model.training
    model.eval()
    try:
        hook = _FeatureHook(last_linear(model))
    except ValueError:
        hook = None
    logits, labels, fsum, fcount = [], [], torch.zeros((), dtype=torch.float64, device=dev), 0
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if amp else nullcontext()
    try:
        for batch in loader:
            x, y = _split_batch(batch)
            x = _to_device(x, dev, channels_last)
            if hook is not None:
                hook.reset()
            with autocast:
                z = model(x)
            logits.append(z.float())
            labels.append(y.to(dev, non_blocking=True))
            if hook is not None and hook.features is not None:
                fsum += hook.features.flatten(1).float().norm(dim=1).sum()
                fcount += x.shape[0]
    finally:
        if hook is not None:
            hook.remove()
        model.train(was_training)
    if not logits:
        raise ValueError("the evaluation loader yielded no batches")
    fnorm = float(fsum) / fcount if fcount else None
    return torch.cat(logits).cpu(), torch.cat(labels).cpu().long(), fnorm


@dataclass
class TrainResult:
    """What :func:`train` returns (the same content is in ``out_dir`` when one was given).

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


def _grad_summary(norms: torch.Tensor) -> dict[str, Any]:
    if norms.numel() == 0:
        return {"grad_norm_hist": [0] * (len(GRAD_NORM_EDGES) - 1), "grad_norm_mean": None,
                "grad_norm_quantiles": None}
    norms = norms.double().cpu()
    edges = torch.tensor(GRAD_NORM_EDGES, dtype=torch.float64)
    # clamp into the end bins so that every sample is counted
    idx = (torch.bucketize(norms, edges, right=True) - 1).clamp(0, len(GRAD_NORM_EDGES) - 2)
    hist = torch.bincount(idx, minlength=len(GRAD_NORM_EDGES) - 1)
    q = torch.quantile(norms, torch.tensor(_QUANTILES, dtype=torch.float64))
    return {"grad_norm_hist": hist.tolist(), "grad_norm_mean": float(norms.mean()),
            "grad_norm_quantiles": dict(zip((f"{int(100 * a)}" for a in _QUANTILES), q.tolist()))}


def _prefixed(prefix: str, stats: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{prefix}_{k}": v for k, v in stats.items()}


def _write_history(out: Path, history: list[dict[str, Any]]) -> None:
    atomic_write_json(out / "history.json", {"grad_norm_edges": GRAD_NORM_EDGES, "records": history})


# -------------------------------------------------------------------------------------- train ---

def train(model: nn.Module, loss_fn: nn.Module | Any, train_loader: Iterable, *,
          val_loader: Iterable | None = None, test_loader: Iterable | None = None,
          epochs: int, optimizer: str = "sgd", lr: float = 0.1, momentum: float = 0.9,
          weight_decay: float = 5e-4, nesterov: bool = False, lr_schedule: str = "step",
          milestones: Iterable[int] | None = None, gamma_lr: float = 0.1,
          device: str | torch.device = "auto", seed: int = 0,
          out_dir: str | os.PathLike | None = None, checkpoint_every: int = 1, resume: bool = True,
          keep_checkpoint: bool = True, progress: bool = True, config: Mapping[str, Any] | None = None,
          amp: bool | str = "auto", channels_last: bool | str = "auto", deterministic: bool = False,
          grad_norms: bool = True, train_eval_loader: Iterable | None = None, n_bins: int = 15,
          clip_grad_norm: float | None = None) -> TrainResult:
    """Train ``model`` on ``loss_fn``; record, checkpoint, resume; save the final logits.

    Parameters
    ----------
    model : nn.Module
        Maps a batch of inputs to logits ``(B, K)``; its last :class:`~torch.nn.Linear` is found by
        :func:`focalcal.lab.models.last_linear`.
    loss_fn : callable
        ``loss_fn(logits, target) -> scalar`` (mean over the batch). Protocols, detected by
        attribute: ``requires_model = True`` -> called as ``loss_fn(logits, target, model=model,
        inputs=x)``; ``set_epoch(epoch)`` -> called before every epoch (0-based); ``update(val_logits,
        val_labels)`` -> called after every epoch with the validation logits and labels (on the
        training device; AdaFocal), which then requires ``val_loader``. An ``nn.Module`` loss is moved
        to the device and its ``state_dict()`` (buffers, extra state: e.g. AdaFocal's gammas) is
        checkpointed and restored.
    train_loader, val_loader, test_loader : iterables of ``(inputs, labels, ...)`` batches
        If ``train_loader`` has a ``generator`` (as from :func:`focalcal.lab.data.make_loaders`), it is
        re-seeded with ``seed`` for a fresh run and checkpointed, so shuffling is reproducible.
    epochs : int
        Total number of epochs (a resumed run continues up to it).
    optimizer : {"sgd", "adam", "adamw"}
    lr, momentum, weight_decay, nesterov
        Optimiser settings (``momentum``/``nesterov`` only for SGD). Paper profile: 0.1, 0.9, 5e-4.
    lr_schedule : {"step", "cosine", "constant"}
        ``"step"``: multiply by ``gamma_lr`` at each epoch in ``milestones`` (none: constant);
        ``"cosine"``: cosine annealing to 0 over ``epochs``. Stepped once per epoch.
    device : {"auto", "cpu", "cuda", ...}
        ``"auto"`` picks CUDA when available (see :func:`select_device`).
    seed : int
        Seeds Python, NumPy, torch and the loader's generator (fresh runs only; a resumed run
        restores the checkpointed states instead, so it continues exactly as if never stopped).
    out_dir : path, optional
        Where checkpoints and results go; nothing is written without it.
    checkpoint_every : int
        Checkpoint after every this many epochs (and always after the last).
    resume : bool
        Continue from ``out_dir/checkpoint.pt`` when it exists (its ``config`` must equal
        ``config``; otherwise ``ValueError``). The model, optimiser (learning rates included),
        scheduler, RNG and loss states come from the checkpoint; ``epochs`` may be raised to extend
        a finished run. ``False`` starts afresh and overwrites.
    keep_checkpoint : bool
        Keep ``checkpoint.pt`` after the run (lets a later call extend ``epochs``).
    progress : bool
        Show a tqdm bar per epoch with the running loss and accuracy.
    config : mapping, optional
        The run's configuration (JSON-serialisable); stored in ``config.json`` and the checkpoint.
    amp : bool or "auto"
        bfloat16 autocast for the forward pass; ``"auto"``: on CUDA with bf16 support only. The loss
        always sees float32 logits.
    channels_last : bool or "auto"
        ``"auto"``: on CUDA only, for 4-D inputs.
    deterministic : bool
        On CUDA: deterministic algorithms and no cuDNN autotuning (slower). CPU runs are
        reproducible either way.
    grad_norms : bool
        Record the per-sample last-layer gradient norms (see the module docstring).
    train_eval_loader : iterable, optional
        An extra eval-mode pass over training data each epoch (records ``train_eval_*``).
    n_bins : int
        Bins of the recorded ECE.
    clip_grad_norm : float, optional
        Clip the total gradient norm to this value before every step. The papers do not mention
        clipping, but Mukhoti et al.'s released code clips at 2 (``clip_grad_norm(params, 2)``)
        and, by default, sums rather than averages the loss over the batch; pass
        ``clip_grad_norm=2`` with a sum-reduced loss to reproduce that code.

    Returns
    -------
    TrainResult

    Raises
    ------
    ValueError
        Bad arguments; ``update`` protocol without ``val_loader``; a checkpoint of another config.
    FloatingPointError
        The mean training loss of an epoch is not finite (the run stops; the last checkpoint stays).
    """
    epochs = check_int(epochs, "epochs")
    check_choice(optimizer, "optimizer", ("sgd", "adam", "adamw"))
    check_choice(lr_schedule, "lr_schedule", ("step", "cosine", "constant"))
    lr = check_positive(lr, "lr")
    gamma_lr = check_positive(gamma_lr, "gamma_lr")
    if not (math.isfinite(weight_decay) and weight_decay >= 0):
        raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay}")
    if not (math.isfinite(momentum) and 0 <= momentum < 1):
        raise ValueError(f"momentum must lie in [0, 1), got {momentum}")
    checkpoint_every = check_int(checkpoint_every, "checkpoint_every")
    n_bins = check_int(n_bins, "n_bins")
    if clip_grad_norm is not None:
        clip_grad_norm = check_positive(clip_grad_norm, "clip_grad_norm")
    check_choice(amp, "amp", (True, False, "auto"))
    check_choice(channels_last, "channels_last", (True, False, "auto"))
    has_update = callable(getattr(loss_fn, "update", None))
    has_set_epoch = callable(getattr(loss_fn, "set_epoch", None))
    requires_model = bool(getattr(loss_fn, "requires_model", False))
    if has_update and val_loader is None:
        raise ValueError("loss_fn has update(val_logits, val_labels) (e.g. AdaFocal) and needs "
                         "val_loader; pass val_loader=")
    user_config = _json_normalise(dict(config) if config is not None else {})

    dev = select_device(device)
    use_amp = (dev.type == "cuda" and torch.cuda.is_bf16_supported()) if amp == "auto" else bool(amp)
    if use_amp and dev.type != "cuda":
        raise ValueError("amp=True needs a CUDA device (bfloat16 autocast is used on GPU only)")
    use_cl = dev.type == "cuda" if channels_last == "auto" else bool(channels_last)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = not deterministic
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
    loader_gen = getattr(train_loader, "generator", None)

    settings = {
        "epochs": epochs, "optimizer": optimizer, "lr": lr, "momentum": momentum,
        "weight_decay": weight_decay, "nesterov": nesterov, "lr_schedule": lr_schedule,
        "milestones": sorted(int(m) for m in milestones) if milestones is not None else None,
        "gamma_lr": gamma_lr, "seed": int(seed), "device": str(dev), "amp_bf16": use_amp,
        "channels_last": use_cl, "deterministic": deterministic, "checkpoint_every": checkpoint_every,
        "n_bins": n_bins, "clip_grad_norm": clip_grad_norm,
    }

    model.to(dev)
    if use_cl:
        model.to(memory_format=torch.channels_last)
    if isinstance(loss_fn, nn.Module):
        loss_fn.to(dev)
    opt = _make_optimizer(optimizer, model.parameters(), lr, momentum, weight_decay, nesterov)
    sched = _make_scheduler(opt, lr_schedule, epochs, milestones, gamma_lr)

    out = Path(out_dir) if out_dir is not None else None
    ckpt_path = out / "checkpoint.pt" if out is not None else None
    history: list[dict[str, Any]] = []
    start = 0
    if ckpt_path is not None and resume and ckpt_path.is_file():
        ck = torch_load(ckpt_path, map_location="cpu")
        if ck.get("format") != _CHECKPOINT_FORMAT:
            raise ValueError(f"{ckpt_path} has checkpoint format {ck.get('format')!r}, "
                             f"expected {_CHECKPOINT_FORMAT}")
        if ck["config"] != user_config:
            raise ValueError(f"{ckpt_path} belongs to a run with another config "
                             f"({ck['config']!r} != {user_config!r}); use another out_dir or "
                             f"resume=False")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        sched.load_state_dict(ck["scheduler"])
        if ck["loss"] is not None and hasattr(loss_fn, "load_state_dict"):
            loss_fn.load_state_dict(ck["loss"])
        _set_rng_state(ck["rng"], loader_gen)
        history = list(ck["history"])
        start = int(ck["epoch"])
    else:
        seed_everything(seed)
        if loader_gen is not None:
            loader_gen.manual_seed(int(seed))
    resumed_from = start
    if out is not None:
        # written first as well, so that an interrupted run's directory says what it was
        _write_config(out, user_config, settings, model, loss_fn, train_loader, val_loader, test_loader)

    fc = last_linear(model)
    hook = _FeatureHook(fc)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if use_amp else nullcontext()
    eval_kw = {"device": dev, "amp": use_amp, "channels_last": use_cl}
    val_out = test_out = None

    def save_checkpoint(epoch_done: int) -> None:
        atomic_torch_save({
            "format": _CHECKPOINT_FORMAT, "epoch": epoch_done, "model": model.state_dict(),
            "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
            "loss": loss_fn.state_dict() if hasattr(loss_fn, "state_dict") else None,
            "rng": _rng_state(loader_gen), "history": history, "config": user_config,
            "settings": settings,
        }, ckpt_path)

    try:
        for epoch in range(start, epochs):
            t0 = time.perf_counter()
            if has_set_epoch:
                loss_fn.set_epoch(epoch)
            model.train()
            lr_now = float(opt.param_groups[0]["lr"])
            loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
            n_batches = 0
            logit_chunks, label_chunks, gnorm_chunks = [], [], []
            try:
                total = len(train_loader)  # type: ignore[arg-type]
            except TypeError:
                total = None
            log_every = max(1, (total or 100) // 20)
            bar = tqdm(train_loader, total=total, disable=not progress, leave=False,
                       desc=f"epoch {epoch + 1}/{epochs}", dynamic_ncols=True)
            for batch in bar:
                x, y = _split_batch(batch)
                x = _to_device(x, dev, use_cl)
                y = y.to(dev, non_blocking=True).long()
                hook.reset()
                with autocast:
                    out_logits = model(x)
                logits = out_logits.float()
                if grad_norms:
                    logits.retain_grad()
                if requires_model:
                    loss = loss_fn(logits, y, model=model, inputs=x)
                else:
                    loss = loss_fn(logits, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if clip_grad_norm is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
                opt.step()
                with torch.no_grad():
                    loss_sum += loss.detach().double()
                    n_batches += 1
                    logit_chunks.append(logits.detach())
                    label_chunks.append(y)
                    if grad_norms and logits.grad is not None and hook.features is not None:
                        h = hook.features.flatten(1).float()
                        g = logits.grad.float()
                        gnorm_chunks.append(y.shape[0] * g.norm(dim=1)
                                            * (h.pow(2).sum(1) + 1.0).sqrt())
                if progress and n_batches % log_every == 0:
                    acc = float((logits.detach().argmax(-1) == y).float().mean())
                    bar.set_postfix(loss=f"{float(loss_sum) / n_batches:.4f}", acc=f"{acc:.3f}")
            bar.close()
            if n_batches == 0:
                raise ValueError("train_loader yielded no batches")
            train_loss = float(loss_sum) / n_batches
            if not math.isfinite(train_loss):
                raise FloatingPointError(f"mean training loss is {train_loss} in epoch {epoch + 1}; "
                                         f"lower lr (last checkpoint kept)")
            sched.step()

            record: dict[str, Any] = {"epoch": epoch + 1, "lr": lr_now, "train_loss": train_loss}
            record.update(_prefixed("train", prediction_stats(
                torch.cat(logit_chunks), torch.cat(label_chunks), n_bins=n_bins)))
            if train_eval_loader is not None:
                z, t, _ = evaluate(model, train_eval_loader, **eval_kw)
                record.update(_prefixed("train_eval", prediction_stats(z, t, n_bins=n_bins)))
            fnorm = None
            if val_loader is not None:
                val_out = evaluate(model, val_loader, **eval_kw)
                record.update(_prefixed("val", prediction_stats(val_out[0], val_out[1], n_bins=n_bins)))
                fnorm = val_out[2]
            if test_loader is not None:
                test_out = evaluate(model, test_loader, **eval_kw)
                record.update(_prefixed("test", prediction_stats(test_out[0], test_out[1], n_bins=n_bins)))
                fnorm = test_out[2]
            if has_update:
                loss_fn.update(val_out[0].to(dev), val_out[1].to(dev))
            record["weight_norm"] = float(fc.weight.detach().float().norm())
            record["feature_norm"] = fnorm
            if grad_norms:
                gn = torch.cat(gnorm_chunks) if gnorm_chunks else torch.zeros(0)
                record.update(_grad_summary(gn))
            record["time_s"] = time.perf_counter() - t0
            history.append(_json_normalise(record))
            if progress:
                msg = f"epoch {epoch + 1}/{epochs} loss {train_loss:.4f} acc {record['train_accuracy']:.3f}"
                if val_loader is not None:
                    msg += f" val acc {record['val_accuracy']:.3f} ece {record['val_ece']:.4f}"
                tqdm.write(msg)
            if out is not None:
                done = epoch + 1
                if done % checkpoint_every == 0 or done == epochs:
                    save_checkpoint(done)
                _write_history(out, history)
    finally:
        hook.remove()

    # a run resumed after its last epoch still returns (and saves) its final logits
    if val_loader is not None and val_out is None:
        val_out = evaluate(model, val_loader, **eval_kw)
    if test_loader is not None and test_out is None:
        test_out = evaluate(model, test_loader, **eval_kw)

    if out is not None:
        logits_blob = {}
        if val_out is not None:
            logits_blob.update(val_logits=val_out[0], val_labels=val_out[1])
        if test_out is not None:
            logits_blob.update(test_logits=test_out[0], test_labels=test_out[1])
        atomic_torch_save(logits_blob, out / "logits.pt")
        _write_config(out, user_config, settings, model, loss_fn, train_loader, val_loader, test_loader)
        _write_history(out, history)
        if not keep_checkpoint and ckpt_path.is_file():
            ckpt_path.unlink()

    return TrainResult(
        model=model, history=history,
        val_logits=val_out[0] if val_out else None, val_labels=val_out[1] if val_out else None,
        test_logits=test_out[0] if test_out else None, test_labels=test_out[1] if test_out else None,
        out_dir=out, device=str(dev), resumed_from=resumed_from, settings=settings)


def _write_config(out: Path, user_config: Any, settings: dict[str, Any], model: nn.Module,
                  loss_fn: Any, train_loader: Any, val_loader: Any, test_loader: Any) -> None:
    atomic_write_json(out / "config.json", _json_normalise({
        "config": user_config, "trainer": settings,
        "model": {"class": type(model).__name__, "parameters": count_parameters(model)},
        "loss": {"class": type(loss_fn).__name__, "repr": repr(loss_fn)},
        "data": {name: _dataset_size(ld) for name, ld in
                 (("train", train_loader), ("val", val_loader), ("test", test_loader))},
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
