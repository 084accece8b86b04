#!/usr/bin/env bash
# The GPU check, one prepared script: on a machine with NVIDIA GPUs, a short sweep
# of every engine at 1 GPU and at all GPUs (resnet50 on synthetic 224x224 images,
# lenet on digits), then the GPU tests; records, a text and an HTML report land in
# OUT. Sized for under 8 minutes on one GPU. Needs no network once .venv exists
# (scripts/setup.sh makes it, picking the CUDA builds when it sees a GPU).
#
# Usage: scripts/gpu_check.sh [--dry-run] [OUT]   (OUT default: results/gpu-check-<time>)
#   --dry-run   print every launch of the plan and exit; works on CPU machines
# Environment:
#   BENCH_GPUS     GPUs to plan for in --dry-run (default 2; a real run counts them)
#   BENCH_ENGINES  engines to check (default horovod,ddp,paddle)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

dry=0
if [ "${1:-}" = --dry-run ]; then dry=1; shift; fi
out=$(realpath -m "${1:-results/gpu-check-$(date +%Y%m%d-%H%M%S)}")
engines=${BENCH_ENGINES:-horovod,ddp,paddle}

if [ ! -x .venv/bin/python ]; then
    echo "gpu_check: no .venv here; run scripts/setup.sh first (it needs the package index once)" >&2
    exit 2
fi
bench=(.venv/bin/python -m bench.cli)

if [ "$dry" = 1 ]; then
    gpus=${BENCH_GPUS:-2}
else
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    if [ "${gpus:-0}" -lt 1 ]; then
        echo "gpu_check: nvidia-smi sees no GPU; use --dry-run to print the plan on CPU" >&2
        exit 2
    fi
fi
workers=1
if [ "$gpus" -gt 1 ]; then workers="1,$gpus"; fi

# One worker per GPU, one CPU thread each; same spec for every engine.
common=(--engines "$engines" --workers "$workers" --device cuda --threads 1
        --no-comm-cost --timeout 150 --results "$out" --no-compare)
resnet=(--models resnet50 --datasets synthetic --batch-size 32 --synthetic-samples 2048
        --epochs 10 --max-steps 50 --warmup-steps 10 --repeats 2)
lenet=(--models lenet --datasets digits --batch-size 64 --epochs 3 --repeats 1)
tests=(.venv/bin/python -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider)

if [ "$dry" = 1 ]; then
    echo "# gpu_check plan for $gpus GPU(s): engines $engines, workers $workers; records in $out"
    "${bench[@]}" run "${common[@]}" "${resnet[@]}" --dry-run
    "${bench[@]}" run "${common[@]}" "${lenet[@]}" --dry-run
    echo "BENCH_EXPECT_GPU=1 ${tests[*]}"
    echo "${bench[*]} compare $out --format html --out $out"
    exit 0
fi

mkdir -p "$out"
start=$SECONDS
status=0
"${bench[@]}" run "${common[@]}" "${resnet[@]}" || status=1
"${bench[@]}" run "${common[@]}" "${lenet[@]}" || status=1
BENCH_EXPECT_GPU=1 "${tests[@]}" 2>&1 | tee "$out/gpu-tests.log" || status=1
"${bench[@]}" compare "$out" | tee "$out/report.txt"
"${bench[@]}" compare "$out" --format html --out "$out"
echo "gpu_check: done in $((SECONDS - start)) s, status $status; records and reports in $out"
exit $status
