#!/bin/bash
# Builds the libFuzzer targets of fuzz/fuzz_entries.h with clang (Bazel's toolchain is gcc, which has
# no libFuzzer) under AddressSanitizer and runs each for a while, seeded from fuzz/corpus/<target>/.
#
#   fuzz/run_fuzzers.sh [-t SECONDS] [-j PARALLEL] [TARGET ...]
#     -t  seconds per target (default 600), -j  targets run at once (default 1)
#     TARGET: safetensors_header hf_config hf_index meta_pth (default: all)
#
# Needs clang++ and the libFuzzer runtime (Debian: clang-14, libclang-rt-14-dev) and tools/setup.sh's
# Python environment (LibTorch headers and libraries from its torch package, as
# third_party/titan_env.bzl finds them). Work goes to $TITAN_FUZZ_DIR (default /tmp/titan_fuzz):
# <target>/corpus (seeds + what the fuzzer found), <target>/artifacts (crashers), <target>/log.
# A crasher is a bug: fix it and commit the input as fuzz/corpus/<target>/crash-<what> (the corpus
# test, //fuzz:corpus_test, replays every corpus file under Bazel).
set -euo pipefail

seconds=600
parallel=1
while getopts "t:j:" opt; do
  case "$opt" in
    t) seconds="$OPTARG" ;;
    j) parallel="$OPTARG" ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors_header hf_config hf_index meta_pth)

repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${TITAN_FUZZ_DIR:-/tmp/titan_fuzz}"
venv="${TITAN_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/titan/venv}"
torch="${LIBTORCH:-$(ls -d "$venv"/lib/python3*/site-packages/torch 2>/dev/null | head -n 1)}"
if [ ! -d "$torch/include/torch" ]; then
  echo "LibTorch not found under $venv: run tools/setup.sh first (or set LIBTORCH)" >&2
  exit 1
fi
cxx="${CXX_FUZZ:-clang++}"

# The entries' sources and what they link: //fuzz:fuzz_entries' closure, as Bazel sees it (the
# model families register themselves, so every object is linked).
mapfile -t sources < <(cd "$repo" && bazel query --noshow_progress \
  'kind("source file", deps(//fuzz:fuzz_entries))' 2>/dev/null |
  sed -n 's|^//\([^:]*\):\(.*\.cc\)$|\1/\2|p')
if [ ${#sources[@]} -eq 0 ]; then
  echo "bazel query found no sources of //fuzz:fuzz_entries: run tools/setup.sh first" >&2
  exit 1
fi
# LibTorch's include/google (protobuf) would shadow Debian's, as in third_party/titan_env.bzl.
cxxflags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -I"$repo" -isystem "$torch/include"
          -isystem "$torch/include/torch/csrc/api/include")
absl_libs=($(ls /usr/lib/x86_64-linux-gnu/libabsl_*.so | sed 's|.*/lib\(absl_[a-z0-9_]*\)\.so$|-l\1|'))
ldflags=(-Wl,--disable-new-dtags -L"$torch/lib" -Wl,-rpath,"$torch/lib" -Wl,--no-as-needed
         -ltorch -ltorch_cpu -lc10 -Wl,--as-needed "${absl_libs[@]}" -lglog -lgflags -lz -lpthread)

mkdir -p "$work/obj"
echo "building in $work with $("$cxx" --version | head -n 1)"
objects=()
for src in "${sources[@]}"; do
  obj="$work/obj/$(echo "$src" | tr / _).o"
  objects+=("$obj")
  if [ ! -f "$obj" ] || [ "$repo/$src" -nt "$obj" ]; then
    "$cxx" "${cxxflags[@]}" -fsanitize=fuzzer-no-link,address -c "$repo/$src" -o "$obj" &
  fi
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
done
wait

run_target() {
  local target="$1" dir="$work/$1"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  "$cxx" "${cxxflags[@]}" -fsanitize=fuzzer,address -DTITAN_FUZZ_TARGET="\"$target\"" \
    "$repo/fuzz/fuzzer_main.cc" "${objects[@]}" "${ldflags[@]}" -o "$dir/fuzzer"
  # Leak checks stay on; rss/malloc limits turn a huge allocation a header claims into a finding.
  LSAN_OPTIONS="suppressions=$repo/fuzz/lsan_suppressions.txt" "$dir/fuzzer" \
    -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
    "$dir/corpus" "$repo/fuzz/corpus/$target" >"$dir/log" 2>&1 || true
  local crashers
  crashers=$(ls "$dir/artifacts" | wc -l)
  echo "$target: $(grep -E '^stat::number_of_executed_units' "$dir/log" | awk '{print $2}') execs," \
       "$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$dir/log" | tail -n 1)," \
       "corpus $(ls "$dir/corpus" | wc -l) files, $crashers crashers (log: $dir/log)"
}

for target in "${targets[@]}"; do
  run_target "$target" &
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n; done
done
wait
