// cuBLAS, opened on first use (Note [Lazily loaded CUDA libraries] in
// libraries.h).
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace mf::cuda {

// The cuBLAS entry points meshflow calls.
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*set_workspace)(cublasHandle_t, void*, size_t);
  cublasStatus_t (*gemm_strided_batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t, int64_t,
                                         int64_t, const void*, const void*, cudaDataType, int64_t, long long,
                                         const void*, cudaDataType, int64_t, long long, const void*, void*,
                                         cudaDataType, int64_t, long long, int64_t, cublasComputeType_t,
                                         cublasGemmAlgo_t);
};

// The library's entry points; throws Error naming the library when it
// cannot be opened.
const CublasApi& cublas();
// Whether it opens.
bool cublas_available();
// The handle of `device` (one per device, created on first use), bound to
// the device's current stream and to that stream's own workspace (Note
// [cuBLAS workspace] in cublas.cpp).
cublasHandle_t cublas_handle(int device);
void check_cublas(cublasStatus_t status, const char* what);

}  // namespace mf::cuda
