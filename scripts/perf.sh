#!/usr/bin/env bash
# The pytest-benchmark regression gate (scripts/perf.py): by default an A/B check of the
# merge base with main against the working tree, alternated on this machine, that fails
# only on a slowdown it is sure of. Arguments go to scripts/perf.py (--help lists them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh >/dev/null
exec .venv/bin/python scripts/perf.py "$@"
