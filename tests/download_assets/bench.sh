#!/bin/bash
# Benchmark (not a test): downloads a 1 GiB LFS file from fake_hub.py on loopback, once with the
# connection dropped every 100 MiB and once without faults; checks the bytes and prints throughput.
#   tests/download_assets/bench.sh [WORKDIR]   (WORKDIR needs 2 GiB free; default under $TMPDIR)
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //tools/download_assets @titan_env//:python3  # the latter fetches the interpreter
binary="$PWD/bazel-bin/tools/download_assets/download_assets"
python="$(bazel info output_base)/external/titan_env/python3"
work="${1:-$(mktemp -d)}"
mkdir -p "$work/repos/org/bench"
blob="$work/repos/org/bench/model.safetensors"
[[ -f "$blob" ]] || head -c $((1 << 30)) /dev/urandom > "$blob"

run() {  # $1: name, $2: fake_hub config JSON
  local dir="$work/$1"
  rm -rf "$dir" && mkdir -p "$dir"
  echo "$2" > "$dir/config.json"
  "$python" tests/download_assets/fake_hub.py --repos "$work/repos" --config "$dir/config.json" \
    --port_file "$dir/ports.json" --log "$dir/requests.log" --lifetime 300 &
  local server=$!
  while [[ ! -f "$dir/ports.json" ]]; do
    kill -0 "$server" 2>/dev/null || { echo "bench: fake_hub.py exited before serving" >&2; exit 1; }
    sleep 0.1
  done
  local port
  port="$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["hub"])' "$dir/ports.json")"
  local start end
  start=$(date +%s.%N)
  HF_ENDPOINT="http://127.0.0.1:$port" "$binary" --repo_id=org/bench --assets=safetensors \
    --local_dir="$dir/out" --retry_base_ms=100 --progress=none --json > "$dir/summary.json"
  end=$(date +%s.%N)
  kill "$server"
  cmp "$blob" "$dir/out/bench/model.safetensors"
  "$python" - "$dir/summary.json" "$start" "$end" "$1" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
seconds = float(sys.argv[3]) - float(sys.argv[2])
size = sum(f["size"] for f in summary["files"])
retries = sum(f["retries"] for f in summary["files"])
print(f"{sys.argv[4]}: {size / 2**30:.2f} GiB in {seconds:.2f} s = {size / seconds / 1e6:.0f} MB/s "
      f"(retries {retries}, verified, byte-identical)")
PY
}

run faults '{"drop_every": 104857600}'
run clean '{}'
