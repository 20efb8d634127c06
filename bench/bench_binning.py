"""The non-parametric calibrators: fit (and predict) times beside netcal's on the same logits.

Goal (issue 22): every calibrator fits 10k x 100 logits in under 5 s on 2 cores, with the
reference package's time measured in the same run on the same data. netcal fits on probabilities
(``softmax`` is computed once, outside its timing; ours fits on logits and computes its own
softmax inside). netcal's equal-mass histogram binning cannot predict (it raises), so it is timed
equal-width beside our equal-width and equal-mass fits. Wall-clock seconds, best of ``--repeat``, and
the CPU seconds of our fit (one torch thread: on a loaded machine the wall clock measures the load).

    python bench/bench_binning.py [--quick] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from pathlib import Path

import numpy as np
import torch
from netcal.binning import HistogramBinning as NetcalHB
from netcal.binning import IsotonicRegression as NetcalIso

from focalcal.posthoc import HistogramBinning, IsotonicCalibration


def best(fn, repeat: int) -> float:
    """Best wall-clock seconds of ``repeat`` calls (``best_cpu`` the best CPU seconds of the process)."""
    times = []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):  # netcal prints per-class warnings
            fn()
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    best.cpu = min(c for _, c in times)
    return min(w for w, _ in times)


def task(n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    return 3 * z, y


def rows(n: int, k: int, repeat: int) -> list[dict]:
    z, y = task(n, k)
    p, yn = torch.softmax(z, 1).numpy(), y.numpy()
    conf, correct = p.max(1), (p.argmax(1) == yn).astype(float)
    cases = [
        ("histogram binning, top-label, width", lambda: HistogramBinning(mode="top_label", binning="width").fit(z, y),
         lambda: NetcalHB(bins=15, equal_intervals=True).fit(conf, correct)),
        ("histogram binning, top-label, mass", lambda: HistogramBinning().fit(z, y), None),
        ("histogram binning, classwise, width", lambda: HistogramBinning(mode="classwise", binning="width").fit(z, y),
         lambda: NetcalHB(bins=15, equal_intervals=True).fit(p, yn)),
        ("histogram binning, classwise, mass", lambda: HistogramBinning(mode="classwise").fit(z, y), None),
        ("isotonic regression", lambda: IsotonicCalibration().fit(z, y), lambda: NetcalIso().fit(p, yn)),
    ]
    out = []
    for name, ours, ref in cases:
        fitted = ours()
        fit_s = best(ours, repeat)
        out.append({"case": name, "n": n, "k": k, "fit_s": fit_s, "fit_cpu_s": best.cpu,
                    "predict_s": best(lambda: fitted.predict_proba(z), repeat),
                    "netcal_fit_s": None if ref is None else best(ref, repeat)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k x 100 only, one repeat")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sizes = [(10_000, 100)] if args.quick else [(10_000, 10), (10_000, 100), (10_000, 1000)]
    repeat = 1 if args.quick else args.repeat
    res = [r for n, k in sizes for r in rows(n, k, repeat)]
    print("## Non-parametric calibrators: fit time beside netcal's (goal: fit < 5 s at 10k x 100)\n")
    print("| N x K | calibrator | fit s | fit CPU s | predict s | netcal fit s | netcal / ours |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in res:
        ref = "-" if r["netcal_fit_s"] is None else f"{r['netcal_fit_s']:.3f}"
        ratio = "-" if r["netcal_fit_s"] is None else f"{r['netcal_fit_s'] / r['fit_s']:.1f}x"
        print(f"| {r['n']} x {r['k']} | {r['case']} | {r['fit_s']:.3f} | {r['fit_cpu_s']:.3f} | {r['predict_s']:.3f} | {ref} | {ratio} |")
    slow = [r for r in res if r["k"] <= 100 and r["fit_s"] >= 5.0]
    print(f"\nfits of 10k x 100 under 5 s: {'yes' if not slow else 'NO: ' + ', '.join(r['case'] for r in slow)}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0 if not slow else 1


if __name__ == "__main__":
    raise SystemExit(main())
