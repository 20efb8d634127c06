"""Seeded train / validation / test loaders (:func:`make_loaders`).

Two kinds: :class:`torch.utils.data.DataLoader`\\ s (the default: items transformed one at a time,
optionally in worker processes), or, with ``make_loaders(..., device=dev)``, :class:`DeviceLoader`\\ s,
which keep a whole split on ``dev`` as one tensor (CIFAR's 45 000 training images are 138 MB as
``uint8``) and make each batch there with batched tensor ops: indexing, the random crop (padding
4) and horizontal flip of :func:`~focalcal.lab.data.images.image_transform` as one gather, and the
normalisation. The augmentation draws from the loader's ``generator`` (the crop offsets uniform,
the flip with probability 0.5: torchvision's distribution) once per epoch, on the CPU, and moves
the draws to the device in one copy, so a GPU step waits for no input pipeline.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset, default_collate

from ..._validation import check_int
from .images import ImageTensorDataset, Normalize
from .registry import DatasetInfo, dataset_info, get_dataset
from .synthetic import SPLITS

__all__ = ["seed_worker", "Loaders", "make_loaders", "resolve_num_workers", "DeviceLoader"]

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


class _Augment(NamedTuple):
    """``RandomCrop(size, padding)`` then ``RandomHorizontalFlip(flip)``, as parameters."""

    size: tuple[int, int]
    padding: int
    flip: float


def _transform_parts(transform: Any) -> tuple[Normalize, _Augment | None]:
    """The :class:`Normalize` and the augmentation of an :func:`image_transform` result."""
    if isinstance(transform, Normalize):
        return transform, None
    from torchvision.transforms import v2
    parts = list(getattr(transform, "transforms", ()))
    if (isinstance(transform, v2.Compose) and len(parts) == 3 and isinstance(parts[0], v2.RandomCrop)
            and isinstance(parts[1], v2.RandomHorizontalFlip) and isinstance(parts[2], Normalize)):
        crop, flip, norm = parts
        pads = list(crop.padding or [0])
        if (len(set(pads)) == 1 and crop.padding_mode == "constant" and crop.fill in (0, {None: 0})
                and not crop.pad_if_needed):
            return norm, _Augment(tuple(crop.size), int(pads[0]), float(flip.p))
    raise ValueError(f"a device loader reproduces the transforms of image_transform (Normalize, or "
                     f"RandomCrop with equal constant padding, RandomHorizontalFlip and Normalize); "
                     f"the dataset's transform is {transform!r}")


class DeviceLoader:
    """A split held on ``device`` as one tensor; batches made there (see the module docstring).

    Iterating yields ``(inputs, labels, ...)`` batches on ``device``, as a
    :class:`~torch.utils.data.DataLoader` over ``dataset`` would: for an
    :class:`~focalcal.lab.data.images.ImageTensorDataset` the ``uint8`` images are kept and
    cropped, flipped and normalised per batch (the same arithmetic as its transform: an
    unaugmented batch equals the DataLoader's bit for bit); any other dataset (a synthetic task's,
    ``Subset``\\ s of either) is stacked once as its items are, so its transform must not be random.

    Parameters
    ----------
    dataset : Dataset
    batch_size : int
    device : str or torch.device
    shuffle : bool
        A new order every epoch, drawn from ``generator`` (the trainer seeds and checkpoints it).
    generator : torch.Generator, optional
        A CPU generator for the order and the augmentation (default: a fresh one, seed 0).
    drop_last : bool

    Examples
    --------
    >>> import torch
    >>> from focalcal.lab.data import DeviceLoader, get_dataset
    >>> ds = get_dataset("gaussian_mixture", split="val", n=10, n_classes=3, dim=2)
    >>> x, y = next(iter(DeviceLoader(ds, 4, device="cpu")))
    >>> x.shape, y.tolist() == ds.targets[:4].tolist()
    (torch.Size([4, 2]), True)
    """

    num_workers = 0
    pin_memory = False

    def __init__(self, dataset: Dataset, batch_size: int, *, device: str | torch.device,
                 shuffle: bool = False, generator: torch.Generator | None = None,
                 drop_last: bool = False) -> None:
        self.dataset = dataset
        self.batch_size = check_int(batch_size, "batch_size")
        self.device = torch.device(device)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        base, index = dataset, None
        while isinstance(base, Subset):  # a Subset of a Subset: compose the indices
            sub = torch.as_tensor(base.indices, dtype=torch.int64)
            index, base = (sub if index is None else sub[index]), base.dataset
        self.augment: _Augment | None = None
        if isinstance(base, ImageTensorDataset):
            norm, self.augment = _transform_parts(base.transform)
            images, targets = base.images, base.targets
            if index is not None:
                images, targets = images[index], targets[index]
            self.tensors = [images.to(self.device), targets.to(self.device)]
            self.mean, self.std = (v.view(1, -1, 1, 1).to(self.device) for v in (norm.mean, norm.std))
        else:
            # the items as a DataLoader collates them (a synthetic task's: inputs, labels[, posterior])
            items = default_collate([dataset[i] for i in range(len(dataset))])
            self.tensors = [t.to(self.device) for t in items]
            self.mean = self.std = None
        self.n = int(self.tensors[0].shape[0])
        if self.augment is not None and self.augment.size != tuple(self.tensors[0].shape[-2:]):
            raise ValueError(f"a device loader crops to the images' own size; the transform crops "
                             f"{tuple(self.tensors[0].shape[-2:])} images to {self.augment.size}")

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def _draws(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The epoch's order, crop offsets ``(N, 2)`` (top, left) and flips ``(N,)`` on the device."""
        g = self.generator
        order = torch.randperm(self.n, generator=g) if self.shuffle else torch.arange(self.n)
        offsets = flips = None
        if self.augment is not None:
            offsets = torch.randint(0, 2 * self.augment.padding + 1, (self.n, 2), generator=g)
            flips = torch.rand(self.n, generator=g) < self.augment.flip
            offsets, flips = offsets.to(self.device, non_blocking=True), flips.to(self.device, non_blocking=True)
        return order.to(self.device, non_blocking=True), offsets, flips

    def augmented(self, idx: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor) -> torch.Tensor:
        """The images ``idx`` cropped at ``offsets`` (top, left; in the padded image) and flipped
        where ``flips``: ``uint8`` ``(B, C, H, W)``, zero where the crop covers the padding."""
        images, pad = self.tensors[0], self.augment.padding
        h, w = images.shape[-2:]
        rows = offsets[:, :1] - pad + torch.arange(h, device=self.device)
        ar = torch.arange(w, device=self.device)
        cols = offsets[:, 1:] - pad + torch.where(flips[:, None], w - 1 - ar, ar)
        inside = (((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :])
        # one gather: (B, H, W, C), the advanced indices first
        x = images[idx[:, None, None], :, rows.clamp(0, h - 1)[:, :, None], cols.clamp(0, w - 1)[:, None, :]]
        x = x * inside[..., None]
        return x.permute(0, 3, 1, 2).contiguous()

    def __iter__(self):
        order, offsets, flips = self._draws()
        stop = len(self) * self.batch_size if self.drop_last else self.n
        for start in range(0, stop, self.batch_size):
            idx = order[start:start + self.batch_size]
            if self.mean is None:
                yield tuple(t[idx] for t in self.tensors)
                continue
            if self.augment is not None:
                x = self.augmented(idx, offsets[start:start + self.batch_size],
                                   flips[start:start + self.batch_size])
            else:
                x = self.tensors[0][idx]
            # Normalize's arithmetic: the same values as the per-item transform
            yield (x.to(torch.float32) / 255.0 - self.mean) / self.std, self.tensors[1][idx]


class Loaders(NamedTuple):
    """What :func:`make_loaders` returns."""

    train: DataLoader | DeviceLoader
    val: DataLoader | DeviceLoader
    test: DataLoader | DeviceLoader
    info: DatasetInfo
    #: the training samples in a fixed order, never augmented (``make_loaders(train_eval=True)``)
    train_eval: DataLoader | DeviceLoader | None = None


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
                 train_eval: bool = False, device: str | torch.device | None = None,
                 **dataset_kwargs: Any) -> Loaders:
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
    device : str or torch.device, optional
        Keep every split on this device and make the batches there: :class:`DeviceLoader`\\ s
        (``num_workers`` and ``pin_memory`` then do nothing). The training loader's ``generator``
        draws the order and the augmentation, so a seeded run is reproducible and resumable, with
        the same augmentation distribution as the DataLoaders but another random stream. Default:
        :class:`~torch.utils.data.DataLoader`\\ s.
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
        if device is not None:
            loaders[split] = DeviceLoader(ds, bs if is_train else ebs, device=device, shuffle=is_train,
                                          generator=gen, drop_last=drop_last and is_train)
            continue
        loaders[split] = DataLoader(
            ds, batch_size=bs if is_train else ebs, shuffle=is_train, generator=gen,
            num_workers=num_workers, worker_init_fn=seed_worker if num_workers else None,
            pin_memory=bool(pin_memory), drop_last=drop_last and is_train,
            persistent_workers=False)
    # synthetic tasks take n_classes= / dim=: report what was built, not the registry default
    built = loaders["test"].dataset
    built = getattr(built, "dataset", built)
    if hasattr(built, "n_classes") and hasattr(built, "input_shape"):
        info = dataclasses.replace(info, n_classes=built.n_classes,
                                   input_shape=tuple(built.input_shape))
    clean = None
    if train_eval:
        # a generator of its own: without one, every pass would draw the workers' base seed from
        # torch's global RNG, and the trainer makes this pass at some epochs only
        if device is not None:
            clean = DeviceLoader(split_data("train", False), ebs, device=device)
        else:
            clean = DataLoader(split_data("train", False), batch_size=ebs, shuffle=False,
                               generator=torch.Generator().manual_seed(int(seed)), num_workers=num_workers,
                               worker_init_fn=seed_worker if num_workers else None,
                               pin_memory=bool(pin_memory))
    return Loaders(loaders["train"], loaders["val"], loaders["test"], info, clean)
