#!/usr/bin/env bash
# Prepare, on a machine with network, what an air-gapped GPU node needs besides
# the repository: a Horovod wheel built with NCCL and Gloo against the exact torch
# the node has preinstalled, for the node's Python, plus a manifest the GPU check
# reads to refuse a bundle built for another torch. No GPU is needed here: CUDA
# code is compiled by this machine's nvcc for the node's architecture.
#
# Usage: scripts/gpu_bundle.sh [OUT]      (OUT default: build/gpu-bundle, ignored by git)
# Then, on the node: scripts/gpu_check.sh --offline --bundle OUT [RESULTS]
#
# Environment (defaults fit the node described in docs/gpu.md):
#   BENCH_BUNDLE_TORCH   the node's torch version (default 2.11.0; PyPI's Linux build is +cu130)
#   BENCH_BUNDLE_PYTHON  a Python of the node's minor version (default: python3.12, or pyenv's)
#   BENCH_CUDA_HOME      CUDA toolkit whose nvcc compiles (default: /usr/local/cuda)
#   BENCH_CUDA_CC        compute capabilities, e.g. "90" (H100/H200) or "80;90" (default 90)
#   BENCH_WHEEL_CACHE    built wheels, keyed by versions (default: ~/.cache/bench-wheels)
#   BENCH_BUNDLE_CACHE   the build venv and NCCL copy (default: ~/.cache/bench-gpu-bundle)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

HOROVOD_VERSION=0.28.1
PATCHES=$(scripts/horovod_patch.sh --version)
TORCH=${BENCH_BUNDLE_TORCH:-2.11.0}
CC=${BENCH_CUDA_CC:-90}
CUDA_HOME=${BENCH_CUDA_HOME:-/usr/local/cuda}
CACHE=${BENCH_WHEEL_CACHE:-$HOME/.cache/bench-wheels}
WORK=${BENCH_BUNDLE_CACHE:-$HOME/.cache/bench-gpu-bundle}
out=$(realpath -m "${1:-build/gpu-bundle}")
MAX_MB=60  # what can be carried to the node besides the repository

say() { echo "gpu_bundle: $*"; }
die() { echo "gpu_bundle: $*" >&2; exit 1; }

# The first candidate that really runs (a pyenv shim exists where that version is not selected).
py=${BENCH_BUNDLE_PYTHON:-}
if [ -z "$py" ]; then
    for c in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
        if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then py=$c; break; fi
    done
fi
[ -n "$py" ] && "$py" -c pass 2>/dev/null ||
    die "no Python 3.12 found; set BENCH_BUNDLE_PYTHON to one (e.g. pyenv install 3.12)"
