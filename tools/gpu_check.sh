#!/usr/bin/env bash
# The checks that need a GPU, in two halves (docs/backends.md):
#   bash tools/gpu_check.sh pack   here: builds with the CUDA backend and packs the C++ test
#                                  binary with every library it loads, except glibc's, into
#                                  .gpu/ (git-ignored; about 25 MiB)
#   bash tools/gpu_check.sh run    on the GPU machine, with .gpu carried there: runs the CUDA
#                                  backend's tests and the backend-boundary tests (under a minute)
# The GPU machine has CUDA but none of meshflow's CPU libraries (oneDNN, OpenBLAS, Open MPI),
# so they travel with the binary. Exit status: that of the tests.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/.gpu"
filter='CudaBackendTest.*:EmulatedDevice.*:HostEvents.*'

case "${1:-}" in
  pack)
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
      echo "gpu_check pack: no CUDA toolkit here, so the CUDA backend cannot be built" >&2; exit 1; }
    bash "$root/tools/build.sh"
    build="${MESHFLOW_BUILD_DIR:-$root/build}"
    grep -q "cuda" <(PYTHONPATH="$root/python" /usr/bin/python3 -c \
      'import meshflow; print(meshflow._C._build_info()["backends"])') || {
      echo "gpu_check pack: the build in $build has no CUDA backend (configure with -DMESHFLOW_CUDA=ON)" >&2; exit 1; }
    rm -rf "$out" && mkdir -p "$out/lib"
    cp "$build/tests/cpp/meshflow_tests" "$out/"
    cp -L "$build/libmeshflow.so" "$out/lib/"
    # Every library the two load, resolved here, but the C library's own.
    ldd "$build/tests/cpp/meshflow_tests" "$build/libmeshflow.so" | awk '$3 ~ /^\// {print $3}' | sort -u |
      grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so' |
      while read -r lib; do cp -L "$lib" "$out/lib/"; done
    tar -C "$out" -cJf "$out/lib.tar.xz" lib && rm -rf "$out/lib"
    du -sh "$out"
    echo "packed: run 'bash tools/gpu_check.sh run' on the GPU machine, carrying .gpu"
    ;;
  run)
    [ -x "$out/meshflow_tests" ] || { echo "gpu_check run: no $out/meshflow_tests (run 'pack' first)" >&2; exit 1; }
    libs="$(mktemp -d)"
    tar -C "$libs" -xJf "$out/lib.tar.xz"
    nvidia-smi -L || true
    # The tests skip, saying why, where no device is visible: a run with skips is not a pass here.
    log="$(mktemp)"
    LD_LIBRARY_PATH="$libs/lib:${LD_LIBRARY_PATH:-}" OMP_WAIT_POLICY=PASSIVE \
      "$out/meshflow_tests" --gtest_filter="$filter" 2>&1 | tee "$log"
    status="${PIPESTATUS[0]}"
    if grep -q '\[  SKIPPED \]' "$log"; then
      echo "gpu_check run: tests were skipped (no CUDA device visible?)" >&2
      exit 1
    fi
    exit "$status"
    ;;
  *)
    echo "usage: tools/gpu_check.sh pack|run" >&2
    exit 2
    ;;
esac
