"""Published logits: the CIFAR-10 ResNet-50 logits released by Zhou et al. (2025), and the cache.

:func:`published_logits` returns the logits of ``han678/CalibWeightedRisk`` (removed upstream later;
pinned here to the commit that still has them). The files carry no licence, so the project never
commits them: they are downloaded once into :func:`cache_dir` and checked against a pinned sha256,
or read from a local copy: ``$FOCALCAL_LOGITS_ROOT/cifar10-resnet50-logits`` (the variable names a
directory holding every published-logits folder, see :mod:`focalcal.lab.data.released`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import torch

from ..._validation import check_choice

__all__ = ["LOGITS_ROOT_ENV", "ZHOU_FOLDER", "CACHE_ENV", "PUBLISHED_SHA256", "PUBLISHED_LOSSES", "DataUnavailableError",
           "cache_dir", "published_logits_path", "published_logits"]

#: a directory holding every published-logits folder (this module's is :data:`ZHOU_FOLDER`)
LOGITS_ROOT_ENV = "FOCALCAL_LOGITS_ROOT"
ZHOU_FOLDER = "cifar10-resnet50-logits"
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

    Looks in ``root`` (files named ``<name>_<split>.npz``), then
    ``$FOCALCAL_LOGITS_ROOT/cifar10-resnet50-logits``, then the cache; downloads into the cache when
    ``download`` and the network allow.
    """
    check_choice(split, "split", ("train", "test"))
    check_choice(name, "name", sorted({n for n, _ in PUBLISHED_SHA256}))
    if (name, split) not in PUBLISHED_SHA256:
        raise ValueError(f"split={split!r} is not published for name={name!r}; available: "
                         f"{sorted(s for n, s in PUBLISHED_SHA256 if n == name)}")
    sha = PUBLISHED_SHA256[(name, split)]
    fname = f"{name}_{split}.npz"
    in_root = os.path.join(os.environ[LOGITS_ROOT_ENV], ZHOU_FOLDER) if os.environ.get(LOGITS_ROOT_ENV) else None
    for base in (root, in_root):
        if base:
            p = Path(base) / fname
            if p.is_file():
                return p
            if root is not None and base == root:
                raise DataUnavailableError(f"{p} does not exist")
    cached = cache_dir() / ZHOU_FOLDER / fname
    if cached.is_file() and _sha256(cached) == sha:
        return cached
    if not download:
        raise DataUnavailableError(f"{fname} is not cached and download=False; set {LOGITS_ROOT_ENV} "
                                   f"to a directory holding {ZHOU_FOLDER}/")
    url = _LOGITS_URL.format(name=name, split=split)
    try:
        _download(url, cached, sha)
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        raise DataUnavailableError(
            f"could not download {url} ({err}); set {LOGITS_ROOT_ENV} to a directory holding a "
            f"local copy of {ZHOU_FOLDER}/") from err
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
        Directory holding ``<name>_<split>.npz``; defaults to
        ``$FOCALCAL_LOGITS_ROOT/cifar10-resnet50-logits``.
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
