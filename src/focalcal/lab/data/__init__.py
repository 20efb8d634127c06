"""Data: synthetic tasks with a known posterior, image datasets, and published logits.

One entry point, :func:`get_dataset` (one split as a :class:`torch.utils.data.Dataset`), and
:func:`make_loaders` (train/val/test :class:`~torch.utils.data.DataLoader`\\ s); the registry
:data:`DATASETS` lists every name with its classes, input shape and split sizes. Every public name
is importable from here. The modules, each documenting its part:

- ``synthetic``: tasks whose samples carry their true posterior (the 1-D task of Charoenphakdee et
  al. 2021 and Gaussian mixtures), for measuring properness directly;
- ``images``: Fashion-MNIST, CIFAR-10/100, SVHN and Tiny-ImageNet with the papers' fixed splits
  and preprocessing, read from their original on-disk formats;
- ``published`` and ``released``: the published logits of trained networks (:data:`RELEASED`, 17
  CIFAR networks), never committed: read from ``$FOCALCAL_LOGITS_ROOT``, a cache, or a
  sha256-checked download;
- ``registry`` (:data:`DATASETS`, :func:`get_dataset`) and ``loaders`` (:func:`make_loaders`).
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
