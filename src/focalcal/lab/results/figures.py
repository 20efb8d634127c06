"""The experiment chapters' figures: training curves, reliability panels, posteriors along a line, KL bars.

Each function draws into new (or given) matplotlib axes and returns ``(figure, axes)``; colours are
the book's (:func:`focalcal.plotting.color`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from ... import plotting
from ..._validation import check_choice
from .protocol import FAMILIES
from .tables import select_losses

__all__ = ["loss_styles", "plot_training_curves", "plot_reliability_panel", "plot_posterior_1d", "plot_posterior_kl"]


def loss_styles(labels: Iterable[str]) -> dict[str, tuple[str, Any]]:
    """Loss label -> ``(colour, line style)``: the book's one colour per loss family, losses that
    share a colour (focal loss with several gammas) told apart by their line style."""
    from ...plotting import LINESTYLES, color

    styles, used = {}, {}
    for lo in labels:
        try:
            c = color(lo)
        except ValueError:
            c = "#4D4D4D"
        k = used.get(c, 0)
        used[c] = k + 1
        # losses sharing a colour (focal with several gamma) get distinct line styles
        styles[lo] = (c, LINESTYLES[k % len(LINESTYLES)])
    return styles


def plot_training_curves(histories, *, split: str = "test", panels: Sequence[str] = ("nll", "error", "ece"),
                         axes: Any = None):
    """Mean over seeds of ``split``'s per-epoch metrics, one line per loss (Mukhoti Fig. 2).

    Parameters
    ----------
    histories : DataFrame
        From :func:`load_histories`.
    split : {"train", "val", "test"}
    panels : sequence of {"nll", "error", "ece", "accuracy", "entropy", "confidence", ...}
        Fields recorded by the trainer, one panel each.
    axes : sequence of matplotlib Axes, optional

    Returns
    -------
    (Figure, 1-D array of Axes, one per metric; a grid of two columns for more than three)
    """
    import matplotlib.pyplot as plt
    import numpy as np

    check_choice(split, "split", ("train", "val", "test"))
    names = {"nll": "NLL (nats)", "error": "error", "ece": "ECE (15 equal-width bins)",
             "accuracy": "accuracy", "entropy": "entropy (nats)", "confidence": "mean confidence",
             "nll_correct": "NLL of correct samples (nats)",
             "nll_incorrect": "NLL of misclassified samples (nats)",
             "entropy_incorrect": "entropy of misclassified samples (nats)"}
    if axes is None:
        ncols = len(panels) if len(panels) <= 3 else 2
        nrows = -(-len(panels) // ncols)
        width = min(3.8 * ncols, plotting.FIGURE_WIDTH_IN)
        fig, axes = plt.subplots(nrows, ncols, figsize=(width, 3.0 * nrows), squeeze=False)
        for ax in axes.flat[len(panels):]:
            ax.remove()
    axes = np.atleast_1d(axes).ravel()[:len(panels)]
    fig = axes[0].figure
    labels = list(dict.fromkeys(histories["loss_label"]))
    styles = loss_styles(labels)
    for ax, m in zip(axes, panels):
        col = f"{split}_{m}"
        for lo in labels:
            h = histories[histories["loss_label"] == lo]
            mean = h.groupby("epoch")[col].mean()
            c, ls = styles[lo]
            ax.plot(mean.index, mean.to_numpy(), color=c, linestyle=ls, label=lo, marker="o",
                    markersize=2.5)
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"{split} {names.get(m, m)}")
    # one legend below the panels, where it hides no curve
    handles, names_ = axes[0].get_legend_handles_labels()
    ncol = min(3, len(names_))
    fig.legend(handles, names_, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, 0.0))
    rows = axes[0].get_gridspec().nrows if axes[0].get_subplotspec() is not None else 1
    fig.tight_layout(rect=(0, 0.07 * -(-len(names_) // ncol) / rows, 1, 1))
    return fig, axes


def plot_reliability_panel(log_probs: Mapping[str, Any], labels: Any, *, n_bins: int = 15,
                           binning: str = "mass", title: str | None = None,
                           colors: Mapping[str, str] | None = None):
    """Reliability diagrams side by side, one per method (:func:`focalcal.plotting.plot_reliability`).

    The figure is at most :data:`focalcal.plotting.FIGURE_WIDTH_IN` wide, so that its text stays
    readable on a page; one legend and one x label below the panels, where they hide no bar.

    Parameters
    ----------
    log_probs : mapping panel -> Tensor (N, K)
        Log-probabilities or logits. Panels named by methods of :data:`METHODS` are coloured by
        their family, others by their name or by ``colors``.
    labels : Tensor, shape (N,), or mapping panel -> Tensor
        The labels of every panel, or each panel's own (panels on different splits).
    binning : {"mass", "width"}
        ``"mass"``: K&K's equal-mass bins.
    title : str, optional
        Figure title (e.g. the run).
    colors : mapping panel -> str, optional
        Colour key (:func:`focalcal.plotting.color`) of a panel, where its name is none.

    Returns
    -------
    (Figure, array of Axes of shape (2, n_methods))
    """
    import matplotlib.pyplot as plt

    n = len(log_probs)
    if n == 0:
        raise ValueError("log_probs must name at least one method")
    if isinstance(labels, Mapping) and set(labels) != set(log_probs):
        raise ValueError(f"labels, when a mapping, must name the panels of log_probs "
                         f"{sorted(log_probs)}, got {sorted(labels)}")
    colors = dict(colors or {})
    # rows share their y axis, so only the outer panels carry tick labels and none overlaps a neighbour
    fig, axes = plt.subplots(2, n, figsize=(min(3.3 * n, plotting.FIGURE_WIDTH_IN), 4.8), sharex=True,
                             sharey="row", squeeze=False,
                             gridspec_kw={"height_ratios": (3, 1), "hspace": 0.08, "wspace": 0.12})
    for j, (method, lp) in enumerate(log_probs.items()):
        plotting.plot_reliability(logits=lp, labels=labels[method] if isinstance(labels, Mapping) else labels,
                                  n_bins=n_bins, binning=binning,
                                  method=colors.get(method, FAMILIES.get(method, method)), title=method,
                                  axes=(axes[0, j], axes[1, j]))
        axes[0, j].title.set_fontsize(9)
        for ax in axes[:, j]:  # one legend for the whole row, below
            if ax.get_legend() is not None:
                ax.get_legend().remove()
        xlabel = axes[1, j].get_xlabel()
        axes[1, j].set_xlabel("")
        if j:
            axes[0, j].set_ylabel("")
            axes[1, j].set_ylabel("")
    if binning == "width":  # "1.00" of one panel would run into "0.00" of the next
        axes[1, 0].set_xticks([0.0, 0.5, 1.0], ["0", "0.5", "1"])
    # one legend and one x label for the row, below the panels, where they hide no bar
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(names), bbox_to_anchor=(0.5, 0.0),
               handlelength=1.5, columnspacing=1.2)
    fig.supxlabel(xlabel, y=0.07, fontsize=10)
    fig.subplots_adjust(bottom=0.2)
    fig.align_ylabels(axes[:, 0])
    if title:
        fig.suptitle(title, fontsize=10)
        fig.subplots_adjust(top=0.84)  # room for the suptitle above the panel titles
    return fig, axes


def plot_posterior_1d(x: Any, posterior: Any, panels: Mapping[str, tuple[Any, str]], *,
                      class_names: Sequence[str] | None = None):
    """True and predicted class posteriors along a 1-D input, one panel per model.

    Parameters
    ----------
    x : Tensor, shape (N, 1) or (N,)
        The inputs (e.g. :attr:`SyntheticTestSet.x`), in any order.
    posterior : Tensor, shape (N, K)
        The true posterior ``eta(x)``, drawn in black in every panel.
    panels : mapping title -> (log_probs of shape (N, K), colour key)
        One panel per entry; the predictions are drawn in the book colour of the key
        (:func:`focalcal.plotting.color`), one line style per class.
    class_names : sequence of str, optional

    Returns
    -------
    (Figure, 1-D array of Axes)
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from ...plotting import LINESTYLES, color

    xs = torch.as_tensor(x).reshape(-1).double()
    eta = torch.as_tensor(posterior).double()
    if eta.dim() != 2 or eta.shape[0] != xs.shape[0]:
        raise ValueError(f"x and posterior must have shapes (N,) or (N, 1) and (N, K) with the same N, "
                         f"got {tuple(torch.as_tensor(x).shape)} and {tuple(eta.shape)}")
    if not panels:
        raise ValueError("panels must name at least one model")
    k = eta.shape[1]
    names = list(class_names) if class_names is not None else [f"class {j + 1}" for j in range(k)]
    order = torch.argsort(xs)
    xs, eta = xs[order].numpy(), eta[order].numpy()
    fig, axes = plt.subplots(1, len(panels), figsize=(min(3.6 * len(panels), plotting.FIGURE_WIDTH_IN), 3.2),
                             sharey=True, squeeze=False)
    axes = axes[0]
    for ax, (title, (log_probs, key)) in zip(axes, panels.items()):
        probs = torch.as_tensor(log_probs).double().exp()[order].numpy()
        for j in range(k):
            ls = LINESTYLES[j % len(LINESTYLES)]
            ax.plot(xs, eta[:, j], color=color("true posterior"), lw=1.0, ls=ls)
            ax.plot(xs, probs[:, j], color=color(key), lw=2.0, ls=ls, alpha=0.9)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("input x")
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("p(y | x)")
    handles = [Line2D([], [], color=color("true posterior"), lw=1.0, label="true posterior")]
    handles += [Line2D([], [], color="0.4", lw=2.0, ls=LINESTYLES[j % len(LINESTYLES)], label=names[j])
                for j in range(k)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig, axes


def plot_posterior_kl(kl, *, methods: Sequence[str] = ("uncalibrated", "TS (NLL)", "focal TS (NLL)", "Psi"),
                      losses: Sequence[str] | None = None):
    """Grouped bars of the KL divergence to the true posterior, one panel per synthetic dataset.

    Parameters
    ----------
    kl : DataFrame
        From :func:`posterior_kl` (averaged over seeds here).
    methods : sequence of str
        Methods of :data:`METHODS`, one bar each, coloured by family.
    losses : sequence of str, optional
        Training losses (``loss_label``) in the order of the groups (default: as they appear).

    Returns
    -------
    (Figure, 1-D array of Axes)
    """
    import matplotlib.pyplot as plt
    import numpy as np

    from ...plotting import color

    if not len(kl):
        raise ValueError("kl has no rows: the sweep has no finished run on a synthetic task")
    datasets = list(dict.fromkeys(kl["dataset"]))
    width = min(6.2 * len(datasets), plotting.FIGURE_WIDTH_IN)
    fig, axes = plt.subplots(1, len(datasets), figsize=(width, 3.6), squeeze=False)
    axes = axes[0]
    hatches = ("", "//", "..", "xx")
    width = 0.8 / len(methods)
    for ax, ds in zip(axes, datasets):
        sub = kl[kl["dataset"] == ds]
        _, order = select_losses(sub, None, losses)
        mean = sub.groupby(["loss_label", "method"])["kl_posterior"].mean()
        pos = np.arange(len(order))
        for i, method in enumerate(methods):
            vals = [mean.get((lo, method), np.nan) for lo in order]
            ax.bar(pos + (i - (len(methods) - 1) / 2) * width, vals, width,
                   color=color(FAMILIES.get(method, method)), hatch=hatches[i % len(hatches)],
                   edgecolor="white", linewidth=0.3, label=method)
        ax.set_xticks(pos, order, rotation=25, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("KL(true posterior || p) (nats)")
        ax.set_title(ds, fontsize=10)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", ncol=len(methods), bbox_to_anchor=(0.5, 1.02))
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig, axes
