// Note [Lazily loaded CUDA libraries]: libmeshflow links the CUDA runtime
// statically, and the runtime opens the driver only when a CUDA call needs
// it, so importing meshflow needs neither a driver nor a GPU. The libraries
// beside the runtime (cuBLAS) are opened with dlopen on their first use,
// for the same reason: a process that never multiplies on a GPU never needs
// them, and one that does gets a clear error where they are missing.
#include "backend/cuda/cublas.h"

#include <dlfcn.h>

#include <array>
#include <mutex>

#include "backend/cuda/cuda_runtime.h"
#include "meshflow/error.h"

namespace mf::cuda {

namespace {

void* open_library(const char* const* names, const char* what) {
  for (const char* const* name = names; *name; ++name)
    if (void* handle = dlopen(*name, RTLD_NOW | RTLD_LOCAL)) return handle;
  throw Error(detail::concat("cuda: cannot open ", what, " (", names[0], "): ", dlerror()));
}

template <typename F>
void bind(void* library, const char* symbol, F& fn) {
  fn = reinterpret_cast<F>(dlsym(library, symbol));
  MF_CHECK(fn != nullptr, Error, "cuda: cuBLAS has no ", symbol);
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = [] {
    static constexpr const char* kNames[] = {"libcublas.so.13", "libcublas.so", nullptr};
    void* library = open_library(kNames, "cuBLAS");
    CublasApi a{};
    bind(library, "cublasCreate_v2", a.create);
    bind(library, "cublasSetStream_v2", a.set_stream);
    bind(library, "cublasGemmStridedBatchedEx_64", a.gemm_strided_batched);
    return a;
  }();
  return api;
}

void check_cublas(cublasStatus_t status, const char* what) {
  MF_CHECK(status == CUBLAS_STATUS_SUCCESS, Error, "cuda: ", what, " failed (cuBLAS status ", int(status), ")");
}

cublasHandle_t cublas_handle(int device) {
  static std::mutex mutex;
  static std::array<cublasHandle_t, 64> handles{};
  MF_CHECK(device >= 0 && device < int(handles.size()), Error, "cuda: device index ", device, " out of range");
  const CublasApi& api = cublas();
  std::lock_guard<std::mutex> lock(mutex);
  DeviceGuard guard(device);
  if (!handles[size_t(device)]) check_cublas(api.create(&handles[size_t(device)]), "cublasCreate");
  check_cublas(api.set_stream(handles[size_t(device)], current_stream(device)), "cublasSetStream");
  return handles[size_t(device)];
}

}  // namespace mf::cuda
