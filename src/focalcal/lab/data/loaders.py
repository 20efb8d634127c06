"""Seeded train / validation / test loaders (:func:`make_loaders`)."""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Subset

from ..._validation import check_int
from .registry import DatasetInfo, dataset_info, get_dataset
from .synthetic import SPLITS

__all__ = ["seed_worker", "Loaders", "make_loaders", "resolve_num_workers"]

#: the most worker processes ``num_workers="auto"`` starts on a GPU: CIFAR's per-sample crop and
#: flip of in-memory tensors keeps up with a ResNet-50 step on one GPU with far fewer
MAX_AUTO_WORKERS = 8


def resolve_num_workers(num_workers: int | str, device: str | torch.device) -> int:
    """The loaders' worker processes for ``num_workers`` on ``device``.

    ``"auto"``: 0 on the CPU (the run's own threads do the arithmetic: workers would compete with
    them for the cores, and the CPU profile's records stay those of a single process), and
    ``min(MAX_AUTO_WORKERS, usable cores)`` on CUDA (the cores this process may run on, e.g. a
    SLURM job's ``--cpus-per-task``). An integer ``>= 0`` is taken as it is.

    Raises
    ------
    ValueError
        ``num_workers`` is neither ``"auto"`` nor an integer >= 0.
    """
    if isinstance(num_workers, str):
        if num_workers != "auto":
            raise ValueError(f"num_workers must be 'auto' or an integer >= 0, got {num_workers!r}")
        if torch.device(device).type != "cuda":
            return 0
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - macOS, Windows
            cores = os.cpu_count() or 1
        return min(MAX_AUTO_WORKERS, cores)
    return check_int(num_workers, "num_workers", minimum=0)

def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: derive NumPy's and Python's seeds from the worker's torch seed.

    PyTorch seeds each worker's torch RNG with ``base_seed + worker_id`` (``base_seed`` drawn from
    the loader's generator); NumPy and ``random`` are left alone unless seeded here.
    """
    s = torch.initial_seed() % 2**32
    np.random.seed(s)
    random.seed(s)


class Loaders(NamedTuple):
    """What :func:`make_loaders` returns."""

    train: DataLoader
    val: DataLoader
    test: DataLoader
    info: DatasetInfo
    #: the training samples in a fixed order, never augmented (``make_loaders(train_eval=True)``)
    train_eval: DataLoader | None = None


def _subset_size(subset: int | Mapping[str, int] | None, split: str) -> int | None:
    if subset is None:
        return None
    if isinstance(subset, Mapping):
        bad = set(subset) - set(SPLITS)
        if bad:
            raise ValueError(f"subset keys must be among {SPLITS}, got {sorted(bad)}")
        v = subset.get(split)
        return None if v is None else check_int(v, f"subset[{split!r}]", minimum=1)
    return check_int(subset, "subset", minimum=1)


def make_loaders(name: str, batch_size: int = 128, *, root: str | os.PathLike | None = None,
                 eval_batch_size: int | None = None, num_workers: int = 0, seed: int = 0,
                 subset: int | Mapping[str, int] | None = None, augment: bool = True,
                 download: bool = True, pin_memory: bool | None = None, drop_last: bool = False,
                 train_eval: bool = False, **dataset_kwargs: Any) -> Loaders:
    """Train / val / test loaders for a dataset of :data:`DATASETS`.

    Parameters
    ----------
    name, root, download, **dataset_kwargs
        As in :func:`get_dataset`.
    batch_size : int
        Training batch size (128 in the papers' CIFAR runs, 64 for Tiny-ImageNet).
    eval_batch_size : int, optional
        Batch size of the validation and test loaders (default: ``max(batch_size, 256)``).
    num_workers : int
        Worker processes. Workers are *not* persistent, so each epoch's worker seeds come from the
        loader's generator and a resumed run reproduces an uninterrupted one exactly.
    seed : int
        Seeds the training loader's ``generator`` (shuffling order and worker seeds) and picks the
        ``subset``.
    subset : int or dict, optional
        Keep at most this many samples of every split (or ``{"train": n, ...}`` per split), chosen
        by a seeded permutation: the CPU profiles' cut-down runs.
    augment : bool
        Augment the training split (as in the papers); validation and test never are.
    pin_memory : bool, optional
        Default: when CUDA is available.
    drop_last : bool
        Drop the last incomplete training batch.
    train_eval : bool
        Also return ``Loaders.train_eval``: the same training samples, unshuffled, unaugmented and
        in evaluation batches, for the trainer's ``train_eval_loader`` (training-set logits).
    """
    info = dataset_info(name)
    bs = check_int(batch_size, "batch_size")
    ebs = check_int(eval_batch_size, "eval_batch_size") if eval_batch_size is not None else max(bs, 256)
    check_int(num_workers, "num_workers", minimum=0)
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    def split_data(split: str, augmented: bool):
        ds = get_dataset(name, root, split, augment=augmented, download=download, **dataset_kwargs)
        k = _subset_size(subset, split)
        if k is not None and k < len(ds):
            rng = np.random.default_rng([seed, SPLITS.index(split)])
            ds = Subset(ds, np.sort(rng.permutation(len(ds))[:k]).tolist())
        return ds

    loaders = {}
    for split in SPLITS:
        ds = split_data(split, augment and split == "train")
        is_train = split == "train"
        gen = torch.Generator().manual_seed(int(seed)) if is_train else None
        loaders[split] = DataLoader(
            ds, batch_size=bs if is_train else ebs, shuffle=is_train, generator=gen,
            num_workers=num_workers, worker_init_fn=seed_worker if num_workers else None,
            pin_memory=bool(pin_memory), drop_last=drop_last and is_train,
            persistent_workers=False)
    # synthetic tasks take num_classes= / dim=: report what was built, not the registry default
    built = loaders["test"].dataset
    built = getattr(built, "dataset", built)
    if hasattr(built, "num_classes") and hasattr(built, "input_shape"):
        info = dataclasses.replace(info, num_classes=built.num_classes,
                                   input_shape=tuple(built.input_shape))
    clean = None
    if train_eval:
        # a generator of its own: without one, every pass would draw the workers' base seed from
        # torch's global RNG, and the trainer makes this pass at some epochs only
        clean = DataLoader(split_data("train", False), batch_size=ebs, shuffle=False,
                           generator=torch.Generator().manual_seed(int(seed)), num_workers=num_workers,
                           worker_init_fn=seed_worker if num_workers else None, pin_memory=bool(pin_memory))
    return Loaders(loaders["train"], loaders["val"], loaders["test"], info, clean)
