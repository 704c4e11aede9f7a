#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test.
set -euo pipefail
# Note [One thread pool] in CMakeLists.txt: idle OpenMP workers sleep.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/tools/build.sh"
build="${MESHFLOW_BUILD_DIR:-$root/build}"
cd "$build"
ctest --output-on-failure -j"$(nproc)"
# The Python front end (its extension was built into python/meshflow/ above).
PYTHONPATH="$root/python" /usr/bin/python3 -m pytest "$root/tests/python" -q -p no:cacheprovider
