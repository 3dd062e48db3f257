#!/usr/bin/env bash
# Set up the project in its own virtual environment (.venv) from the lock files, and the
# front-end packages in node_modules/ from package-lock.json. Safe to run again: what is
# already installed from the same lock files is not installed again.
#   bash scripts/setup.sh          the gateway (and the reference client): requirements/gateway.txt
#   bash scripts/setup.sh games    plus the games' packages (PettingZoo, pygame-ce): requirements/games.txt
#   bash scripts/setup.sh test     plus what the tests need (the games' packages too): requirements/test.txt
set -euo pipefail
cd "$(dirname "$0")/.."
# Each profile: the requirement files pip installs, then any other file they read (games.txt
# takes its versions from the test lock: `-c test.txt`), which the stamp below covers too.
case "${1:-}" in
  "") profile="gateway"; files=(requirements/gateway.txt); installed=1 ;;
  games) profile="games"; files=(requirements/gateway.txt requirements/games.txt requirements/test.txt); installed=2 ;;
  test) profile="test"; files=(requirements/test.txt); installed=1 ;;
  *) echo "setup: unknown profile '$1': use none (the gateway), games or test" >&2; exit 2 ;;
esac

if [ ! -x .venv/bin/python ]; then
  if ! python3 -m venv .venv; then
    rm -rf .venv
    echo "setup: python3 cannot make a virtual environment; on Debian or Ubuntu: apt-get install python3-venv" >&2
    exit 1
  fi
fi

# onnxruntime-web, uPlot and Swagger UI for the pages, as locked in package-lock.json.
wanted="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ "$(cat node_modules/.installed 2>/dev/null)" != "$wanted" ]; then
  echo "setup: installing the front-end packages (npm ci)" >&2
  npm ci --ignore-scripts --no-audit --no-fund --silent
  echo "$wanted" > node_modules/.installed
fi

# The Python packages, exactly as locked (torch: its CPU build), then the project itself
# (after npm: the project maps the vendor files the pages load into its package), which
# compiles app/sansio/_columns.c where a C compiler is at hand (setup.py; else it goes on
# without it).
stamp=".venv/.installed-$profile"
wanted="$(cat "${files[@]}" pyproject.toml setup.py app/sansio/_columns.c app/sansio/_powers_of_five.h | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  args=()
  for file in "${files[@]:0:$installed}"; do args+=(-r "$file"); done
  echo "setup: installing ${files[*]:0:$installed} into .venv" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "${args[@]}"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
  echo "$wanted" > "$stamp"
fi
