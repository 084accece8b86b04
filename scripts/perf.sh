#!/usr/bin/env bash
# Time the pytest-benchmark checks for real and fail when a minimum got slower than
# the limit (default 25%, chosen from the rerun noise measured on the 2-core CI
# machine: see the README).
#
#   scripts/perf.sh                  against the committed baseline (tests/benchmarks/baseline/)
#   scripts/perf.sh --against REV    A/B: time REV (a git worktree) and then this tree, back to
#                                    back on the same machine, and compare the two; immune to
#                                    the machine having drifted since the baseline was saved
#   scripts/perf.sh --save           record a new committed baseline
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
py=$PWD/.venv/bin/python
compare=(--benchmark-compare-fail="${BENCH_PERF_STAT:-min}:${BENCH_PERF_LIMIT:-25%}"
         --benchmark-columns=min,median,iqr,rounds --benchmark-sort=name)
storage="file://$PWD/tests/benchmarks/baseline"
case "${1:-}" in
--save)
    shift
    exec "$py" -m pytest tests/benchmarks --benchmark-enable \
        --benchmark-storage="$storage" --benchmark-save=baseline "$@"
    ;;
--against)
    rev=${2:?--against needs a git revision}
    shift 2
    work=$(mktemp -d)
    trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
    git worktree add -q --detach "$work/base" "$rev"
    ln -s "$PWD/.venv" "$work/base/.venv"
    # Both sides import their own bench/models/runners: pytest runs from each tree.
    (cd "$work/base" && "$py" -m pytest tests/benchmarks --benchmark-enable -p no:cacheprovider \
        --benchmark-storage="file://$work/store" --benchmark-save=base "$@")
    # not exec: the EXIT trap must remove the worktree afterwards
    "$py" -m pytest tests/benchmarks --benchmark-enable -p no:cacheprovider \
        --benchmark-storage="file://$work/store" --benchmark-compare "${compare[@]}" "$@"
    exit $?
    ;;
esac
exec "$py" -m pytest tests/benchmarks --benchmark-enable \
    --benchmark-storage="$storage" --benchmark-compare "${compare[@]}" "$@"
