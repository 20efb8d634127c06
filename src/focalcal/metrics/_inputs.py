"""Input handling shared by the metrics: exactly one of ``probs=`` / ``logits=``, labels, top label."""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import ArrayLike, check_labels, check_logits, check_probs


def one_of(probs: ArrayLike | None, logits: ArrayLike | None) -> None:
    if (probs is None) == (logits is None):
        given = "both" if probs is not None else "neither"
        raise ValueError(f"pass exactly one of probs= or logits= (got {given})")


def scores_of(probs: ArrayLike | None, logits: ArrayLike | None) -> tuple[Tensor, str]:
    """The validated array that was passed (probabilities or logits) and its argument name."""
    one_of(probs, logits)
    if probs is not None:
        return check_probs(probs, "probs"), "probs"
    return check_logits(logits, "logits"), "logits"


def require_samples(t: Tensor, name: str) -> None:
    if t.dim() < 2:
        raise ValueError(f"{name} must have shape (..., N, K), got shape {tuple(t.shape)}")


def log_probs(probs: ArrayLike | None, logits: ArrayLike | None) -> Tensor:
    """Log-probabilities from exactly one of ``probs=`` / ``logits=`` (a zero probability is
    clamped to the dtype's smallest normal number, so its log is large but finite)."""
    t, name = scores_of(probs, logits)
    require_samples(t, name)
    if name == "logits":
        return torch.log_softmax(t, dim=-1)
    return torch.log(t.clamp(min=torch.finfo(t.dtype).tiny))


def as_probs(probs: ArrayLike | None, logits: ArrayLike | None) -> Tensor:
    """Validated probabilities ``(..., N, K)`` (softmax of ``logits`` in their own dtype)."""
    t, name = scores_of(probs, logits)
    require_samples(t, name)
    return t if name == "probs" else torch.softmax(t, dim=-1)


def as_log_probs(probs: ArrayLike | None, logits: ArrayLike | None) -> Tensor:
    """Validated log-probabilities ``(..., N, K)``, accurate also for saturated rows.

    ``log p_max`` is computed as ``-log1p(sum_{j != argmax} exp(z_j - z_max))`` so that a row
    whose top probability rounds to 1 keeps a distinct (tiny, negative) log-confidence; zero
    probabilities give ``-inf``.
    """
    t, name = scores_of(probs, logits)
    require_samples(t, name)
    z = torch.log(t) if name == "probs" else t
    zmax, imax = z.max(dim=-1, keepdim=True)
    shifted = z - zmax
    # the arg-max term is exactly exp(0) = 1; dropping it lets log1p keep the tiny remainder
    rest = shifted.exp().scatter(-1, imax, 0.0).sum(-1, keepdim=True)
    return shifted - torch.log1p(rest)


def labels_for(labels: ArrayLike, scores: Tensor) -> Tensor:
    return check_labels(labels, n_classes=scores.shape[-1], n_samples=scores.shape[-2])


def top_label(labels: ArrayLike, probs: ArrayLike | None, logits: ArrayLike | None
              ) -> tuple[Tensor, Tensor]:
    """Top-class probability and correctness, both (..., N); ties go to the lowest class index."""
    scores, name = scores_of(probs, logits)
    require_samples(scores, name)
    lab = labels_for(labels, scores)
    top, pred = scores.max(dim=-1)
    if name == "probs":
        return top, pred == lab
    # max softmax probability without the full softmax: 1 / sum_k exp(z_k - z_max)
    conf = (scores - top.unsqueeze(-1)).exp_().sum(-1).reciprocal_()
    return conf, pred == lab
