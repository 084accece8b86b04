#!/usr/bin/env bash
# Set up .venv if needed, then run the default sweep (bench run) on the bundled
# digits data and print the comparison. Extra arguments go to `bench run`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/bench run "$@"
