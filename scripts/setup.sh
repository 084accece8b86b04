#!/usr/bin/env bash
# Create .venv/ with everything the suite needs: torch, paddle, a patched
# Horovod, the bench package (editable) and the dev tools.
#
# Idempotent: a second run with nothing changed takes seconds. The Horovod wheel
# is cached outside the repo, keyed by (horovod, torch, python, gpu) versions and
# its controllers, because building it takes minutes and the extension is tied to
# the exact torch it was compiled against. Horovod gets MPI as well as Gloo (the
# MPI controller, horovodrun --mpi and Adasum) when an MPI compiler wrapper
# (mpicxx, e.g. Debian's libopenmpi-dev) is on the PATH.
#
# Environment:
#   BENCH_GPU          1: CUDA torch, paddlepaddle-gpu and Horovod with NCCL; 0: CPU builds;
#                      auto (default): 1 when nvidia-smi sees a GPU
#   BENCH_PADDLE_INDEX where paddlepaddle-gpu comes from (default: Paddle's cu126 index)
#   BENCH_TORCH_INDEX  where the CUDA torch comes from (default: the configured index)
#   BENCH_CUDA_HOME    CUDA toolkit Horovod's NCCL build compiles with (default: /usr/local/cuda)
#   BENCH_PYTHON       interpreter used to create the venv (default: python3.11, else python3)
#   BENCH_WHEEL_CACHE  where built Horovod wheels live (default: ~/.cache/bench-wheels)
#
# --check: install nothing; exit 0 when .venv is up to date, 1 when setup would
# change it (tests/test_docs_as_typed.py runs scripts/run.sh only when it would not).
set -euo pipefail

check=0
case ${1:-} in
    --check) check=1 ;;
    "") ;;
    *) echo "setup: unknown argument $1 (only --check)" >&2; exit 2 ;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

TORCH_VERSION=2.13.0
PADDLE_VERSION=3.3.1
HOROVOD_VERSION=0.28.1
# Our fixes to the Horovod sources (scripts/horovod_patch.sh); part of the wheel's cache key.
HOROVOD_PATCHES=$(scripts/horovod_patch.sh --version)
GPU=${BENCH_GPU:-auto}
if [ "$GPU" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        GPU=1
        echo "setup: NVIDIA GPU found; installing the CUDA builds (BENCH_GPU=0 for CPU ones)"
    else
        GPU=0
    fi
fi
CACHE=${BENCH_WHEEL_CACHE:-$HOME/.cache/bench-wheels}
# Which controllers Horovod is built with: part of the stamp and the wheel's cache
# key, so installing MPI later rebuilds and reinstalls the wheel.
if command -v mpicxx >/dev/null 2>&1; then
    CONTROLLERS=gloo-mpi
else
    CONTROLLERS=gloo
    echo "setup: no MPI compiler wrapper (mpicxx): Horovod is built with Gloo only (apt-get install libopenmpi-dev openmpi-bin adds MPI and Adasum)"
fi

vpy=.venv/bin/python
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)
# Exact versions for every install (constraints.txt says how it is made); the GPU wheels
# from other indexes are the exception, since those indexes carry other version sets.
pin=(-c "$root/constraints.txt")

# The project's own modules compiled to bytecode once, here: an environment that sets
# PYTHONDONTWRITEBYTECODE (some containers do) would otherwise have every process of a
# sweep or of the test suite compile them from source again (0.05-0.1 s of CPU each;
# the suite starts hundreds). Python still reads these; a changed source is
# compiled afresh. compileall rewrites only what changed: a fraction of a second.
compile_sources() {
    "$vpy" -m compileall -q bench runners models scripts tests >/dev/null
}

stamp=.venv/.bench-setup
want="torch=$TORCH_VERSION paddle=$PADDLE_VERSION horovod=$HOROVOD_VERSION-$HOROVOD_PATCHES-$CONTROLLERS gpu=$GPU pyproject=$(sha1sum pyproject.toml | cut -c1-12) constraints=$(sha1sum constraints.txt | cut -c1-12)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "setup: .venv is up to date ($want)"
    [ "$check" = 1 ] || compile_sources
    exit 0
fi
if [ "$check" = 1 ]; then
    echo "setup: .venv is not up to date: it has ($(cat "$stamp" 2>/dev/null || echo nothing)), setup would make ($want)"
    exit 1
fi
py=${BENCH_PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -x "$vpy" ]; then
    echo "setup: creating .venv with $py"
    "$py" -m venv .venv
fi

# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build on
# CPU machines, and Horovod's build must see the final torch.
if [ "$GPU" = 1 ]; then
    # PyPI's Linux torch wheels are the CUDA builds; BENCH_TORCH_INDEX picks another
    # (e.g. https://download.pytorch.org/whl/cu126) where a local CPU wheel would win.
    "${pip[@]}" install "torch==$TORCH_VERSION" ${BENCH_TORCH_INDEX:+--index-url "$BENCH_TORCH_INDEX"}
    $vpy -c 'import sys, torch; sys.exit(torch.version.cuda is None)' || {
        echo "setup: BENCH_GPU=1 but the torch installed is a CPU build; set BENCH_TORCH_INDEX" >&2
        exit 1; }
    # Paddle 3.x GPU wheels live on Paddle's own index, not on PyPI.
    "${pip[@]}" install "paddlepaddle-gpu==$PADDLE_VERSION" \
        -i "${BENCH_PADDLE_INDEX:-https://www.paddlepaddle.org.cn/packages/stable/cu126/}"
