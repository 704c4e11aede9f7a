#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test.
#   tools/test.sh             C++ tests, Python tests, a 50,000-call API fuzz campaign
#   tools/test.sh --sanitize  the same under AddressSanitizer + UBSan, built in
#                             build-asan/ (the main build is left alone), with a
#                             shorter campaign (MESHFLOW_SANITIZE_FUZZ_CALLS, 3000)
set -euo pipefail
# Note [One thread pool] in CMakeLists.txt: idle OpenMP workers sleep.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sanitize=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    *) echo "usage: tools/test.sh [--sanitize]" >&2; exit 2 ;;
  esac
done

# Each phase's wall time, to see where the run's time goes.
phase_start=$SECONDS
phase_done() {
  echo "tools/test.sh: $1 took $((SECONDS - phase_start)) s"
  phase_start=$SECONDS
}

if [ "$sanitize" = 0 ]; then
  bash "$root/tools/build.sh"
  phase_done "install and build"
  build="${MESHFLOW_BUILD_DIR:-$root/build}"
  (cd "$build" && ctest --output-on-failure -j"$(nproc)")
  phase_done "ctest"
  # The Python front end (its extension was built into python/meshflow/ above).
  PYTHONPATH="$root/python" /usr/bin/python3 -m pytest "$root/tests/python" -q -p no:cacheprovider --durations=15
  phase_done "pytest"
  # The device-generic tests' "cuda" cases on the emulated device (Note
  # [Emulated device] in src/backend/emulated/emulated.h): the Python front
  # end and the shared device kernels, without a GPU.
  MESHFLOW_EMULATE_CUDA=1 PYTHONPATH="$root/python" /usr/bin/python3 -m pytest "$root/tests/python" -q \
    -p no:cacheprovider -k cuda
  phase_done "pytest on the emulated CUDA device"
  # docs/reliability.md: a fixed-seed campaign; any crash, hang or
  # undocumented exception fails the run (reproducers in build/fuzz-ci).
  MESHFLOW_FUZZ_NO_BUILD=1 bash "$root/tools/fuzz.sh" --calls "${MESHFLOW_FUZZ_CALLS:-50000}" --seed 1 \
    --out "$build/fuzz-ci"
  phase_done "fuzz campaign"
  exit 0
fi

# --- the sanitizer run ----------------------------------------------------------------------------
bash "$root/tools/install_deps.sh"
build="$root/build-asan"
package="$build/python"  # a meshflow package of its own: the sources, linked, and this build's _C
if [ ! -f "$build/build.ninja" ]; then
  # -O1 -g1 (line tables): ASan's reports keep file:line, and the build is
  # far quicker than at -O2 -g.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DMESHFLOW_SANITIZE=ON \
    -DMESHFLOW_PYTHON_PACKAGE_DIR="$package/meshflow"
fi
ninja -C "$build" -j"$(nproc)"
# Links to sources that were moved or deleted since the last run go first.
find "$package/meshflow" -maxdepth 1 -xtype l -delete
for entry in "$root"/python/meshflow/*; do
  name="$(basename "$entry")"
  case "$name" in _C*.so|__pycache__) continue ;; esac
  ln -sfn "$entry" "$package/meshflow/$name"
done
# Leaks are not checked: CPython and the caching allocator keep memory on
# purpose until exit. Any other report ends the process with an error.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
(cd "$build" && ctest --output-on-failure -j"$(nproc)")
# The interpreter is not instrumented: the runtimes are preloaded for it.
preload="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
LD_PRELOAD="$preload" PYTHONPATH="$package" /usr/bin/python3 -m pytest "$root/tests/python" -q -p no:cacheprovider
# The children cannot have an address-space limit (ASan's shadow memory):
# ASan's own allocation cap stands in for it.
ASAN_OPTIONS="max_allocation_size_mb=2048:$ASAN_OPTIONS" \
  LD_PRELOAD="$preload" MESHFLOW_FUZZ_NO_BUILD=1 MESHFLOW_FUZZ_NO_RLIMIT=1 MESHFLOW_PYTHONPATH="$package" \
  bash "$root/tools/fuzz.sh" --calls "${MESHFLOW_SANITIZE_FUZZ_CALLS:-3000}" --seed 2 --timeout 60 \
  --out "$build/fuzz"
