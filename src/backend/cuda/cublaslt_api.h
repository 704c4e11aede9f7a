// cuBLASLt, opened on first use (Note [Lazily loaded CUDA libraries] in
// libraries.h).
#pragma once

#include <cublasLt.h>

namespace mf::cuda {

struct CublasLtApi {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtMatmulDescCreate) desc_create;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&::cublasLtMatmul) matmul;
};

// The library's entry points; throws Error naming the library when it
// cannot be opened.
const CublasLtApi& cublaslt();
// Whether it opens (addmm runs on cuBLAS alone where not).
bool cublaslt_available();
// The handle of `device` (one per device, created on first use).
cublasLtHandle_t cublaslt_handle(int device);

}  // namespace mf::cuda
