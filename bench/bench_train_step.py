"""One training step (forward, loss, backward, optimiser) with each focal-family loss, relative to
cross-entropy, on the Fashion-MNIST CNN and a CIFAR ResNet-50 (CPU); and our focal losses against
the ones users have today (torchvision's ``sigmoid_focal_loss`` on one-hot targets, the released
FLSD-53 per-sample loop) for speed and for finite gradients at saturation.

Goal (issue 11): every focal-family step within 3% of the cross-entropy step. Method: one model
and one SGD optimiser for every loss, on the same batch; each round runs one step per loss in a
shuffled order, timed by the CPU time of the calling thread (``time.thread_time``) with one torch
thread; a step's ratio is taken to the cross-entropy step of the same round, and the table gives
medians over the rounds. An A/A row (cross-entropy timed twice) shows the noise floor.

    python bench/bench_train_step.py [--quick] [--rounds 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torchvision.ops import sigmoid_focal_loss

from focalcal import losses as L
from focalcal.lab.models import make_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
import released_flsd  # noqa: E402
from bench_losses import REFERENCE, timed_losses  # noqa: E402

FOCAL_FAMILY = ("focal", "flsd53", "dual_focal", "adafocal")


def loss_functions(k: int) -> dict:
    return {
        **timed_losses(("ce",) + FOCAL_FAMILY),
        "torchvision sigmoid_focal_loss (one-hot, gamma 3)": lambda z, y: sigmoid_focal_loss(
            z, F.one_hot(y, k).to(z.dtype), alpha=-1, gamma=3.0, reduction="mean"),
        "released FLSD-53 (per-sample loop)": released_flsd.FocalLossAdaptive(gamma=3.0),
    }


def step_times(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, rounds: int) -> dict[str, tuple[float, float]]:
    """Per loss: (median CPU seconds of one SGD step, median over rounds of step / reference step).

    One model and one optimiser serve every loss (their steps differ only by the loss); each
    round runs one step per loss in a shuffled order, and each step is compared with the
    reference step of the same round (paired, so that slow phases of the machine cancel).
    ``"F.cross_entropy (A/A control)"`` is the reference timed twice: its ratio is the noise floor.
    """
    fns = {"F.cross_entropy (A/A control)": lambda z, t: F.cross_entropy(z, t),
           **loss_functions(int(model(x[:2]).shape[-1]))}
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)

    def step(fn) -> float:
        t0 = time.thread_time()
        opt.zero_grad(set_to_none=True)
        fn(model(x), y).backward()
        opt.step()
        return time.thread_time() - t0

    for fn in fns.values():  # warm-up
        step(fn)
    rng = random.Random(0)
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            times[name].append(step(fns[name]))
    ref = times[REFERENCE]
    out = {name: (statistics.median(v), statistics.median(a / b for a, b in zip(v, ref)))
           for name, v in times.items()}
    return {REFERENCE: out.pop(REFERENCE), **out}


def loss_only(n: int, k: int, rounds: int) -> dict[str, float]:
    """Median CPU seconds of forward+backward of the loss alone on n x k logits."""
    g = torch.Generator().manual_seed(0)
    z0, y = 3.0 * torch.randn(n, k, generator=g), torch.randint(0, k, (n,), generator=g)
    fns = loss_functions(k)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(rounds + 2):
        for name, fn in fns.items():
            z = z0.clone().requires_grad_(True)
            t0 = time.thread_time()
            fn(z, y).backward()
            if r >= 2:
                times[name].append(time.thread_time() - t0)
    return {name: statistics.median(v) for name, v in times.items()}


def saturation() -> list[tuple[str, float, bool]]:
    """Are the gradients finite on float32 logits whose softmax / sigmoid saturates?"""
    z0 = torch.tensor([[1e4, 0.0, -1e4], [0.0, 60.0, 0.0], [3.0, 2.0, 1.0], [-1e4, 1e4, 0.0]])
    y = torch.tensor([0, 1, 2, 0])
    out = []
    for gamma in (0.5, 1.0, 3.0):
        cands = {
            "focalcal focal": L.make_loss("focal", gamma=gamma),
            "torchvision sigmoid_focal_loss (one-hot)": lambda z, t, g=gamma: sigmoid_focal_loss(
                z, F.one_hot(t, 3).float(), alpha=-1, gamma=g, reduction="mean"),
            "released FLSD loss, gamma for p_t >= 0.5": released_flsd.FocalLossAdaptive(gamma=gamma),
        }
        for name, fn in cands.items():
            z = z0.clone().requires_grad_(True)
            fn(z, y).backward()
            out.append((name, gamma, bool(torch.isfinite(z.grad).all())))
    for name in ("flsd53", "dual_focal", "adafocal"):
        z = z0.clone().requires_grad_(True)
        L.make_loss(name)(z, y).backward()
        out.append((f"focalcal {name}", float("nan"), bool(torch.isfinite(z.grad).all())))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the CNN only, few rounds (seconds)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    cases = [("Fashion-MNIST CNN, batch 128", make_model("cnn", 10, 1, seed=0),
              torch.randn(128, 1, 28, 28, generator=g), torch.randint(0, 10, (128,), generator=g),
              args.rounds or (12 if args.quick else 60))]
    if not args.quick:
        cases.append(("CIFAR ResNet-50, batch 16", make_model("resnet50", 10, 3, seed=0),
                      torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g),
                      args.rounds or 12))
    res: dict = {"steps": [], "loss_only": [], "saturation": saturation()}
    for label, model, x, y, rounds in cases:
        res["steps"].append((label, rounds, step_times(model, x, y, rounds),
                             loss_only(x.shape[0], 10, 10 if args.quick else 40)))
    for n, k in ([] if args.quick else [(128, 10), (4096, 100)]):
        res["loss_only"].append((n, k, loss_only(n, k, 40)))

    print(f"torch {torch.__version__}, 1 torch thread, CPU time of the thread (time.thread_time), "
          f"medians over rounds in shuffled order, load average {os.getloadavg()[0]:.1f}\n")
    print("## Table 1: one training step (forward, loss, backward, SGD step), relative to F.cross_entropy\n")
    print("The last column is the loss's own extra forward+backward time over `F.cross_entropy` on the "
          "step's logits (timed alone), as a share of the cross-entropy step: what the loss adds to a "
          "step without the step-to-step noise of the machine.\n")
    print("| model | loss | median step (ms) | step / CE step (median of rounds) | goal <= 1.03 | "
          "loss's extra time / CE step |")
    print("|---|---|---:|---:|---|---:|")
    goals, extras, controls = [], [], []
    for label, rounds, t, lo in res["steps"]:
        controls.append(abs(t["F.cross_entropy (A/A control)"][1] - 1))
        extras += [(lo[n] - lo[REFERENCE]) / t[REFERENCE][0]
                   for n in FOCAL_FAMILY]
        ref, lref = t[REFERENCE][0], lo[REFERENCE]
        for name, (v, ratio) in t.items():
            ok = ("met" if ratio <= 1.03 else "MISSED") if name in FOCAL_FAMILY else ""
            if name in FOCAL_FAMILY:
                goals.append(ratio <= 1.03)
            extra = f"{(lo[name] - lref) / ref:+.2%}" if name in lo else "-"
            print(f"| {label} ({rounds} rounds) | {name} | {v * 1e3:.2f} | {ratio:.3f} | {ok} | {extra} |")
    print("\n## Table 2: the loss alone, forward + backward on N x K logits, relative to F.cross_entropy\n")
    print("| N x K | loss | median (ms) | ratio |")
    print("|---|---|---:|---:|")
    for n, k, t in res["loss_only"]:
        ref = t[REFERENCE]
        for name, v in t.items():
            print(f"| {n} x {k} | {name} | {v * 1e3:.3f} | {v / ref:.2f} |")
    print("\n## Table 3: finite gradients at saturation (float32 logits with margins up to 2e4)\n")
    print("| loss | gamma | gradients finite |")
    print("|---|---:|---|")
    for name, gamma, ok in res["saturation"]:
        gs = "schedule" if gamma != gamma else f"{gamma:g}"
        print(f"| {name} | {gs} | {'yes' if ok else 'NO (nan)'} |")
    res["goal"] = (f"every focal-family step within 3% of cross-entropy, measured step against step: "
                   f"{'met' if all(goals) else 'MISSED'} ({sum(goals)} of {len(goals)}; the A/A control "
                   f"is off by up to {max(controls):.1%}, the noise floor of this run); from the loss's own "
                   f"time, the focal-family losses add at most {max(extras):+.2%} to a cross-entropy step: "
                   f"{'met' if max(extras) <= 0.03 else 'MISSED'}")
    print("\n" + res["goal"])
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
