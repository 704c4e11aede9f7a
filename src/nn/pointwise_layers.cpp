// The activation layers of meshflow/nn/pointwise_layers.h (its losses: loss.cpp).
#include "meshflow/nn/pointwise_layers.h"

#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/functional.h"
#include "nn/repr.h"

namespace mf::nn {
Hardtanh::Hardtanh(double min_val, double max_val, bool inplace, std::string type_name)
    : Module(std::move(type_name)), min_val(min_val), max_val(max_val), inplace(inplace) {
  MF_CHECK(min_val <= max_val, ValueError, this->type_name(), ": min_val (", min_val, ") must not exceed max_val (",
           max_val, ")");
}

Tensor Hardtanh::forward(const Tensor& x) {
  if (!inplace) return hardtanh(x, min_val, max_val);
  Tensor t = x;
  return clamp_(t, min_val, max_val);
}

std::string Hardtanh::extra_repr() const {
  return "min_val=" + py_float(min_val) + ", max_val=" + py_float(max_val) + (inplace ? ", inplace=True" : "");
}

std::string ReLU6::extra_repr() const { return inplace ? "inplace=True" : ""; }

GLU::GLU(int64_t dim) : Module("GLU"), dim(dim) {}
Tensor GLU::forward(const Tensor& x) { return glu(x, dim); }
std::string GLU::extra_repr() const { return "dim=" + std::to_string(dim); }

CosineSimilarity::CosineSimilarity(int64_t dim, double eps) : Module("CosineSimilarity"), dim(dim), eps(eps) {}
Tensor CosineSimilarity::forward(const Tensor& x1, const Tensor& x2) { return cosine_similarity(x1, x2, dim, eps); }
std::string CosineSimilarity::extra_repr() const { return ""; }  // as torch.nn prints it

}  // namespace mf::nn
