#!/usr/bin/env bash
# Installs everything titan needs on Debian 12; idempotent, and a no-op in seconds when all is present.
#   - Debian packages: Bazel 4.2.3, abseil, protobuf, gflags, glog, GoogleTest, toml++, nlohmann-json,
#     PCRE2, zlib, libcurl.
#   - A Python environment outside the clone with PyPI's torch==2.11.0 (LibTorch for the build) and
#     the reference packages the tests compare against. Every clone shares it, so torch downloads once.
set -euo pipefail

cache="${XDG_CACHE_HOME:-$HOME/.cache}/titan"
venv="${TITAN_VENV:-$cache/venv}"

apt_packages=(
  bazel-bootstrap bazel-platforms build-essential libabsl-dev libprotobuf-dev protobuf-compiler
  libgflags-dev libgoogle-glog-dev libgtest-dev libgmock-dev libtomlplusplus-dev nlohmann-json3-dev
  libpcre2-dev zlib1g-dev libcurl4-openssl-dev libssl-dev libgloo-dev clang-14 libclang-rt-14-dev python3-venv
)
# Pinned: the tests' reference numbers come from these versions.
pip_packages=(
  torch==2.11.0 numpy==2.4.6 safetensors==0.8.0 tiktoken==0.14.0 tokenizers==0.23.3
  transformers==5.24.0 tensorboard==2.21.0 torchtune==0.6.1 torchao==0.15.0
)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) == 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q "${missing[@]}"
fi

stamp="$venv/.titan-packages"
want="${pip_packages[*]}"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "setup: preparing the Python environment in $venv (torch is a large download, once)"
  mkdir -p "$cache"
  [[ -x "$venv/bin/python3" ]] || python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "${pip_packages[@]}"
  echo "$want" > "$stamp"
fi
mkdir -p "$cache/bazel-disk"
echo "setup: ready (LibTorch from $venv)"
