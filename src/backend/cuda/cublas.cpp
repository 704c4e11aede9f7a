// cuBLAS and cuBLASLt, opened on first use (Note [Lazily loaded CUDA libraries] in
// libraries.h).
#include "backend/cuda/cublas.h"
#include "backend/cuda/cublaslt_api.h"

#include <array>
#include <mutex>

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
    library::bind(lib, "cuBLAS", "cublasGemmStridedBatchedEx_64", a.gemm_strided_batched);
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
  const CublasApi& api = cublas();
  cublasHandle_t handle = library::device_handle(
      handles, mutex, device, [&](cublasHandle_t* h) { check_cublas(api.create(h), "cublasCreate"); });
  check_cublas(api.set_stream(handle, current_stream(device)), "cublasSetStream");
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
