"""Image datasets in memory or on disk, with the papers' fixed splits and preprocessing.

Each ``build_*`` function makes one split for :data:`focalcal.lab.data.DATASETS`, from the
original on-disk formats under an argument or ``$FOCALCAL_DATA`` (:func:`data_root`). Images are
kept as ``uint8`` (Tiny-ImageNet decoded per item) and become normalised ``float32`` ``(C, H, W)``
tensors; CIFAR and Tiny-ImageNet training splits get a random crop (padding 4) and a flip.

============== ======================== ================================== ============================
name           train / val / test       validation taken from              normalisation
============== ======================== ================================== ============================
fashion_mnist  55 000 / 5 000 / 10 000  training set, seed-1 permutation   mean 0.2860, std 0.3530
cifar10        45 000 / 5 000 / 10 000  training set, seed-1 permutation   Mukhoti et al. CIFAR stats
cifar100       45 000 / 5 000 / 10 000  training set, seed-1 permutation   same as cifar10
svhn           65 932 / 7 325 / 26 032  ``train`` (10 %), seed-1 perm.     same as cifar10, no augm.
tiny_imagenet  90 000 / 10 000 / 10 000 50 images per class of training    ImageNet stats
============== ======================== ================================== ============================

The CIFAR and SVHN splits are Mukhoti et al.'s (2020) released code's: ``0..n-1`` shuffled by
``numpy.random.RandomState(1)``, the first ``floor(0.1 n)`` validation. Tiny-ImageNet's official
validation set is the test set (their App. D). Fashion-MNIST comes from Debian's
``dataset-fashion-mnist`` (offline); the others are downloaded through torchvision where allowed.
"""

from __future__ import annotations

import gzip
import math
import os
import pickle
import urllib.error
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ..._validation import check_int
from ..io import atomic_write
from .published import DataUnavailableError, cache_dir

__all__ = ["DATA_ENV", "DEBIAN_FASHION_MNIST_DIR", "FASHION_MNIST_CLASSES", "FASHION_MNIST_FILES",
           "NORMALIZATION",
           "TINY_IMAGENET_URL", "TINY_IMAGENET_MD5", "data_root", "Normalize", "image_transform",
           "ImageTensorDataset", "ImageFileDataset", "train_val_indices", "prepare_fashion_mnist",
           "read_idx", "read_cifar", "read_svhn", "tiny_imagenet_val_mask", "read_tiny_imagenet"]

DATA_ENV = "FOCALCAL_DATA"
#: where Debian's ``dataset-fashion-mnist`` installs the original idx files
DEBIAN_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                       "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

#: per-channel (mean, std) used by the papers' released code
NORMALIZATION = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    # Mukhoti et al.'s code uses the CIFAR-10 statistics for CIFAR-10, CIFAR-100 and SVHN training
    # (its CIFAR-100 *test* loader uses ImageNet statistics, an inconsistency we do not copy)
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "cifar100": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "svhn": ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "tiny_imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
TINY_IMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_IMAGENET_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"


def data_root() -> Path:
    """``$FOCALCAL_DATA`` or ``<cache_dir()>/datasets``: where image datasets live."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else cache_dir() / "datasets"


class Normalize:
    """``uint8`` image ``(C, H, W)`` -> ``float32`` ``(x / 255 - mean) / std`` (cheap, per item)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        return (img.to(torch.float32) / 255.0 - self.mean) / self.std

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()})"


def image_transform(name: str, augment: bool, size: int | None = None) -> Callable:
    """The papers' preprocessing for ``uint8`` ``(C, H, W)`` tensors.

    Training (``augment=True``) on CIFAR/Tiny-ImageNet: ``RandomCrop(size, padding=4)`` and
    ``RandomHorizontalFlip()`` (torchvision v2, drawing from torch's global RNG, which the trainer
    seeds and checkpoints), then :class:`Normalize`. Otherwise only :class:`Normalize`.
    """
    mean, std = NORMALIZATION[name]
    norm = Normalize(mean, std)
    if not augment or name in ("fashion_mnist", "svhn"):
        return norm
    from torchvision.transforms import v2
    return v2.Compose([v2.RandomCrop(size, padding=4), v2.RandomHorizontalFlip(), norm])


