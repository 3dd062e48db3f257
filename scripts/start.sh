#!/usr/bin/env bash
# Set up and start the gateway on its embedded defaults (or the flags given).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec python3 -m app "$@"
