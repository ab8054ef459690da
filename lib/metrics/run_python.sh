#!/bin/bash
# Runs a Python test with the interpreter passed first: sh_test cannot name a Python as its source.
set -euo pipefail
python3="$1"
shift
# @titan_env//:python3 reaches the venv through symlinks and Python only finds pyvenv.cfg beside
# the path it was started by, so start it by the venv's own bin/python3 link.
while [[ -L "${python3}" && ! -e "$(dirname "${python3}")/../pyvenv.cfg" ]]; do
  target="$(readlink "${python3}")"
  [[ "${target}" == /* ]] || target="$(dirname "${python3}")/${target}"
  python3="${target}"
done
exec "${python3}" "$@"
