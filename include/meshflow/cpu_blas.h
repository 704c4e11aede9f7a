// Which library runs the CPU's float32 and 16-bit matrix products
// (Note [Choosing a GEMM library] in src/backend/cpu/kernels/gemm.cpp).
// Python: meshflow.backends.cpu.preferred_blas_library() and
// meshflow.backends.cpu.blas_choices().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/dtype.h"

namespace mf::cpu {

enum class BlasLibrary : int8_t {
  Auto,      // the fastest measured per product shape (the default)
  OpenBLAS,  // float32 only
  OneDNN,    // float32, bfloat16, float16
  MKL,       // float32, bfloat16; where oneMKL is installed
};

// "auto", "openblas", "onednn", "mkl".
const char* blas_library_name(BlasLibrary library);
// The inverse of blas_library_name; "mkldnn" also names oneDNN. Throws
// ValueError for any other name.
BlasLibrary parse_blas_library(std::string_view name);

// A library other than Auto runs every product of the types it handles
// (float64 and integer products are unaffected). Asking for MKL where it is
// not installed throws ValueError with where it was looked for.
void set_preferred_blas_library(BlasLibrary library);
BlasLibrary preferred_blas_library();

// Whether oneMKL was found and loaded (Note [oneMKL at run time]), its
// version string, and where it was looked for when it was not.
bool mkl_available();
std::string mkl_version();
std::string mkl_search_report();

// What Auto measured and chose for one product shape: the key, then each
// candidate's seconds for one product.
struct BlasChoice {
  DType dtype;
  int64_t batch, n, m, k;
  bool a_transposed, b_transposed;
  int threads;
  BlasLibrary library;
  std::vector<std::pair<BlasLibrary, double>> seconds;
};
std::vector<BlasChoice> blas_choices();
// Forgets every choice, so the next product of each shape measures again.
void clear_blas_choices();

}  // namespace mf::cpu
