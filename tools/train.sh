#!/usr/bin/env bash
# The main job: trains the flagship example, a CNN on Fashion-MNIST
# (examples/fashion_mnist.py: progress bar, per-epoch accuracy, checkpoints
# under runs/fashion_mnist/, a PNG of the loss curve). Extra arguments go to
# the example, e.g. `bash tools/train.sh --epochs 5` or `--resume`.
set -euo pipefail
# Note [One thread pool] in CMakeLists.txt: idle OpenMP workers sleep.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/tools/build.sh"
cd "$root"
PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" exec /usr/bin/python3 examples/fashion_mnist.py "$@"
