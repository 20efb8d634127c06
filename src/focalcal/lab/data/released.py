"""Released networks: the registry of published logits of 17 trained CIFAR networks, and their loader.

Two public sources, each a folder of files with pinned sha256 (the project never commits them):

``mukhoti-pretrained-logits/``
    The 12 networks released with Mukhoti et al. (2020): ResNet-50, ResNet-110, Wide-ResNet-26-10
    and DenseNet-121 trained with the Brier loss on CIFAR-10 and on CIFAR-100, and the same four
    trained with FLSD-53 on CIFAR-10. Validation (5 000, the held-out part of the training split
    that Mukhoti et al. fitted the temperature on) and test (10 000) logits, as published by Gupta &
    Ramdas in ``AIgen/df-posthoc-calibration`` (MIT), pinned to the commit that still has them.
``cifar10-resnet50-logits/``
    Five CIFAR-10 ResNet-50 runs of Zhou et al. (2025), ``han678/CalibWeightedRisk`` (seed 40):
    cross-entropy, FLSD-53, dual focal, ECE-KDE and AURC; train and test logits (AURC: test only),
    no validation split (:mod:`focalcal.lab.data.published` reads the same files).

:data:`RELEASED` lists every network (:class:`ReleasedNetwork`: name, dataset, network, training
loss, splits, files with URL and sha256). :func:`released_logits` returns one split, from a local
copy, ``$FOCALCAL_LOGITS_ROOT``, the cache or a download, sha256-checked wherever it comes from.
"""

from __future__ import annotations

import functools
import os
import urllib.error
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..._validation import check_choice
from ...losses import DISPLAY_NAMES
from ..models import MODEL_TITLES
from .published import (_LOGITS_COMMIT, LOGITS_ROOT_ENV, PUBLISHED_SHA256, ZHOU_FOLDER,
                        DataUnavailableError, _download, _sha256, cache_dir)
from .registry import DATASETS

__all__ = ["LOGITS_ROOT_ENV", "MUKHOTI_FOLDER", "ZHOU_FOLDER", "ReleasedFile", "ReleasedNetwork",
           "RELEASED", "released_network", "released_path", "released_logits", "logits_root"]

MUKHOTI_FOLDER = "mukhoti-pretrained-logits"

_MUKHOTI_COMMIT = "2e41ac939f23e5b20d2910000d887ba33c3af402"
_MUKHOTI_URL = ("https://raw.githubusercontent.com/AIgen/df-posthoc-calibration/" + _MUKHOTI_COMMIT
                + "/data/{upstream}/{file}")
_ZHOU_URL = ("https://raw.githubusercontent.com/han678/CalibWeightedRisk/" + _LOGITS_COMMIT
             + "/result/train/cifar10/resnet50_{name}_seed40_{split}_logits.npz")


@dataclass(frozen=True)
class ReleasedFile:
    """One published file: where it lies under a data root, where it is downloaded from, its sha256."""

    relpath: str   #: path under the root, e.g. ``mukhoti-pretrained-logits/cifar10_resnet50_brier/val_logits.npy``
    url: str
    sha256: str


@dataclass(frozen=True)
class ReleasedNetwork:
    """What :data:`RELEASED` records about one trained network.

    ``files`` maps a split to its files: two ``.npy`` (logits, labels) for Mukhoti et al.'s
    networks, one ``.npz`` (``logits``, ``targets``) for the ResNet-50 runs.
    """

    name: str
    dataset: str             #: ``"cifar10"`` or ``"cifar100"``
    network: str             #: ``"ResNet-50"``, ``"ResNet-110"``, ``"Wide-ResNet-26-10"``, ``"DenseNet-121"``
    loss: str                #: training loss, as the book names it (a key of :func:`focalcal.plotting.color`)
    source: str              #: ``"mukhoti2020"`` or ``"zhou2025"``
    files: Mapping[str, tuple[ReleasedFile, ...]] = field(repr=False)

    @property
    def splits(self) -> tuple[str, ...]:
        """The published splits (``"val"``/``"test"``, or ``"train"``/``"test"``)."""
        return tuple(self.files)

    @property
    def n_classes(self) -> int:
        return 100 if self.dataset == "cifar100" else 10

    @property
    def label(self) -> str:
        """A short display name: ``"CIFAR-10 ResNet-50, Brier"``."""
        return f"{DATASETS[self.dataset].title} {self.network}, {self.loss}"


