#!/bin/bash
# Guards the gloo ABI argument in lib/distributed/gloo_communicator.cc: a binary linking it must not
# carry gloo code of its own (compiled from Debian's older headers) nor call gloo directly: only
# exported c10d entry points, whose gloo side is LibTorch's.
set -euo pipefail
binary="$1"
symbols="$(nm -C "$binary")"
# Defined here: a gloo function, a gloo/GlooStore vtable or typeinfo, or ProcessGroupGloo code.
own="$(grep -E '^[0-9a-f]+ [TtWwVvDdRrBb] (gloo::|vtable for gloo::|typeinfo for gloo::|.*GlooStore|vtable for c10d::ProcessGroupGloo|c10d::ProcessGroupGloo::[A-Za-z_~]+\()' <<<"$symbols" || true)"
# Called directly: any gloo function.
called="$(grep -E '^ +U gloo::' <<<"$symbols" || true)"
if [[ -n "$own$called" ]]; then
  echo "gloo symbols that must come from LibTorch only:" >&2
  echo "$own$called" >&2
  exit 1
fi
# The check must see the binary's c10d Gloo entry points, or it proves nothing.
grep -q ' U c10d::ProcessGroupGloo::ProcessGroupGloo(' <<<"$symbols"
grep -q ' U c10d::ProcessGroupGloo::createDeviceForHostname(' <<<"$symbols"
echo "ok: no gloo code of its own; ProcessGroupGloo comes from LibTorch"
