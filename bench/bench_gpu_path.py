"""The GPU path's two goals, measured on whichever device is present (issue 25, section 2).

1. The template's training loop (``notebooks/train_classifier.md``: ``make_loaders``, ``make_model``,
   :class:`~focalcal.lab.train.Trainer` with its per-epoch evaluation): seconds per epoch and
   training images/s, with the DataLoader path and with the device-resident one
   (``make_loaders(device=...)``, the template's ``data_on_device=True``).
2. Forward+backward of the focal-family losses against ``F.cross_entropy`` at 128 x 10, 128 x 100
   and 4096 x 1000 (ms per call, median over rounds timed round-robin; on CUDA after a synchronise,
   with the compiled path that CUDA selects).

    python bench/bench_gpu_path.py                                # CPU: small settings, < 2 min
    python bench/bench_gpu_path.py --dataset cifar10 --model resnet50 --train-subset 0 --epochs 2
    python bench/bench_gpu_path.py --json out.json                # also write the figures

The goals (one H100, batch 128: a ResNet-50 CIFAR epoch with its evaluation in at most 5 s; the
losses within 1.5x of ``F.cross_entropy``) are met only where this script, run on that GPU, says so.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from focalcal.lab.data import make_loaders
from focalcal.lab.models import make_model
from focalcal.lab.records import device_name, select_device
from focalcal.lab.train import Trainer, TrainSettings
from focalcal.losses import make_loss

LOSSES = {"F.cross_entropy": None, "focal (gamma=3)": ("focal", {"gamma": 3.0}),
          "FLSD-53": ("flsd53", {}), "dual focal": ("dual_focal", {})}
SIZES = ((128, 10), (128, 100), (4096, 1000))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_epochs(args, device: torch.device, on_device: bool) -> list[dict]:
    sub = {"train": args.train_subset, "val": args.eval_subset, "test": args.eval_subset}
    sub = {k: v for k, v in sub.items() if v} or None
    ld = make_loaders(args.dataset, args.batch_size, seed=0, subset=sub, eval_batch_size=args.eval_batch_size,
                      num_workers=0 if on_device or device.type == "cpu" else args.workers,
                      pin_memory=device.type == "cuda", device=device if on_device else None)
    net = make_model(args.model, ld.info.n_classes, ld.info.in_channels, seed=0)
    settings = TrainSettings(epochs=args.epochs, optimizer="sgd", lr=0.05, device=device,
                             lr_schedule="constant", grad_norms=True)
    res = Trainer(net, make_loss(args.loss), settings, progress=False).fit(ld.train, val_loader=ld.val,
                                                                           test_loader=ld.test)
    return [{"epoch": r["epoch"], "epoch_s": r["time_s"], "train_images_per_s": r["throughput"]}
            for r in res.history]


def loss_times(device: torch.device, rounds: int) -> list[dict]:
    rows = []
    for n, k in SIZES:
        g = torch.Generator().manual_seed(0)
        z0 = (3 * torch.randn(n, k, generator=g)).to(device)
        t = torch.randint(0, k, (n,), generator=g).to(device)
        fns = {name: (lambda a, b: F.cross_entropy(a, b)) if spec is None else make_loss(spec[0], **spec[1])
               for name, spec in LOSSES.items()}
        times = {name: [] for name in fns}
        for r in range(rounds + 3):  # 3 warm-up rounds (and the compilation on CUDA)
            for name, fn in fns.items():
                z = z0.clone().requires_grad_()
                sync(device)
                t0 = time.perf_counter()
                fn(z, t).backward()
                sync(device)
                if r >= 3:
                    times[name].append(time.perf_counter() - t0)
        ref = statistics.median(times["F.cross_entropy"])
        for name, ts in times.items():
            med = statistics.median(ts)
            rows.append({"size": f"{n}x{k}", "loss": name, "ms": 1e3 * med, "ratio_to_ce": med / ref})
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dataset", default="fashion_mnist")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--loss", default="focal")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--eval-batch-size", type=int, default=None)
    ap.add_argument("--train-subset", type=int, default=2048, help="0: the whole split")
    ap.add_argument("--eval-subset", type=int, default=1000, help="0: the whole splits")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=8, help="DataLoader workers on CUDA")
    ap.add_argument("--rounds", type=int, default=20, help="timed rounds per loss and size")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    device = select_device(args.device)
    out = {"device": str(device), "device_name": device_name(device), "torch": torch.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(), "cpu": platform.processor()
           or platform.machine(), "torch_threads": torch.get_num_threads(),
           "setting": {k: v for k, v in vars(args).items() if k != "json"}}
    print(f"device {out['device_name']} ({device}), torch {out['torch']} (CUDA {out['cuda']}), "
          f"Python {out['python']}, {out['torch_threads']} threads")
    out["training"] = {}
    for label, on_device in (("DataLoader", False), ("data on the device", True)):
        rows = train_epochs(args, device, on_device)
        out["training"][label] = rows
        for r in rows:
            print(f"{args.dataset} {args.model} {args.loss} batch {args.batch_size}, {label}: epoch "
                  f"{r['epoch']} {r['epoch_s']:.2f} s (with the evaluation), "
                  f"{r['train_images_per_s']:.0f} training images/s")
    out["losses"] = loss_times(device, args.rounds)
    print(f"\n{'size':>10}  {'loss':<18} {'ms':>8}  x F.cross_entropy")
    for r in out["losses"]:
        print(f"{r['size']:>10}  {r['loss']:<18} {r['ms']:8.3f}  {r['ratio_to_ce']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
