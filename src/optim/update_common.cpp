// Shared pieces of the fused optimizer update ops; see update_common.h.
#include "optim/update_common.h"

#include "meshflow/distributed/global.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/ops/creation.h"

namespace mf::optim::detail {

namespace {
// Whether the memory spans of a and b intersect (tensors without memory,
// or empty ones, never do).
bool overlaps(const Tensor& a, const Tensor& b) {
  auto span = [](const Tensor& t) -> std::pair<const char*, const char*> {
    const char* p = static_cast<const char*>(t.data_ptr());
    if (p == nullptr || t.numel() == 0) return {nullptr, nullptr};
    int64_t lo = 0, hi = 0;
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t reach = (t.sizes()[size_t(d)] - 1) * t.strides()[size_t(d)];
      (reach < 0 ? lo : hi) += reach;
    }
    const int64_t item = int64_t(t.element_size());
    return {p + lo * item, p + (hi + 1) * item};
  };
  const auto [a0, a1] = span(a);
  const auto [b0, b1] = span(b);
  return a0 != nullptr && b0 != nullptr && a0 < b1 && b0 < a1;
}

// Whether several elements of t share one memory location (a dimension of
// stride 0 and size above 1, as expand() makes), which an in-place write
// cannot honour.
bool has_internal_overlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.strides()[size_t(d)] == 0 && t.sizes()[size_t(d)] > 1) return true;
  return false;
}
}  // namespace

std::vector<TensorMeta> infer_update(const std::string& op, const TensorList& in,
                                     std::initializer_list<StateInput> state, int step_index) {
  const Tensor& param = in[0];
  const Tensor& grad = in[1];
  MF_CHECK(param.defined(), ValueError, op, ": param is undefined");
  MF_CHECK(is_floating(param.dtype()), TypeError, op, ": expected a floating-point param, got ",
           dtype_name(param.dtype()));
  MF_CHECK(grad.defined(), ValueError, op, ": grad is undefined");
  MF_CHECK(grad.sizes() == param.sizes(), ShapeError, op, ": grad has shape ", shape_str(grad.sizes()),
           " but param has shape ", shape_str(param.sizes()));
  MF_CHECK(grad.dtype() == param.dtype(), TypeError, op, ": grad has dtype ", dtype_name(grad.dtype()),
           " but param has dtype ", dtype_name(param.dtype()));
  const auto& names = dispatch::op(op).inputs;
  for (const StateInput& s : state) {
    const Tensor& t = in[s.index];
    const std::string& name = names[s.index];
    MF_CHECK(t.defined() == s.required, ValueError, op, ": ", name,
             s.required ? " is required by the given options but undefined"
                        : " must be undefined with the given options");
    if (!t.defined()) continue;
    MF_CHECK(t.sizes() == param.sizes(), ShapeError, op, ": ", name, " has shape ", shape_str(t.sizes()),
             " but param has shape ", shape_str(param.sizes()));
    MF_CHECK(t.dtype() == param.dtype(), TypeError, op, ": ", name, " has dtype ", dtype_name(t.dtype()),
             " but param has dtype ", dtype_name(param.dtype()));
  }
  // The loops read and write their arrays through restrict pointers: no
  // two operands may overlap in memory.
  std::vector<size_t> operands{0, 1};
  for (const StateInput& s : state)
    if (in[s.index].defined()) operands.push_back(s.index);
  if (step_index >= 0 && in[size_t(step_index)].defined()) operands.push_back(size_t(step_index));
  for (size_t i : operands)
    MF_CHECK(i == 1 || !has_internal_overlap(in[i]), ValueError, op, ": ", names[i],
             " has elements that share memory (stride 0, as from expand()) and cannot be written in place");
  for (size_t a = 0; a < operands.size(); ++a)
    for (size_t b = a + 1; b < operands.size(); ++b)
      MF_CHECK(!overlaps(in[operands[a]], in[operands[b]]), ValueError, op, ": ", names[operands[a]], " and ",
               names[operands[b]], " overlap in memory; each must have its own storage");
  const Tensor& found_inf = in.back();
  MF_CHECK(names.back() == "found_inf", Error, op, ": an update op's last input must be found_inf");
  if (found_inf.defined())
    MF_CHECK(found_inf.numel() == 1 && found_inf.dtype() == kFloat32, TypeError, op,
             ": found_inf must be a one-element float32 tensor, got shape ", shape_str(found_inf.sizes()),
             " and dtype ", dtype_name(found_inf.dtype()));
  if (step_index >= 0) {
    const Tensor& step = in[size_t(step_index)];
    MF_CHECK(step.defined(), ValueError, op, ": step is undefined");
    MF_CHECK(step.numel() == 1 && is_floating(step.dtype()), TypeError, op,
             ": step must be a one-element floating-point tensor, got shape ", shape_str(step.sizes()), " and dtype ",
             dtype_name(step.dtype()));
  }
  return {{param.sizes(), param.dtype(), param.device()}};
}

void* FlatOperands::flat(const Tensor& t, bool written) {
  if (!t.defined()) return nullptr;
  if (t.is_contiguous()) return t.data_ptr();
  NoGradGuard no_grad;
  Tensor copy = contiguous(t.detach());
  if (written) copies_.emplace_back(t, copy);
  else keep_alive_.push_back(copy);
  return copy.data_ptr();
}

void FlatOperands::write_back() {
  for (auto& [original, copy] : copies_) {
    Tensor dst = original;
    if (dst.device().is_cpu()) {
      cpu::copy_cast(dst, copy);
    } else {
      NoGradGuard no_grad;
      copy_(dst, copy);  // the device's copy kernel
    }
  }
  copies_.clear();
}

double increment_step(const Tensor& step) {
  return dispatch_floating(step.dtype(), "optimizer step", [&]<typename T>() {
    T* p = static_cast<T*>(step.data_ptr());
    *p = T(acc_type<T>(*p) + acc_type<T>(1));
    return double(acc_type<T>(*p));
  });
}

Tensor state_like(const Tensor& p, Scalar value) {
  if (!p.is_global()) return full_like(p, value);
  const Tensor local = global_to_local(p);
  return make_global(local.defined() ? full_like(local, value) : Tensor(), p.sizes(), p.dtype(), placement_of(p),
                     sbp_of(p));
}

void apply_update(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  NoGradGuard no_grad;
  const Tensor* skip = SkipUpdatesIf::current();
  if (skip && !inputs.back().defined() && op.inputs.back() == "found_inf") {
    TensorList with_flag = inputs;
    with_flag.back() = *skip;
    dispatch::apply_inplace(op, with_flag, attrs);
    return;
  }
  dispatch::apply_inplace(op, inputs, attrs);
}

}  // namespace mf::optim::detail

namespace mf::optim {

namespace {
thread_local const Tensor* current_skip = nullptr;
}  // namespace

SkipUpdatesIf::SkipUpdatesIf(Tensor found_inf) : flag_(std::move(found_inf)), previous_(current_skip) {
  MF_CHECK(flag_.defined() && flag_.numel() == 1 && flag_.dtype() == kFloat32, TypeError,
           "SkipUpdatesIf: found_inf must be a one-element float32 tensor");
  current_skip = &flag_;
}

SkipUpdatesIf::~SkipUpdatesIf() { current_skip = previous_; }

const Tensor* SkipUpdatesIf::current() { return current_skip; }

}  // namespace mf::optim
