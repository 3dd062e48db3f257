#!/usr/bin/env bash
# Set up (scripts/setup.sh), then start the gateway on its embedded defaults (or the flags given).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m app "$@"
