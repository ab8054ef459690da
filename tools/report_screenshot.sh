#!/usr/bin/env bash
# Renders profile_run's report.html in headless Chromium (Debian's `chromium` package:
# apt-get install chromium) and saves a PNG screenshot, to check that the inline SVG plots show
# with no network. Keep the PNG out of the repository.
# Usage: tools/report_screenshot.sh REPORT.html OUT.png [width] [height]
set -euo pipefail
report="$(realpath "$1")"
png="$(realpath -m "$2")"
width="${3:-1200}"
height="${4:-3200}"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$browser" ]]; then
  echo "report_screenshot: no chromium; install Debian's package: apt-get install chromium" >&2
  exit 1
fi
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
# --no-sandbox: Chromium refuses to run as root with its sandbox; the page is a local file.
# Network access is cut (a bogus proxy for every scheme) so a plot that needed it would not show.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --proxy-server="127.0.0.1:9" --proxy-bypass-list="<-loopback>" \
  --window-size="$width,$height" --screenshot="$png" "file://$report" 2>"$profile/log" || {
  cat "$profile/log" >&2
  exit 1
}
echo "wrote $png"
