// oneMKL, loaded at run time where it is installed (Note [oneMKL at run
// time] in mkl.cpp). meshflow neither needs it to build nor links it: its
// GEMMs use it where it measures fastest (Note [Choosing a GEMM library]
// in gemm.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace mf::cpu::mkl {

// The CBLAS entry points meshflow calls, with MKL's LP64 integers and
// CBLAS's enum values (row major 101, no transpose 111, transpose 112).
struct Library {
  void (*sgemm)(int layout, int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                int ldb, float beta, float* c, int ldc);
  void (*sgemm_batch_strided)(int layout, int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda,
                              int stride_a, const float* b, int ldb, int stride_b, float beta, float* c, int ldc,
                              int stride_c, int batch);
  void (*gemm_bf16bf16f32)(int layout, int ta, int tb, int m, int n, int k, float alpha, const uint16_t* a, int lda,
                           const uint16_t* b, int ldb, float beta, float* c, int ldc);
  std::string version;
  std::string path;
};

// The loaded library, or null where none was found (or MESHFLOW_MKL=0).
// Loads once, on first use; thread-safe.
const Library* library();

// Where library() looked, in order, and why each place failed; empty once
// loaded. For build_info and error messages.
std::string search_report();

}  // namespace mf::cpu::mkl
