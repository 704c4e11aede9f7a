// The activation layers of meshflow/nn/pointwise_layers.h (its losses: loss.cpp).
#include "meshflow/nn/pointwise_layers.h"

#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/functional.h"
#include "meshflow/ops/shape.h"
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

namespace {
// Python's text of a number PyTorch's defaults give as an int (Softplus's
// beta=1, threshold=20): integral values without ".0".
std::string py_number(double v) { return v == double(int64_t(v)) ? std::to_string(int64_t(v)) : py_float(v); }
std::string shape_tuple(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}
}  // namespace

Tensor Mish::forward(const Tensor& x) {
  if (!inplace) return mish(x);
  Tensor t = x;
  return copy_(t, mish(x));
}
std::string Mish::extra_repr() const { return inplace ? "inplace=True" : ""; }

Tensor ELU::forward(const Tensor& x) {
  if (!inplace) return elu(x, alpha);
  Tensor t = x;
  return copy_(t, elu(x, alpha));
}
std::string ELU::extra_repr() const { return "alpha=" + py_float(alpha) + (inplace ? ", inplace=True" : ""); }

Tensor Softplus::forward(const Tensor& x) { return softplus(x, beta, threshold); }
std::string Softplus::extra_repr() const { return "beta=" + py_number(beta) + ", threshold=" + py_number(threshold); }

Tensor Unflatten::forward(const Tensor& x) { return unflatten(x, dim, unflattened_size); }
std::string Unflatten::extra_repr() const {
  return "dim=" + std::to_string(dim) + ", unflattened_size=" + shape_tuple(unflattened_size);
}

PixelShuffle::PixelShuffle(int64_t factor, bool unshuffle)
    : Module(unshuffle ? "PixelUnshuffle" : "PixelShuffle"), factor(factor), unshuffle(unshuffle) {
  MF_CHECK(factor > 0, ValueError, type_name(), ": the factor must be positive, got ", factor);
}
Tensor PixelShuffle::forward(const Tensor& x) { return unshuffle ? pixel_unshuffle(x, factor) : pixel_shuffle(x, factor); }
std::string PixelShuffle::extra_repr() const {
  return (unshuffle ? "downscale_factor=" : "upscale_factor=") + std::to_string(factor);
}

Tensor Pool1d::forward(const Tensor& x) { return type_name() == "MaxPool1d" ? max_pool1d(x, args) : avg_pool1d(x, args); }
std::string Pool1d::extra_repr() const {
  const std::string common = "kernel_size=" + std::to_string(args.kernel_size) +
                             ", stride=" + std::to_string(args.stride.value_or(args.kernel_size)) +
                             ", padding=" + std::to_string(args.padding);
  if (type_name() == "MaxPool1d")
    return common + ", dilation=" + std::to_string(args.dilation) + ", ceil_mode=" + py_bool(args.ceil_mode);
  return "kernel_size=(" + std::to_string(args.kernel_size) + ",), stride=(" +
         std::to_string(args.stride.value_or(args.kernel_size)) + ",), padding=(" + std::to_string(args.padding) +
         ",)";
}

Tensor AdaptiveAvgPool1d::forward(const Tensor& x) { return adaptive_avg_pool1d(x, output_size); }
std::string AdaptiveAvgPool1d::extra_repr() const { return "output_size=" + std::to_string(output_size); }

}  // namespace mf::nn
