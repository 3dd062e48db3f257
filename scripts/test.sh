#!/usr/bin/env bash
# Set up with the test lock (scripts/setup.sh test), then run the whole test suite (or the
# pytest arguments given) in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec .venv/bin/python -m pytest -q "$@"
