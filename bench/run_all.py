"""Run every benchmark in this folder, one after the other, and print their tables.

Each ``bench_*.py`` measures ratios within one run on this machine (never absolute timings
compared across machines); this script only sequences them so ``make bench`` prints one report.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import torch


def main() -> int:
    here = Path(__file__).resolve().parent
    print(f"# focalcal benchmarks\n\nmachine: {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, "
          f"device {'cuda' if torch.cuda.is_available() else 'cpu'}\n", flush=True)
    status = 0
    for script in sorted(here.glob("bench_*.py")):
        print(f"## {script.stem}\n", flush=True)
        rc = subprocess.call([sys.executable, str(script)])
        status = status or rc
        print(flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
