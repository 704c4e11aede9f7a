#!/usr/bin/env bash
# Installs dependencies (if missing) and builds meshflow into build/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/tools/install_deps.sh"
build="${MESHFLOW_BUILD_DIR:-$root/build}"
if [ ! -f "$build/build.ninja" ]; then
  # In CI a new compiler warning in meshflow's own code fails the build.
  werror=OFF
  [ "${CI:-}" = true ] && werror=ON
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMESHFLOW_WERROR="$werror"
fi
ninja -C "$build" -j"$(nproc)"
