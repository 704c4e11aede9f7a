// Tensor printing in PyTorch's format (torch/_tensor_str.py): 4 decimals,
// scientific notation for wide ranges, summarised above 1000 elements.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "meshflow/autograd.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/tensor.h"

namespace mf {
namespace {

constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = false;
  bool int_mode = true;   // floats that are all whole numbers print as "1."
  bool sci_mode = false;
  int width = 1;

  std::string format(double v) const {
    char buf[64];
    if (!floating) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    } else if (std::isnan(v)) {
      std::snprintf(buf, sizeof buf, "nan");
    } else if (std::isinf(v)) {
      std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
    } else if (sci_mode) {
      std::snprintf(buf, sizeof buf, "%.4e", v);
    } else if (int_mode) {
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof buf, "%.4f", v);
    }
    return buf;
  }
};

double value_at(const Tensor& t, int64_t linear_offset) {
  return dispatch_dtype(t.dtype(), [&]<typename T>() -> double {
    const T* p = static_cast<const T*>(t.data_ptr()) + linear_offset;
    if constexpr (std::is_same_v<T, bool>) return *p ? 1.0 : 0.0;
    else return double(acc_type<T>(*p));
  });
}

// Visits the printed elements (respecting summarisation).
template <typename F>
void visit(const Tensor& t, int64_t dim, int64_t offset, bool summarize, const F& f) {
  if (dim == t.dim()) {
    f(offset);
    return;
  }
  int64_t n = t.sizes()[size_t(dim)];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    visit(t, dim + 1, offset + i * t.strides()[size_t(dim)], summarize, f);
  }
}

void write(std::ostringstream& os, const Tensor& t, int64_t dim, int64_t offset, bool summarize,
           const Formatter& fmt, int indent) {
  if (dim == t.dim()) {
    std::string s;
    if (t.dtype() == DType::Bool) s = value_at(t, offset) != 0 ? "True" : "False";
    else s = fmt.format(value_at(t, offset));
    os << std::string(size_t(std::max<int>(0, fmt.width - int(s.size()))), ' ') << s;
    return;
  }
  int64_t n = t.sizes()[size_t(dim)];
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      if (dim == t.dim() - 1) os << " ...,";
      else os << "\n" << std::string(size_t(indent + 1), ' ') << "...,";
      i = n - kEdgeItems;
      if (dim == t.dim() - 1) os << " ";
      else os << std::string(size_t(t.dim() - dim - 1), '\n') << std::string(size_t(indent + 1), ' ');
    }
    write(os, t, dim + 1, offset + i * t.strides()[size_t(dim)], summarize, fmt, indent + 1);
    if (i + 1 < n) {
      os << ",";
      if (dim == t.dim() - 1) os << " ";
      else os << std::string(size_t(t.dim() - dim - 1), '\n') << std::string(size_t(indent + 1), ' ');
    }
  }
  os << "]";
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  const Tensor& t = *this;
  // A device tensor prints from a host copy of its values, as PyTorch's does.
  Tensor host;
  if (!t.device().is_cpu() && t.storage()->has_data()) host = mf::to(t.detach(), Device());
  const Tensor& shown = host.defined() ? host : t;
  const bool has_values = shown.storage()->has_data() && shown.device().is_cpu();
  const bool summarize = t.numel() > kThreshold;
  Formatter fmt;
  fmt.floating = t.is_floating_point();
  if (has_values && t.numel() > 0 && t.dtype() != DType::Bool) {
    double max_abs = 0, min_abs = INFINITY;
    bool any_finite = false;
    visit(shown, 0, 0, summarize, [&](int64_t off) {
      double v = value_at(shown, off);
      if (!std::isfinite(v)) return;
      any_finite = true;
      if (v != std::nearbyint(v)) fmt.int_mode = false;
      double a = std::fabs(v);
      max_abs = std::max(max_abs, a);
      if (a != 0) min_abs = std::min(min_abs, a);
    });
    if (fmt.floating && any_finite) {
      const bool wide_range = (min_abs != INFINITY && max_abs / min_abs > 1000.0) || max_abs > 1e8;
      fmt.sci_mode = fmt.int_mode ? wide_range : wide_range || (min_abs != INFINITY && min_abs < 1e-4);
    }
    visit(shown, 0, 0, summarize, [&](int64_t off) {
      fmt.width = std::max<int>(fmt.width, int(fmt.format(value_at(shown, off)).size()));
    });
  } else if (t.dtype() == DType::Bool) {
    fmt.width = 1;
    visit(shown, 0, 0, summarize, [&](int64_t off) {
      if (has_values) fmt.width = std::max(fmt.width, value_at(shown, off) != 0 ? 4 : 5);
    });
  }
  os << "tensor(";
  if (!has_values) os << "...";
  else if (t.numel() == 0 && t.dim() <= 1) os << "[]";
  else if (t.numel() == 0) os << "[]";
  else write(os, shown, 0, 0, summarize, fmt, 7);
  const bool default_dtype_shown = t.dtype() == default_dtype() || t.dtype() == DType::Int64 ||
                                   t.dtype() == DType::Bool;
  if (t.numel() == 0 && t.dim() > 1) os << ", size=" << shape_str(t.sizes());
  if (!t.device().is_cpu()) os << ", device='" << t.device() << "'";
  if (!default_dtype_shown || (t.numel() == 0 && t.dtype() != default_dtype()))
    os << ", dtype=meshflow." << dtype_name(t.dtype());
  if (t.grad_fn()) os << ", grad_fn=<" << t.grad_fn()->name() << ">";
  else if (t.requires_grad()) os << ", requires_grad=True";
  os << ")";
  return os.str();
}

}  // namespace mf