[ -x "$CUDA_HOME/bin/nvcc" ] || die "no nvcc in $CUDA_HOME/bin; set BENCH_CUDA_HOME to a CUDA 13 toolkit"
nvcc_v=$("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
py_tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
say "Horovod $HOROVOD_VERSION ($PATCHES) for torch $TORCH, $py_tag, nvcc $nvcc_v, sm_${CC//;/,sm_}"

# 1. A venv holding the node's torch (the build compiles against its headers and
#    checks the result imports). Created once; ~1.5 min and 4.8 GB for torch 2.11.
venv="$WORK/venv-$py_tag-torch$TORCH"
# Made in place (a moved venv's scripts point at the old path); a marker says it is whole.
if [ ! -f "$venv/.bundle-ready" ]; then
    say "creating $venv (downloads torch $TORCH and its CUDA wheels once)"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "torch==$TORCH" "cmake<4" packaging wheel setuptools \
        numpy cloudpickle psutil pyyaml
    touch "$venv/.bundle-ready"
fi
vpy="$venv/bin/python"
read -r torch_full torch_cuda cxx11 nccl_dir <<<"$("$vpy" -c '
import os, torch, nvidia.nccl as n
print(torch.__version__, torch.version.cuda, int(torch._C._GLIBCXX_USE_CXX11_ABI),
      os.path.dirname(n.__file__) if n.__file__ else list(n.__path__)[0])')"
[ "$torch_cuda" != None ] || die "torch $torch_full in $venv is a CPU build; the node's is a CUDA build"
nccl_v=$("$vpy" -c 'from importlib.metadata import version as v; print(v("nvidia-nccl-cu13"))' 2>/dev/null ||
         "$vpy" -c 'from importlib.metadata import version as v; print(v("nvidia-nccl-cu12"))')

# 2. NCCL as Horovod's build wants it: the wheel has lib/libnccl.so.2 only, and
#    the link step looks for libnccl.so. A copy we own gets the symlink.
nccl_home="$WORK/nccl-$nccl_v"
if [ ! -e "$nccl_home/lib/libnccl.so" ]; then
    rm -rf "$nccl_home" && mkdir -p "$nccl_home"
    cp -r "$nccl_dir/include" "$nccl_dir/lib" "$nccl_home/"
    ln -sf libnccl.so.2 "$nccl_home/lib/libnccl.so"
fi

# 3. The wheel, cached by everything that changes its content.
key="horovod-$HOROVOD_VERSION-$PATCHES-torch$torch_full-$py_tag-nccl$nccl_v-cuda$nvcc_v-sm${CC//;/-}"
wheel_dir="$CACHE/$key"
build_s=$(cat "$wheel_dir/build-seconds" 2>/dev/null || echo "")
if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
    say "building $key (minutes; once)"
    src_dir=$(mktemp -d)
    trap 'rm -rf "$src_dir"' EXIT
    "$vpy" -m pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$src_dir"
    tar -xzf "$src_dir/horovod-$HOROVOD_VERSION.tar.gz" -C "$src_dir"
    src="$src_dir/horovod-$HOROVOD_VERSION"
    scripts/horovod_patch.sh "$src"
    # CUDA_HOME too: torch's extension helper otherwise guesses the toolkit from the
    # nvcc on PATH (/usr/local/bin here) and Horovod's CMake then finds no libcudart.
    start=$SECONDS
    mkdir -p "$wheel_dir.tmp"
    env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
        HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo \
        HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME="$CUDA_HOME" CUDA_HOME="$CUDA_HOME" \
        HOROVOD_NCCL_HOME="$nccl_home" HOROVOD_NCCL_LINK=SHARED \
        HOROVOD_BUILD_CUDA_CC_LIST="$CC" MAKEFLAGS="-j$(nproc)" CMAKE_POLICY_VERSION_MINIMUM=3.5 \
        "$vpy" -m pip wheel -q --no-build-isolation --no-deps "$src" -w "$wheel_dir.tmp"
    build_s=$((SECONDS - start))
    echo "$build_s" > "$wheel_dir.tmp/build-seconds"
    rm -rf "$wheel_dir" && mv "$wheel_dir.tmp" "$wheel_dir"
    say "built in $((build_s / 60)) min $((build_s % 60)) s"
fi
wheel=$(ls "$wheel_dir"/horovod-*.whl)

# 4. Prove it here, as far as a machine without a GPU can: it installs beside
#    the node's torch, imports, reports NCCL, CUDA and Gloo, and the launcher runs
#    without setuptools' distutils shim (absent from a bare Python 3.12).
"$vpy" -m pip install -q --no-deps --force-reinstall "$wheel"
"$vpy" -c '
import horovod.torch as hvd
assert hvd.nccl_built(), "built without NCCL"
assert hvd.cuda_built(), "built without CUDA"
assert hvd.gloo_built(), "built without Gloo"
print(f"gpu_bundle: imports; nccl_built={hvd.nccl_built()} cuda_built=True gloo_built=True")
' || die "the wheel does not import with NCCL, CUDA and Gloo beside torch $torch_full"
check=$(SETUPTOOLS_USE_DISTUTILS=stdlib "$venv/bin/horovodrun" --check-build) ||
    die "horovodrun --check-build fails: $check"
for want in PyTorch NCCL Gloo; do
    grep -q "\[X\] $want" <<<"$check" || die "horovodrun --check-build does not show $want"
done
say "horovodrun --check-build shows PyTorch, NCCL and Gloo"

# 5. The bundle: the wheel and a manifest. Horovod's runtime needs (cloudpickle,
#    psutil, pyyaml, packaging) are on the node already; nothing else travels.
rm -rf "$out" && mkdir -p "$out"
cp "$wheel" "$out/"
cat > "$out/manifest.json" <<EOF
{
 "horovod": "$HOROVOD_VERSION",
 "patches": "$PATCHES",
 "wheel": "$(basename "$wheel")",
 "sha256": "$(sha256sum "$wheel" | cut -d' ' -f1)",
 "python": "$py_tag",
 "torch": "$torch_full",
 "torch_cuda": "$torch_cuda",
 "torch_cxx11_abi": $cxx11,
 "nccl": "$nccl_v",
 "nvcc": "$nvcc_v",
 "cuda_cc": "$CC",
 "build_seconds": ${build_s:-null},
 "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
EOF
mb=$(du -sm "$out" | cut -f1)
[ "$mb" -le "$MAX_MB" ] || die "bundle is $mb MB, over the $MAX_MB MB the node can receive"
say "bundle in $out: $(basename "$wheel") ($(du -h "$wheel" | cut -f1)), manifest.json; $mb MB in all"