# sha256 of Mukhoti et al.'s networks, by folder here (the README of the shared copy lists the same)
_MUKHOTI_SHA256 = {
    "cifar100_densenet121_brier": ("a3e1e797d7ae719d338bbdb7472d36109d441feee000ac2de809f695792d0e4f",
                                   "3c01c3932664c2b177991f798300f3c68224e721e407be9a12bd37d400e979d2",
                                   "c7acbf0e354880c9d6eb9350dec98ad88da281285fa3b6128c0b348f7df7f988",
                                   "49d7d8ee2d829c8c50a83fd80e121de3c06700dbff4446d1f044ac51479ab7b8"),
    "cifar100_resnet110_brier": ("6d51caf1e4bf76dd246dcbf90f8edb96daaa1bc4dc53b3c25f9328acff17c2ff",
                                 "1fa16720cd30a507e60ba32888082364a5e8e8db008494af4661159bd93dc86b",
                                 "4c9b671ef47ff6166272aff1230d4d4c247e01d8c250554657a2df43ae98cb01",
                                 "27cd93abb91c90b68ee6f501124cff49e939e729a76ee7449edd03b841749184"),
    "cifar100_resnet50_brier": ("d9da5c5a4b3d99abd920f97f5ccd8f92d76b0ac99c28bce1a89fa325bbee5b00",
                                "7e7e64ea69142be37da551e238ce0375366ff5fb9b863d6938ba2ed2560b1acb",
                                "ce07644c35475c4e49e743b77c12cca82944e842c13c563c8e5172f4cd9460a9",
                                "e6e86d7de0dfe9490aee288737eb59d564aed01c8072b74901eb8edb1b2a3536"),
    "cifar100_wide_resnet_brier": ("ee5dfa694d36349ce0d281da1bf04170fe6e2aff7b50592b32f20fa2b88894a6",
                                   "36f52beaa33eedd7eecf51317e52f876b00034ce16e606b4e2f40bf07f2fe951",
                                   "91d12d4679fb6b66de03fd46eaefe8def51117e5ea72479963581ba82b5a08f3",
                                   "701717e9426d6ea4bae7b924d685779a13359f257c1620e7a5acf96078f98595"),
    "cifar10_densenet121_brier": ("fc48d9ecfdbeacce2dacf004498170f2df12e75e3485475017d2663b587a92f3",
                                  "f7a0b44ee7d59d8b2495e61140f3bc18dfedc0a4aa48637238d12dcea1b713ef",
                                  "28161775b0037d8ec9fa9b8d31e8c8f25d2083af5b351d978530fd0899802218",
                                  "32ce38884481e4ae88741df850af9d2bf6f1a600f3d0d2f8f84fa6a12fa924d5"),
    "cifar10_densenet121_flsd53": ("fc48d9ecfdbeacce2dacf004498170f2df12e75e3485475017d2663b587a92f3",
                                   "804974b7411b68d6cb1564f1a5eaffd23fb3743871ab635d62e8627b64014dc2",
                                   "28161775b0037d8ec9fa9b8d31e8c8f25d2083af5b351d978530fd0899802218",
                                   "d794330dd6c68e9b59da1b28c352dc4a79b9e6705c4d28d7c454448c7fcc4f30"),
    "cifar10_resnet110_brier": ("fc48d9ecfdbeacce2dacf004498170f2df12e75e3485475017d2663b587a92f3",
                                "c8388d7e57e76a8896f1b4816e8883da2801250e197185b1352594e348d00929",
                                "116891b76062472fe8c902c2e0aec55042512ab26555542bd131b849c82d9d06",
                                "e9daa2549d679efb788b1934f1865b4f3eb47dc65d4aa991004d505e65119e58"),
    "cifar10_resnet110_flsd53": ("fc48d9ecfdbeacce2dacf004498170f2df12e75e3485475017d2663b587a92f3",
                                 "a33139fefb2efbdfd9c2f1185f8296a7d352184d59690613bb8023342eb4e620",
                                 "116891b76062472fe8c902c2e0aec55042512ab26555542bd131b849c82d9d06",
                                 "40c4d72c1a23436e08b31ed3010a60f660c941ce9fbf6a8ba0b05df5b9a590ee"),
    "cifar10_resnet50_brier": ("fc48d9ecfdbeacce2dacf004498170f2df12e75e3485475017d2663b587a92f3",
                               "bba5e075bcbf0c240d8f1dc6085a7368676b9f5fa26e27de34c2105be949e004",
                               "0018eec5ce5885987100b8f027c5abf443c487fd2712187a87f4bb12c7938f99",
                               "4b375ffb8cf5241b8707355c714181d58240fb866dfd2b4992d2fc20fcf534a2"),
    "cifar10_resnet50_flsd53": ("fc48d9ecfdbeacce2dacf004498170f2df12e75e3485475017d2663b587a92f3",
                                "45d081766a5f26aa2883a7316b100ac5367001bb080fd0139038993fee8c2c92",
                                "0018eec5ce5885987100b8f027c5abf443c487fd2712187a87f4bb12c7938f99",
                                "c7d8234168223320454afaf14e034418fe648963acd7ef12971a6ba241e4bb48"),
    "cifar10_wide_resnet_brier": ("fc48d9ecfdbeacce2dacf004498170f2df12e75e3485475017d2663b587a92f3",
                                  "04c41fa3f1f69ee06e22147e8a873774f3a341a4670b2ecd93b49ab222ac4e57",
                                  "ad0a67bbddd2900b3b3f0a329ac69108e9e74059e9852e0f51d97a0c8bfd88a5",
                                  "0391b220d2a7a230626483fa49e0295fdbe546031919bcfd1c9362e848dbf910"),
    "cifar10_wide_resnet_flsd53": ("fc48d9ecfdbeacce2dacf004498170f2df12e75e3485475017d2663b587a92f3",
                                   "2eafa672713471c696b04121c1a87ff1849e33bddfd941d7d9549195172b99a7",
                                   "ad0a67bbddd2900b3b3f0a329ac69108e9e74059e9852e0f51d97a0c8bfd88a5",
                                   "91f9d92f925d69bf288ec0c9adb1e1a0d0818611a57262500b7d0f67182b0b5b"),
}
# the released folders' network names, as :data:`focalcal.lab.models.MODEL_TITLES` writes them
_NETWORKS = {key: MODEL_TITLES[name] for key, name in (("resnet50", "resnet50"), ("resnet110", "resnet110"),
                                                       ("wide_resnet", "wide_resnet26_10"),
                                                       ("densenet121", "densenet121"))}


