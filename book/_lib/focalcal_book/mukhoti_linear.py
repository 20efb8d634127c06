"""Mukhoti et al.'s linear model (App. B, Figs. 7-8): ``book/experiments/mukhoti_linear.md``.

Their setup: a binary task whose classes are two Gaussian clusters each, the four means on the
vertices of a square of side 4 and linearly separable, each cluster with standard deviation 1 and
correlated coordinates, 10 % of the labels flipped, 4000 training and 1000 test points; a logistic
regression with two weights and no bias, ``p(y = 1 | x) = sigmoid(w . x)``, trained by gradient
descent with cross-entropy and with focal loss (gamma = 1). They give no step size or number of
steps; :data:`STEPS` and :data:`LR` are this book's (full-batch, from ``w = 0``). The losses are the
library's :func:`focalcal.losses.focal_loss` on the two-class logits ``(0, w . x)``.

:func:`make_data` draws one data set, :func:`train` runs one loss on it, :func:`run` every loss and
seed, :func:`summary` the numbers behind the page's verdicts and :data:`RULES` their tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from focalcal import metrics
from focalcal.losses import focal_loss
from focalcal.plotting import FIGURE_WIDTH_IN, color
from focalcal_book.verdicts import combine, every_seed, paired

__all__ = ["MEANS", "N_TRAIN", "N_TEST", "FLIP", "STEPS", "LR", "LOSSES", "RULES", "CONVERGED_RTOL", "FINAL_COLUMNS",
           "FINAL_FORMATS", "make_data", "train", "run", "summary", "plot_norms", "plot_mistakes"]

#: class -> its two cluster means, vertices of a square of side 4 (separable by x1 = 0)
MEANS = {1: ((2.0, 2.0), (2.0, -2.0)), 0: ((-2.0, 2.0), (-2.0, -2.0))}
N_TRAIN, N_TEST, FLIP = 4000, 1000, 0.1
#: full-batch gradient-descent steps and step size (not given in the paper)
STEPS, LR = 100, 0.5
#: display name -> focal gamma (0: cross-entropy)
LOSSES = {"cross-entropy": 0.0, "focal (gamma=1)": 1.0}
#: the rule each of the page's claims is tested by (Markdown, shown beside its verdict)
RULES: dict[str, str] = {
    "mukhoti_linear_norms": "after training, the weight norm and the RMS training logit of focal loss below "
                            "cross-entropy's on every data seed (`verdicts.paired`, both must hold)",
    "mukhoti_linear_regions": "the two classifiers predict the same class on at least 99 % of the test points "
                              "on every data seed (this book's threshold)",
    "mukhoti_linear_mistakes": "on every data seed, at least 90 % of cross-entropy's misclassified test points "
                               "have confidence above 0.9 (\"almost always\", this book's reading) and focal "
                               "loss's median confidence on its misclassified points is below cross-entropy's",
}


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training and test points ``(x, y)`` of one data set (float64 ``(N, 2)``, int64 ``(N,)``).

    Each cluster has standard deviation 1 in each coordinate and its own random correlation between
    the two, drawn uniformly in ``[-0.8, 0.8]`` (the paper: its samples "randomly linearly combined
    within each cluster in order to add covariance"); the clusters are equally likely; a random
    10 % of the labels of each split are flipped.
    """
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor([label for label in (0, 1) for _ in MEANS[label]])
    means = torch.tensor([mean for label in (0, 1) for mean in MEANS[label]], dtype=torch.float64)
    # per cluster a correlation rho in [-0.8, 0.8]: x = mean + L z with L L^T = [[1, rho], [rho, 1]]
    rho = 1.6 * torch.rand(len(means), generator=g, dtype=torch.float64) - 0.8
    chol = torch.zeros(len(means), 2, 2, dtype=torch.float64)
    chol[:, 0, 0], chol[:, 1, 0], chol[:, 1, 1] = 1.0, rho, torch.sqrt(1 - rho.square())

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        which = torch.randint(len(means), (n,), generator=g)
        z = torch.randn(n, 2, generator=g, dtype=torch.float64)
        x = means[which] + torch.einsum("nji,ni->nj", chol[which], z)
        y = labels[which].clone()
        flip = torch.randperm(n, generator=g)[: round(FLIP * n)]
        y[flip] = 1 - y[flip]
        return x, y

    return (*draw(N_TRAIN), *draw(N_TEST))


