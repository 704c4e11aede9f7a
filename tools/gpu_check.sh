#!/usr/bin/env bash
# The checks that need a GPU, in two halves (docs/backends.md):
#   bash tools/gpu_check.sh pack   here: builds with the CUDA backend and packs the C++ test
#                                  binary and libmeshflow with every library they load, except
#                                  the C and C++ runtimes, into .gpu/ (git-ignored; about 25 MiB)
#   bash tools/gpu_check.sh run    on the GPU machine, with .gpu carried there (under 8 minutes):
#                                  1. the CUDA backend's and the backend-boundary C++ tests;
#                                  2. builds meshflow._C for that machine's python3 (its pybind11)
#                                     against the packed libmeshflow, then runs every device-generic
#                                     Python test on "cuda" (pytest -k cuda), against the CPU;
#                                     and dist_scripts/cuda_placements.py (NCCL, a world of 1);
#                                  3. bench/train_step.py --device cuda --amp: GPT and ResNet-18
#                                     training steps under bfloat16 autocast against that
#                                     machine's PyTorch;
#                                  and prints a summary.
# The GPU machine has CUDA, PyTorch and pybind11 but none of meshflow's CPU libraries (oneDNN,
# OpenBLAS, Open MPI), so they travel with the binary. Exit status: 0 when every step passed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/.gpu"
filter='CudaBackendTest.*:EmulatedDevice.*:EmulatedDevice/*:HostEvents.*:KernelScratch.*'

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
      grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
      while read -r lib; do cp -L "$lib" "$out/lib/"; done
    tar -C "$out" -cJf "$out/lib.tar.xz" lib && rm -rf "$out/lib"
    du -sh "$out"
    echo "packed: run 'bash tools/gpu_check.sh run' on the GPU machine, carrying .gpu"
    ;;
  run)
    [ -x "$out/meshflow_tests" ] || { echo "gpu_check run: no $out/meshflow_tests (run 'pack' first)" >&2; exit 1; }
    libs="$(mktemp -d)"
    tar -C "$libs" -xJf "$out/lib.tar.xz"
    # cuBLAS(Lt), cuDNN and NCCL are opened at run time (Note [Lazily loaded CUDA libraries]):
    # there they may live only in the NVIDIA wheels beside PyTorch (site-packages/nvidia/*/lib).
    nvidia_libs="$(python3 -c 'import glob, os, sys
print(":".join(sorted({d for p in sys.path for d in glob.glob(os.path.join(p, "nvidia", "*", "lib"))})))' \
      2>/dev/null || true)"
    export LD_LIBRARY_PATH="$libs/lib:${nvidia_libs:+$nvidia_libs:}${LD_LIBRARY_PATH:-}" OMP_WAIT_POLICY=PASSIVE \
      PYTHONUNBUFFERED=1
    echo "libraries opened at run time:"
    for lib in libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
      python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('  ' + sys.argv[1] + ': found')" "$lib" \
        2>/dev/null || echo "  $lib: NOT FOUND (its paths fall back or fail)"
    done
    nvidia-smi -L || true
    logs="${OUT:-$(mktemp -d)}"
    summary=()
    failed=0
    # 1. The C++ tests. They skip, saying why, where no device is visible: a run with skips is
    # not a pass here.
    if "$out/meshflow_tests" --gtest_filter="$filter" 2>&1 | tee "$logs/cpp.log" &&
      ! grep -q '\[  SKIPPED \]' "$logs/cpp.log"; then
      summary+=("C++: $(grep -E '^\[  PASSED  \]' "$logs/cpp.log" | tail -1)")
    else
      summary+=("C++: FAILED or skipped ($(grep -cE '^\[  (FAILED|SKIPPED) \]' "$logs/cpp.log") lines)")
      failed=1
    fi
    # 2. The extension for this machine's Python (its headers and pybind11), linked against the
    # packed libmeshflow, then the device-generic tests.
    ext="$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
    objs="$(mktemp -d)"
    read -r -a py_includes <<<"$(python3 -m pybind11 --includes)"
    pids=()
    for src in "$root"/python/bindings/*.cpp; do
      c++ -O1 -fPIC -fvisibility=hidden -fopenmp -std=gnu++20 -I"$root/include" "${py_includes[@]}" \
        -c "$src" -o "$objs/$(basename "$src" .cpp).o" 2>>"$logs/bindings.log" &
      pids+=("$!")
    done
    built=1
    for pid in "${pids[@]}"; do wait "$pid" || built=0; done
    [ "$built" = 1 ] && c++ -shared -fopenmp "$objs"/*.o -L"$libs/lib" -lmeshflow -Wl,-rpath,"$libs/lib" \
      -o "$root/python/meshflow/_C$ext" 2>>"$logs/bindings.log" || built=0
    if [ "$built" = 1 ]; then
      summary+=("bindings: built for $(python3 --version)")
      (cd "$root" && timeout 300 python3 -m pytest tests/python -q -k cuda -p no:cacheprovider 2>&1) |
        tee "$logs/pytest.log" || true
      summary+=("pytest -k cuda: $(grep -E '(passed|failed|error)' "$logs/pytest.log" | tail -1)")
      if ! grep -qE '[0-9]+ passed' "$logs/pytest.log" || grep -qE '[0-9]+ (failed|error)' "$logs/pytest.log"; then
        failed=1
      fi
      # The global view on a CUDA placement of one rank: NCCL's group of one, DDP and graph mode.
      if (cd "$root/tests/python/dist_scripts" && PYTHONPATH="$root/python" timeout 120 \
            python3 cuda_placements.py 2>&1) | tee "$logs/placements.log" && grep -q 'cuda placements OK' \
            "$logs/placements.log"; then
        summary+=("cuda placements (NCCL, world of 1): OK")
      else
        summary+=("cuda placements (NCCL, world of 1): FAILED (see placements.log)")
        failed=1
      fi
      # 3. GPT and ResNet-18 steps (cuBLAS(Lt), cuDNN) under bfloat16 autocast against this
      # machine's PyTorch.
      if (cd "$root" && PYTHONPATH=python timeout 240 python3 bench/train_step.py --device cuda --amp \
            --workloads gpt,resnet18 --rounds 2 2>&1) | tee "$logs/bench.log" && grep -q '^| gpt' "$logs/bench.log"
      then
        summary+=("bench: $(grep -E '^\| (gpt|resnet18)' "$logs/bench.log" | tr '\n' ' ')")
      else
        summary+=("bench: FAILED (see bench.log)")
        failed=1
      fi
    else
      summary+=("bindings: FAILED to build (see bindings.log)")
      tail -30 "$logs/bindings.log"
      failed=1
    fi
    echo
    echo "gpu_check summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)):"
    printf '  %s\n' "${summary[@]}"
    exit "$failed"
    ;;
  *)
    echo "usage: tools/gpu_check.sh pack|run" >&2
    exit 2
    ;;
esac
