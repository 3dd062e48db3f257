#!/usr/bin/env bash
# Set up with the test lock (scripts/setup.sh test), then run the whole test suite (or the
# pytest arguments given) in .venv, in RLLINK_TEST_WORKERS (default 3: most tests wait on processes and sockets, not on a core) pytest-xdist workers,
# each running whole test files (a file's fixtures, such as a kit's build, are made once), in
# tests/conftest.py's order (longest first; --no-loadscope-reorder: xdist would reorder by test count).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec .venv/bin/python -m pytest -q -n "${RLLINK_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder "$@"