def _mukhoti(folder: str) -> ReleasedNetwork:
    dataset, rest = folder.split("_", 1)
    arch, loss = rest.rsplit("_", 1)
    # upstream folders: <dataset>_<network> (Brier) and focal_cifar10_<network> (FLSD-53)
    upstream = f"{dataset}_{arch}" if loss == "brier" else f"focal_{dataset}_{arch}"
    sha = dict(zip(("test_labels", "test_logits", "val_labels", "val_logits"), _MUKHOTI_SHA256[folder]))

    def split(s: str) -> tuple[ReleasedFile, ...]:
        return tuple(ReleasedFile(f"{MUKHOTI_FOLDER}/{folder}/{s}_{kind}.npy",
                                  _MUKHOTI_URL.format(upstream=upstream, file=f"{s}_{kind}.npy"),
                                  sha[f"{s}_{kind}"]) for kind in ("logits", "labels"))

    return ReleasedNetwork(folder, dataset, _NETWORKS[arch],
                           DISPLAY_NAMES["brier" if loss == "brier" else "flsd53"],
                           "mukhoti2020", {"val": split("val"), "test": split("test")})


# their runs' keys -> the loss's display name (their "focal" run is FLSD-53, "ece_kde" is KDE-XE)
_ZHOU_LOSSES = {key: DISPLAY_NAMES[loss] for key, loss in (("ce", "ce"), ("focal", "flsd53"),
                ("dual_focal", "dual_focal"), ("ece_kde", "kde_xe"), ("aurc", "aurc"))}


def _zhou(key: str) -> ReleasedNetwork:
    splits = [s for s in ("train", "test") if (key, s) in PUBLISHED_SHA256]
    files = {s: (ReleasedFile(f"{ZHOU_FOLDER}/{key}_{s}.npz", _ZHOU_URL.format(name=key, split=s),
                              PUBLISHED_SHA256[(key, s)]),) for s in splits}
    name = f"cifar10_resnet50_{'flsd53' if key == 'focal' else key}_zhou"
    return ReleasedNetwork(name, "cifar10", "ResNet-50", _ZHOU_LOSSES[key], "zhou2025", files)


_MUKHOTI_ORDER = [f"{d}_{a}_{loss}" for loss, datasets in (("brier", ("cifar10", "cifar100")), ("flsd53", ("cifar10",)))
                  for d in datasets for a in _NETWORKS]
#: the 17 released networks by name: Mukhoti et al.'s 12 in the order of their tables (Brier on CIFAR-10,
#: Brier on CIFAR-100, FLSD-53 on CIFAR-10), then Zhou et al.'s five ResNet-50 runs
RELEASED: dict[str, ReleasedNetwork] = {
    net.name: net for net in [_mukhoti(f) for f in _MUKHOTI_ORDER] + [_zhou(k) for k in _ZHOU_LOSSES]}


