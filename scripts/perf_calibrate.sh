#!/usr/bin/env bash
# The gate's calibration (docs/development.md#the-performance-gate): RUNS gate runs of
# each kind, alternated, the working tree against HEAD (commit first), each keeping its
# launches, counts and output under OUT; OUT/summary gets one line a gate run: what it
# was, its exit status, seconds.
#   bash scripts/perf_calibrate.sh OUT [RUNS=10] [SLOWDOWN=0.15] [ENGINE=ddp]
# Kinds (KINDS, default "same slow"):
#   same         identical code
#   slow         ENGINE's training step SLOWDOWN slower (BENCH_PERF_SLOWDOWN): timed
#   more-NAME    counted benchmark NAME doing EXTRA (default 0.05) more work
#                (BENCH_PERF_EXTRA_WORK): e.g. more-bench_compare, more-runner_steps
# BUDGET (default 8m) is each gate run's --budget; CI gives 6m.
#   KINDS="same more-bench_compare more-runner_steps" BUDGET=6m bash scripts/perf_calibrate.sh OUT 5
# Run it alone on the machine.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:?usage: perf_calibrate.sh OUT [RUNS] [SLOWDOWN] [ENGINE]}
runs=${2:-10}
slowdown=${3:-0.15}
engine=${4:-ddp}
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
    for kind in ${KINDS:-same slow}; do
        extra=()
        case $kind in
            same) ;;
            slow) extra=(BENCH_PERF_SLOWDOWN="$slowdown" BENCH_PERF_SLOWDOWN_ENGINE="$engine") ;;
            more-*) extra=(BENCH_PERF_EXTRA_WORK="${EXTRA:-0.05}" BENCH_PERF_EXTRA_WORK_IN="${kind#more-}") ;;
            *) echo "perf_calibrate: no kind $kind" >&2; exit 2 ;;
        esac
        start=$(date +%s)
        env "${extra[@]}" .venv/bin/python scripts/perf.py --base HEAD --budget "${BUDGET:-8m}" \
            --keep "$out/$kind-$i" >"$out/$kind-$i.log" 2>&1
        rc=$?
        echo "$kind $i exit=$rc $(($(date +%s) - start))s" | tee -a "$out/summary"
    done
done
