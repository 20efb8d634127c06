"""Throughput of :class:`focalcal.lab.train.Trainer` on Fashion-MNIST with the small CNN (CPU).

Compares the trainer (with and without the per-sample gradient-norm records, and in the contiguous
memory layout instead of the channels-last one that ``channels_last="auto"`` picks for a
convolutional model) against a bare forward/backward/step loop over the same loader, for a few
batch sizes; at most a few hundred batches in all. Each training row is one epoch over
``--batches`` batches after a short warm-up; the two "evaluation" rows are one evaluation pass over
the same images in each layout.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_train.py [--batches 50] [--device auto]

Prints a table of images per second of wall-clock time and per CPU-second of this process (training
only: no validation or test pass); a "loader only" row shows the data pipeline's share.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch
from torch import nn

from focalcal.lab.data import make_loaders
from focalcal.lab.models import make_model
from focalcal.lab.records import evaluate
from focalcal.lab.train import Trainer, TrainSettings, select_device


def _timed(fn, device: torch.device) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of ``fn()``."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - w0, time.process_time() - c0


def loader_only(loader, device: torch.device) -> None:
    """Iterate the loader and move batches to the device: the data pipeline's share."""
    for x, y in loader:
        x.to(device), y.to(device)


def bare_loop(loader, device: torch.device, lr: float = 1e-3) -> None:
    """One epoch of a plain training loop (no records, no progress bar)."""
    model = make_model("cnn", 10, 1, seed=0).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def trainer_epoch(loader, device: torch.device, grad_norms: bool, channels_last: bool | str = "auto") -> None:
    """One epoch of :class:`Trainer` (includes its per-epoch statistics)."""
    model = make_model("cnn", 10, 1, seed=0)
    settings = TrainSettings(epochs=1, optimizer="adam", lr=1e-3, weight_decay=0.0,
                             lr_schedule="constant", device=device, grad_norms=grad_norms,
                             channels_last=channels_last)
    Trainer(model, nn.CrossEntropyLoss(), settings, progress=False).fit(loader)


def evaluation_pass(loader, device: torch.device, channels_last: bool) -> None:
    """One evaluation pass (the trainer's per-epoch records and saved logits) in one layout."""
    model = make_model("cnn", 10, 1, seed=0).to(device)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    evaluate(model, loader, device=device, channels_last=channels_last)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=50, help="timed batches per row")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    device = select_device(args.device)
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, cpu {platform.processor() or platform.machine()}")

    rows = []
    for bs in args.batch_sizes:
        loaders = make_loaders("fashion_mnist", bs, subset={"train": bs * args.batches}, seed=0)
        warm = make_loaders("fashion_mnist", bs, subset={"train": bs * 3}, seed=1)
        bare_loop(warm.train, device)  # warm-up: allocator, kernels, page cache
        n_img = len(loaders.train.dataset)
        for label, fn in (("loader only", lambda: loader_only(loaders.train, device)),
                          ("bare loop", lambda: bare_loop(loaders.train, device)),
                          ("Trainer", lambda: trainer_epoch(loaders.train, device, True)),
                          ("Trainer(grad_norms=False)", lambda: trainer_epoch(loaders.train, device, False)),
                          ("Trainer(channels_last=False)",
                           lambda: trainer_epoch(loaders.train, device, True, channels_last=False)),
                          ("evaluation, channels-last", lambda: evaluation_pass(loaders.train, device, True)),
                          ("evaluation, contiguous", lambda: evaluation_pass(loaders.train, device, False))):
            wall, cpu = _timed(fn, device)
            rows.append((label, bs, args.batches, n_img, wall, cpu))

    # on a shared machine the wall clock includes time the process waited for a core; images
    # per CPU-second is the steadier number there
    head = (f"{'loop':<30}{'batch':>6}{'batches':>9}{'images':>8}{'wall s':>9}{'cpu s':>8}"
            f"{'images/s':>10}{'images/cpu-s':>14}")
    print(head)
    print("-" * len(head))
    for label, bs, nb, n, wall, cpu in rows:
        print(f"{label:<30}{bs:>6}{nb:>9}{n:>8}{wall:>9.2f}{cpu:>8.2f}{n / wall:>10.0f}{n / cpu:>14.0f}")


if __name__ == "__main__":
    main()
