#!/usr/bin/env bash
# The GPU check, one prepared command for a short slot on a GPU node, which may
# have no network: a sweep of DDP, Horovod (NCCL) and Paddle at 1 GPU (and at all
# GPUs when there are several) on resnet50 (synthetic 224x224, fp32 and bf16) and
# lenet (digits), then the GPU tests; an engine not installed there is recorded as
# unavailable and the others run. Sized for under 8 minutes on one H200 (docs/gpu.md
# gives the step costs behind the estimate).
#
# Usage: scripts/gpu_check.sh [--offline] [--dry-run] [--bundle DIR] [OUT]
#   OUT        output folder (default results/gpu-check-<time>); at the end it holds at
#              most 7 files: summary.txt, report.txt, report.html, gpu-tests.log,
#              check.log, records-logs.tar.gz (records + every log), bundle.txt
#   --offline  use the interpreter given (BENCH_PYTHON, default python3) and the
#              packages installed for it: no venv, no pip index, no network. The
#              project is put on PYTHONPATH, not installed. Chosen by itself when
#              there is no .venv and no default route.
#   --bundle   a Horovod bundle from scripts/gpu_bundle.sh (default build/gpu-bundle
#              when it exists): installed into a temporary folder for this check when
#              Horovod is not already importable, after its manifest's torch and
#              Python are compared with the interpreter's (a mismatch is refused)
#   --dry-run  check the interpreter and bundle, print every launch, write nothing; on
#              an interpreter without the suite's packages (no torch: any laptop) it
#              still prints the plan, says what the check itself would refuse, and
#              shows each sweep as its bench run command where bench cannot load
# Environment:
#   BENCH_PYTHON   interpreter for --offline (default python3)
#   BENCH_GPUS     GPUs to plan for in --dry-run (default 1; a real run counts them)
#   BENCH_ENGINES  engines to check (default: all; named engines that are absent fail the check)
# Exit status: 0 all ran ok, 1 something failed (the reports say what), 2 refused before starting.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

dry=0 offline=0 bundle=${BENCH_BUNDLE:-} out=""
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry=1 ;;
        --offline) offline=1 ;;
        --bundle) bundle=${2:?--bundle needs a folder}; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "gpu_check: unknown option $1; see scripts/gpu_check.sh --help" >&2; exit 2 ;;
        *) [ -z "$out" ] || { echo "gpu_check: one OUT folder only (got $out and $1)" >&2; exit 2; }
           out=$1 ;;
    esac
    shift
done
out=$(realpath -m "${out:-results/gpu-check-$(date +%Y%m%d-%H%M%S)}")
start=$SECONDS
phase() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - start))s] gpu_check: $*"; }
refuse() { echo "gpu_check: $*" >&2; exit 2; }

# --- the interpreter -------------------------------------------------------------
# Offline by itself when nothing else could work: no venv here and no route out.
has_route() { awk 'NR > 1 && $2 == "00000000" { found = 1 } END { exit !found }' /proc/net/route 2>/dev/null; }
if [ "$offline" = 0 ] && [ ! -x .venv/bin/python ]; then
    if has_route; then
        refuse "no .venv here; run scripts/setup.sh first (needs the package index), or pass --offline to use python3's packages"
    fi
    offline=1
    phase "no .venv and no network route: offline mode"
fi
if [ "$offline" = 1 ]; then
    py=${BENCH_PYTHON:-python3}
    command -v "$py" >/dev/null || refuse "interpreter $py not found; set BENCH_PYTHON"
    # Nothing may reach a package index; the project runs from this folder, uninstalled.
    export PIP_NO_INDEX=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
else
    py=.venv/bin/python
fi
py=$(command -v "$py")
# Everything the suite imports at run time, checked at once: one line naming all missing.
missing=$("$py" - <<'EOF'
import importlib.util
need = ["numpy", "torch", "yaml", "psutil", "pandas", "tabulate", "matplotlib"]
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
EOF
) || refuse "$py does not run"
lacks="" plannable=1
if [ -n "$missing" ]; then
    lacks="$py lacks these packages the suite needs: $missing (carry their wheels; see docs/gpu.md)"
    # A dry run is for reading the plan anywhere (docs/gpu.md), so it goes on and says
    # what the check would refuse; the launches need bench, which needs numpy and more.
    [ "$dry" = 1 ] || refuse "$lacks"
    "$py" -c 'import bench.cli.run' 2>/dev/null || plannable=0
