"""Data: synthetic tasks with a known posterior, image datasets, and published logits.

One entry point, :func:`get_dataset` (one split as a :class:`torch.utils.data.Dataset`), and
:func:`make_loaders` (train/val/test :class:`~torch.utils.data.DataLoader`\\ s); the registry
:data:`DATASETS` lists every name with its classes, input shape and split sizes.

Synthetic tasks (known posterior)
---------------------------------
Every sample of a synthetic task carries its true class posterior ``eta(x) = p(y | x)``
(:attr:`SyntheticDataset.posterior`), so properness is measured directly, e.g. as
``metrics.kl_to_posterior``. Samples are generated on the fly from a seed; train, validation and
test are independent draws (separate child seeds of one :class:`numpy.random.SeedSequence`).

``"charoenphakdee_1d"``
    The 1-D 3-class problem of Charoenphakdee et al. (2021), Sec. 5.2 / Fig. 3. The paper gives
    its distribution only as the plot of Fig. 3a; the text states no numbers. We use a
    three-component Gaussian mixture on the real line with equal priors, means ``-2, 0, 2`` and
    unit standard deviations (:func:`charoenphakdee_1d_task`), which has the features the figure
    relies on: the outer classes' posteriors approach 1, the middle class's peaks at 0.79, and
    every class is the Bayes decision somewhere.
``"gaussian_mixture"``
    ``K`` classes in ``d`` dimensions, ``p(x | y=k) = N(mu_k, sigma_k^2 I)``
    (:func:`gaussian_mixture_task`).

Image datasets (fixed, documented splits)
-----------------------------------------
Images are kept in memory as ``uint8`` tensors (Tiny-ImageNet is decoded per item) and turned into
normalised ``float32`` tensors of shape ``(C, H, W)``; training splits of CIFAR and Tiny-ImageNet are
augmented with a random crop (padding 4) and a horizontal flip, as in the papers.

============== ======================== ================================== ============================
name           train / val / test       validation taken from              normalisation
============== ======================== ================================== ============================
fashion_mnist  55 000 / 5 000 / 10 000  training set, seed-1 permutation   mean 0.2860, std 0.3530
cifar10        45 000 / 5 000 / 10 000  training set, seed-1 permutation   Mukhoti et al. CIFAR stats
cifar100       45 000 / 5 000 / 10 000  training set, seed-1 permutation   same as cifar10
svhn           65 932 / 7 325 / 26 032  ``train`` (10 %), seed-1 perm.     same as cifar10, no augm.
tiny_imagenet  90 000 / 10 000 / 10 000 50 images per class of training    ImageNet stats
============== ======================== ================================== ============================

The CIFAR and SVHN splits reproduce the released code of Mukhoti et al. (2020) exactly: the
indices ``0..n-1`` are shuffled by ``numpy.random.RandomState(1)`` and the first ``floor(0.1 n)``
form the validation set. Tiny-ImageNet's official validation set is the test set (Mukhoti et al.,
Appendix D). Fashion-MNIST (offline) comes from Debian's ``dataset-fashion-mnist`` package,
decompressed once into the cache; CIFAR, SVHN and Tiny-ImageNet are downloaded (through torchvision)
on machines with internet and read from their original on-disk formats.

Published logits
----------------
:func:`published_logits` returns the real CIFAR-10 ResNet-50 logits released by Zhou et al.
(2025) in ``han678/CalibWeightedRisk`` (removed upstream later; pinned here to the commit that
still has them). The files carry no licence, so the project never commits them: they are
downloaded once into a cache directory and checked against a pinned sha256, or read from a local
copy named by the environment variable ``FOCALCAL_LOGITS_DIR``.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import math
import os
import pickle
import random
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from .._validation import as_float_tensor, check_choice, check_finite, check_int, check_positive
from .io import atomic_write
LOGITS_ENV = "FOCALCAL_LOGITS_DIR"
CACHE_ENV = "FOCALCAL_CACHE"
_LOGITS_COMMIT = "d5fdafc43dab45bafa223ea1254aedd14a53f60e"
_LOGITS_URL = ("https://raw.githubusercontent.com/han678/CalibWeightedRisk/" + _LOGITS_COMMIT
               + "/result/train/cifar10/resnet50_{name}_seed40_{split}_logits.npz")
PUBLISHED_SHA256 = {
    ("aurc", "test"): "69db44ac03afed4b90da4849e5d87f9f475385f041dcf5816325d591de42eede",
    ("ce", "test"): "346836ae9cec89fb6d69299d0c22806be1dec6cf178deb206d16b08d895c8e45",
    ("ce", "train"): "1ab1760862cb54e9f33c11e341c48706f8b29cab911eaedc63b7f928a2cc97bf",
    ("dual_focal", "test"): "c9a2d686a3c7b1fd680ed5ab1cd74c928b7d2e146c60bd28f290184ce6451245",
    ("dual_focal", "train"): "16d16c0c113956e7b95ea0818e9639954965a696ce11acf1ec5dbdaf0a31b593",
    ("ece_kde", "test"): "ab8ba699f8a80f4cedeffe76a218a9d24045ff13c699bf86ad4e7e22319e1b90",
    ("ece_kde", "train"): "262afc3f12212e341b8ab94dbd564894e19784717bb97254df590525753a9abc",
    ("focal", "test"): "42bbc2be41621be2c0ec8b3e8eea2b7a9bd1958b42fa0d76a02fb28ff8cddb85",
    ("focal", "train"): "cadcb226b8acd65806ed5e7aaa94da427c1409d5bbef34d25885f5627c517aff",
}
#: what each published run was trained with (seed 40, ResNet-50, CIFAR-10)
PUBLISHED_LOSSES = {
    "ce": "cross-entropy",
    "focal": "FLSD-53 (gamma = 5 if p_t < 0.2 else 3)",
    "dual_focal": "dual focal loss (Tao et al. 2023, as released)",
    "ece_kde": "cross-entropy + 0.3 * ECE-KDE",
    "aurc": "AURC-weighted loss (SoftRank)",
}


class DataUnavailableError(RuntimeError):
    """Raised when data is neither in a local directory nor downloadable (e.g. offline)."""


def cache_dir() -> Path:
    """``$FOCALCAL_CACHE`` or ``~/.cache/focalcal``."""
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "focalcal"))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download(url: str, dest: Path, sha256: str, timeout: float = 30.0) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    # temporary file + rename: an interrupted download never leaves a file that looks complete
    fd, tmp = tempfile.mkstemp(dir=dest.parent, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            while block := resp.read(1 << 20):
                out.write(block)
        got = _sha256(Path(tmp))
        if got != sha256:
            raise DataUnavailableError(f"checksum mismatch for {url}: got {got}, expected {sha256}")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def published_logits_path(name: str, split: str = "test", *, root: str | os.PathLike | None = None,
                          download: bool = True) -> Path:
    """Local path of one published logits file, downloading it if needed.

    Looks in ``root``, then ``$FOCALCAL_LOGITS_DIR`` (files named ``<name>_<split>.npz``), then
    the cache; downloads into the cache when ``download`` and the network allow.
    """
    check_choice(split, "split", ("train", "test"))
    check_choice(name, "name", sorted({n for n, _ in PUBLISHED_SHA256}))
    if (name, split) not in PUBLISHED_SHA256:
        raise ValueError(f"split={split!r} is not published for name={name!r}; available: "
                         f"{sorted(s for n, s in PUBLISHED_SHA256 if n == name)}")
    sha = PUBLISHED_SHA256[(name, split)]
    fname = f"{name}_{split}.npz"
    for base in (root, os.environ.get(LOGITS_ENV)):
        if base:
            p = Path(base) / fname
            if p.is_file():
                return p
            if root is not None and base == root:
                raise DataUnavailableError(f"{p} does not exist")
    cached = cache_dir() / "cifar10-resnet50-logits" / fname
    if cached.is_file() and _sha256(cached) == sha:
        return cached
    if not download:
        raise DataUnavailableError(f"{fname} is not cached and download=False; set {LOGITS_ENV} "
                                   f"to a directory holding it")
    url = _LOGITS_URL.format(name=name, split=split)
    try:
        _download(url, cached, sha)
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        raise DataUnavailableError(
            f"could not download {url} ({err}); set {LOGITS_ENV} to a local copy of the "
            f"published logits") from err
    return cached


def published_logits(name: str, split: str = "test", *, root: str | os.PathLike | None = None,
                     download: bool = True, dtype: torch.dtype = torch.float64
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Published CIFAR-10 ResNet-50 logits of Zhou et al. (2025), seed 40.

    Parameters
    ----------
    name : {"ce", "focal", "dual_focal", "ece_kde", "aurc"}
        The training loss, see :data:`PUBLISHED_LOSSES` (``"focal"`` is FLSD-53).
    split : {"train", "test"}
        50 000 training or 10 000 test images (``"aurc"`` has only ``"test"``).
    root : path, optional
        Directory holding ``<name>_<split>.npz``; defaults to ``$FOCALCAL_LOGITS_DIR``.
    download : bool
        Fetch from the pinned upstream commit (sha256-checked) when not found locally.
    dtype : torch.dtype
        Dtype of the returned logits (stored as float32; float64 by default for exact metrics).

    Returns
    -------
    logits : Tensor, shape (N, 10)
    labels : Tensor, shape (N,), int64

    Raises
    ------
    DataUnavailableError
        When the file is neither local nor downloadable.
    """
    path = published_logits_path(name, split, root=root, download=download)
    with np.load(path) as z:
        logits = torch.from_numpy(np.asarray(z["logits"])).to(dtype)
        labels = torch.from_numpy(np.asarray(z["targets"]).astype(np.int64))
    return logits, labels


