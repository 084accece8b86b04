#!/usr/bin/env bash
# Set up .venv if needed, then run every check CI runs: lint, types, layering, tests.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not distributed"; -n 0 runs
# the tests in this one process).
#
# Two processes, a test file each at a time: the suite spends half its time waiting
# (daemons starting, rendezvous, time-outs), so two cores run it in about half the
# time (docs/development.md#where-the-suites-time-goes). `-n auto` is two at most, one
# where one CPU is usable (tests/conftest.py). BENCH_TEST_PROCESSES sets the number.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# mypy's cache outside the clone, as the Horovod wheel's (CI clones afresh): a warm
# machine checks what changed only. mypy keys every entry by its version, its options
# and each file's hash.
MYPY_CACHE_DIR=${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bench-mypy} .venv/bin/mypy
.venv/bin/lint-imports  # the layering contracts in pyproject.toml
exec .venv/bin/python -m pytest -n "${BENCH_TEST_PROCESSES:-auto}" --dist loadfile "$@"
