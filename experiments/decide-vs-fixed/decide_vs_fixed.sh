#!/usr/bin/env bash
# The sequential loop against fixed repeats in the same launches (issue 35's done-when):
# `bench run --decide-at 5% --budget 20m` over lenet and mlp at 1 and 2 workers, three
# engines, then a fixed-repeats sweep of as many launches, one after the other on the
# same machine, PASSES times (the order alternates by pass). The table counts the
# head-to-heads each settled (scripts/decide_vs_fixed.py).
#   bash scripts/decide_vs_fixed.sh [OUT] [PASSES] [FIRST]
# (OUT default results/decide-vs-fixed; FIRST: the first pass to run, to add passes to
# an earlier OUT)
# Run it alone on the machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-results/decide-vs-fixed}
passes=${2:-1}
first=${3:-1}
budget=${DVF_BUDGET:-20m}
sweep=(--engines ddp,horovod,paddle --models lenet,mlp --workers 1,2 --no-comm-cost --no-compare)
cells=12
ok_launches() {  # ok records of a results folder
    .venv/bin/python -c 'import json, sys
print(sum(json.loads(l)["status"] == "ok" for l in open(sys.argv[1])))' "$1/runs.jsonl"
}
timed() {  # timed NAME DIR ARGS...: run bench run, keep its wall seconds beside the records
    local dir=$2 start
    shift 2
    start=$(date +%s)
    .venv/bin/bench run "${sweep[@]}" --results "$dir" "$@"
    echo $(($(date +%s) - start)) > "$dir/wall-seconds"
}
for pass in $(seq "$first" "$passes"); do
    d="$out/pass$pass"
    if ((pass % 2)); then
        timed decide "$d/decide" --decide-at 5% --budget "$budget"
        repeats=$((($(ok_launches "$d/decide") + cells / 2) / cells))
        timed fixed "$d/fixed" --repeats "$repeats"
    else  # the fixed sweep first: as many repeats as the previous pass's loop used
        repeats=$((($(ok_launches "$out/pass$((pass - 1))/decide") + cells / 2) / cells))
        timed fixed "$d/fixed" --repeats "$repeats"
        timed decide "$d/decide" --decide-at 5% --budget "$budget"
    fi
done
.venv/bin/python scripts/decide_vs_fixed.py "$out"
