#!/usr/bin/env bash
# Refresh the lock files (requirements/gateway.txt, requirements/test.txt) from
# pyproject.toml and requirements/constraints.in, with pip-tools in a throwaway venv.
# pip must find torch's CPU build: on the project's machines it lies in /opt/wheels
# (PIP_FIND_LINKS); elsewhere add `--extra-index-url https://download.pytorch.org/whl/cpu`.
# Run it with the Python CI sets up with (Debian's: PATH=/usr/bin:$PATH bash scripts/lock.sh), so
# that no pin needs a newer Python than that one.
set -euo pipefail
cd "$(dirname "$0")/../requirements"
tool="$(mktemp -d)/venv"
python3 -m venv "$tool"
"$tool/bin/pip" install --quiet pip-tools
compile() { "$tool/bin/pip-compile" --quiet --strip-extras --no-emit-index-url --no-emit-find-links \
  --constraint constraints.in "$@" ../pyproject.toml; }
compile --extra client --output-file gateway.txt
# --allow-unsafe: the test lock pins setuptools too (the wheel test builds with it, offline).
compile --extra client --extra test --allow-unsafe --constraint gateway.txt --output-file test.txt
rm -rf "$(dirname "$tool")"
