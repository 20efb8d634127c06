"""What the trainer records per epoch: prediction statistics, evaluation passes, gradient norms.

Records (one dict per epoch in a run's ``history``)
---------------------------------------------------
For every evaluated split ``s`` in ``train``, ``val``, ``test``: ``s_nll``, ``s_nll_correct``,
``s_nll_incorrect`` (mean NLL over correctly / incorrectly classified samples, Mukhoti et al. 2020,
Figs. 2a-b, 3b-c), ``s_entropy``, ``s_entropy_correct``, ``s_entropy_incorrect`` (entropy of the
softmax in nats, Figs. 2, 3d), ``s_accuracy``, ``s_error``, ``s_confidence`` (mean
max-probability), ``s_ece`` (15-bin equal-width ECE, :func:`focalcal.metrics.ece`, Fig. 2c), and
``s_n`` (:func:`prediction_stats`). The ``train_*`` values come from the logits of the training
forward passes themselves (train mode, augmented inputs, weights changing within the epoch), at no
extra cost; a ``train_eval_loader`` adds a clean pass, recorded as ``train_eval_*``. Means over an
empty group are ``None``.

Also: ``epoch`` (1-based), ``lr`` (used during the epoch), ``train_loss`` (mean training
objective), ``time_s`` (the whole epoch, evaluation included), ``throughput`` (training images per
second of the epoch's training pass alone: its optimiser steps, data loading included), ``weight_norm`` (Frobenius norm of the last linear layer's weight, Fig. 3e),
``feature_norm`` (mean L2 norm of the last layer's input on the test split, else validation;
Mukhoti et al. Fig. 10, :func:`evaluate`), and the per-sample gradient norms of the last layer over
all training samples of the epoch (Fig. 4b-d, :func:`grad_norm_summary`): ``grad_norm_hist``
(counts in the log-spaced bins :data:`GRAD_NORM_EDGES`, values outside clamped into the end bins),
``grad_norm_mean`` and ``grad_norm_quantiles`` (5, 25, 50, 75, 95 %).

The per-sample gradient norm has a closed form (:func:`last_layer_grad_norms`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn

from .._validation import check_labels, check_logits
from ..metrics import ece
from .models import last_linear

__all__ = ["GRAD_NORM_EDGES", "select_device", "device_name", "hardware_record", "loader_record",
           "prediction_stats", "evaluate", "grad_norm_summary",
           "last_layer_grad_norms", "FeatureHook"]

#: bin edges of the per-sample gradient-norm histograms: 4 bins per decade, 1e-8 .. 1e3
GRAD_NORM_EDGES: list[float] = [float(10.0 ** (e / 4)) for e in range(-32, 13)]
_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


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


def device_name(device: str | torch.device = "auto") -> str:
    """What a run records as its hardware: the GPU's name (``torch.cuda.get_device_name``, e.g.
    ``"NVIDIA H100 80GB HBM3"``) for a CUDA device, else the device type (``"cpu"``)."""
    dev = select_device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return dev.type


def hardware_record(device: str | torch.device, history: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What a run's ``config.json`` records as its ``hardware``: the ``device``, its
    :func:`device_name`, and the median ``throughput`` (training images/s) of the epoch records in
    ``history`` (``None`` when none has one: before the first epoch, or records of older code)."""
    rates = [r["throughput"] for r in history if r.get("throughput") is not None]
    return {"device": str(device), "device_name": device_name(device),
            "throughput": float(statistics.median(rates)) if rates else None}


def loader_record(loader: Any) -> dict[str, Any]:
    """``{"loader": {"num_workers": n, "pin_memory": b}}`` for a loader with worker processes or
    pinned memory (a GPU run's), else ``{}``, so that the records of the other runs stay as they
    were (the workers change the augmentation's random stream, not its distribution)."""
    workers = int(getattr(loader, "num_workers", 0) or 0)
    pinned = bool(getattr(loader, "pin_memory", False))
    return {"loader": {"num_workers": workers, "pin_memory": pinned}} if workers or pinned else {}


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
        "ece": float(ece(logits=z, labels=y, n_bins=n_bins)), "n": n,
    }


class FeatureHook:
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


def split_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        return batch[0], batch[1]
    raise ValueError("each batch must be a tuple (inputs, labels, ...); got "
                     f"{type(batch).__name__}")


def to_device(x: torch.Tensor, device: torch.device, channels_last: bool) -> torch.Tensor:
    x = x.to(device, non_blocking=True)
    if channels_last and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable, *, device: str | torch.device = "auto",
             amp: bool = False, channels_last: bool = False, limit: int | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, float | None]:
    """Logits of ``model`` (eval mode) over ``loader``, or over its first ``limit`` samples.

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
        hook = FeatureHook(last_linear(model))
    except ValueError:
        hook = None
    logits, labels, fsum, fcount = [], [], torch.zeros((), dtype=torch.float64, device=dev), 0
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if amp else nullcontext()
    try:
        seen = 0
        for batch in loader:
            if limit is not None and seen >= limit:
                break
            x, y = split_batch(batch)
            if limit is not None and seen + len(y) > limit:
                x, y = x[:limit - seen], y[:limit - seen]
            seen += len(y)
            x = to_device(x, dev, channels_last)
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


def grad_norm_summary(norms: torch.Tensor) -> dict[str, Any]:
    """``grad_norm_hist``, ``grad_norm_mean`` and ``grad_norm_quantiles`` of per-sample norms."""
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


def last_layer_grad_norms(logits_grad: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """Per-sample gradient norms of the last linear layer, in closed form.

    With last layer ``z = W h + b`` and a batch loss ``L = (1/B) sum_i l_i``, autograd gives
    ``G = dL/dz`` (one row per sample, ``G_i = (1/B) dl_i/dz_i``); the gradient of ``l_i`` with
    respect to ``(W, b)`` is ``(dl_i/dz_i) [h_i^T, 1]``, whose norm is
    ``B ||G_i|| sqrt(||h_i||^2 + 1)``. This is exact for every loss that is a mean of per-sample
    terms of the logits (cross-entropy, focal losses); for batch-coupled losses (MMCE, ECE-KDE,
    AURC) it is each sample's share of the batch gradient through the logits.

    Parameters
    ----------
    logits_grad : Tensor, shape (B, K)
        ``dL/dz`` of the batch-mean loss ``L`` with respect to the logits.
    features : Tensor, shape (B, ...)
        The last layer's input ``h`` of the same forward pass.
    """
    h = features.flatten(1).float()
    g = logits_grad.float()
    return logits_grad.shape[0] * g.norm(dim=1) * (h.pow(2).sum(1) + 1.0).sqrt()


def prefixed(prefix: str, stats: Mapping[str, Any]) -> dict[str, Any]:
    """``stats`` with every key prefixed by ``prefix_`` (``"val"`` -> ``val_nll``, ...)."""
    return {f"{prefix}_{k}": v for k, v in stats.items()}
