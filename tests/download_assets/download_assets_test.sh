#!/bin/bash
# Runs the download_assets fault scenarios: $1 python3, $2 the driver, $3 the binary, $4 the server.
set -euo pipefail
exec "$1" "$2" "$3" "$4"
