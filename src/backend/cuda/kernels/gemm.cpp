// The CUDA kernels of matmul and addmm: cuBLAS, planned as Note [BLAS
// plans] describes. Half and bfloat16 products use the tensor cores and
// accumulate in float; float32 ones compute in full float32 (no TF32, as
// PyTorch's default); float64 in float64.
#include "backend/common/gemm_plan.h"
#include "backend/cuda/kernels/batched_gemm.h"
#include "backend/cuda/cublas.h"
#include "backend/cuda/cublaslt_api.h"
#include "backend/cuda/cuda_runtime.h"
#include "meshflow/op_def.h"

namespace mf::cuda {

void copy_cast(Tensor& dst, const Tensor& src);  // elementwise.cu

namespace {

struct BlasType {
  cudaDataType data;
  cublasComputeType_t compute;
};

BlasType blas_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::Float64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::Float16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case DType::BFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    default: break;
  }
  throw TypeError(detail::concat("matmul: cuda supports floating-point tensors only, got ", dtype_name(dtype)));
}

// out = beta * out + alpha * (a @ b); out is read only when beta != 0.
void gemm(const Tensor& a, const Tensor& b, Tensor& out, Scalar alpha_s, Scalar beta_s, Scratch taken) {
  if (out.numel() == 0) return;
  const BlasType type = blas_type(out.dtype());
  const GemmPlan plan = plan_gemm(a, b, out, copy_cast, taken);
  // Scalars in the compute type, read from the host.
  const double alpha64 = alpha_s.to_double(), beta64 = beta_s.to_double();
  const float alpha32 = float(alpha64), beta32 = float(beta64);
  const bool wide = type.compute == CUBLAS_COMPUTE_64F;
  const void* alpha = wide ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = wide ? static_cast<const void*>(&beta64) : &beta32;
  const int device = out.device().index();
  cublasHandle_t handle = cublas_handle(device);
  const CublasApi& api = cublas();
  const int64_t item = int64_t(out.element_size());
  const char* ap = static_cast<const char*>(plan.a.tensor.data_ptr());
  const char* bp = static_cast<const char*>(plan.b.tensor.data_ptr());
  char* cp = static_cast<char*>(out.data_ptr());
  const cublasOperation_t op_b = plan.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = plan.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  auto call = [&](int64_t first, int64_t count, int64_t stride_a, int64_t stride_b) {
    check_cublas(api.gemm_strided_batched(handle, op_b, op_a, plan.m, plan.n, plan.k, alpha,
                                          bp + plan.b.offsets[size_t(first)] * item, type.data, plan.b.ld, stride_b,
                                          ap + plan.a.offsets[size_t(first)] * item, type.data, plan.a.ld, stride_a,
                                          beta, cp + first * plan.n * plan.m * item, type.data, plan.m,
                                          plan.n * plan.m, count, type.compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  };
  if (plan.strided) {
    call(0, plan.count, plan.stride_a, plan.stride_b);
  } else {
    for (int64_t i = 0; i < plan.count; ++i) call(i, 1, 0, 0);
  }
}

// Note [cuBLASLt epilogues]: addmm(bias, a, b) with alpha = beta = 1, a
// contiguous 1-d bias over out's columns (linear's), 2-d a and b (one
// product) and a dtype of float16, bfloat16 or float32 is one
// cublasLtMatmul whose BIAS epilogue adds the bias as the product is
// written: no copy of the bias into the output first, and no read of that
// copy back (beta = 0). The column-major D = C^T has the output features
// as rows, so the epilogue's per-row bias is linear's per-feature bias.
// The algorithm is cuBLASLt's first heuristic choice for the operands'
// actual alignment, with a workspace of kLtWorkspace bytes of the kernel's
// scratch; where it has none, the addmm runs as below (bias copied, GEMM
// with beta = 1).
constexpr int64_t kLtWorkspace = int64_t(8) << 20;

bool bias_epilogue(const TensorList& in, const Attrs& attrs) {
  const Tensor &bias = in[0], &a = in[1], &b = in[2];
  const DType dtype = a.dtype();
  return cublaslt_available() && attrs.get_scalar("alpha").to_double() == 1.0 &&
         attrs.get_scalar("beta").to_double() == 1.0 &&
         bias.dim() == 1 && bias.is_contiguous() && bias.dtype() == dtype && a.dim() == 2 && b.dim() == 2 &&
         bias.size(0) == b.size(1) && b.size(1) > 0 && a.size(0) > 0 &&
         (dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32);
}

// The largest power of two, up to 256, that divides the address.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// out = a @ b + bias by the BIAS epilogue; false where cuBLASLt offers no
// algorithm (nothing was written).
bool gemm_bias_epilogue(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out, Scratch& taken) {
  const GemmPlan plan = plan_gemm(a, b, out, copy_cast, taken);
  Tensor space = taken.take({kLtWorkspace}, DType::UInt8);
  if (alignment_of(bias.data_ptr()) < 16) return false;
  const CublasLtApi& api = cublaslt();
  const int device = out.device().index();
  cublasLtHandle_t handle = cublaslt_handle(device);
  const cudaDataType type = blas_type(out.dtype()).data;
  // RAII for the descriptors of one call.
  struct Descriptors {
    const CublasLtApi& api;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t preference = nullptr;
    ~Descriptors() {
      if (preference) (void)api.preference_destroy(preference);
      if (d) (void)api.layout_destroy(d);
      if (b) (void)api.layout_destroy(b);
      if (a) (void)api.layout_destroy(a);
      if (desc) (void)api.desc_destroy(desc);
    }
  } lt{api};
  check_cublas(api.desc_create(&lt.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  // cuBLASLt's A is plan.b and its B is plan.a (Note [BLAS plans]).
  const cublasOperation_t op_a = plan.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = plan.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  const void* bias_ptr = bias.data_ptr();
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& value) {
    check_cublas(api.desc_set(lt.desc, attr, &value, sizeof(value)), "cublasLtMatmulDescSetAttribute");
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set(CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr);
  // The stored matrices: op(A) is (m, k), op(B) is (k, n), D is (m, n), all column-major.
  const uint64_t m = uint64_t(plan.m), n = uint64_t(plan.n), k = uint64_t(plan.k);
  check_cublas(api.layout_create(&lt.a, type, op_a == CUBLAS_OP_N ? m : k, op_a == CUBLAS_OP_N ? k : m, plan.b.ld),
               "cublasLtMatrixLayoutCreate");
  check_cublas(api.layout_create(&lt.b, type, op_b == CUBLAS_OP_N ? k : n, op_b == CUBLAS_OP_N ? n : k, plan.a.ld),
               "cublasLtMatrixLayoutCreate");
  check_cublas(api.layout_create(&lt.d, type, m, n, int64_t(m)), "cublasLtMatrixLayoutCreate");
  const int64_t item = int64_t(out.element_size());
  const char* ap = static_cast<const char*>(plan.b.tensor.data_ptr()) + plan.b.offsets[0] * item;
  const char* bp = static_cast<const char*>(plan.a.tensor.data_ptr()) + plan.a.offsets[0] * item;
  void* dp = out.data_ptr();
  check_cublas(api.preference_create(&lt.preference), "cublasLtMatmulPreferenceCreate");
  auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& value) {
    check_cublas(api.preference_set(lt.preference, attr, &value, sizeof(value)),
                 "cublasLtMatmulPreferenceSetAttribute");
  };
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kLtWorkspace));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(ap));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(bp));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(dp));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(dp));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check_cublas(api.heuristic(handle, lt.desc, lt.a, lt.b, lt.d, lt.d, lt.preference, 1, &result, &found),
               "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) return false;
  const float one = 1.0f, zero = 0.0f;
  check_cublas(api.matmul(handle, lt.desc, &one, ap, lt.a, bp, lt.b, &zero, dp, lt.d, dp, lt.d, &result.algo,
                          space.data_ptr(), size_t(kLtWorkspace), current_stream(device)),
               "cublasLtMatmul");
  return true;
}

}  // namespace

