#!/usr/bin/env bash
# Set up (as scripts/setup.sh test) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
python3 -m pytest -q "$@"
