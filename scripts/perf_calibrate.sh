#!/usr/bin/env bash
# The gate's calibration (docs/development.md#the-performance-gate): RUNS gate runs of
# identical code (the working tree against HEAD; commit first) and RUNS with one
# engine's training step made slower, alternated, each keeping its launches and output
# under OUT; OUT/summary gets one line a gate run: what it was, its exit status, seconds.
#   bash scripts/perf_calibrate.sh OUT [RUNS=10] [SLOWDOWN=0.15] [ENGINE=ddp]
# Run it alone on the machine.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:?usage: perf_calibrate.sh OUT [RUNS] [SLOWDOWN] [ENGINE]}
runs=${2:-10}
slowdown=${3:-0.15}
engine=${4:-ddp}
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
    for kind in same slow; do
        extra=()
        [ "$kind" = slow ] && extra=(BENCH_PERF_SLOWDOWN="$slowdown" BENCH_PERF_SLOWDOWN_ENGINE="$engine")
        start=$(date +%s)
        env "${extra[@]}" .venv/bin/python scripts/perf.py --base HEAD --keep "$out/$kind-$i" \
            >"$out/$kind-$i.log" 2>&1
        rc=$?
        echo "$kind $i exit=$rc $(($(date +%s) - start))s" | tee -a "$out/summary"
    done
done
