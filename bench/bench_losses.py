"""Forward+backward time of every loss of :mod:`focalcal.losses` relative to ``F.cross_entropy``.

Run with one thread (the numbers in the report were taken so)::

    OMP_NUM_THREADS=1 python bench/bench_losses.py            # both tables, about a minute
    OMP_NUM_THREADS=1 python bench/bench_losses.py --quick    # fewer repetitions

Table 1: every loss on 4096 x 100 float32 logits, time of ``loss(x, t).backward()`` divided by
that of ``F.cross_entropy(x, t).backward()`` measured in the same run. Goal: <= 1.2x for focal,
FLSD, dual focal and AdaFocal. Table 2: the selective-risk loss (bin-based CDF, ``O(nK)``) against
the sort-based AURC loss as the batch grows, with time per sample, for the whole losses and for
the weight computations alone.

Method: the candidates are timed round-robin (one call of each in turn, repeated), so that load
from other processes hits all of them alike; each entry is the median (and, for Table 1, also
the minimum) over the rounds of the CPU time of the calling thread (``time.thread_time``, which
does not count time the process spends descheduled). glibc's
``malloc`` returns freed multi-megabyte buffers to the OS and page-faults them back in on the next
allocation, which on a loaded VM costs more than the arithmetic; ``--malloc default`` keeps that
behaviour, the default ``--malloc keep`` raises the trim/mmap thresholds with ``mallopt`` so that
the table compares the losses' arithmetic (both settings are reported in the docs).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence


#: the name of the reference every ratio divides by
REFERENCE = "F.cross_entropy (reference)"
#: the parameters a loss is timed at (the others: the library's defaults)
TIMED_PARAMS = {"focal": {"gamma": 3.0}}


def timed_losses(names: Sequence[str]) -> dict[str, Callable]:
    """:data:`REFERENCE` (``F.cross_entropy``) and the ``focalcal.losses.make_loss`` losses
    ``names`` at :data:`TIMED_PARAMS`, by name: the candidates of this and ``bench_train_step``."""
    # imported here: main() sets the allocator up before torch allocates anything
    import torch.nn.functional as F

    from focalcal import losses as L

    return {REFERENCE: lambda z, y: F.cross_entropy(z, y),
            **{name: L.make_loss(name, **TIMED_PARAMS.get(name, {})) for name in names}}


def _keep_malloc() -> bool:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_trim_threshold, 1 << 30)) and bool(libc.mallopt(m_mmap_threshold, 1 << 30))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--malloc", choices=("keep", "default"), default="keep")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=100)
    args = ap.parse_args(argv)
    kept = _keep_malloc() if args.malloc == "keep" else False

    import torch
    import torch.nn.functional as F

    from focalcal import losses as L
    from focalcal.scores import aurc_weights

    torch.manual_seed(0)
    rounds = 15 if args.quick else 40

    def timer(fn, x, t):
        def run() -> float:
            xx = x.detach().clone().requires_grad_(True)
            t0 = time.thread_time()
            fn(xx, t).backward()
            return time.thread_time() - t0
        return run

    def round_robin(cands: dict[str, object], n_rounds: int, stat: str = "median") -> dict[str, float]:
        for run in cands.values():  # warm-up
            run(); run()
        times: dict[str, list[float]] = {k: [] for k in cands}
        for _ in range(n_rounds):
            for k, run in cands.items():
                times[k].append(run())
        if stat == "both":
            return {k: (statistics.median(v), min(v)) for k, v in times.items()}
        return {k: statistics.median(v) for k, v in times.items()}

    n, k = args.n, args.k
    x = torch.randn(n, k) * 3.0
    t = torch.randint(0, k, (n,))
    dev = "cpu"
    print(f"# focalcal.losses benchmark\n\ntorch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"threads={torch.get_num_threads()} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}), "
          f"device={dev}, malloc={'kept (mallopt)' if kept else 'default'}, {rounds} round-robin rounds, medians\n")

    goal = {"focal", "flsd53", "flsd532", "dual_focal", "dual_focal_released", "adafocal"}
    cands = timed_losses(("ce", "focal", "flsd53", "flsd532", "flsc531", "inverse_focal", "dual_focal",
                          "dual_focal_released", "adafocal", "brier", "label_smoothing", "aurc",
                          "selective_risk"))
    both = round_robin({name: timer(fn, x, t) for name, fn in cands.items()}, rounds, stat="both")
    ref, ref_min = both[REFERENCE]
    print(f"## Table 1: forward+backward on {n} x {k} float32 logits, relative to F.cross_entropy\n")
    print("| loss | median (ms) | ratio (medians) | ratio (minima) | goal <= 1.2x (medians) |")
    print("|---|---:|---:|---:|---|")
    for name, (v, vmin) in both.items():
        g = ("met" if v / ref <= 1.2 else "MISSED") if name in goal else ""
        print(f"| {name} | {v * 1e3:.3f} | {v / ref:.2f} | {vmin / ref_min:.2f} | {g} |")

    # the O(N^2) batch penalties are far slower at N = 4096; time them on fewer rounds
    slow = {
        **timed_losses(()),
        "mmce (weighted)": L.make_loss("mmce"),
        "kde_xe (bandwidth=0.01)": L.make_loss("kde_xe", bandwidth=0.01),
        "kde_xe (bandwidth='auto', LOO over 20 h)": L.make_loss("kde_xe"),
    }
    med2 = round_robin({name: timer(fn, x, t) for name, fn in slow.items()}, 2 if args.quick else 3)
    ref2 = med2[REFERENCE]
    print(f"\n### O(N^2) penalties on the same {n} x {k} logits ({2 if args.quick else 3} rounds)\n")
    print("| loss | time (ms) | ratio to F.cross_entropy |")
    print("|---|---:|---:|")
    for name, v in med2.items():
        print(f"| {name} | {v * 1e3:.1f} | {v / ref2:.0f} |")

    # Hessian trace on a 2-layer MLP (the paper's CIFAR-10 setting: hidden 100), batch 128
    mlp = torch.nn.Sequential(torch.nn.Linear(3072, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10))
    xb = torch.randn(128, 3072)
    yb = torch.randint(0, 10, (128,))
    hess = L.make_loss("hessian_trace", lamda=1e-3)

    def step_ce() -> float:
        mlp.zero_grad()
        t0 = time.thread_time()
        F.cross_entropy(mlp(xb), yb).backward()
        return time.thread_time() - t0

    def step_h() -> float:
        mlp.zero_grad()
        t0 = time.thread_time()
        hess(mlp(xb), yb, model=mlp, inputs=xb).backward()
        return time.thread_time() - t0

    med3 = round_robin({"ce": step_ce, "hessian_trace": step_h}, 5 if args.quick else 15)
    print("\n### Hessian-trace penalty: one training step (forward + backward) of a 3072-100-10 MLP, batch 128\n")
    print("| loss | time (ms) | ratio |")
    print("|---|---:|---:|")
    for name, v in med3.items():
        print(f"| {name} | {v * 1e3:.2f} | {v / med3['ce']:.2f} |")

    # Table 2: selective-risk loss (histogram CDF) vs sort-based AURC loss as n grows
    print("\n## Table 2: selective-risk loss (bin-based CDF, O(nK), K = 64 bins) vs sort-based AURC loss\n")
    print("Full losses: forward+backward on n x 10 logits. Weights only: the selective-risk weights "
          "(`selective_risk_weights`, forward+backward through the scores) against the AURC rank weights "
          "(`focalcal.scores.aurc_weights`, one sort + cumulative sum) on n scores. "
          "Per-sample times in microseconds.\n")
    print("| n | selective_risk loss (ms) | per sample | aurc loss (ms) | per sample | "
          "AU weights (ms) | per sample | AURC rank weights (ms) | per sample |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    au, ar = L.make_loss("selective_risk"), L.make_loss("aurc")

    def w_au(s_):
        def run() -> float:
            ss = s_.detach().clone().requires_grad_(True)
            t0 = time.thread_time()
            L.selective_risk_weights(ss, coverage=0.9, nu=0.1, n_bins=64).sum().backward()
            return time.thread_time() - t0
        return run

    def w_ar(s_):
        def run() -> float:
            t0 = time.thread_time()
            aurc_weights(s_, ties="sorted")  # what aurc_loss uses
            return time.thread_time() - t0
        return run

    for nn_ in (1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20):
        xs = torch.randn(nn_, 10) * 3.0
        ts = torch.randint(0, 10, (nn_,))
        sc = torch.rand(nn_)
        r = max(5, min(40, (1 << 21) // nn_)) if not args.quick else max(3, min(10, (1 << 19) // nn_))
        cand = {"wau": w_au(sc), "war": w_ar(sc)}
        if nn_ <= (1 << 18):
            cand.update({"au": timer(au, xs, ts), "aurc": timer(ar, xs, ts)})
        m = round_robin(cand, r)
        full = (f"{m['au'] * 1e3:.2f} | {m['au'] / nn_ * 1e6:.3f} | {m['aurc'] * 1e3:.2f} | "
                f"{m['aurc'] / nn_ * 1e6:.3f}") if "au" in m else "- | - | - | -"
        print(f"| {nn_} | {full} | {m['wau'] * 1e3:.2f} | {m['wau'] / nn_ * 1e6:.3f} | "
              f"{m['war'] * 1e3:.2f} | {m['war'] / nn_ * 1e6:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
