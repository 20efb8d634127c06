"""Speed of focalcal.metrics against torchmetrics, as a markdown table of ratios from one run.

Goals: ``ece`` no slower than torchmetrics' ``multiclass_calibration_error`` on 200k x 100
float32 logits; ``classwise_ece`` at most 2x ``ece``. Each time is the minimum over a few repeats
(``time.perf_counter``), the candidates interleaved so that machine load hits them alike.

    OMP_NUM_THREADS=1 python bench/bench_metrics.py [--n 200000] [--k 100] [--repeats 5] [--quick] [--json out.json]

``--quick`` (the book's Performance page): 100 000 x 100 and 3 repeats.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torchmetrics.functional.classification import multiclass_calibration_error

from focalcal import metrics


def best_times(fns: dict, repeats: int) -> dict:
    for f in fns.values():  # warm-up
        f()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, f in fns.items():
            t0 = time.perf_counter()
            f()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="100 000 rows, 3 repeats")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    if args.quick:
        args.n, args.repeats = 100_000, 3

    g = torch.Generator().manual_seed(0)
    logits = 3.0 * torch.randn(args.n, args.k, generator=g)
    labels = torch.randint(0, args.k, (args.n,), generator=g)
    # a (10 temperatures, N) grid of confidences for the batched core
    conf_grid = torch.softmax(logits[:20_000].unsqueeze(0) / torch.linspace(0.5, 3, 10).view(-1, 1, 1),
                              -1).amax(-1)
    correct = logits[:20_000].argmax(-1) == labels[:20_000]

    fns = {
        "ece": lambda: metrics.ece(logits=logits, labels=labels),
        "torchmetrics": lambda: multiclass_calibration_error(logits, labels, num_classes=args.k,
                                                             n_bins=15, norm="l1"),
        "classwise_ece": lambda: metrics.classwise_ece(logits=logits, labels=labels),
        "ece mass": lambda: metrics.ece(logits=logits, labels=labels, binning="mass"),
        "grid core": lambda: metrics.calibration_error(conf_grid, correct),
        "grid loop": lambda: [metrics.calibration_error(c, correct) for c in conf_grid],
    }
    t = best_times(fns, args.repeats)

    print(f"N = {args.n}, K = {args.k}, float32 logits, 15 bins, {torch.get_num_threads()} thread(s), "
          f"min of {args.repeats} repeats\n")
    print("| comparison | time A (s) | time B (s) | ratio A/B | goal |")
    print("|---|---|---|---|---|")
    rows = [
        ("`ece` / torchmetrics `multiclass_calibration_error`", "ece", "torchmetrics", "<= 1"),
        ("`classwise_ece` / `ece`", "classwise_ece", "ece", "<= 2"),
        ("`ece(binning='mass')` / `ece`", "ece mass", "ece", "-"),
        ("`calibration_error` on (10, 20000) / loop of 10 calls", "grid core", "grid loop", "-"),
    ]
    out = []
    for label, a, b, goal in rows:
        print(f"| {label} | {t[a]:.4f} | {t[b]:.4f} | {t[a] / t[b]:.2f} | {goal} |")
        out.append({"comparison": label, "a": t[a], "b": t[b], "ratio": t[a] / t[b], "goal": goal})
    met = [t["ece"] / t["torchmetrics"] <= 1, t["classwise_ece"] / t["ece"] <= 2]
    print(f"\ngoals: ece <= torchmetrics {'met' if met[0] else 'MISSED'}, "
          f"classwise_ece <= 2 x ece {'met' if met[1] else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps({"n": args.n, "k": args.k, "threads": torch.get_num_threads(),
                                         "rows": out}, indent=1))


if __name__ == "__main__":
    main()
