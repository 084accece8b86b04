#!/usr/bin/env bash
# Real A/A decisions (docs/methodology.md#decided-not-only-measured): each engine against
# itself under two labels (`bench run --aa`), lenet and mlp at 1 and 2 workers, decided
# by the sequential loop at +-5% (AA_PRECISION), 4 A/A pairs an engine, 12 a pass. Any
# "different" between the two labels of one engine is a false positive, measured.
#   bash scripts/aa_check.sh [OUT] [PASSES] [FIRST]
# (OUT default results/aa-check; 2 passes; FIRST: the first pass to run, to add passes
# to an earlier OUT)
# Run it alone on the machine: anything else running is the noise it measures.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-results/aa-check}
passes=${2:-2}
first=${3:-1}
budget=${AA_BUDGET:-6m}
precision=${AA_PRECISION:-5%}
for pass in $(seq "$first" "$passes"); do
    for engine in ddp horovod paddle; do
        .venv/bin/bench run --aa --engines "$engine" --models lenet,mlp --workers 1,2 \
            --no-comm-cost --decide-at "$precision" --budget "$budget" --no-compare \
            --results "$out/pass$pass/$engine"
    done
done
for dir in "$out"/pass*/*; do
    echo "== $dir"
    .venv/bin/bench compare --decide-at "$precision" "$dir" | sed -n '/decided/,/^$/p'
done
