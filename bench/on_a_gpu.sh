#!/usr/bin/env bash
# The checks that need a GPU, as one command on a CUDA machine with torch, the lab's dependencies and
# focalcal installed (the library's tests run from this checkout against the installed package):
#   1. the losses on CUDA (their compiled path) against the float64 formula, and the trainer's tests;
#   2. bench_gpu_path.py: a ResNet-50 epoch on CIFAR-10-size data (50 000 + 10 000 synthetic images
#      in CIFAR's on-disk format, classes told apart by brightness), DataLoader and device-resident,
#      and the focal-family losses against F.cross_entropy;
#   3. the gpu profile shrunk (profiles.shrink), every run through papermill on CUDA, on small
#      CIFAR-10 and CIFAR-100 in the same format.
# usage: bench/on_a_gpu.sh OUTDIR   (writes tests.log, gpu_path.json, bench.log, sweep.log, runs.tgz)
set -u
out=${1:?usage: bench/on_a_gpu.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}book/_lib"
nvidia-smi -L; python3 -c "import torch, focalcal; print('torch', torch.__version__, 'focalcal', focalcal.__file__)"

write_data() {  # ROOT N_TRAIN N_TEST
  python3 -c "import sys; from pathlib import Path; sys.path.insert(0, 'tests'); from conftest import write_cifar
for name in ('cifar10', 'cifar100'): write_cifar(Path('$1'), name, n_train=$2, n_test=$3)"
}

timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_losses.py tests/test_train.py \
  -k "each_device or compiled or select_device or train" 2>&1 | tail -25 | tee "$out/tests.log"

write_data /tmp/cifar-full 50000 10000
FOCALCAL_DATA=/tmp/cifar-full timeout 240 python3 bench/bench_gpu_path.py --dataset cifar10 --model resnet50 \
  --train-subset 0 --eval-subset 0 --epochs 3 --json "$out/gpu_path.json" 2>&1 | tee "$out/bench.log" | tail -30

write_data /tmp/cifar-small 400 64
start=$(date +%s)
FOCALCAL_DATA=/tmp/cifar-small timeout 150 python3 -m focalcal.lab.sweep --profile gpu --shrink \
  --out /tmp/gpu-shrunk --jobs 4 > "$out/sweep.log" 2>&1
echo "shrunk gpu sweep: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/sweep.log"
tail -5 "$out/sweep.log"
(cd /tmp/gpu-shrunk && tar czf "$out/runs.tgz" results.csv profile.json runs/*/result.json runs/*/config.json \
  runs/*/history.json 2>/dev/null); ls -la "$out"
