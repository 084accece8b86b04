#!/usr/bin/env bash
# Time the pytest-benchmark checks for real and compare them with the committed
# baseline (tests/benchmarks/baseline/). Fails when a median got slower than the
# limit (default 25%, chosen from the rerun noise measured on the 2-core CI
# machine: see the README). Save a new baseline with: scripts/perf.sh --save
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
storage="file://$PWD/tests/benchmarks/baseline"
if [ "${1:-}" = "--save" ]; then
    shift
    exec .venv/bin/python -m pytest tests/benchmarks --benchmark-enable \
        --benchmark-storage="$storage" --benchmark-save=baseline "$@"
fi
exec .venv/bin/python -m pytest tests/benchmarks --benchmark-enable \
    --benchmark-storage="$storage" --benchmark-compare \
    --benchmark-compare-fail="median:${BENCH_PERF_LIMIT:-25%}" \
    --benchmark-columns=min,median,iqr,rounds "$@"