class ImageTensorDataset(Dataset):
    """In-memory ``uint8`` images ``(N, C, H, W)`` with labels; items are ``(transform(img), y)``."""

    def __init__(self, images: torch.Tensor, targets: torch.Tensor, transform: Callable,
                 classes: Sequence[str] | None = None) -> None:
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise ValueError(f"images must be uint8 of shape (N, C, H, W), got {images.dtype} "
                             f"{tuple(images.shape)}")
        if targets.shape != (images.shape[0],):
            raise ValueError(f"targets must have shape ({images.shape[0]},), got {tuple(targets.shape)}")
        self.images = images.contiguous()
        self.targets = targets.to(torch.int64)
        self.transform = transform
        self.classes = list(classes) if classes is not None else None

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __getitem__(self, i: int):
        return self.transform(self.images[i]), self.targets[i]


class ImageFileDataset(Dataset):
    """Images decoded from files per item (RGB ``uint8``); items are ``(transform(img), y)``."""

    def __init__(self, paths: Sequence[str | os.PathLike], targets: torch.Tensor,
                 transform: Callable, classes: Sequence[str] | None = None) -> None:
        if len(paths) != targets.shape[0]:
            raise ValueError(f"{len(paths)} paths but {targets.shape[0]} targets")
        self.paths = [str(p) for p in paths]
        self.targets = targets.to(torch.int64)
        self.transform = transform
        self.classes = list(classes) if classes is not None else None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        from PIL import Image
        with Image.open(self.paths[i]) as im:
            # convert: a few Tiny-ImageNet images are greyscale
            arr = np.asarray(im.convert("RGB"), dtype=np.uint8)
        img = torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
        return self.transform(img), self.targets[i]


