#!/usr/bin/env bash
# Check the scaling model (bench predict) against real runs: every engine and model at
# 2 workers across two network namespaces, at each link rate, and at 4 workers (two a
# namespace) on the first; on the first (fitted) rate also the compute-only twins and
# bench collectives at 2 and 4 workers (two worker counts separate the fixed and per-hop
# latency); the model fitted at 2 workers on the first rate predicts the other rates
# and the 4-worker runs, and the table gives
# its error per engine (predicted / measured throughput - 1) and whether each 95%
# interval holds the measured value. Needs root (namespaces, tc) and an sshd for
# horovod. Time it on a quiet machine: other load is measured too.
#
#   sudo scripts/predict_check.sh                 full check (docs/prediction.md, "Checked against runs")
#   sudo scripts/predict_check.sh --smallest      one engine, one model, two rates: proves
#                                                 the pipeline end to end in minutes
#
# Settings (environment): RATES (first = the fitted one), CHECK_WORKERS (on the first
# rate; empty: none) with CHECK_MODELS and CHECK_REPEATS, ENGINES, MODELS, REPEATS,
# MAX_STEPS, SIZES, ITERS, RESULTS, PYTHON. Reruns resume: cells already recorded are
# skipped (bench run), so an interrupted check continues where it stopped.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH=$PWD
py=${PYTHON:-$PWD/.venv/bin/python}
if [[ "${1:-}" == --smallest ]]; then
    : "${RATES:=200mbit 1gbit}" "${ENGINES:=ddp}" "${MODELS:=mlp}" "${REPEATS:=1}"
    : "${MAX_STEPS:=20}" "${SIZES:=65536,1048576}" "${ITERS:=5}" "${CHECK_WORKERS=}"
elif [[ -n "${1:-}" ]]; then
    echo "usage: $0 [--smallest]  (settings through RATES, ENGINES, MODELS, ...)" >&2
    exit 2
fi
RATES=${RATES:-500mbit 2gbit 10gbit}
ENGINES=${ENGINES:-horovod,ddp,paddle}
MODELS=${MODELS:-mlp,lenet,resnet18}
REPEATS=${REPEATS:-3}
MAX_STEPS=${MAX_STEPS:-30}
# up to 16 MiB: the fit of latency and bus bandwidth spans the models' buckets
SIZES=${SIZES:-4096,65536,1048576,16777216}
ITERS=${ITERS:-10}
RESULTS=${RESULTS:-results/predict-check}
CHECK_WORKERS=${CHECK_WORKERS-4}
# resnet18 at 4 workers on 2 cores takes 2-3 minutes a cell: the worker-count check
# uses the small models unless told otherwise
CHECK_MODELS=${CHECK_MODELS:-mlp,lenet}
CHECK_REPEATS=${CHECK_REPEATS:-$REPEATS}
read -r -a rates <<<"$RATES"
(( ${#rates[@]} >= 2 )) || { echo "RATES needs two rates or more: fit one, check the others" >&2; exit 2; }

fit=${rates[0]}
echo "== $fit (fitted): training cells (2 workers across the namespaces) and their compute-only twins"
# resnet18 reads the synthetic dataset (its default); the others their own
"$py" -m bench run --emulate-link "$fit" --workers 2 --engines "$ENGINES" \
    --models "$MODELS" --repeats "$REPEATS" --max-steps "$MAX_STEPS" --epochs 1 \
    --results "$RESULTS" --no-compare || echo "WARNING: some $fit cells did not finish ok" >&2
echo "== $fit: all-reduce latency and bus bandwidth at 2${CHECK_WORKERS:+ and $CHECK_WORKERS} workers"
"$py" -m bench collectives --emulate-link "$fit" --workers "2${CHECK_WORKERS:+,$CHECK_WORKERS}" \
    --engines "$ENGINES" --sizes "$SIZES" --iters "$ITERS" --results "$RESULTS" ||
    echo "WARNING: some $fit collectives did not finish ok" >&2
# checked cells are never fitted: no twins, no collectives
for rate in "${rates[@]:1}"; do
    echo "== $rate (checked): training cells"
    "$py" -m bench run --emulate-link "$rate" --workers 2 --engines "$ENGINES" --no-comm-cost \
        --models "$MODELS" --repeats "$REPEATS" --max-steps "$MAX_STEPS" --epochs 1 \
        --results "$RESULTS" --no-compare || echo "WARNING: some $rate cells did not finish ok" >&2
done
if [[ -n "$CHECK_WORKERS" ]]; then
    echo "== $fit (checked): training cells at $CHECK_WORKERS workers"
    "$py" -m bench run --emulate-link "$fit" --workers "$CHECK_WORKERS" --engines "$ENGINES" \
        --no-comm-cost --models "$CHECK_MODELS" --repeats "$CHECK_REPEATS" \
        --max-steps "$MAX_STEPS" --epochs 1 --results "$RESULTS" --no-compare ||
        echo "WARNING: some $CHECK_WORKERS-worker cells did not finish ok" >&2
fi
echo "== the model fitted at 2 workers on ${rates[0]}, checked on the other rates and worker counts"
exec "$py" -m bench predict "$RESULTS" --fit-link "${rates[0]}" --fit-workers 2 --check
