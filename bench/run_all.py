"""Run every benchmark in this folder, one after the other, and print their tables.

Each ``bench_*.py`` measures ratios within one run on this machine (never absolute timings
compared across machines); this script only sequences them so ``make bench`` prints one report,
headed by the machine (CPU model, cores, load, torch version and threads).

``--quick`` runs the short settings of the benchmarks the book's Performance page shows (seconds
each); ``--json DIR`` also writes their results, and the machine, as JSON files into ``DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

# the benchmarks with a short setting and a JSON output (the Performance page's tables)
PAGE = ("bench_posthoc", "bench_metrics", "bench_train_step")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "load_average": os.getloadavg()[0], "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "device": "cuda" if torch.cuda.is_available() else "cpu"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(PAGE)}, short settings")
    ap.add_argument("--json", type=Path, default=None, help="write results as JSON files into this folder")
    args = ap.parse_args(argv)
    here = Path(__file__).resolve().parent
    m = machine()
    print(f"# focalcal benchmarks\n\nmachine: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), "
          f"load average {m['load_average']:.1f}; torch {m['torch']} ({m['torch_threads']} threads), "
          f"Python {m['python']}, device {m['device']}\n", flush=True)
    if args.json:
        args.json.mkdir(parents=True, exist_ok=True)
        (args.json / "machine.json").write_text(json.dumps(m, indent=1))
    status = 0
    for script in sorted(here.glob("bench_*.py")):
        if args.quick and script.stem not in PAGE:
            continue
        cmd = [sys.executable, str(script)]
        if args.quick:
            cmd.append("--quick")
        if args.json and script.stem in PAGE:
            cmd += ["--json", str(args.json / f"{script.stem}.json")]
        print(f"## {script.stem}\n", flush=True)
        rc = subprocess.call(cmd)
        status = status or rc
        print(flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