void CublasBatchedGemm::bmm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out, Scratch&) {
  MF_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3 && a.is_contiguous() && b.is_contiguous() &&
               out.is_contiguous() && a.dtype() == b.dtype(),
           Error, "attention: expected contiguous 3-d operands of one dtype (internal error)");
  const int64_t n = out.size(0), m = out.size(1), cols = out.size(2), k = ta ? a.size(1) : a.size(2);
  if (out.numel() == 0) return;
  const BlasType in = blas_type(a.dtype()), to = blas_type(out.dtype());
  const bool wide = to.compute == CUBLAS_COMPUTE_64F;
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const void* alpha = wide ? static_cast<const void*>(&one64) : &one32;
  const void* beta = wide ? static_cast<const void*>(&zero64) : &zero32;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T (Note [BLAS plans]).
  check_cublas(cublas().gemm_strided_batched(cublas_handle(out.device().index()), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                             ta ? CUBLAS_OP_T : CUBLAS_OP_N, cols, m, k, alpha, b.data_ptr(), in.data,
                                             tb ? k : cols, k * cols, a.data_ptr(), in.data, ta ? m : k, m * k, beta,
                                             out.data_ptr(), to.data, cols, m * cols, n, to.compute,
                                             CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
}

namespace {

[[maybe_unused]] const bool kRegistered = [] {
  auto& registry = OpRegistry::instance();
  registry.set_kernel(
      "matmul", DeviceType::CUDA,
      [](const TensorList& in, TensorList& out, const Attrs&) { gemm(in[0], in[1], out[0], 1, 0, Scratch(out)); },
      [](const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
        return gemm_scratch_bytes(in[0], in[1]);
      });
  // beta * t + alpha * (a @ b): t broadcast into out first.
  registry.set_kernel(
      "addmm", DeviceType::CUDA,
      [](const TensorList& in, TensorList& out, const Attrs& attrs) {
        if (bias_epilogue(in, attrs)) {
          Scratch taken(out);
          if (gemm_bias_epilogue(in[1], in[2], in[0], out[0], taken)) return;
        }
        const Scalar beta = attrs.get_scalar("beta");
        if (beta.to_double() != 0.0) copy_cast(out[0], in[0]);
        gemm(in[1], in[2], out[0], attrs.get_scalar("alpha"), beta, Scratch(out));
      },
      [](const TensorList& in, const std::vector<TensorMeta>&, const Attrs& attrs) {
        ScratchLayout layout("addmm");
        layout.add_bytes(gemm_scratch_bytes(in[1], in[2]));
        if (bias_epilogue(in, attrs)) layout.add_bytes(kLtWorkspace);
        return layout.bytes();
      });
  return true;
}();

}  // namespace
}  // namespace mf::cuda
