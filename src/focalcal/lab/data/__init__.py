"""Data: synthetic tasks with a known posterior, image datasets, and published logits.

One entry point, :func:`get_dataset` (one split as a :class:`torch.utils.data.Dataset`), and
:func:`make_loaders` (train/val/test :class:`~torch.utils.data.DataLoader`\\ s); the registry
:data:`DATASETS` lists every name with its classes, input shape and split sizes. Every public name
is importable from here; the modules are ``synthetic`` (tasks with a known posterior), ``images``
(image datasets), ``published`` (published logits and the cache), ``released`` (the registry of
released trained networks, :data:`RELEASED`), ``registry`` (:data:`DATASETS`,
:func:`get_dataset`) and ``loaders`` (:func:`make_loaders`).

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
copy: ``$FOCALCAL_LOGITS_ROOT`` names a directory holding every published-logits folder.

Released networks
-----------------
:data:`RELEASED` is the registry of 17 trained CIFAR networks whose logits are public: the 12
released with Mukhoti et al. (2020) (Brier loss and FLSD-53; validation and test logits) and the
five ResNet-50 runs above. :func:`released_logits` returns one split of one of them, from
``$FOCALCAL_LOGITS_ROOT``, the cache, or a sha256-checked download (``released``).
"""

from .images import (DATA_ENV, DEBIAN_FASHION_MNIST_DIR, FASHION_MNIST_CLASSES, FASHION_MNIST_FILES,
                     NORMALIZATION, TINY_IMAGENET_MD5, TINY_IMAGENET_URL, ImageFileDataset,
                     ImageTensorDataset, Normalize, data_root, image_transform, prepare_fashion_mnist,
                     read_cifar, read_idx, read_svhn, read_tiny_imagenet, tiny_imagenet_val_mask,
                     train_val_indices)
from .loaders import DeviceLoader, Loaders, make_loaders, seed_worker
from .published import (CACHE_ENV, PUBLISHED_LOSSES, PUBLISHED_SHA256, DataUnavailableError,
                        cache_dir, published_logits, published_logits_path)
from .released import (LOGITS_ROOT_ENV, MUKHOTI_FOLDER, RELEASED, ZHOU_FOLDER, ReleasedFile, ReleasedNetwork,
                       logits_root, released_logits, released_network, released_path)
from .registry import DATASETS, SYNTHETIC_SIZES, DatasetInfo, dataset_info, get_dataset
from .synthetic import SPLITS, GaussianMixture, SyntheticDataset, charoenphakdee_1d_task, gaussian_mixture_task

__all__ = [
    # registry and loaders
    "DATASETS", "DatasetInfo", "dataset_info", "get_dataset", "make_loaders", "Loaders", "seed_worker",
    "DeviceLoader",
    "SPLITS", "SYNTHETIC_SIZES",
    # synthetic tasks
    "GaussianMixture", "charoenphakdee_1d_task", "gaussian_mixture_task", "SyntheticDataset",
    # image datasets
    "DATA_ENV", "data_root", "DEBIAN_FASHION_MNIST_DIR", "FASHION_MNIST_CLASSES", "FASHION_MNIST_FILES",
    "NORMALIZATION",
    "TINY_IMAGENET_URL", "TINY_IMAGENET_MD5", "Normalize", "image_transform", "ImageTensorDataset",
    "ImageFileDataset", "train_val_indices", "prepare_fashion_mnist", "read_cifar", "read_idx", "read_svhn",
    "tiny_imagenet_val_mask", "read_tiny_imagenet",
    # published logits
    "CACHE_ENV", "PUBLISHED_SHA256", "PUBLISHED_LOSSES", "DataUnavailableError",
    "cache_dir", "published_logits_path", "published_logits",
    # released networks
    "LOGITS_ROOT_ENV", "MUKHOTI_FOLDER", "ZHOU_FOLDER", "RELEASED", "ReleasedFile", "ReleasedNetwork",
    "released_network", "released_path", "released_logits", "logits_root",
]
