#!/usr/bin/env bash
# Set up .venv if needed, then run every check CI runs: lint, types, layering, tests.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not distributed").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports  # the layering contracts in pyproject.toml
exec .venv/bin/python -m pytest "$@"
