#!/usr/bin/env bash
# Install the gateway and its front-end packages. Safe to run again.
#   bash scripts/setup.sh          the gateway (and the reference client)
#   bash scripts/setup.sh test     plus what the tests need
set -euo pipefail
cd "$(dirname "$0")/.."
extras="client"
[ "${1:-}" = "test" ] && extras="client,test"
# torch pinned first: 2.13.0 is a CPU build; an unpinned torch pulls a multi-GB CUDA build.
python3 -m pip install --quiet torch==2.13.0
python3 -m pip install --quiet -e ".[${extras}]"
# onnxruntime-web and uPlot for the dashboard and the browser demo, from package-lock.json.
npm ci --ignore-scripts --no-audit --no-fund --silent
