// cuBLAS and cuBLASLt, opened on first use (Note [Lazily loaded CUDA libraries] in
// libraries.h).
#include "backend/cuda/cublas.h"
#include "backend/cuda/cublaslt_api.h"

#include <array>
#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/cuda_runtime.h"
#include "backend/cuda/libraries.h"
#include "meshflow/error.h"

namespace mf::cuda {

const CublasApi& cublas() {
  static const CublasApi api = [] {
    void* lib = library::open({"libcublas.so.13", "libcublas.so"}, "cuBLAS");
    CublasApi a{};
    library::bind(lib, "cuBLAS", "cublasCreate_v2", a.create);
    library::bind(lib, "cuBLAS", "cublasSetStream_v2", a.set_stream);
    library::bind(lib, "cuBLAS", "cublasSetWorkspace_v2", a.set_workspace);
    library::bind(lib, "cuBLAS", "cublasGemmStridedBatchedEx_64", a.gemm_strided_batched);
    return a;
  }();
  return api;
}

bool cublas_available() {
  static const bool available = library::opens(cublas);
  return available;
}

void check_cublas(cublasStatus_t status, const char* what) {
  MF_CHECK(status == CUBLAS_STATUS_SUCCESS, Error, "cuda: ", what, " failed (cuBLAS status ", int(status), ")");
}

// Note [cuBLAS workspace]: setting a handle's stream gives it back cuBLAS's
// default workspace pool, which cuBLAS may fill with a device allocation on
// a stream's first product; inside a CUDA graph recording (Note [Captured
// steps]) that allocation is refused. So each (device, stream) gets a
// workspace of its own (kWorkspace: cuBLAS's recommendation for Hopper),
// allocated on the stream's first product and set after each stream
// change; the recording's side stream gets its one before the recording
// starts (capture.cpp calls cublas_handle there first). Products on one
// stream run one after another, so they can share it.
constexpr size_t kWorkspace = size_t(32) << 20;

cublasHandle_t cublas_handle(int device) {
  static std::mutex mutex;
  static std::array<cublasHandle_t, 64> handles{};
  static std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  const CublasApi& api = cublas();
  cublasHandle_t handle = library::device_handle(
      handles, mutex, device, [&](cublasHandle_t* h) { check_cublas(api.create(h), "cublasCreate"); });
  cudaStream_t stream = current_stream(device);
  void* workspace = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    void*& slot = workspaces[{device, stream}];
    if (!slot) {
      DeviceGuard guard(device);
      check_cuda(cudaMalloc(&slot, kWorkspace), "cudaMalloc (cuBLAS workspace)");
    }
    workspace = slot;
  }
  check_cublas(api.set_stream(handle, stream), "cublasSetStream");
  check_cublas(api.set_workspace(handle, workspace, kWorkspace), "cublasSetWorkspace");
  return handle;
}

const CublasLtApi& cublaslt() {
  static const CublasLtApi api = [] {
    void* lib = library::open({"libcublasLt.so.13", "libcublasLt.so"}, "cuBLASLt");
    CublasLtApi a{};
    auto bind = [lib](const char* name, auto& fn) { library::bind(lib, "cuBLASLt", name, fn); };
    bind("cublasLtCreate", a.create);
    bind("cublasLtMatmulDescCreate", a.desc_create);
    bind("cublasLtMatmulDescDestroy", a.desc_destroy);
    bind("cublasLtMatmulDescSetAttribute", a.desc_set);
    bind("cublasLtMatrixLayoutCreate", a.layout_create);
    bind("cublasLtMatrixLayoutDestroy", a.layout_destroy);
    bind("cublasLtMatmulPreferenceCreate", a.preference_create);
    bind("cublasLtMatmulPreferenceDestroy", a.preference_destroy);
    bind("cublasLtMatmulPreferenceSetAttribute", a.preference_set);
    bind("cublasLtMatmulAlgoGetHeuristic", a.heuristic);
    bind("cublasLtMatmul", a.matmul);
    return a;
  }();
  return api;
}

bool cublaslt_available() {
  static const bool available = library::opens(cublaslt);
  return available;
}

cublasLtHandle_t cublaslt_handle(int device) {
  static std::mutex mutex;
  static std::array<cublasLtHandle_t, 64> handles{};
  const CublasLtApi& api = cublaslt();
  return library::device_handle(handles, mutex, device,
                                [&](cublasLtHandle_t* h) { check_cublas(api.create(h), "cublasLtCreate"); });
}

}  // namespace mf::cuda
