#!/bin/bash
# Runs a Python script with the interpreter given first (sh_test cannot name a Python as its
# binary). The runfiles link to the test environment's python3 hides the venv's pyvenv.cfg, which
# Python looks for beside the path it was started by, so follow links until one sits in the venv.
set -euo pipefail
python="$1"
shift
while [[ -L "$python" && ! -f "$(dirname "$python")/../pyvenv.cfg" ]]; do
  target="$(readlink "$python")"
  [[ "$target" == /* ]] || target="$(dirname "$python")/$target"
  python="$target"
done
exec "$python" "$@"
