#!/usr/bin/env bash
# Our fixes to Horovod 0.28.1's sources, written once for every build of it
# (scripts/setup.sh for this machine's venv, scripts/gpu_bundle.sh for a GPU node).
#
# Usage: scripts/horovod_patch.sh SRC       patch the unpacked sdist in SRC
#        scripts/horovod_patch.sh --version print the patch set's name (part of the
#                                           wheel cache keys: bump it when a patch changes)
# Each patch is checked after it is applied; one that no longer applies stops the
# build with a one-line message instead of producing a silently unpatched wheel.
set -euo pipefail

PATCHES=p3
if [ "${1:-}" = --version ]; then echo "$PATCHES"; exit 0; fi
src=${1:?usage: horovod_patch.sh SRC (the unpacked horovod sdist)}
[ -f "$src/setup.py" ] && [ -d "$src/horovod" ] || {
    echo "horovod_patch: $src is not an unpacked Horovod sdist" >&2; exit 1; }

fail() { echo "horovod_patch: could not patch $1; is this Horovod 0.28.1?" >&2; exit 1; }

# 1. torch >= 2.1 headers require C++17; 0.28.1 asks for C++14 (fixed upstream
#    after the release, never published).
sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' \
    "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
grep -q 'CMAKE_CXX_STANDARD 17' "$src/horovod/torch/CMakeLists.txt" || fail "the C++ standard"

# 2. Process-set Gloo contexts are created without the interface horovodrun chose
#    (--network-interfaces / HOROVOD_GLOO_IFACE) and fall back to the host name's
#    address: multi-node runs fail wherever that is not the chosen network.
ctx="$src/horovod/common/gloo/gloo_context.cc"
sed -i '/InitializeForProcessSet/,/CreateDevice/ s/device_attr.iface = gloo_iface_;/device_attr.iface = global_context.gloo_iface_;/' "$ctx"
grep -q 'device_attr.iface = global_context.gloo_iface_;' "$ctx" || fail "the process-set Gloo interface"

# 3. Python 3.12 has no distutils. The torch extension's CMake asks
#    distutils.sysconfig for the Python headers (sysconfig gives the same folder),
#    and the launcher imports distutils.spawn.find_executable (shutil.which does the
#    same); without these the build fails, and horovodrun works only where
#    setuptools' distutils shim happens to be active.
cm="$src/horovod/torch/CMakeLists.txt"
sed -i 's/from distutils.sysconfig import get_python_inc; print(get_python_inc())/import sysconfig; print(sysconfig.get_paths()[\x27include\x27])/' "$cm"
grep -q "import sysconfig; print(sysconfig.get_paths()\['include'\])" "$cm" || fail "the Python include lookup"
js="$src/horovod/runner/js_run.py"
sed -i 's/^from distutils.spawn import find_executable$/from shutil import which as find_executable/' "$js"
grep -q '^from shutil import which as find_executable$' "$js" || fail "the launcher's distutils import"
if grep -rqs --include='*.py' --include=CMakeLists.txt distutils "$src/horovod"; then
    fail "every use of distutils (one is left under $src/horovod)"
fi
