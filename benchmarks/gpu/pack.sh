#!/usr/bin/env bash
# Builds here and packs what the one-shot H200 benchmark needs into gpu_pack/ (git-ignored, carried
# by the device tool): titan's binaries and the Debian shared libraries they need beyond LibTorch
# and CUDA (the GPU machine has its own torch 2.11 cu130), the comparison's Python wheels that its
# image lacks (torchtitan 0.2.2, which imports on torch 2.11, and its pure-Python dependencies),
# the bundled tokenizer and corpus. Fails if the pack exceeds 50 MiB.
# Usage: benchmarks/gpu/pack.sh     (from the repo root, after tools/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
pack=gpu_pack
python="${TITAN_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/titan/venv}/bin/python3"
targets=(//tools/titan_train //tests/distributed:nccl_communicator_test //benchmarks:chunked_ce_benchmark
         //lib/kernels:cuda_kernels_test //benchmarks:fused_kernels_benchmark
         //lib/train:cuda_graph_test //lib/float8:float8_cuda_test
         //lib/model:attention_cuda_test //benchmarks:optimizer_step_benchmark)
bazel build -c opt "${targets[@]}"
rm -rf "$pack" && mkdir -p "$pack"/{bin,lib,wheels}
cp bazel-bin/tools/titan_train/titan_train bazel-bin/tests/distributed/nccl_communicator_test \
  bazel-bin/benchmarks/chunked_ce_benchmark bazel-bin/lib/kernels/cuda_kernels_test \
  bazel-bin/benchmarks/fused_kernels_benchmark bazel-bin/lib/train/cuda_graph_test \
  bazel-bin/lib/float8/float8_cuda_test bazel-bin/lib/model/attention_cuda_test \
  bazel-bin/benchmarks/optimizer_step_benchmark "$pack/bin/"
# Debian's libraries (abseil, protobuf, glog, gflags, pcre2, ...); not glibc, the C++ runtime,
# LibTorch or CUDA, which the GPU machine has in newer versions.
for binary in "$pack"/bin/*; do
  ldd "$binary" | awk '/=> \// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|librt|libpthread|libutil|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|/venv/|/cuda/|libtorch|libc10' |
  while read -r lib; do cp -L "$lib" "$pack/lib/"; done
# The comparison: torchtitan and what its image lacks (see .library/device/KINDS.md's list).
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d "$pack/wheels" \
  torchtitan==0.2.2 torchdata==0.11.0 datasets==4.0.0 tyro==0.9.35 docstring-parser==0.18.0 \
  typeguard==4.6.1 shtab==1.13.0 tomli==2.5.0 dill==0.3.8 multiprocess==0.70.16
cp -r assets/default_tokenizer assets/default_corpus benchmarks/gpu/*.py benchmarks/gpu/*.sh \
  "$pack/"
size=$(du -sm "$pack" | cut -f1)
echo "gpu_pack: ${size} MiB ($(ls "$pack/lib" | wc -l) libraries, $(ls "$pack/wheels" | wc -l) wheels)"
if ((size > 50)); then echo "gpu_pack exceeds 50 MiB" >&2; exit 1; fi