else
    "${pip[@]}" install "${pin[@]}" "torch==$TORCH_VERSION"
    "${pip[@]}" install "${pin[@]}" "paddlepaddle==$PADDLE_VERSION"
fi
# Horovod's build needs these in the environment (it runs without isolation).
"${pip[@]}" install "${pin[@]}" "cmake<4" packaging wheel setuptools

torch_v=$($vpy -c 'import torch; print(torch.__version__.split("+")[0])')
py_v=$($vpy -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
flavour=$([ "$GPU" = 1 ] && echo nccl || echo cpu)
wheel_dir="$CACHE/horovod-$HOROVOD_VERSION-$HOROVOD_PATCHES-torch$torch_v-$py_v-$flavour-$CONTROLLERS"
if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
    echo "setup: building Horovod $HOROVOD_VERSION for torch $torch_v ($flavour, $CONTROLLERS); takes a few minutes once"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "${pip[@]}" download --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$work"
    tar -xzf "$work"/horovod-"$HOROVOD_VERSION".tar.gz -C "$work"
    src="$work/horovod-$HOROVOD_VERSION"
    scripts/horovod_patch.sh "$src"
    export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 \
        HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo
    # MPI adds a controller (and Adasum); a run under horovodrun --gloo moves its tensors
    # over Gloo on either build, one under mpirun over MPI (records say which ran).
    if [ "$CONTROLLERS" = gloo-mpi ]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; fi
    if [ "$GPU" = 1 ]; then
        # As scripts/gpu_bundle.sh (verified build): CUDA_HOME explicitly, since torch's
        # extension helper otherwise guesses the toolkit from the nvcc on PATH and CMake
        # then finds no libcudart; NCCL from torch's nvidia-nccl wheel, which ships
        # libnccl.so.2 only, so a copy gets the libnccl.so the link step looks for.
        cuda_home=${BENCH_CUDA_HOME:-/usr/local/cuda}
        [ -x "$cuda_home/bin/nvcc" ] || {
            echo "setup: BENCH_GPU=1 needs nvcc: none in $cuda_home/bin; set BENCH_CUDA_HOME" >&2; exit 1; }
        nccl_dir=$(.venv/bin/python -c 'import os, nvidia.nccl as n; print(os.path.dirname(n.__file__) if n.__file__ else list(n.__path__)[0])') || {
            echo "setup: BENCH_GPU=1 but torch's nvidia-nccl wheel is not installed" >&2; exit 1; }
        mkdir -p "$work/nccl" && cp -r "$nccl_dir/include" "$nccl_dir/lib" "$work/nccl/"
        ln -sf libnccl.so.2 "$work/nccl/lib/libnccl.so"
        export HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_HOME="$work/nccl" HOROVOD_NCCL_LINK=SHARED \
            HOROVOD_CUDA_HOME="$cuda_home" CUDA_HOME="$cuda_home"
    fi
    export MAKEFLAGS="-j$(nproc)" CMAKE_POLICY_VERSION_MINIMUM=3.5
    mkdir -p "$wheel_dir.tmp"
    "${pip[@]}" wheel --no-build-isolation --no-deps "$src" -w "$wheel_dir.tmp"
    rm -rf "$wheel_dir" && mv "$wheel_dir.tmp" "$wheel_dir"
fi
"${pip[@]}" install "${pin[@]}" --no-deps --force-reinstall "$wheel_dir"/horovod-*.whl
# Horovod's runtime dependencies (the wheel was installed without them).
"${pip[@]}" install "${pin[@]}" cffi cloudpickle psutil pyyaml

# setuptools is installed above (pinned), so the editable build needs no isolated env
if [ "$GPU" = 1 ]; then
    "${pip[@]}" install "${pin[@]}" --no-build-isolation -e ".[dev]"
else
    "${pip[@]}" install "${pin[@]}" --no-build-isolation -e ".[dev,paddle]"
fi
"${pip[@]}" check
# What Horovod was built with, from its own API (horovodrun --check-build also
# imports every framework it knows: 7 s against 1.5 s).
built=$($vpy -c 'import horovod.torch as h; print("Gloo" * h.gloo_built(), "MPI" * h.mpi_built())') || {
    echo "setup: Horovod's PyTorch extension does not load (the traceback above); remove $wheel_dir to rebuild it" >&2; exit 1; }
want_built=(Gloo)
if [ "$CONTROLLERS" = gloo-mpi ]; then want_built+=(MPI); fi
for part in "${want_built[@]}"; do
    grep -qw "$part" <<<"$built" || {
        echo "setup: Horovod was built without $part support (wanted ${want_built[*]}; it has: ${built:-neither})" >&2; exit 1; }
done
echo "$want" > "$stamp"
compile_sources
echo "setup: done ($want)"
