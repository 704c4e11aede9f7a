#!/usr/bin/env bash
# The main job: trains the flagship example (an MLP on Fashion-MNIST,
# written against the C++ API). Extra arguments go to the example.
set -euo pipefail
# Note [One thread pool] in CMakeLists.txt: idle OpenMP workers sleep.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/tools/build.sh"
build="${MESHFLOW_BUILD_DIR:-$root/build}"
exec "$build/examples/cpp/fashion_mnist_mlp" "$@"
