"""Data: synthetic posteriors against direct formulas, image datasets from files written in the
real on-disk formats (no downloads), Fashion-MNIST from Debian's package, splits, loaders."""

from __future__ import annotations

import gzip
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from focalcal.lab import data as D
from focalcal.lab.data import (DATASETS, DataUnavailableError, GaussianMixture, charoenphakdee_1d_task,
                           gaussian_mixture_task, get_dataset, make_loaders, read_cifar,
                           tiny_imagenet_val_mask, train_val_indices)



# ============================================================================ synthetic tasks ===

def _slow_posterior(task: GaussianMixture, x: np.ndarray) -> np.ndarray:
    """Bayes' rule with scipy densities, one class at a time."""
    mu, s, pi = task.means.numpy(), task.stds.numpy(), task.priors.numpy()
    joint = np.stack([pi[k] * scipy.stats.multivariate_normal(mu[k], s[k] ** 2 * np.eye(task.dim)).pdf(x)
                      for k in range(task.n_classes)], axis=-1)
    return joint / joint.sum(-1, keepdims=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_posterior_matches_scipy(dtype):
    task = GaussianMixture(means=[[0.0, 1.0], [2.0, -1.0], [-1.0, -2.0]], stds=[1.0, 0.7, 1.5],
                           priors=[0.5, 0.3, 0.2])
    x = np.random.default_rng(0).normal(0, 2, size=(50, 2))
    got = task.posterior(torch.tensor(x, dtype=dtype))
    assert got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(got.double().numpy(), _slow_posterior(task, x), atol=tol)
    np.testing.assert_allclose(task.log_density(torch.tensor(x)).numpy(),
                               np.log(sum(task.priors[k].item() * scipy.stats.multivariate_normal(
                                   task.means[k].numpy(), task.stds[k].item() ** 2 * np.eye(2)).pdf(x)
                                   for k in range(3))), rtol=1e-10)


def test_charoenphakdee_task_values():
    task = charoenphakdee_1d_task()
    assert task.n_classes == 3 and task.dim == 1
    eta0 = task.posterior(torch.tensor([[0.0]], dtype=torch.float64))[0]
    assert eta0[1].item() == pytest.approx(1 / (1 + 2 * math.exp(-2)), rel=1e-12)
    assert eta0[0].item() == pytest.approx(eta0[2].item(), rel=1e-12)
    # every class is the Bayes decision somewhere
    x = torch.linspace(-6, 6, 1001, dtype=torch.float64)[:, None]
    assert set(task.posterior(x).argmax(-1).tolist()) == {0, 1, 2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_posterior_extreme_inputs_finite(dtype):
    task = charoenphakdee_1d_task()
    x = torch.tensor([[-1e4], [1e4], [0.0]], dtype=dtype)
    eta = task.posterior(x)
    assert bool(torch.isfinite(eta).all()) and bool(torch.isfinite(task.log_posterior(x)).all())
    assert eta[0, 0].item() == pytest.approx(1.0) and eta[1, 2].item() == pytest.approx(1.0)
    # the exact log posterior of the far-right point for class 1: -(x*2 - 2) = -(2*1e4 - 2)
    assert task.log_posterior(x)[1, 1].item() == pytest.approx(-(2 * 1e4 - 2), rel=1e-6)


@given(st.floats(-50, 50), st.integers(0, 10_000))
@settings(max_examples=30, deadline=None)
def test_posterior_rows_sum_to_one(x0, seed):
    task = gaussian_mixture_task(n_classes=5, dim=3, seed=seed)
    x = torch.full((4, 3), x0, dtype=torch.float64)
    eta = task.posterior(x)
    assert torch.allclose(eta.sum(-1), torch.ones(4, dtype=torch.float64), atol=1e-12)
    assert bool((eta >= 0).all())


@pytest.mark.parametrize("kwargs,match", [
    ({"means": [[0.0]]}, "means"),
    ({"means": [[0.0], [1.0]], "stds": -1.0}, "stds"),
    ({"means": [[0.0], [1.0]], "priors": [0.2, 0.2]}, "priors"),
    ({"means": [[0.0], [float("nan")]]}, "means"),
])
def test_mixture_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GaussianMixture(**kwargs)


def test_posterior_bad_x():
    task = charoenphakdee_1d_task()
    with pytest.raises(ValueError, match=r"^x must have shape \(\.\.\., 1\)"):
        task.posterior(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="^x contains 1 NaN"):
        task.posterior(torch.tensor([[float("nan")]]))


def test_samples_follow_the_model():
    task = GaussianMixture(means=[[-2.0], [0.0], [2.0]], stds=[1.0, 0.5, 1.0], priors=[0.2, 0.5, 0.3])
    ds = get_dataset("charoenphakdee_1d", split="train", n=40_000, seed=3, dtype=torch.float64)
    assert len(ds) == 40_000 and ds.x.dtype == torch.float64
    # the registered task: equal priors
    freq = torch.bincount(ds.targets, minlength=3).double() / len(ds)
    assert torch.allclose(freq, torch.full((3,), 1 / 3, dtype=torch.float64), atol=4 * math.sqrt(1 / 3 * 2 / 3 / 40_000))
    # labels are consistent with the stored posterior: in bins of x, label frequencies = mean eta
    x, y, eta = ds.x[:, 0], ds.targets, ds.posterior
    bins = torch.bucketize(x, torch.linspace(-3, 3, 7, dtype=torch.float64))
    onehot = torch.nn.functional.one_hot(y, 3).double()
    for b in range(8):
        m = bins == b
        if int(m.sum()) < 500:
            continue
        gap = (onehot[m] - eta[m]).mean(0).abs().max().item()
        assert gap < 5 / math.sqrt(int(m.sum())), (b, gap)
    # a non-uniform task: class frequencies and class means
    xs, ys = task.sample(40_000, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(ys, minlength=3).double() / 40_000
    assert torch.allclose(freq, task.priors, atol=0.01)
    for k in range(3):
        assert xs[ys == k].mean().item() == pytest.approx(task.means[k, 0].item(), abs=0.05)
        assert xs[ys == k].std().item() == pytest.approx(task.stds[k].item(), rel=0.05)


def test_synthetic_splits_deterministic_and_independent():
    a = get_dataset("gaussian_mixture", split="train", n=200, seed=1, n_classes=4, dim=3)
    b = get_dataset("gaussian_mixture", split="train", n=200, seed=1, n_classes=4, dim=3)
    c = get_dataset("gaussian_mixture", split="test", n=200, seed=1, n_classes=4, dim=3)
    d = get_dataset("gaussian_mixture", split="train", n=200, seed=2, n_classes=4, dim=3)
    assert torch.equal(a.x, b.x) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.x, c.x) and not torch.equal(a.x, d.x)
    assert a.x.shape == (200, 3) and a.posterior.shape == (200, 4) and a.x.dtype == torch.float32
    assert a.posterior.dtype == torch.float64
    # the stored posterior is the task's posterior at the stored inputs
    task = gaussian_mixture_task(n_classes=4, dim=3)
    assert torch.allclose(task.posterior(a.x.double()), a.posterior, atol=1e-5)
    x, y = a[0]
    assert x.shape == (3,) and y.dtype == torch.int64
    t = get_dataset("gaussian_mixture", split="val", n=10, return_posterior=True)
    assert len(t[0]) == 3 and t[0][2].shape == (10,)


def test_posterior_feeds_kl_to_posterior():
    from focalcal.metrics import kl_to_posterior
    ds = get_dataset("charoenphakdee_1d", split="test", n=2000, dtype=torch.float64)
    bayes = ds.task.bayes_logits(ds.x)
    assert kl_to_posterior(logits=bayes, true_probs=ds.posterior) == pytest.approx(0.0, abs=1e-12)
    # a tempered (under-confident) predictor is strictly worse
    assert kl_to_posterior(logits=bayes / 2, true_probs=ds.posterior) > 1e-3


def test_gaussian_mixture_task_is_seeded():
    a, b = gaussian_mixture_task(seed=4), gaussian_mixture_task(seed=4)
    assert torch.equal(a.means, b.means)
    assert not torch.equal(a.means, gaussian_mixture_task(seed=5).means)
    with pytest.raises(ValueError, match="n_classes"):
        gaussian_mixture_task(n_classes=1)


# ============================================================================= registry, API ===

def test_unknown_dataset_lists_names():
    with pytest.raises(ValueError, match="name must be one of") as err:
        get_dataset("mnist")
    for name in ("cifar10", "cifar100", "svhn", "tiny_imagenet", "fashion_mnist",
                 "charoenphakdee_1d", "gaussian_mixture"):
        assert name in str(err.value)
        assert name in DATASETS


def test_bad_split_and_keywords():
    with pytest.raises(ValueError, match="split"):
        get_dataset("charoenphakdee_1d", split="validation")
    with pytest.raises(ValueError, match="val_size"):
        get_dataset("charoenphakdee_1d", val_size=0.1)


def test_dataset_info():
    assert DATASETS["cifar10"].input_shape == (3, 32, 32) and DATASETS["cifar10"].in_channels == 3
    assert DATASETS["cifar100"].n_classes == 100 and DATASETS["tiny_imagenet"].n_classes == 200
    assert DATASETS["fashion_mnist"].in_channels == 1
    assert DATASETS["gaussian_mixture"].in_channels == 2


# ===================================================================================== splits ===

def test_train_val_indices_reproduce_mukhoti_code():
    # Mukhoti et al.'s Data/cifar10.py: np.random.seed(1); np.random.shuffle(list); val = first 10 %
    indices = list(range(50_000))
    np.random.seed(1)
    np.random.shuffle(indices)
    tr, va = train_val_indices(50_000, 0.1, seed=1)
    assert va.tolist() == indices[:5000] and tr.tolist() == indices[5000:]
    assert len(tr) == 45_000 and len(va) == 5_000
    assert sorted(np.concatenate([tr, va]).tolist()) == list(range(50_000))
    # SVHN: 10 % of 73 257
    tr, va = train_val_indices(73_257, 0.1)
    assert (len(tr), len(va)) == (65_932, 7_325)


@pytest.mark.parametrize("val_size", [0, 1.5, 100])
def test_train_val_indices_bad(val_size):
    with pytest.raises(ValueError, match="val_size"):
        train_val_indices(100, val_size)


def test_tiny_imagenet_val_mask_matches_slow_selection():
    rng = np.random.default_rng(0)
    targets = np.repeat(np.arange(7), 12)
    rng.shuffle(targets)
    mask = tiny_imagenet_val_mask(targets, per_class=3, seed=5)
    assert np.bincount(targets[mask], minlength=7).tolist() == [3] * 7
    # slow oracle: walk the seeded permutation, take the first 3 of each class
    perm = np.random.RandomState(5).permutation(len(targets))
    taken, slow = {}, np.zeros(len(targets), dtype=bool)
    for i in perm:
        if taken.get(targets[i], 0) < 3:
            taken[targets[i]] = taken.get(targets[i], 0) + 1
            slow[i] = True
    assert np.array_equal(mask, slow)


# ============================================================= image files in on-disk formats ===

def _write_pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def _cifar_images(n: int, offset: int) -> np.ndarray:
    # row-major CHW planes with distinct values per image and channel, as in the real batches
    img = np.zeros((n, 3, 32, 32), dtype=np.uint8)
    img += (np.arange(n, dtype=np.uint8) + offset)[:, None, None, None]
    img[:, 1] += 100
    img[:, 2] += 200
    img[:, :, 0, 1] = 7  # a marker to pin the H/W order
    return img.reshape(n, 3072)


@pytest.fixture
def cifar10_root(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for b in range(5):
        _write_pickle(folder / f"data_batch_{b + 1}",
                      {b"batch_label": b"x", b"data": _cifar_images(10, 10 * b),
                       b"labels": [(10 * b + i) % 10 for i in range(10)]})
    _write_pickle(folder / "test_batch", {"data": _cifar_images(6, 50), "labels": [1, 2, 3, 4, 5, 6]})
    _write_pickle(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    return tmp_path


def test_read_cifar10_layout(cifar10_root):
    images, targets, classes = read_cifar(cifar10_root, "cifar10", train=True)
    assert images.shape == (50, 3, 32, 32) and images.dtype == torch.uint8
    assert targets.tolist() == [i % 10 for i in range(50)]
    assert classes[3] == "c3"
    assert images[13, 0, 5, 5].item() == 13 and images[13, 1, 5, 5].item() == 113
    assert images[13, 0, 0, 1].item() == 7 and images[13, 0, 1, 0].item() == 13


def test_cifar10_splits_and_normalisation(cifar10_root):
    train = get_dataset("cifar10", cifar10_root, "train", download=False, augment=False)
    val = get_dataset("cifar10", cifar10_root, "val", download=False)
    test = get_dataset("cifar10", cifar10_root, "test", download=False)
    assert (len(train), len(val), len(test)) == (45, 5, 6)
    tr_idx, va_idx = train_val_indices(50, 0.1, seed=1)
    assert val.targets.tolist() == [i % 10 for i in va_idx]
    mean, std = D.NORMALIZATION["cifar10"]
    x, y = val[0]
    raw = va_idx[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and int(y) == raw % 10
    expect = (torch.tensor([raw, raw + 100, raw + 200], dtype=torch.float32) / 255
              - torch.tensor(mean)) / torch.tensor(std)
    assert torch.allclose(x[:, 10, 10], expect, atol=1e-6)
    assert test.targets.tolist() == [1, 2, 3, 4, 5, 6]
    assert set(tr_idx.tolist()).isdisjoint(va_idx.tolist())


def test_cifar10_augmentation_crops_and_flips(cifar10_root):
    torch.manual_seed(0)
    ds = get_dataset("cifar10", cifar10_root, "train", download=False)
    plain = get_dataset("cifar10", cifar10_root, "train", download=False, augment=False)
    mean, std = D.NORMALIZATION["cifar10"]
    pad = (0.0 - torch.tensor(mean)) / torch.tensor(std)  # zero padding, normalised
    outs = torch.stack([ds[0][0] for _ in range(20)])
    assert outs.shape == (20, 3, 32, 32)
    assert not all(torch.equal(outs[0], o) for o in outs[1:])
    ref = plain[0][0]
    # every output pixel is an input pixel value of its channel or the padding value
    for c in range(3):
        allowed = torch.cat([ref[c].unique(), pad[c:c + 1]])
        assert bool(torch.isclose(outs[:, c].reshape(-1, 1), allowed[None]).any(1).all())


def test_train_eval_loader_is_the_training_subset_unaugmented_and_in_order(cifar10_root):
    ld = D.make_loaders("cifar10", 8, root=cifar10_root, download=False, seed=3, subset={"train": 20},
                        train_eval=True)
    first = torch.cat([x for x, _ in ld.train_eval])
    again = torch.cat([x for x, _ in ld.train_eval])
    assert first.shape == (20, 3, 32, 32) and torch.equal(first, again)  # no random crop or flip
    plain = get_dataset("cifar10", cifar10_root, "train", download=False, augment=False)
    picked = ld.train_eval.dataset.indices
    assert picked == ld.train.dataset.indices  # the same training samples as the training loader
    assert torch.equal(first[5], plain[picked[5]][0])
    assert D.make_loaders("cifar10", 8, root=cifar10_root, download=False).train_eval is None


def test_cifar100_fine_labels(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    _write_pickle(folder / "train", {"data": _cifar_images(20, 0), "fine_labels": list(range(20)),
                                     "coarse_labels": [0] * 20})
    _write_pickle(folder / "test", {"data": _cifar_images(4, 0), "fine_labels": [99, 98, 97, 96],
                                    "coarse_labels": [1] * 4})
    _write_pickle(folder / "meta", {"fine_label_names": [f"f{i}" for i in range(100)]})
    test = get_dataset("cifar100", tmp_path, "test", download=False)
    assert test.targets.tolist() == [99, 98, 97, 96] and test.classes[99] == "f99"
    assert len(get_dataset("cifar100", tmp_path, "train", download=False)) == 18


def test_cifar_missing_without_download(tmp_path):
    with pytest.raises(DataUnavailableError, match="cifar10"):
        get_dataset("cifar10", tmp_path, "train", download=False)


def test_svhn_mat(tmp_path):
    folder = tmp_path / "svhn"
    folder.mkdir()
    n = 30
    x = np.zeros((32, 32, 3, n), dtype=np.uint8)  # the .mat layout: H, W, C, N
    x[...] = np.arange(n, dtype=np.uint8)
    x[:, :, 1, :] += 50
    x[0, 1, 0, :] = 255
    y = (np.arange(n) % 10 + 1).reshape(n, 1)  # digit 0 is stored as 10
    scipy.io.savemat(folder / "train_32x32.mat", {"X": x, "y": y})
    scipy.io.savemat(folder / "test_32x32.mat", {"X": x[..., :5], "y": y[:5]})
    imgs, targets = D.read_svhn(folder, "train")
    assert imgs.shape == (n, 3, 32, 32)
    assert targets.tolist() == [(i % 10 + 1) % 10 for i in range(n)]
    assert imgs[4, 1, 3, 3].item() == 54 and imgs[4, 0, 0, 1].item() == 255 and imgs[4, 0, 1, 0].item() == 4
    tr = get_dataset("svhn", tmp_path, "train", download=False)
    va = get_dataset("svhn", tmp_path, "val", download=False)
    te = get_dataset("svhn", tmp_path, "test", download=False)
    assert (len(tr), len(va), len(te)) == (27, 3, 5)
    # no augmentation on SVHN, even for training
    assert torch.equal(tr[0][0], tr[0][0])


def _jpeg(path: Path, rgb: tuple[int, int, int], mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, (64, 64), rgb if mode == "RGB" else rgb[0]).save(path, "JPEG", quality=95)


@pytest.fixture
def tiny_root(tmp_path):
    base = tmp_path / "tiny-imagenet-200"
    wnids = ["n03", "n01", "n02"]  # unsorted on purpose: classes are the sorted ids
    base.mkdir()
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    colours = {"n01": (200, 30, 30), "n02": (30, 200, 30), "n03": (30, 30, 200)}
    for w in wnids:
        for k in range(4):
            _jpeg(base / "train" / w / "images" / f"{w}_{k}.JPEG", colours[w])
        (base / "train" / w / f"{w}_boxes.txt").write_text("")
    ann = []
    for i, w in enumerate(["n02", "n03", "n01"]):
        _jpeg(base / "val" / "images" / f"val_{i}.JPEG", colours[w])
        ann.append(f"val_{i}.JPEG\t{w}\t0\t0\t63\t63")
    _jpeg(base / "val" / "images" / "val_3.JPEG", (128, 0, 0), mode="L")  # greyscale file
    ann.append("val_3.JPEG\tn01\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(ann) + "\n")
    return tmp_path


def test_tiny_imagenet_layout(tiny_root):
    tr = get_dataset("tiny_imagenet", tiny_root, "train", download=False, val_per_class=1, augment=False)
    va = get_dataset("tiny_imagenet", tiny_root, "val", download=False, val_per_class=1)
    te = get_dataset("tiny_imagenet", tiny_root, "test", download=False)
    assert (len(tr), len(va), len(te)) == (9, 3, 4)
    assert sorted(va.targets.tolist()) == [0, 1, 2]  # one per class, taken from training images
    assert all("/train/" in p for p in va.paths) and not set(va.paths) & set(tr.paths)
    assert te.targets.tolist() == [1, 2, 0, 0]  # official val = test, labels from the annotations
    assert te.classes == ["n01", "n02", "n03"]
    mean, std = D.NORMALIZATION["tiny_imagenet"]
    x, y = te[0]  # val_0 is n02: green
    assert x.shape == (3, 64, 64) and int(y) == 1
    rgb = x[:, 32, 32] * torch.tensor(std) + torch.tensor(mean)
    assert torch.allclose(rgb * 255, torch.tensor([30.0, 200.0, 30.0]), atol=4)
    grey, _ = te[3]
    assert grey.shape == (3, 64, 64)  # greyscale decoded to RGB
    aug = get_dataset("tiny_imagenet", tiny_root, "train", download=False, val_per_class=1)
    assert aug[0][0].shape == (3, 64, 64)


# ============================================================================== Fashion-MNIST ===

def _idx_images(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    n, h, w = (int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(3))
    return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, h, w)


def test_fashion_mnist_from_debian_package(tmp_path):
    root = tmp_path / "data"
    test = get_dataset("fashion_mnist", root, "test", download=False)
    raw = root / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(D.FASHION_MNIST_FILES)  # no temp files
    mtime = (raw / "train-images-idx3-ubyte").stat().st_mtime_ns
    train = get_dataset("fashion_mnist", root, "train", download=False)
    val = get_dataset("fashion_mnist", root, "val", download=False)
    assert (len(train), len(val), len(test)) == (55_000, 5_000, 10_000)
    assert (raw / "train-images-idx3-ubyte").stat().st_mtime_ns == mtime  # decompressed once
    ref = _idx_images(D.DEBIAN_FASHION_MNIST_DIR / "t10k-images-idx3-ubyte.gz")
    x, _ = test[7]
    assert x.shape == (1, 28, 28)
    mean, std = D.NORMALIZATION["fashion_mnist"]
    assert torch.allclose(x[0], (torch.from_numpy(ref[7].copy()).float() / 255 - mean[0]) / std[0], atol=1e-6)
    # validation = 5 000 of the 60 000 training images by the seed-1 permutation
    _, va = train_val_indices(60_000, 5000, seed=1)
    ref_train = _idx_images(D.DEBIAN_FASHION_MNIST_DIR / "train-images-idx3-ubyte.gz")
    assert torch.equal(val.images[:, 0], torch.from_numpy(ref_train[va]))
    # the published normalisation statistics fit these files
    assert float(test.images.float().mean() / 255) == pytest.approx(mean[0], abs=0.01)


def test_fashion_mnist_idx_reader_matches_torchvision(tmp_path):
    # the lab reads the idx files itself (importing torchvision costs every sweep run ~1.5 s):
    # images, labels and class names must be torchvision's, bit for bit
    from torchvision.datasets import FashionMNIST

    root = D.prepare_fashion_mnist(tmp_path / "data", download=False)
    raw = root / "FashionMNIST" / "raw"
    for train, prefix in ((True, "train"), (False, "t10k")):
        ref = FashionMNIST(root, train=train, download=False)
        images = D.read_idx(raw / f"{prefix}-images-idx3-ubyte")
        labels = D.read_idx(raw / f"{prefix}-labels-idx1-ubyte")
        assert images.dtype == ref.data.dtype and torch.equal(images, ref.data)
        assert torch.equal(labels.to(torch.int64), ref.targets)
        assert list(D.FASHION_MNIST_CLASSES) == ref.classes
    test = get_dataset("fashion_mnist", root, "test", download=False)
    assert test.classes == ref.classes
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x08\x01" + bytes(8))
    with pytest.raises(ValueError, match="not an IDX file"):
        D.read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(b"\x00\x00\x08\x01" + (5).to_bytes(4, "big") + bytes(3))
    with pytest.raises(ValueError, match=r"header gives shape \(5,\)"):
        D.read_idx(short)


def test_fashion_mnist_fallback_to_torchvision_download(tmp_path, monkeypatch):
    import torchvision.datasets as tvd
    calls = []

    def fake_download(self):
        # stands in for the network: put the decompressed files where torchvision would
        calls.append(self.root)
        raw = Path(self.raw_folder)
        raw.mkdir(parents=True, exist_ok=True)
        for f in D.FASHION_MNIST_FILES:
            with gzip.open(D.DEBIAN_FASHION_MNIST_DIR / f"{f}.gz") as inp:
                (raw / f).write_bytes(inp.read())

    monkeypatch.setattr(tvd.FashionMNIST, "download", fake_download)
    missing = tmp_path / "no-debian"
    with pytest.raises(DataUnavailableError, match="Fashion-MNIST"):
        D.prepare_fashion_mnist(tmp_path / "a", download=False, debian_dir=missing)
    assert not calls
    D.prepare_fashion_mnist(tmp_path / "b", download=True, debian_dir=missing)
    assert len(calls) == 1
    assert all((tmp_path / "b" / "FashionMNIST" / "raw" / f).is_file() for f in D.FASHION_MNIST_FILES)


def test_data_root_env(tmp_path, monkeypatch):
    monkeypatch.setenv(D.DATA_ENV, str(tmp_path))
    assert D.data_root() == tmp_path


# ==================================================================================== loaders ===

def test_make_loaders_shapes_order_and_subset():
    kw = dict(n=300, n_classes=4, dim=3)
    a = make_loaders("gaussian_mixture", 32, seed=7, **kw)
    b = make_loaders("gaussian_mixture", 32, seed=7, **kw)
    c = make_loaders("gaussian_mixture", 32, seed=8, **kw)
    xa, ya = next(iter(a.train))
    xb, yb = next(iter(b.train))
    xc, _ = next(iter(c.train))
    assert xa.shape == (32, 3) and ya.shape == (32,) and ya.dtype == torch.int64
    assert torch.equal(xa, xb) and torch.equal(ya, yb) and not torch.equal(xa, xc)
    # evaluation loaders are not shuffled and use the larger default batch
    xv, yv = next(iter(a.val))
    assert xv.shape == (256, 3) and torch.equal(yv, a.val.dataset.targets[:256])
    assert a.info.n_classes == 4
    s = make_loaders("gaussian_mixture", 16, subset={"train": 50}, **kw)
    assert (len(s.train.dataset), len(s.val.dataset), len(s.test.dataset)) == (50, 300, 300)
    s = make_loaders("gaussian_mixture", 16, subset=20, **kw)
    assert len(s.val.dataset) == 20
    with pytest.raises(ValueError, match="subset"):
        make_loaders("gaussian_mixture", 16, subset={"training": 5}, **kw)
    with pytest.raises(ValueError, match="batch_size"):
        make_loaders("gaussian_mixture", 0, **kw)


def test_make_loaders_workers_reproducible(cifar10_root):
    def first_batch():
        ld = make_loaders("cifar10", 8, root=cifar10_root, download=False, num_workers=2, seed=3)
        return next(iter(ld.train))[0]
    a, b = first_batch(), first_batch()
    assert torch.equal(a, b)  # shuffling and per-worker augmentation both seeded


# ========================================================================== published logits ===

def test_published_logits_local_copy_still_loads(shared_logits_dir):
    logits, labels = D.published_logits("ce", "test", root=shared_logits_dir, download=False)
    assert logits.shape == (10_000, 10) and logits.dtype == torch.float64
    assert labels.shape == (10_000,) and int(labels.max()) == 9
    assert (logits.argmax(1) == labels).double().mean().item() == pytest.approx(0.906, abs=0.005)


# ------------------------------------------------------------------ the device-resident data path ---

def _all_crops_and_flips(img, padding=4):
    """Every image RandomCrop(padding) + RandomHorizontalFlip + Normalize can make of ``img``,
    by (top, left, flip), through torchvision's own functional ops."""
    from torchvision.transforms.v2 import functional as TF
    norm = D.image_transform("cifar10", False)
    padded = TF.pad(img, [padding])
    h, w = img.shape[-2:]
    out = {}
    for top in range(2 * padding + 1):
        for left in range(2 * padding + 1):
            crop = TF.crop(padded, top, left, h, w)
            for flip in (0, 1):
                out[norm(TF.horizontal_flip(crop) if flip else crop).numpy().tobytes()] = (top, left, flip)
    return out


def test_device_loader_augments_as_torchvision():
    # one image drawn 8000 times by each path: every device-made image is one torchvision can make,
    # and the two histograms over the 9 x 9 x 2 (top, left, flip) cells agree (chi-square
    # contingency test); the flip frequency lies within 4 standard errors of 1/2
    g = torch.Generator().manual_seed(0)
    img = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=g)
    cells = _all_crops_and_flips(img)
    assert len(cells) == 162  # a random image: no two crops alike
    n = 8000
    ds = D.ImageTensorDataset(img.expand(n, -1, -1, -1), torch.zeros(n, dtype=torch.int64),
                              D.image_transform("cifar10", True, 32))
    loader = D.DeviceLoader(ds, 1000, device="cpu", shuffle=True, generator=torch.Generator().manual_seed(1))
    device_made = [cells[x.numpy().tobytes()] for xb, _ in loader for x in xb]
    torch.manual_seed(2)  # torchvision draws from the global RNG
    reference = [cells[ds[0][0].numpy().tobytes()] for _ in range(n)]
    keys = sorted(cells.values())
    table = np.array([[sum(1 for c in made if c == k) for k in keys] for made in (device_made, reference)])
    assert table.sum() == 2 * n and (table[0] > 0).all()
    assert scipy.stats.chi2_contingency(table).pvalue > 1e-3
    flips = np.mean([c[2] for c in device_made])
    assert abs(flips - 0.5) < 4 * math.sqrt(0.25 / n)
    # and the offsets are not stuck: each of the 9 tops and lefts appears about n / 9 times
    for axis in (0, 1):
        counts = np.bincount([c[axis] for c in device_made], minlength=9)
        assert scipy.stats.chisquare(counts).pvalue > 1e-3


def test_device_loader_unaugmented_batches_equal_the_dataloaders():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (50, 3, 8, 8), dtype=torch.uint8, generator=g)
    ds = D.ImageTensorDataset(images, torch.arange(50) % 10, D.image_transform("cifar10", False))
    sub = torch.utils.data.Subset(torch.utils.data.Subset(ds, list(range(5, 45))), list(range(0, 40, 3)))
    for d in (ds, sub):
        ref = list(torch.utils.data.DataLoader(d, batch_size=4))
        dev = list(D.DeviceLoader(d, 4, device="cpu"))
        assert len(dev) == len(ref)
        for (xa, ya), (xb, yb) in zip(ref, dev):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
    # a synthetic task's items (with the posterior) are stacked as they are
    syn = D.get_dataset("gaussian_mixture", split="val", n=30, n_classes=3, dim=2, return_posterior=True)
    for a, b in zip(torch.utils.data.DataLoader(syn, batch_size=7), D.DeviceLoader(syn, 7, device="cpu")):
        assert len(a) == len(b) == 3 and all(torch.equal(u, v) for u, v in zip(a, b))


def test_device_loader_shuffles_every_epoch_and_drops_last():
    ds = D.get_dataset("gaussian_mixture", split="train", n=50, n_classes=3, dim=2)
    loader = D.DeviceLoader(ds, 8, device="cpu", shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(0))
    epochs = [torch.cat([y for _, y in loader]) for _ in range(2)]
    assert len(loader) == 6 and all(len(e) == 48 for e in epochs)
    xs = [torch.cat([x for x, _ in loader]) for _ in range(2)]
    assert not torch.equal(xs[0], xs[1])
    rows = {tuple(r.tolist()) for r in ds.x}
    for x in xs:  # 48 distinct samples of the data set each epoch
        assert len({tuple(r.tolist()) for r in x} & rows) == 48


def test_make_loaders_on_a_device_and_the_bad_transform():
    ld = D.make_loaders("gaussian_mixture", 16, seed=0, n=64, n_classes=3, dim=2, device="cpu",
                        train_eval=True)
    assert all(isinstance(x, D.DeviceLoader) for x in (ld.train, ld.val, ld.test, ld.train_eval))
    assert len(ld.train.dataset) == 64 and ld.train.batch_size == 16 and ld.val.batch_size == 256
    from torchvision.transforms import v2
    bad = D.ImageTensorDataset(torch.zeros(2, 1, 4, 4, dtype=torch.uint8), torch.zeros(2),
                               v2.Compose([v2.RandomRotation(10)]))
    with pytest.raises(ValueError, match="transform"):
        D.DeviceLoader(bad, 2, device="cpu")