def train_val_indices(n: int, val_size: int | float = 0.1, seed: int = 1
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Mukhoti et al.'s split of ``n`` training indices into (train, val).

    ``np.random.RandomState(seed)`` shuffles ``0..n-1``; the first ``val_size`` indices (a count,
    or ``floor(val_size * n)`` for a fraction) are the validation set. ``seed=1`` and
    ``val_size=0.1`` reproduce the released code's 45 000 / 5 000 CIFAR split.
    """
    n = check_int(n, "n", minimum=2)
    if isinstance(val_size, float):
        if not 0.0 < val_size < 1.0:
            raise ValueError(f"val_size as a fraction must lie in (0, 1), got {val_size}")
        n_val = int(math.floor(val_size * n))
    else:
        n_val = check_int(val_size, "val_size", minimum=1)
    if not 1 <= n_val < n:
        raise ValueError(f"val_size gives {n_val} validation samples out of {n}; need 1 <= n_val < n")
    idx = np.arange(n)
    np.random.RandomState(seed).shuffle(idx)
    return idx[n_val:], idx[:n_val]


def _unavailable(name: str, where: Path, hint: str) -> DataUnavailableError:
    return DataUnavailableError(f"{name} not found under {where} and download is disabled or "
                                f"failed; {hint}")


def _torchvision_download(name: str, where: Path, fetch: Callable[[], Any]) -> None:
    try:
        fetch()
    except (urllib.error.URLError, OSError, RuntimeError) as err:
        raise DataUnavailableError(f"could not download {name} into {where}: {err}") from err


# -------------------------------------------------------------------- Fashion-MNIST (offline) ---

def _decompress_atomic(src: Path, dest: Path) -> None:
    def copy(out) -> None:
        with gzip.open(src, "rb") as inp:
            while block := inp.read(1 << 20):
                out.write(block)
    atomic_write(dest, copy)


def prepare_fashion_mnist(root: str | os.PathLike | None = None, *, download: bool = True,
                          debian_dir: str | os.PathLike = DEBIAN_FASHION_MNIST_DIR) -> Path:
    """Make ``root/FashionMNIST/raw/`` hold the four decompressed idx files; return ``root``.

    Debian's ``dataset-fashion-mnist`` ships the original files recompressed (their ``.gz`` md5
    differs from torchvision's, so torchvision would re-download); torchvision reads the
    *decompressed* files without any checksum. So: already there -> nothing to do; Debian files
    present -> decompress each (to a temporary file, then rename, so concurrent or killed runs never
    leave a truncated file); otherwise torchvision ``download=True`` when ``download``.
    """
    root = Path(root) if root is not None else data_root()
    raw = root / "FashionMNIST" / "raw"
    if all((raw / f).is_file() for f in FASHION_MNIST_FILES):
        return root
    debian = Path(debian_dir)
    if all((debian / f"{f}.gz").is_file() for f in FASHION_MNIST_FILES):
        for f in FASHION_MNIST_FILES:
            if not (raw / f).is_file():
                _decompress_atomic(debian / f"{f}.gz", raw / f)
        return root
    if not download:
        raise _unavailable("Fashion-MNIST", raw, "install Debian's dataset-fashion-mnist or "
                           "pass download=True on a machine with internet")
    from torchvision.datasets import FashionMNIST
    _torchvision_download("Fashion-MNIST", root, lambda: FashionMNIST(root, train=True, download=True))
    return root


#: the class names of Fashion-MNIST, in label order (as torchvision's ``FashionMNIST.classes``)
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                         "Sneaker", "Bag", "Ankle boot")
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | os.PathLike) -> torch.Tensor:
    """An uncompressed IDX file (the MNIST format: magic ``0 0 dtype ndim``, big-endian dimensions).

    Read here rather than through torchvision's ``FashionMNIST``: importing torchvision costs about
    1.5 s on 2 cores, paid by every sweep run's kernel; tests check the result against torchvision.
    """
    raw = Path(path).read_bytes()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()})")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">i4", count=ndim, offset=4))
    data = np.frombuffer(raw, dtype=_IDX_DTYPES[raw[2]], offset=4 + 4 * ndim)
    if data.size != math.prod(dims):
        raise ValueError(f"{path}: header gives shape {dims} but the file holds {data.size} values")
    return torch.from_numpy(data.astype(data.dtype.newbyteorder("="), copy=True).reshape(dims))


def build_fashion_mnist(split: str, root: Path, augment: bool, download: bool,
                        val_size: int | float = 5000, split_seed: int = 1) -> Dataset:
    """One split of Fashion-MNIST: validation = ``val_size`` training images (seed ``split_seed``)."""
    prepare_fashion_mnist(root, download=download)
    prefix = "t10k" if split == "test" else "train"
    raw = Path(root) / "FashionMNIST" / "raw"
    images = read_idx(raw / f"{prefix}-images-idx3-ubyte").unsqueeze(1)
    targets = read_idx(raw / f"{prefix}-labels-idx1-ubyte").to(torch.int64)
    if split != "test":
        tr, va = train_val_indices(len(targets), val_size, split_seed)
        sel = torch.from_numpy(tr if split == "train" else va)
        images, targets = images[sel], targets[sel]
    return ImageTensorDataset(images, targets, image_transform("fashion_mnist", augment),
                              classes=FASHION_MNIST_CLASSES)


# ---------------------------------------------------------------------------- CIFAR-10 / 100 ---

_CIFAR = {
    "cifar10": dict(folder="cifar-10-batches-py", train=[f"data_batch_{i}" for i in range(1, 6)],
                    test=["test_batch"], meta="batches.meta", names="label_names", labels="labels"),
    "cifar100": dict(folder="cifar-100-python", train=["train"], test=["test"], meta="meta",
                     names="fine_label_names", labels="fine_labels"),
}


def _unpickle(path: Path) -> dict:
    # the official CIFAR python batches are Python-2 pickles; latin1 maps their byte strings 1:1
    with open(path, "rb") as f:
        d = pickle.load(f, encoding="latin1")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}


def read_cifar(root: str | os.PathLike, name: str = "cifar10", train: bool = True
               ) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Read the official python-pickle batches (``cifar-10-batches-py`` / ``cifar-100-python``).

    Returns
    -------
    images : Tensor, shape (N, 3, 32, 32), uint8
    targets : Tensor, shape (N,), int64 (CIFAR-100: the fine labels)
    classes : list of str
    """
    spec = _CIFAR[name]
    folder = Path(root) / spec["folder"]
    data, labels = [], []
    for fname in spec["train" if train else "test"]:
        d = _unpickle(folder / fname)
        data.append(np.asarray(d["data"], dtype=np.uint8))
        labels.append(np.asarray(d[spec["labels"]], dtype=np.int64))
    images = torch.from_numpy(np.concatenate(data).reshape(-1, 3, 32, 32))
    classes = list(_unpickle(folder / spec["meta"])[spec["names"]])
    return images, torch.from_numpy(np.concatenate(labels)), classes


def _cifar_files_present(root: Path, name: str) -> bool:
    spec = _CIFAR[name]
    folder = root / spec["folder"]
    return all((folder / f).is_file() for f in spec["train"] + spec["test"] + [spec["meta"]])


def cifar_builder(name: str) -> Callable[..., Dataset]:
    """The split builder of ``"cifar10"`` or ``"cifar100"`` (validation = 10 % of training)."""
    def build(split: str, root: Path, augment: bool, download: bool,
              val_size: int | float = 0.1, split_seed: int = 1) -> Dataset:
        if not _cifar_files_present(root, name):
            if not download:
                raise _unavailable(name, root / _CIFAR[name]["folder"], "pass download=True")
            from torchvision import datasets as tvd
            cls = tvd.CIFAR10 if name == "cifar10" else tvd.CIFAR100
            _torchvision_download(name, root, lambda: cls(root, train=True, download=True))
        images, targets, classes = read_cifar(root, name, train=split != "test")
        if split != "test":
            tr, va = train_val_indices(len(targets), val_size, split_seed)
            sel = torch.from_numpy(tr if split == "train" else va)
            images, targets = images[sel], targets[sel]
        return ImageTensorDataset(images, targets, image_transform(name, augment, 32), classes)
    return build


# --------------------------------------------------------------------------------------- SVHN ---

def read_svhn(root: str | os.PathLike, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
    """Read ``<root>/<split>_32x32.mat`` (the official format; digit 0 is stored as label 10).

    Returns ``images`` ``(N, 3, 32, 32)`` uint8 and ``targets`` ``(N,)`` int64 in ``0..9``.
    """
    import scipy.io
    m = scipy.io.loadmat(str(Path(root) / f"{split}_32x32.mat"))
    images = torch.from_numpy(np.ascontiguousarray(np.transpose(m["X"], (3, 2, 0, 1))))
    targets = torch.from_numpy(np.asarray(m["y"], dtype=np.int64).reshape(-1) % 10)
    return images, targets


def build_svhn(split: str, root: Path, augment: bool, download: bool,
               val_size: int | float = 0.1, split_seed: int = 1) -> Dataset:
    """One split of SVHN: validation = 10 % of ``train`` (Mukhoti et al.'s code)."""
    folder = root / "svhn"
    file_split = "test" if split == "test" else "train"
    if not (folder / f"{file_split}_32x32.mat").is_file():
        if not download:
            raise _unavailable("SVHN", folder, "pass download=True")
        from torchvision.datasets import SVHN
        _torchvision_download("SVHN", folder, lambda: SVHN(folder, split=file_split, download=True))
    images, targets = read_svhn(folder, file_split)
    if split != "test":
        tr, va = train_val_indices(len(targets), val_size, split_seed)
        sel = torch.from_numpy(tr if split == "train" else va)
        images, targets = images[sel], targets[sel]
    return ImageTensorDataset(images, targets, image_transform("svhn", augment, 32),
                              classes=[str(d) for d in range(10)])


# ------------------------------------------------------------------------------ Tiny-ImageNet ---

def tiny_imagenet_val_mask(targets: np.ndarray, per_class: int = 50, seed: int = 1) -> np.ndarray:
    """Boolean mask choosing ``per_class`` random training images of every class as validation.

    Vectorised: a seeded permutation, a stable sort by class, and each sample's rank inside its
    class; the first ``per_class`` ranks of every class are kept.
    """
    targets = np.asarray(targets)
    n = targets.shape[0]
    perm = np.random.RandomState(seed).permutation(n)
    order = perm[np.argsort(targets[perm], kind="stable")]
    sorted_t = targets[order]
    first = np.searchsorted(sorted_t, sorted_t, side="left")
    rank = np.arange(n) - first
    mask = np.zeros(n, dtype=bool)
    mask[order[rank < per_class]] = True
    return mask


def read_tiny_imagenet(root: str | os.PathLike, which: str = "train"
                       ) -> tuple[list[Path], torch.Tensor, list[str]]:
    """File list of Tiny-ImageNet's official ``train`` or ``val`` folder with labels.

    Layout: ``wnids.txt`` (one WordNet id per line; classes are the sorted ids, as in Mukhoti et
    al.'s loader), ``train/<wnid>/images/*.JPEG`` and ``val/images/*.JPEG`` labelled by
    ``val/val_annotations.txt`` (tab-separated: file name, wnid, box).
    """
    base = Path(root)
    wnids = sorted(w.strip() for w in (base / "wnids.txt").read_text().split() if w.strip())
    index = {w: i for i, w in enumerate(wnids)}
    if which == "train":
        paths = sorted((base / "train").glob("*/images/*.JPEG"))
        labels = [index[p.parent.parent.name] for p in paths]
    else:
        ann = {}
        for line in (base / "val" / "val_annotations.txt").read_text().splitlines():
            if line.strip():
                fname, wnid = line.split("\t")[:2]
                ann[fname] = index[wnid]
        paths = sorted((base / "val" / "images").glob("*.JPEG"))
        labels = [ann[p.name] for p in paths]
    if not paths:
        raise DataUnavailableError(f"no images found in {base / which}")
    return paths, torch.tensor(labels, dtype=torch.int64), wnids


def build_tiny_imagenet(split: str, root: Path, augment: bool, download: bool,
                        val_per_class: int = 50, split_seed: int = 1) -> Dataset:
    """One split of Tiny-ImageNet: the official validation set is the test set."""
    base = root / "tiny-imagenet-200"
    if not (base / "wnids.txt").is_file():
        if not download:
            raise _unavailable("Tiny-ImageNet", base, "pass download=True")
        from torchvision.datasets.utils import download_and_extract_archive
        _torchvision_download("Tiny-ImageNet", root, lambda: download_and_extract_archive(
            TINY_IMAGENET_URL, download_root=str(root), md5=TINY_IMAGENET_MD5))
    # the official validation set is the test set; validation comes out of the training set
    paths, targets, wnids = read_tiny_imagenet(base, "val" if split == "test" else "train")
    if split != "test":
        mask = tiny_imagenet_val_mask(targets.numpy(), val_per_class, split_seed)
        keep = np.flatnonzero(mask if split == "val" else ~mask)
        paths, targets = [paths[i] for i in keep], targets[torch.from_numpy(keep)]
    return ImageFileDataset(paths, targets, image_transform("tiny_imagenet", augment, 64), wnids)