fi
read -r torch_v py_tag has_pytest < <("$py" -c '
import importlib.util, sys
try:
    import torch
    version = torch.__version__
except Exception:  # only a dry run gets here without torch (refused above otherwise)
    version = "absent"
print(version, f"cp{sys.version_info[0]}{sys.version_info[1]}", int(importlib.util.find_spec("pytest") is not None))')

# --- Horovod from the bundle, when it is not installed -----------------------------
if [ -z "$bundle" ] && [ -f build/gpu-bundle/manifest.json ]; then bundle=build/gpu-bundle; fi
bundle_note="no Horovod bundle given"
if "$py" -c '
import importlib.util, sys
try:
    sys.exit(importlib.util.find_spec("horovod") is None)
except ImportError:
    sys.exit(1)'; then
    bundle_note="Horovod already installed for $py; no bundle used"
elif [ -n "$bundle" ]; then
    [ -f "$bundle/manifest.json" ] || refuse "$bundle has no manifest.json; make the bundle with scripts/gpu_bundle.sh"
    read -r b_torch b_py b_wheel < <("$py" -c '
import json, sys; m = json.load(open(sys.argv[1])); print(m["torch"], m["python"], m["wheel"])' "$bundle/manifest.json")
    # without torch (a dry run's laptop) only the Python can be compared
    if { [ "$torch_v" != absent ] && [ "$b_torch" != "$torch_v" ]; } || [ "$b_py" != "$py_tag" ]; then
        refuse "the Horovod bundle in $bundle was built for torch $b_torch ($b_py), but $py has torch $torch_v ($py_tag); rebuild it with BENCH_BUNDLE_TORCH=${torch_v%%+*} scripts/gpu_bundle.sh"
    fi
    [ -f "$bundle/$b_wheel" ] || refuse "$bundle/manifest.json names $b_wheel, which is not there"
    bundle_note="Horovod from $bundle/$b_wheel (built for torch $b_torch, $b_py)"
    if [ "$dry" = 0 ]; then
        site=$(mktemp -d "${TMPDIR:-/tmp}/bench-gpu-site.XXXXXX")
        trap 'rm -rf "$site"' EXIT
        "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --disable-pip-version-check --target "$site" "$bundle/$b_wheel" ||
            refuse "could not install $bundle/$b_wheel with $py -m pip (offline, into $site)"
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
        # Same torch version but another build of it (another ABI) shows here, as an
        # undefined symbol on import: refused in one line rather than in every cell.
        why=$("$py" -c 'import horovod.torch as h; print("ok" if h.nccl_built() else "no NCCL")' 2>&1 | tail -1) || true
        [ "$why" = ok ] || refuse "the bundle's Horovod does not load with NCCL beside this torch ($why); rebuild the bundle against this exact torch build"
    fi
fi

# --- the plan ------------------------------------------------------------------
if [ "$dry" = 1 ]; then
    gpus=${BENCH_GPUS:-1}
else
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [ "${gpus:-0}" -ge 1 ] || refuse "nvidia-smi sees no GPU; use --dry-run to print the plan on CPU"
fi
workers=1
if [ "$gpus" -gt 1 ]; then workers="1,$gpus"; fi
raw="$out/raw"  # packed into records-logs.tar.gz at the end
bench=("$py" -m bench)
# One worker per GPU, one CPU thread each; the same spec for every engine. Engines
# are named only when the user named them: absent ones then fail the check.
common=(--workers "$workers" --device cuda --threads 1 --no-comm-cost --timeout 150
        --results "$raw" --no-compare ${BENCH_ENGINES:+--engines "$BENCH_ENGINES"})
resnet=(--models resnet50 --datasets synthetic --batch-size 32 --synthetic-samples 640
        --epochs 10 --max-steps 50 --warmup-steps 10 --repeats 2)
lenet=(--models lenet --datasets digits --batch-size 64 --epochs 3 --repeats 1)
sweeps=("${resnet[*]} --precision fp32" "${resnet[*]} --precision bf16" "${lenet[*]}")

# GPU tests: those that one GPU can run; the others are named, not counted as skips.
deselect=() not_run=() engines_here=""
[ "$plannable" = 0 ] || engines_here=$("$py" - "${BENCH_ENGINES:-horovod,ddp,paddle}" <<'EOF'
import sys
from bench.engines import Engine
from bench.sweep import engine_unavailable
names = [n.strip() for n in sys.argv[1].split(",")]
known = [e.value for e in Engine]
if any(n not in known for n in names):
    sys.exit(f"gpu_check: BENCH_ENGINES={sys.argv[1]!r}: engines are {', '.join(known)}")
for name in names:
    print(name, "ok" if engine_unavailable(Engine(name)) is None else "absent")
EOF
) || exit 2
while read -r engine state; do
    [ -n "$engine" ] || continue  # none read: bench did not load (a dry run says so)
    if [ "$state" != ok ]; then
        deselect+=("not $engine")
        not_run+=("GPU tests of $engine: $engine is not installed for $py (its sweep cells are recorded as unavailable)")
    fi
done <<<"$engines_here"
if [ "$gpus" -lt 2 ]; then
    deselect+=("not two_gpus")
    not_run+=("test_horovod_and_ddp_agree_on_two_gpus, test_synchronised_batchnorm_on_two_gpus, multi-rank NCCL over 2+ GPUs and scaling efficiency: need 2+ GPUs, this node has $gpus")
fi
kexpr=""
for d in "${deselect[@]}"; do kexpr+="${kexpr:+ and }$d"; done
tests=("$py" -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs ${kexpr:+-k "$kexpr"})

if [ "$dry" = 1 ]; then
    echo "# gpu_check plan for $gpus GPU(s), workers $workers, $py (torch $torch_v, $py_tag)"
    echo "# $bundle_note; records in $raw, packed into $out"
    if [ -n "$lacks" ]; then
        echo "# $lacks: the check itself refuses until they are there"
    fi
    if [ "$plannable" = 0 ]; then
        echo "# bench does not load with $py, so each sweep is its bench run command (with the packages, --dry-run prints every launch) and installed engines are not checked"
    fi
    for s in "${sweeps[@]}"; do
        if [ "$plannable" = 1 ]; then
            # shellcheck disable=SC2086  # each sweep's flags are words by design
            "${bench[@]}" run "${common[@]}" $s --dry-run
        else
            echo "${bench[*]} run ${common[*]} $s"
        fi
    done
    echo "BENCH_EXPECT_GPU=1 ${tests[*]}"
    for n in "${not_run[@]}"; do echo "# not run: $n"; done
    echo "${bench[*]} compare $raw --format html --out $out"
    exit 0
fi

# --- the run: every phase runs, whatever the one before it returned ----------------------
mkdir -p "$raw"
exec > >(tee "$out/check.log") 2>&1
tee_pid=$!
phase "start: $gpus GPU(s), $py (torch $torch_v, $py_tag), $bundle_note; output in $out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
status=0
for s in "${sweeps[@]}"; do
    phase "sweep: ${s}"
    # shellcheck disable=SC2086
    "${bench[@]}" run "${common[@]}" $s || status=1
done
if [ "$has_pytest" = 1 ]; then
    # whatever the sweeps took, the tests stop in time for the reports and a rerun
    left=$((540 - (SECONDS - start))); [ "$left" -ge 60 ] || left=60
    phase "GPU tests (at most ${left}s)"
    BENCH_EXPECT_GPU=1 timeout "$left" "${tests[@]}" > "$out/gpu-tests.log" 2>&1 || status=1
    tail -n 15 "$out/gpu-tests.log"; echo
else
    echo "pytest is not installed for $py: GPU tests not run" | tee "$out/gpu-tests.log"
    status=1
fi
for n in "${not_run[@]}"; do echo "not run: $n" | tee -a "$out/gpu-tests.log"; done
phase "reports"
"${bench[@]}" compare "$raw" > "$out/report.txt" 2>&1 || { echo "bench compare failed (see report.txt)"; status=1; }
if ! "${bench[@]}" compare "$raw" --format html --out "$out" > /dev/null 2>>"$out/report.txt"; then
    echo "bench compare --format html failed (see report.txt)"; status=1
    # the HTML report is still there, saying why it has no tables
    "$py" -c 'import html, sys; print("<!doctype html><html><body><h1>bench compare failed</h1><pre>"
              + html.escape(open(sys.argv[1]).read()) + "</pre></body></html>")' \
        "$out/report.txt" > "$out/report.html" || true
fi
"$py" - "$raw" > "$out/summary.txt" <<'EOF' || status=1
import sys
from bench import records
loaded = records.load([sys.argv[1]])
print(f"{'engine':8} {'model':9} {'prec':5} {'np':>2} {'status':11} {'samples/s':>10} {'peak GPU MB':>11} {'wall s':>7}")
for r in loaded.records:
    s, res = r.get("spec") or {}, r.get("resources") or {}
    gpu = max(res.get("peak_gpu_mb") or [0]) or float("nan")
    print(f"{r['engine']:8} {s.get('model', '?'):9} {s.get('precision', '?'):5} {r['world_size']:>2} "
          f"{r['status']:11} {r.get('throughput') or float('nan'):>10.1f} {gpu:>11.0f} "
          f"{r.get('training_wall_s') or float('nan'):>7.1f}")
for p in loaded.problems:
    print("problem:", p)
EOF
{ echo "torch $torch_v ($py_tag) at $py"; echo "$bundle_note"; [ -z "$bundle" ] || cat "$bundle/manifest.json"; } > "$out/bundle.txt"
phase "packing records and logs"
if tar -czf "$out/records-logs.tar.gz" -C "$out" raw; then
    rm -rf "$raw"
    mb=$(( $(stat -c %s "$out/records-logs.tar.gz") / 1048576 ))
    [ "$mb" -lt 16 ] || echo "WARNING: records-logs.tar.gz is $mb MB, over 16 MB"
else
    echo "packing failed: records and logs left unpacked in $raw"; status=1
fi
cat "$out/summary.txt"
phase "done, status $status; files in $out: $(cd "$out" && ls | tr '\n' ' ')"
exec >&- 2>&-
wait "$tee_pid" || true  # check.log complete before the caller collects it
exit $status