def released_network(name: str) -> ReleasedNetwork:
    """``RELEASED[name]``, or ``ValueError`` naming the valid names."""
    if name not in RELEASED:
        raise ValueError(f"name must be one of {', '.join(RELEASED)}; got {name!r}")
    return RELEASED[name]


def logits_root() -> Path | None:
    """``$FOCALCAL_LOGITS_ROOT`` as a path, or ``None`` when unset."""
    env = os.environ.get(LOGITS_ROOT_ENV)
    return Path(env) if env else None


@functools.lru_cache(maxsize=512)
def _verified(path: str, size: int, mtime_ns: int, sha256: str) -> bool:
    # a file is hashed once per process (and again when it changes)
    return _sha256(Path(path)) == sha256


def _check(path: Path, f: ReleasedFile) -> Path:
    st = path.stat()
    if not _verified(str(path), st.st_size, st.st_mtime_ns, f.sha256):
        raise DataUnavailableError(f"{path} does not have the pinned sha256 {f.sha256} (a corrupt or "
                                   f"different copy of {f.url}); remove or replace it")
    return path


def released_path(f: ReleasedFile, *, root: str | os.PathLike | None = None, download: bool = True) -> Path:
    """The local, sha256-checked path of one published file (see the module docstring for the search).

    Raises
    ------
    DataUnavailableError
        ``root`` given and the file is not in it; the file is nowhere local and ``download`` is off
        or fails (the message names the variable to set); or a copy has another sha256.
    """
    if root is not None:
        p = Path(root) / f.relpath
        if not p.is_file():
            raise DataUnavailableError(f"{p} does not exist (root={str(root)!r} must hold "
                                       f"{f.relpath.split('/')[0]}/)")
        return _check(p, f)
    candidates = []
    if (base := logits_root()) is not None:
        candidates.append(base / f.relpath)
    for p in candidates:
        if p.is_file():
            return _check(p, f)
    cached = cache_dir() / f.relpath
    if cached.is_file():
        return _check(cached, f)
    hint = (f"set {LOGITS_ROOT_ENV} to a directory holding {MUKHOTI_FOLDER}/ and {ZHOU_FOLDER}/ "
            f"(e.g. ../shared/data)")
    if not download:
        raise DataUnavailableError(f"{f.relpath} is neither local nor cached and download=False; {hint}")
    try:
        _download(f.url, cached, f.sha256)
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        raise DataUnavailableError(f"could not download {f.url} ({err}); {hint}") from err
    return cached


def released_logits(name: str, split: str, *, root: str | os.PathLike | None = None, download: bool = True,
                    dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and labels of one split of a released network.

    A file is looked for in

    1. the ``root`` argument, a directory holding the two folders of the module docstring;
    2. ``$FOCALCAL_LOGITS_ROOT`` (:data:`LOGITS_ROOT_ENV`), the same layout (the Makefile and the
       tests point it at ``../shared/data``);
    3. the cache (:func:`focalcal.lab.data.cache_dir`, same layout), where it is downloaded when
       ``download`` and the network allow.

    Every file is checked against its pinned sha256 wherever it comes from (a local copy too: a
    mismatch raises :class:`DataUnavailableError` naming the file).

    Parameters
    ----------
    name : str
        A key of :data:`RELEASED`.
    split : str
        One of ``RELEASED[name].splits``: ``"val"``/``"test"`` (Mukhoti et al.'s networks) or
        ``"train"``/``"test"`` (the ResNet-50 runs; ``"test"`` only for AURC).
    root : path, optional
        A directory holding the folders ``mukhoti-pretrained-logits/`` and ``cifar10-resnet50-logits/``;
        default: ``$FOCALCAL_LOGITS_ROOT``, then the cache (downloading when ``download``).
    download : bool
        Fetch missing files from the pinned upstream commits (sha256-checked).
    dtype : torch.dtype
        Dtype of the returned logits (stored as float32).

    Returns
    -------
    logits : Tensor, shape (N, K)
    labels : Tensor, shape (N,), int64

    Raises
    ------
    ValueError
        Unknown ``name`` or a split the network does not have.
    DataUnavailableError
        As :func:`released_path`.
    """
    net = released_network(name)
    check_choice(split, "split", net.splits)
    paths = [released_path(f, root=root, download=download) for f in net.files[split]]
    if len(paths) == 2:
        logits, labels = (np.load(p, allow_pickle=False) for p in paths)
    else:
        with np.load(paths[0], allow_pickle=False) as z:
            logits, labels = np.asarray(z["logits"]), np.asarray(z["targets"])
    return torch.from_numpy(np.asarray(logits)).to(dtype), torch.from_numpy(np.asarray(labels).astype(np.int64))
