// The CUDA kernels of matmul and addmm: cuBLAS, planned as Note [BLAS
// plans] describes. Half and bfloat16 products use the tensor cores and
// accumulate in float; float32 ones compute in full float32 (no TF32, as
// PyTorch's default); float64 in float64.
#include "backend/common/gemm_plan.h"
#include "backend/cuda/cublas.h"
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
        const Scalar beta = attrs.get_scalar("beta");
        if (beta.to_double() != 0.0) copy_cast(out[0], in[0]);
        gemm(in[1], in[2], out[0], attrs.get_scalar("alpha"), beta, Scratch(out));
      },
      [](const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) {
        return gemm_scratch_bytes(in[1], in[2]);
      });
  return true;
}();

}  // namespace
}  // namespace mf::cuda
