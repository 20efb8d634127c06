"""focalcal.metrics.smooth_ece against relplot (Błasiok & Nakkiran's package) and a direct sum."""

from __future__ import annotations

import math

import numpy as np
import pytest
import relplot
import torch

from focalcal.metrics import ece, smooth_ece


def task(n: int, k: int, scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits ``scale * z`` whose labels are drawn from ``softmax(z)``: calibrated at ``scale = 1``."""
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    return scale * z, y


def relplot_smece(logits: torch.Tensor, labels: torch.Tensor) -> float:
    conf, correct = relplot.multiclass_logits_to_confidences(logits.numpy(), labels.numpy())
    return float(relplot.smECE(conf, correct))


def direct_smece(conf: np.ndarray, correct: np.ndarray, sigma: float, images: int = 1) -> float:
    """smECE_sigma by the definition: the reflected Gaussian summed over its images, 20001 points."""
    t = np.linspace(0.0, 1.0, 20001)
    r, dens = np.zeros_like(t), np.zeros_like(t)
    for m in range(-images, images + 1):
        for c in (conf + 2 * m, -conf + 2 * m):
            kern = np.exp(-0.5 * ((t[:, None] - c[None, :]) / sigma) ** 2)
            r += kern @ (correct - conf)
            dens += kern.sum(1)
    trap = np.full_like(t, 1.0)
    trap[[0, -1]] = 0.5
    return float((trap * np.abs(r)).sum() / (trap * dens).sum())


@pytest.mark.parametrize("n,k,scale,seed", [(500, 10, 1.0, 0), (5000, 10, 1.5, 1), (20000, 10, 0.7, 2),
                                            (2000, 3, 1.0, 3), (3000, 100, 1.3, 4)])
def test_matches_relplot(n, k, scale, seed):
    logits, labels = task(n, k, scale, seed)
    ours = smooth_ece(logits=logits, labels=labels)
    ref = relplot_smece(logits, labels)
    assert ref < 0.2
    assert ours == pytest.approx(ref, abs=1e-3)


def test_differs_from_relplot_where_relplot_truncates_its_kernel():
    # a smooth ECE near 0.3: relplot's Gaussian, cut at distance 0.5, drops a quarter of the weight,
    # and its reflection counts the confidences that round to 1 once instead of twice
    logits, labels = task(800, 10, 3.0, 0)
    ours, ref = smooth_ece(logits=logits, labels=labels), relplot_smece(logits, labels)
    assert ours > 0.25
    assert ref - ours > 2e-3
    # ours is the definition: the fixed point of the full reflected kernel, summed directly
    conf = torch.softmax(logits, 1).max(1).values.numpy()
    correct = (logits.argmax(1) == labels).numpy().astype(np.float64)
    assert direct_smece(conf, correct, ours) == pytest.approx(ours, abs=1e-5)


def test_is_the_fixed_point_of_the_definition():
    logits, labels = task(500, 5, 1.3, 7)
    s = smooth_ece(logits=logits, labels=labels)
    conf = torch.softmax(logits, 1).max(1).values.numpy()
    correct = (logits.argmax(1) == labels).numpy().astype(np.float64)
    assert direct_smece(conf, correct, s) == pytest.approx(s, abs=1e-5)


def test_probs_and_logits_agree_and_ordinary_input():
    logits, labels = task(1000, 4, 1.7, 1)
    a = smooth_ece(logits=logits, labels=labels)
    assert smooth_ece(torch.softmax(logits, 1), labels) == pytest.approx(a, abs=1e-12)
    assert smooth_ece(torch.softmax(logits, 1).numpy().tolist(), labels.tolist()) == pytest.approx(a, abs=1e-12)
    assert isinstance(a, float)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtypes_and_extreme_logits(dtype):
    logits, labels = task(1000, 4, 1.7, 1)
    ref = smooth_ece(logits=logits, labels=labels)
    got = smooth_ece(logits=logits.to(dtype), labels=labels)
    assert got == pytest.approx(ref, abs={torch.float16: 5e-3, torch.bfloat16: 2e-2}.get(dtype, 1e-5))
    huge = smooth_ece(logits=(1e4 * logits / logits.abs().max()).to(dtype), labels=labels)  # confidences of 1: error 1 - acc
    acc = float((logits.argmax(1) == labels).double().mean())
    assert math.isfinite(huge) and huge == pytest.approx(1 - acc, abs=2e-3)


def test_tracks_binned_ece_and_is_small_when_calibrated():
    calibrated, labels = task(20000, 10, 1.0, 5)
    over = 2.5 * calibrated
    assert smooth_ece(logits=calibrated, labels=labels) < 0.02
    s, b = smooth_ece(logits=over, labels=labels), ece(logits=over, labels=labels)
    assert s > 0.1 and s == pytest.approx(b, rel=0.15)


def test_bad_input_names_the_argument():
    logits, labels = task(100, 3, 1.0, 0)
    with pytest.raises(ValueError, match="labels"):
        smooth_ece(logits=logits, labels=labels.double())
    with pytest.raises(ValueError, match="labels"):
        smooth_ece(logits=logits)
    with pytest.raises(ValueError, match="probs"):
        smooth_ece(torch.rand(100, 3), labels)
    with pytest.raises(ValueError, match="logits"):
        smooth_ece(logits=logits.expand(2, -1, -1), labels=labels)
    with pytest.raises(ValueError, match="logits"):
        smooth_ece(logits=torch.full((100, 3), math.nan), labels=labels)