# ================================================================================================
# Synthetic tasks with a known posterior
# ================================================================================================

_LOG_2PI = math.log(2 * math.pi)


class GaussianMixture:
    """A labelled Gaussian mixture: ``p(y=k) = pi_k``, ``p(x | y=k) = N(mu_k, sigma_k^2 I_d)``.

    Parameters
    ----------
    means : array_like, shape (K, d)
        Class means ``mu_k``.
    stds : float or array_like, shape (K,)
        Isotropic standard deviations ``sigma_k > 0``.
    priors : array_like, shape (K,), optional
        Class priors ``pi_k`` (positive, summing to 1); uniform by default.

    Notes
    -----
    All densities are evaluated in log space (``log pi_k - ||x - mu_k||^2 / (2 sigma_k^2) - d log
    sigma_k``, normalised by ``logsumexp``) and in float64 (results are cast back to the dtype of
    ``x``), so the posterior stays finite and exact to rounding for any finite ``x``, including
    ``|x| ~ 1e4`` where every density underflows.
    """

    def __init__(self, means: Any, stds: Any = 1.0, priors: Any = None) -> None:
        mu = as_float_tensor(means, "means").to(torch.float64)
        if mu.dim() != 2 or mu.shape[0] < 2 or mu.shape[1] < 1:
            raise ValueError(f"means must have shape (K, d) with K >= 2 classes, got {tuple(mu.shape)}")
        check_finite(mu, "means")
        k, _ = mu.shape
        s = as_float_tensor(stds, "stds").to(torch.float64)
        s = s.expand(k).clone() if s.dim() == 0 else s
        if s.shape != (k,):
            raise ValueError(f"stds must be a scalar or have shape ({k},), got {tuple(s.shape)}")
        check_finite(s, "stds")
        if bool((s <= 0).any()):
            raise ValueError(f"stds must be positive, got {s.tolist()}")
        if priors is None:
            p = torch.full((k,), 1.0 / k, dtype=torch.float64)
        else:
            p = as_float_tensor(priors, "priors").to(torch.float64)
            if p.shape != (k,):
                raise ValueError(f"priors must have shape ({k},), got {tuple(p.shape)}")
            check_finite(p, "priors")
            if bool((p <= 0).any()) or abs(float(p.sum()) - 1.0) > 1e-8:
                raise ValueError(f"priors must be positive and sum to 1, got {p.tolist()}")
        self.means, self.stds, self.priors = mu, s, p

    @property
    def num_classes(self) -> int:
        return int(self.means.shape[0])

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])

    def _check_x(self, x: Any) -> torch.Tensor:
        t = as_float_tensor(x, "x")
        if t.dim() < 1 or t.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (..., {self.dim}), got {tuple(t.shape)}")
        check_finite(t, "x")
        return t

    def _log_joint64(self, x: Any) -> tuple[torch.Tensor, torch.dtype]:
        t = self._check_x(x)
        # float64 inside whatever the input dtype: for |x| ~ 1e4 the squared distances are ~1e8
        # and their differences (the posterior's log-odds) would lose every digit in float32
        sq = (t.to(torch.float64).unsqueeze(-2) - self.means).pow(2).sum(-1)
        s = self.stds
        return self.priors.log() - 0.5 * sq / s.pow(2) - self.dim * (s.log() + 0.5 * _LOG_2PI), t.dtype

    def log_joint(self, x: Any) -> torch.Tensor:
        """``log p(x, y=k)``, shape ``(..., K)``, in the dtype of ``x`` (float32 or float64)."""
        lj, dtype = self._log_joint64(x)
        return lj.to(dtype)

    def log_density(self, x: Any) -> torch.Tensor:
        """Marginal ``log p(x)``, shape ``(...)``."""
        lj, dtype = self._log_joint64(x)
        return torch.logsumexp(lj, dim=-1).to(dtype)

    def log_posterior(self, x: Any) -> torch.Tensor:
        """``log p(y=k | x)``, shape ``(..., K)``."""
        lj, dtype = self._log_joint64(x)
        return torch.log_softmax(lj, dim=-1).to(dtype)

    def posterior(self, x: Any) -> torch.Tensor:
        """True class posterior ``eta(x) = p(y | x)``, shape ``(..., K)``; rows sum to 1."""
        lj, dtype = self._log_joint64(x)
        return torch.softmax(lj, dim=-1).to(dtype)

    def bayes_logits(self, x: Any) -> torch.Tensor:
        """Logits whose softmax is the true posterior (the joint log-density)."""
        return self.log_joint(x)

    def sample(self, n: int, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``n`` labelled samples.

        Returns
        -------
        x : Tensor, shape (n, d), float64
        y : Tensor, shape (n,), int64
        """
        n = check_int(n, "n", minimum=1)
        y = torch.multinomial(self.priors, n, replacement=True, generator=generator)
        noise = torch.randn(n, self.dim, dtype=torch.float64, generator=generator)
        x = self.means[y] + self.stds[y, None] * noise
        return x, y

    def __repr__(self) -> str:
        return (f"GaussianMixture(K={self.num_classes}, d={self.dim}, "
                f"stds={self.stds.tolist()}, priors={self.priors.tolist()})")


def charoenphakdee_1d_task() -> GaussianMixture:
    """The 1-D 3-class task standing in for Charoenphakdee et al. (2021), Fig. 3a.

    The paper shows ``p(x)``, ``p(x, y)`` and ``p(y | x)`` only as plots and states no parameters,
    so this is our documented choice: equal priors, means ``(-2, 0, 2)``, unit standard
    deviations. The outer classes' posteriors tend to 1 in the tails, the middle class peaks at
    ``1 / (1 + 2 e^{-2}) = 0.787`` at ``x = 0``: the regime where the focal-loss minimiser is
    under-confident (Charoenphakdee et al., Thm. 8).
    """
    return GaussianMixture(means=[[-2.0], [0.0], [2.0]], stds=1.0)


def gaussian_mixture_task(num_classes: int = 10, dim: int = 2, separation: float = 2.0,
                          std: float = 1.0, priors: Any = None, seed: int = 0) -> GaussianMixture:
    """A ``K``-class isotropic Gaussian mixture with seeded random means.

    The means are i.i.d. ``N(0, separation^2 I_d)`` draws from ``numpy.random.default_rng(seed)``,
    so the task is a pure function of its arguments; ``separation / std`` sets the Bayes error.
    """
    k = check_int(num_classes, "num_classes", minimum=2)
    d = check_int(dim, "dim", minimum=1)
    sep = check_positive(separation, "separation")
    check_positive(std, "std")
    means = np.random.default_rng(seed).normal(0.0, sep, size=(k, d))
    return GaussianMixture(means=means, stds=std, priors=priors)


SPLITS = ("train", "val", "test")


def _split_generator(seed: int, split: str) -> torch.Generator:
    # independent child streams per split: same seed -> same data, splits never overlap in RNG
    ss = np.random.SeedSequence(entropy=int(seed), spawn_key=(SPLITS.index(split),))
    return torch.Generator().manual_seed(int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1)))


class SyntheticDataset(Dataset):
    """``n`` samples of a synthetic task, each with its true posterior.

    Attributes
    ----------
    x : Tensor, shape (n, d), ``dtype``
    targets : Tensor, shape (n,), int64
    posterior : Tensor, shape (n, K), float64
        ``eta(x_i)``, exact to rounding.
    task : GaussianMixture

    Items are ``(x_i, y_i)``, or ``(x_i, y_i, eta_i)`` with ``return_posterior=True``.
    """

    def __init__(self, task: GaussianMixture, n: int, seed: int = 0, split: str = "train",
                 dtype: torch.dtype = torch.float32, return_posterior: bool = False) -> None:
        check_choice(split, "split", SPLITS)
        check_choice(dtype, "dtype", (torch.float32, torch.float64))
        x, y = task.sample(n, generator=_split_generator(seed, split))
        self.task, self.split, self.seed = task, split, seed
        self.x = x.to(dtype)
        self.targets = y
        self.posterior = task.posterior(x)
        self.return_posterior = return_posterior
        self.num_classes = task.num_classes
        self.input_shape = (task.dim,)

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def __getitem__(self, i: int):
        if self.return_posterior:
            return self.x[i], self.targets[i], self.posterior[i]
        return self.x[i], self.targets[i]


# ================================================================================================
# Image datasets
# ================================================================================================

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


def _fashion_mnist(split: str, root: Path, augment: bool, download: bool,
                   val_size: int | float = 5000, split_seed: int = 1) -> Dataset:
    from torchvision.datasets import FashionMNIST
    prepare_fashion_mnist(root, download=download)
    ds = FashionMNIST(root, train=split != "test", download=False)
    images, targets = ds.data.unsqueeze(1), ds.targets
    if split != "test":
        tr, va = train_val_indices(len(targets), val_size, split_seed)
        sel = torch.from_numpy(tr if split == "train" else va)
        images, targets = images[sel], targets[sel]
    return ImageTensorDataset(images, targets, image_transform("fashion_mnist", augment),
                              classes=ds.classes)


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


def _cifar(name: str):
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


def _svhn(split: str, root: Path, augment: bool, download: bool,
          val_size: int | float = 0.1, split_seed: int = 1) -> Dataset:
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


def _tiny_imagenet(split: str, root: Path, augment: bool, download: bool,
                   val_per_class: int = 50, split_seed: int = 1) -> Dataset:
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


# ================================================================================================
# Registry and entry points
# ================================================================================================

@dataclass(frozen=True)
class DatasetInfo:
    """What :data:`DATASETS` records about one dataset."""

    name: str
    kind: str                       #: "synthetic" or "image"
    num_classes: int
    input_shape: tuple[int, ...]    #: per-sample shape, ``(d,)`` or ``(C, H, W)``
    splits: str                     #: sizes of train / val / test and where val comes from
    builder: Callable[..., Dataset] = field(repr=False)

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
        "10 000 / 5 000 / 10 000 independent draws (n= to change)", _synthetic(charoenphakdee_1d_task)),
    "gaussian_mixture": DatasetInfo(
        "gaussian_mixture", "synthetic", 10, (2,),
        "10 000 / 5 000 / 10 000 independent draws; num_classes=, dim= change K and d",
        _synthetic(gaussian_mixture_task)),
    "fashion_mnist": DatasetInfo(
        "fashion_mnist", "image", 10, (1, 28, 28),
        "55 000 / 5 000 / 10 000; val = 5 000 of the 60 000 training images (seed 1)", _fashion_mnist),
    "cifar10": DatasetInfo(
        "cifar10", "image", 10, (3, 32, 32),
        "45 000 / 5 000 / 10 000; val = 10 % of training (seed 1, Mukhoti et al.)", _cifar("cifar10")),
    "cifar100": DatasetInfo(
        "cifar100", "image", 100, (3, 32, 32),
        "45 000 / 5 000 / 10 000; val = 10 % of training (seed 1, Mukhoti et al.)", _cifar("cifar100")),
    "svhn": DatasetInfo(
        "svhn", "image", 10, (3, 32, 32),
        "65 932 / 7 325 / 26 032; val = 10 % of 'train' (seed 1, Mukhoti et al.'s code); "
        "'extra' unused", _svhn),
    "tiny_imagenet": DatasetInfo(
        "tiny_imagenet", "image", 200, (3, 64, 64),
        "90 000 / 10 000 / 10 000; val = 50 training images per class (seed 1); test = official val",
        _tiny_imagenet),
}


def _info(name: str) -> DatasetInfo:
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
        ``dtype``, ``return_posterior`` and the task's parameters (``num_classes``, ``dim``,
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
    info = _info(name)
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
    """
    info = _info(name)
    bs = check_int(batch_size, "batch_size")
    ebs = check_int(eval_batch_size, "eval_batch_size") if eval_batch_size is not None else max(bs, 256)
    check_int(num_workers, "num_workers", minimum=0)
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    loaders = {}
    for split in SPLITS:
        ds = get_dataset(name, root, split, augment=augment and split == "train",
                         download=download, **dataset_kwargs)
        k = _subset_size(subset, split)
        if k is not None and k < len(ds):
            rng = np.random.default_rng([seed, SPLITS.index(split)])
            ds = Subset(ds, np.sort(rng.permutation(len(ds))[:k]).tolist())
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
    return Loaders(loaders["train"], loaders["val"], loaders["test"], info)
