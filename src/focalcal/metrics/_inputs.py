"""Input handling shared by the metrics, done once here: the scores first (exactly one of
``probs`` / ``logits``), then ``labels`` (required, an integer dtype)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import (
    ArrayLike,
    as_float_tensor,
    check_labels,
    check_logits,
    check_probs,
    warn_if_probabilities,
)


_BINARY_FORM = {
    "probs": "for binary scores p = p(y=1) of shape (N,) pass the two columns "
             "torch.stack([1 - p, p], dim=-1)",
    "logits": "for one binary logit z = log(p / (1 - p)) per sample, shape (N,), pass the two "
              "columns torch.stack([torch.zeros_like(z), z], dim=-1)",
}


def scores_of(probs: ArrayLike | None, logits: ArrayLike | None) -> tuple[Tensor, str]:
    """The validated ``(..., N, K)`` array that was passed (probabilities or logits) and its name.

    One-dimensional scores are refused with the two-column form of binary scores; ``logits`` that
    look like probabilities warn (``UserWarning``), as in the calibrators.
    """
    if (probs is None) == (logits is None):
        given = "both" if probs is not None else "neither"
        raise ValueError(f"pass exactly one of probs (the first argument) or logits= (got {given})")
    name = "probs" if probs is not None else "logits"
    raw = as_float_tensor(probs if probs is not None else logits, name)
    if raw.dim() < 2:
        raise ValueError(f"{name} must have shape (..., N, K), one column per class, got shape "
                         f"{tuple(raw.shape)}; {_BINARY_FORM[name]}")
    if name == "probs":
        return check_probs(raw, "probs"), name
    t = check_logits(raw, "logits")
    warn_if_probabilities(t)
    return t, name


def require_labels(labels: ArrayLike | None) -> None:
    if labels is None:
        raise ValueError("labels is required: pass the integer class labels (N,) after the scores, "
                         "e.g. ece(probs, labels) or ece(logits=logits, labels=labels)")


def labels_for(labels: ArrayLike | None, scores: Tensor) -> Tensor:
    """Integer labels ``(N,)`` matching ``scores`` ``(..., N, K)``, on their device.

    Floating (even integral-valued), bool and complex dtypes are refused with the library's one
    message (:func:`focalcal._validation.label_tensor`), as by the losses and the calibrators.
    """
    require_labels(labels)
    return check_labels(labels, n_classes=scores.shape[-1],
                        n_samples=scores.shape[-2]).to(scores.device)


def scored(probs: ArrayLike | None, labels: ArrayLike | None, logits: ArrayLike | None
           ) -> tuple[Tensor, str, Tensor]:
    """The validated scores ``(..., N, K)``, their name (``"probs"`` / ``"logits"``) and labels."""
    require_labels(labels)  # first: an old-style ece(labels, logits=z) gets this message
    t, name = scores_of(probs, logits)
    return t, name, labels_for(labels, t)


def log_probs(t: Tensor, name: str) -> Tensor:
    """Log-probabilities of validated scores (a zero probability is clamped to the dtype's
    smallest normal number, so its log is large but finite)."""
    if name == "logits":
        return torch.log_softmax(t, dim=-1)
    return torch.log(t.clamp(min=torch.finfo(t.dtype).tiny))


def as_probs(t: Tensor, name: str) -> Tensor:
    """Probabilities of validated scores (softmax of logits in their own dtype)."""
    return t if name == "probs" else torch.softmax(t, dim=-1)


def as_log_probs(t: Tensor, name: str) -> Tensor:
    """Log-probabilities of validated scores, accurate also for saturated rows.

    ``log p_max`` is computed as ``-log1p(sum_{j != argmax} exp(z_j - z_max))`` so that a row
    whose top probability rounds to 1 keeps a distinct (tiny, negative) log-confidence; zero
    probabilities give ``-inf``.
    """
    z = torch.log(t) if name == "probs" else t
    zmax, imax = z.max(dim=-1, keepdim=True)
    shifted = z - zmax
    # the arg-max term is exactly exp(0) = 1; dropping it lets log1p keep the tiny remainder
    rest = shifted.exp().scatter(-1, imax, 0.0).sum(-1, keepdim=True)
    return shifted - torch.log1p(rest)


def top_label(probs: ArrayLike | None, labels: ArrayLike | None, logits: ArrayLike | None
              ) -> tuple[Tensor, Tensor]:
    """Top-class probability and correctness, both (..., N); ties go to the lowest class index."""
    scores, name, lab = scored(probs, labels, logits)
    top, pred = scores.max(dim=-1)
    if name == "probs":
        return top, pred == lab
    # max softmax probability without the full softmax: 1 / sum_k exp(z_k - z_max)
    conf = (scores - top.unsqueeze(-1)).exp_().sum(-1).reciprocal_()
    return conf, pred == lab


def logits_batch(logits: ArrayLike, min_samples: int = 1) -> Tensor:
    """Logits of one batch ``(N, K)`` with at least ``min_samples`` rows (the kernel estimates)."""
    x = check_logits(logits, "logits")
    if x.dim() != 2:
        raise ValueError(f"logits must have shape (N, K), got shape {tuple(x.shape)}")
    if x.shape[0] < min_samples:
        raise ValueError(f"logits must have at least {min_samples} rows (samples) for the "
                         f"leave-one-out estimate, got {x.shape[0]}")
    return x
