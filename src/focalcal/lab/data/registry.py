"""The registry of datasets (:data:`DATASETS`) and :func:`get_dataset`, one split of one of them."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from ..._validation import check_choice
from .images import build_fashion_mnist, build_svhn, build_tiny_imagenet, cifar_builder, data_root
from .synthetic import SPLITS, GaussianMixture, SyntheticDataset, charoenphakdee_1d_task, gaussian_mixture_task

__all__ = ["DatasetInfo", "SYNTHETIC_SIZES", "DATASETS", "dataset_info", "get_dataset"]

@dataclass(frozen=True)
class DatasetInfo:
    """What :data:`DATASETS` records about one dataset."""

    name: str
    kind: str                       #: "synthetic" or "image"
    n_classes: int
    input_shape: tuple[int, ...]    #: per-sample shape, ``(d,)`` or ``(C, H, W)``
    splits: str                     #: sizes of train / val / test and where val comes from
    builder: Callable[..., Dataset] = field(repr=False)
    title: str = ""                 #: its name in prose ("CIFAR-10"); the book's pages use it

    @property
    def in_channels(self) -> int:
        """Image channels ``C``, or the dimension ``d`` of vector inputs (what :func:`focalcal.lab.models.make_model`
        takes as ``in_channels``, also for the MLP)."""
        return self.input_shape[0]


SYNTHETIC_SIZES = {"train": 10_000, "val": 5_000, "test": 10_000}


def _synthetic(make_task: Callable[..., GaussianMixture]):
    def build(split: str, root: Path, augment: bool, download: bool, *, n: int | None = None,
              seed: int = 0, dtype: torch.dtype = torch.float32, return_posterior: bool = False,
              **task_kwargs: Any) -> Dataset:
        task = make_task(**task_kwargs)
        return SyntheticDataset(task, SYNTHETIC_SIZES[split] if n is None else n, seed=seed,
                                split=split, dtype=dtype, return_posterior=return_posterior)
    return build


DATASETS: dict[str, DatasetInfo] = {
    "charoenphakdee_1d": DatasetInfo(
        "charoenphakdee_1d", "synthetic", 3, (1,),
        "10 000 / 5 000 / 10 000 independent draws (n= to change)", _synthetic(charoenphakdee_1d_task),
        "the 1-D three-class task"),
    "gaussian_mixture": DatasetInfo(
        "gaussian_mixture", "synthetic", 10, (2,),
        "10 000 / 5 000 / 10 000 independent draws; n_classes=, dim= change K and d",
        _synthetic(gaussian_mixture_task), "the Gaussian mixture"),
    "fashion_mnist": DatasetInfo(
        "fashion_mnist", "image", 10, (1, 28, 28),
        "55 000 / 5 000 / 10 000; val = 5 000 of the 60 000 training images (seed 1)", build_fashion_mnist,
        "Fashion-MNIST"),
    "cifar10": DatasetInfo(
        "cifar10", "image", 10, (3, 32, 32),
        "45 000 / 5 000 / 10 000; val = 10 % of training (seed 1, Mukhoti et al.)", cifar_builder("cifar10"),
        "CIFAR-10"),
    "cifar100": DatasetInfo(
        "cifar100", "image", 100, (3, 32, 32),
        "45 000 / 5 000 / 10 000; val = 10 % of training (seed 1, Mukhoti et al.)", cifar_builder("cifar100"),
        "CIFAR-100"),
    "svhn": DatasetInfo(
        "svhn", "image", 10, (3, 32, 32),
        "65 932 / 7 325 / 26 032; val = 10 % of 'train' (seed 1, Mukhoti et al.'s code); "
        "'extra' unused", build_svhn, "SVHN"),
    "tiny_imagenet": DatasetInfo(
        "tiny_imagenet", "image", 200, (3, 64, 64),
        "90 000 / 10 000 / 10 000; val = 50 training images per class (seed 1); test = official val",
        build_tiny_imagenet, "Tiny-ImageNet"),
}


def dataset_info(name: str) -> DatasetInfo:
    """``DATASETS[name]``, or ``ValueError`` naming the valid names."""
    if name not in DATASETS:
        raise ValueError(f"name must be one of {', '.join(repr(n) for n in DATASETS)}; got {name!r}")
    return DATASETS[name]


def get_dataset(name: str, root: str | os.PathLike | None = None, split: str = "train", *,
                augment: bool | None = None, download: bool = True, **kwargs: Any) -> Dataset:
    """One split of a dataset from :data:`DATASETS`.

    Parameters
    ----------
    name : str
        A key of :data:`DATASETS`.
    root : path, optional
        Directory holding (or receiving) the image files; default :func:`data_root`. Ignored by
        synthetic tasks.
    split : {"train", "val", "test"}
        The fixed split documented in :data:`DATASETS` and the module docstring.
    augment : bool, optional
        Random crop + flip (CIFAR, Tiny-ImageNet); default: on for ``"train"`` only.
    download : bool
        Allow torchvision to fetch missing image files (never needed for Fashion-MNIST on a machine
        with Debian's package, nor for synthetic tasks).
    **kwargs
        Image datasets: ``val_size`` (count or fraction; Tiny-ImageNet: ``val_per_class``) and
        ``split_seed`` (default 1) to change the split. Synthetic tasks: ``n`` (samples), ``seed``,
        ``dtype``, ``return_posterior`` and the task's parameters (``n_classes``, ``dim``,
        ``separation``, ``std``, ``priors`` for ``"gaussian_mixture"``).

    Returns
    -------
    torch.utils.data.Dataset
        Items ``(x, y)``: ``x`` float tensor of shape ``DATASETS[name].input_shape``, ``y`` int64.
        The dataset has ``.targets`` (int64, ``(N,)``); synthetic ones also ``.posterior``.

    Raises
    ------
    ValueError
        Unknown ``name`` or ``split`` (the message lists the valid ones).
    DataUnavailableError
        Image files neither present nor downloadable.
    """
    info = dataset_info(name)
    check_choice(split, "split", SPLITS)
    if augment is None:
        augment = split == "train"
    base = Path(root) if root is not None else data_root()
    try:
        return info.builder(split, base, bool(augment), download, **kwargs)
    except TypeError as err:
        if "unexpected keyword argument" in str(err):
            raise ValueError(f"{name!r} does not take the keyword argument(s) {sorted(kwargs)}: "
                             f"{err}") from err
        raise