def _logits(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Two-class logits ``(0, w . x)`` of ``x`` ``(..., N, 2)`` under ``w`` ``(..., 2)``, shape ``(..., N, 2)``:
    softmax gives ``sigmoid(w . x)`` to class 1."""
    s = torch.einsum("...nd,...d->...n", x, w)
    return torch.stack([torch.zeros_like(s), s], dim=-1)


def train(x: torch.Tensor, y: torch.Tensor, gamma: float, *, steps: int = STEPS, lr: float = LR,
          every: int = 2) -> tuple[torch.Tensor, pd.DataFrame]:
    """Full-batch gradient descent from ``w = 0`` on the focal loss with ``gamma`` (0: cross-entropy).

    ``x`` ``(S, N, 2)`` and ``y`` ``(S, N)`` hold ``S`` independent data sets, trained side by side
    (one loss call per step; each model's gradient is that of its own mean loss). Returns the final
    weights ``(S, 2)`` and the history every ``every`` steps: ``set`` (index into ``S``), ``step``,
    ``weight_norm`` (``|w|``) and ``logit_rms`` (root mean square of ``w . x`` over the training points).
    """
    n_sets = x.shape[0]
    w = torch.zeros(n_sets, 2, dtype=torch.float64, requires_grad=True)
    rows = []
    for step in range(steps + 1):
        if step % every == 0:
            with torch.no_grad():
                rms = torch.einsum("snd,sd->sn", x, w).square().mean(-1).sqrt()
                rows += [{"set": i, "step": step, "weight_norm": float(w[i].norm()), "logit_rms": float(rms[i])}
                         for i in range(n_sets)]
        if step == steps:
            break
        # the mean over all sets' points is 1 / S times each set's own mean: scale the step by S
        loss = focal_loss(_logits(w, x).reshape(-1, 2), y.reshape(-1), gamma=gamma)
        (grad,) = torch.autograd.grad(loss, w)
        with torch.no_grad():
            w -= lr * n_sets * grad
    return w.detach(), pd.DataFrame(rows)


def run(seeds: Sequence[int]) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Every loss of :data:`LOSSES` on the data set of every seed.

    Returns ``(final, history, mistakes)``: one row per seed x loss (``w1``, ``w2``, the final
    ``weight_norm`` and ``logit_rms``, test ``accuracy`` and ``ece`` (15 equal-width bins, top
    label), ``mean_conf`` (mean test confidence), ``agreement`` with cross-entropy's test predictions, ``share_above_09`` and
    ``median_conf`` over the misclassified test points); the histories with ``seed`` and ``loss``;
    and ``{(seed, loss): confidences of the misclassified test points}``.
    """
    seeds = list(seeds)
    xtr, ytr, xte, yte = (torch.stack(t) for t in zip(*(make_data(seed) for seed in seeds)))
    final, hist, mistakes, pred_ce = [], [], {}, None
    for loss, gamma in LOSSES.items():
        w, h = train(xtr, ytr, gamma)
        hist.append(h.assign(seed=h["set"].map(dict(enumerate(seeds))), loss=loss).drop(columns="set"))
        probs = torch.softmax(_logits(w, xte), dim=-1)
        conf, pred = probs.max(dim=-1)
        pred_ce = pred if pred_ce is None else pred_ce
        last = h[h["step"] == h["step"].max()].set_index("set")
        for i, seed in enumerate(seeds):
            wrong = conf[i][pred[i] != yte[i]].numpy()
            mistakes[(seed, loss)] = wrong
            final.append({"seed": seed, "loss": loss, "w1": float(w[i, 0]), "w2": float(w[i, 1]),
                          "weight_norm": last.loc[i, "weight_norm"], "logit_rms": last.loc[i, "logit_rms"],
                          "accuracy": metrics.accuracy(probs[i], yte[i]), "ece": float(metrics.ece(probs[i], yte[i])),
                          "mean_conf": float(conf[i].mean()),
                          "agreement": float((pred[i] == pred_ce[i]).double().mean()),
                          "share_above_09": float(np.mean(wrong > 0.9)) if wrong.size else math.nan,
                          "median_conf": float(np.median(wrong)) if wrong.size else math.nan})
    return pd.DataFrame(final).sort_values(["seed", "loss"], kind="stable"), pd.concat(hist, ignore_index=True), mistakes


#: a run has converged when its last two recorded weight norms differ by less than this (relative)
CONVERGED_RTOL = 1e-6
#: the table of :func:`run`'s ``final`` rows that the page shows: column -> header, and formats
FINAL_COLUMNS = {"seed": "data seed", "loss": "loss", "weight_norm": "|w|", "logit_rms": "RMS logit",
                 "accuracy": "accuracy (%)", "ece": "ECE (%)", "mean_conf": "mean confidence (%)",
                 "median_conf": "median confidence on mistakes"}
FINAL_FORMATS = {"weight_norm": ".3f", "logit_rms": ".3f", "accuracy": ".1f", "ece": ".2f", "mean_conf": ".1f",
                 "median_conf": ".3f"}


def summary(final: pd.DataFrame, history: pd.DataFrame) -> dict:
    """The page's verdicts and the numbers they rest on, from :func:`run`'s tables."""
    ce, fl = (final[final["loss"] == lo].set_index("seed") for lo in LOSSES)
    norms = combine([paired(fl["weight_norm"] - ce["weight_norm"]), paired(fl["logit_rms"] - ce["logit_rms"])])
    regions = every_seed(fl["agreement"] >= 0.99)
    almost_always = every_seed(ce["share_above_09"] >= 0.9)
    lower = paired(fl["median_conf"] - ce["median_conf"])
    return {"verdicts": {"mukhoti_linear_norms": norms, "mukhoti_linear_regions": regions,
                         "mukhoti_linear_mistakes": combine([almost_always, lower])},
            "ce_share_above_09": (float(ce["share_above_09"].min()), float(ce["share_above_09"].max())),
            "norm_ratio": (float((ce["weight_norm"] / fl["weight_norm"]).min()),
                           float((ce["weight_norm"] / fl["weight_norm"]).max())),
            "agreement_min": float(fl["agreement"].min()),
            "median_ce": (float(ce["median_conf"].min()), float(ce["median_conf"].max())),
            "median_fl": (float(fl["median_conf"].min()), float(fl["median_conf"].max())),
            "fl_under": int((fl["mean_conf"] < fl["accuracy"]).sum()),
            "converged": bool(history.groupby(["loss", "seed"])["weight_norm"].apply(
                lambda v: abs(v.iloc[-1] - v.iloc[-2]) <= CONVERGED_RTOL * abs(v.iloc[-1])).all()),
            "ece_lower_ce": int((ce["ece"] < fl["ece"]).sum()), "seeds": len(ce)}


def plot_norms(history: pd.DataFrame):
    """Fig. 7: the weight norm and the RMS logit along training, one line per loss and seed."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(FIGURE_WIDTH_IN, 3.2), layout="constrained")
    for ax, col, label in zip(axes, ("logit_rms", "weight_norm"), ("RMS logit (training points)", "weight norm |w|")):
        for (loss, seed), h in history.groupby(["loss", "seed"], sort=False):
            ax.plot(h["step"], h[col], color=color("ce" if loss == "cross-entropy" else "focal"), lw=1,
                    alpha=0.8, label=loss if seed == history["seed"].min() else None)
        ax.set_xlabel("gradient-descent step")
        ax.set_ylabel(label)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, frameon=False)
    return fig


def plot_mistakes(mistakes: dict, final: pd.DataFrame, seed: int):
    """Fig. 8: confidence of the misclassified test points (all seeds), and the two decision
    boundaries over the test points of ``seed``."""
    import matplotlib.pyplot as plt

    fig, (ax_h, ax_b) = plt.subplots(1, 2, figsize=(FIGURE_WIDTH_IN, 3.4), layout="constrained")
    bins = np.linspace(0.5, 1.0, 26)
    for loss in LOSSES:
        conf = np.concatenate([v for (s, lo), v in mistakes.items() if lo == loss])
        ax_h.hist(conf, bins=bins, histtype="step", lw=1.5, color=color("ce" if loss == "cross-entropy" else "focal"),
                  label=loss, density=True)
    ax_h.set_xlabel("confidence on a misclassified test point")
    ax_h.set_ylabel("density")
    _, _, xte, yte = make_data(seed)
    for label, marker in ((0, "o"), (1, "^")):
        pts = xte[yte == label]
        ax_b.scatter(pts[:, 0], pts[:, 1], s=4, marker=marker, color="0.6" if label else "0.3", alpha=0.5,
                     label=f"test label {label}")
    t = np.linspace(-6, 6, 2)
    for loss in LOSSES:
        r = final[(final["seed"] == seed) & (final["loss"] == loss)].iloc[0]
        # boundary w1 x1 + w2 x2 = 0
        ax_b.plot(-r["w2"] / r["w1"] * t, t, color=color("ce" if loss == "cross-entropy" else "focal"), lw=1.5,
                  label=f"boundary, {loss}")
    ax_b.set(xlim=(-6, 6), ylim=(-6, 6), xlabel="$x_1$", ylabel="$x_2$")
    fig.legend(*ax_b.get_legend_handles_labels(), loc="outside lower center", ncols=2, frameon=False)
    ax_h.legend(frameon=False, loc="upper left")
    return fig
