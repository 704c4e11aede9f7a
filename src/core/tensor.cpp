#include "meshflow/tensor.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <sstream>

#include "meshflow/autograd.h"
#include "meshflow/backend.h"
#include "meshflow/graph/trace.h"
#include "meshflow/ops/elementwise.h"

namespace mf {

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ",";
  os << ")";
  return os.str();
}

void throw_size_overflow(std::string_view op, std::string_view what, int64_t a, char sign, int64_t b) {
  throw ShapeError(detail::concat(op, ": ", what, " overflows int64 (", a, " ", sign, " ", b, ")"));
}

void check_host_memory(std::string_view op, double bytes, std::string_view what) {
  double limit = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) limit = std::min(limit, double(as.rlim_cur));
  constexpr double kGiB = double(int64_t(1) << 30);
  MF_CHECK(bytes <= limit, OutOfMemoryError, op, ": CPU out of memory. ", bytes / kGiB, " GiB ", what,
           " would be needed; this process may use ", limit / kGiB, " GiB");
}

int64_t checked_numel(const Shape& shape, std::string_view op) {
  int64_t numel = 1, span = 1;
  for (int64_t s : shape) {
    MF_CHECK(s >= 0, ValueError, op, ": sizes must be non-negative, got ", shape_str(shape));
    if (s == 0) numel = 0;
    MF_CHECK(!__builtin_mul_overflow(span, std::max<int64_t>(s, 1), &span), ShapeError, op,
             ": the number of elements of a tensor of size ", shape_str(shape), " overflows int64");
  }
  return numel == 0 ? 0 : span;
}

int64_t checked_nbytes(const Shape& shape, DType dtype, std::string_view op) {
  int64_t nbytes;
  MF_CHECK(!__builtin_mul_overflow(checked_numel(shape, op), int64_t(itemsize(dtype)), &nbytes), ShapeError, op,
           ": the byte size of a ", dtype_name(dtype), " tensor of size ", shape_str(shape), " overflows int64");
  return nbytes;
}

int64_t shape_numel(const Shape& shape) { return checked_numel(shape, "shape"); }

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (int64_t i = int64_t(sizes.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s = checked_mul(s, std::max<int64_t>(sizes[i], 1), "contiguous_strides", "the stride");
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1
  MF_CHECK(dim >= -n && dim < n, IndexError, op, ": dim ", dim, " is out of range for a tensor with ",
           ndim, " dimension", ndim == 1 ? "" : "s", " (expected a value in [", -n, ", ", n - 1, "])");
  return dim < 0 ? dim + n : dim;
}

// --- TensorImpl ---------------------------------------------------------------

TensorImpl::TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype) {
  set_data(std::move(storage), std::move(sizes), std::move(strides), offset, dtype);
}

TensorImpl::TensorImpl(Fresh, Storage storage, const Shape& sizes, int64_t numel, DType dtype)
    : storage_(std::move(storage)),
      sizes_(sizes),
      strides_(contiguous_strides(sizes)),
      offset_(0),
      numel_(numel),
      dtype_(dtype),
      is_contiguous_(true) {}

namespace {

// Note [View bounds]: a tensor never addresses memory outside its storage.
// Its elements lie between offset + sum of (size - 1) * stride over the
// negative strides and offset + the same sum over the positive ones; both
// are computed with overflow checks, and both must fall inside the storage
// (a tensor without elements addresses nothing). Every tensor is built
// through here, so no view op, `as_strided` or foreign buffer can reach
// past its storage, however its sizes and strides were computed.
void check_view_bounds(const StorageImpl& storage, const Shape& sizes, const Shape& strides, int64_t offset,
                       DType dtype, int64_t numel) {
  MF_CHECK(sizes.size() == strides.size(), ShapeError, "Tensor: ", sizes.size(), " sizes ", shape_str(sizes),
           " but ", strides.size(), " strides ", shape_str(strides));
  if (numel == 0) return;
  auto fail = [&] {
    throw ShapeError(detail::concat("Tensor: sizes ", shape_str(sizes), ", strides ", shape_str(strides),
                                    " and storage offset ", offset, " address elements outside a storage of ",
                                    storage.nbytes(), " bytes (", storage.nbytes() / itemsize(dtype), " ",
                                    dtype_name(dtype), " elements)"));
  };
  int64_t lo = offset, hi = offset, step;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (__builtin_mul_overflow(sizes[d] - 1, strides[d], &step)) fail();
    if (__builtin_add_overflow(step < 0 ? lo : hi, step, step < 0 ? &lo : &hi)) fail();
  }
  const int64_t elements = int64_t(storage.nbytes() / itemsize(dtype));
  if (lo < 0 || hi >= elements) fail();
}

}  // namespace

void TensorImpl::set_data(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype) {
  const int64_t numel = checked_numel(sizes, "Tensor");
  check_view_bounds(*storage, sizes, strides, offset, dtype, numel);
  storage_ = std::move(storage);
  sizes_ = std::move(sizes);
  strides_ = std::move(strides);
  offset_ = offset;
  numel_ = numel;
  dtype_ = dtype;
  is_contiguous_ = true;
  int64_t expected = 1;
  for (int64_t i = int64_t(sizes_.size()) - 1; i >= 0; --i) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) {
      is_contiguous_ = false;
      break;
    }
    expected *= sizes_[i];
  }
  if (numel_ == 0) is_contiguous_ = true;
}

namespace {
void (*g_binding_release)(void*) = nullptr;
}  // namespace

void set_binding_release(void (*release)(void* object)) { g_binding_release = release; }

TensorImpl::~TensorImpl() {
  if (owns_binding_object_ && g_binding_release != nullptr) g_binding_release(binding_object_);
}

void* TensorImpl::data() const {
  MF_CHECK(global_ == nullptr, Error,
           "a global tensor holds no data of its own; use to_local() for this rank's shard, or "
           "to_global(sbp=broadcast).to_local() for the whole value");
  void* base = storage_->data();
  if (!base) return nullptr;
  return static_cast<char*>(base) + offset_ * int64_t(itemsize(dtype_));
}

AutogradMeta& TensorImpl::ensure_autograd() {
  if (!autograd_) autograd_ = std::make_unique<AutogradMeta>();
  return *autograd_;
}

void TensorImpl::clear_autograd() { autograd_.reset(); }

// --- default dtype ------------------------------------------------------------

namespace {
std::atomic<DType> g_default_dtype{DType::Float32};
}
DType default_dtype() { return g_default_dtype.load(); }
void set_default_dtype(DType dtype) {
  MF_CHECK(is_floating(dtype), TypeError, "set_default_dtype: expected a floating dtype, got ",
           dtype_name(dtype));
  g_default_dtype.store(dtype);
}

// --- raw construction -----------------------------------------------------------

namespace {
// A contiguous tensor of sizes over the storage make_storage(nbytes) gives.
template <typename MakeStorage>
Tensor fresh_tensor(const Shape& sizes, DType dtype, const MakeStorage& make_storage) {
  const int64_t numel = checked_numel(sizes, "empty");
  const size_t nbytes = size_t(checked_mul(numel, int64_t(itemsize(dtype)), "empty", "the byte size"));
  return Tensor(std::make_shared<TensorImpl>(TensorImpl::Fresh{}, make_storage(nbytes), sizes, numel, dtype));
}
}  // namespace

Tensor make_empty(const Shape& sizes, DType dtype, Device device) {
  return fresh_tensor(sizes, dtype, [&](size_t nbytes) {
    if (!device.is_cpu()) [[unlikely]]
      check_device(device, "empty");
    return std::make_shared<StorageImpl>(nbytes, device, &get_backend(device.type()).allocator(device.index()));
  });
}

Tensor make_meta(const Shape& sizes, DType dtype, Device device) {
  return fresh_tensor(sizes, dtype, [&](size_t nbytes) { return std::make_shared<StorageImpl>(nbytes, device); });
}

Tensor make_view(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype()));
}

// --- Tensor -------------------------------------------------------------------------

void Tensor::throw_undefined() { throw Error("Tensor: the tensor is undefined (default-constructed)"); }

int64_t Tensor::size_out_of_range(int64_t d) const {
  MF_CHECK(dim() != 0, IndexError, "Tensor.size: a 0-d tensor has no dimension ", d);
  wrap_dim(d, dim(), "Tensor.size");  // throws
  throw Error("internal: Tensor.size: dim in range");
}

int64_t Tensor::stride_out_of_range(int64_t d) const {
  MF_CHECK(dim() != 0, IndexError, "Tensor.stride: a 0-d tensor has no dimension ", d);
  wrap_dim(d, dim(), "Tensor.stride");  // throws
  throw Error("internal: Tensor.stride: dim in range");
}

Scalar Tensor::item() const {
  MF_CHECK(numel() == 1, ValueError, "Tensor.item: only a tensor with one element can be converted ",
           "to a number, got shape ", shape_str(sizes()));
  graph::check_traceable(*this, "Tensor.item()");
  // A device scalar is copied to the host (the caller waits for it, as in PyTorch).
  if (!device().is_cpu() && storage()->has_data()) return mf::to(detach(), Device()).item();
  MF_CHECK(data_ptr() != nullptr, Error, "Tensor.item: the tensor has no data (is it a traced graph tensor?)");
  return dispatch_dtype(dtype(), [&]<typename T>() -> Scalar {
    T v = *static_cast<const T*>(data_ptr());
    if constexpr (std::is_same_v<T, bool>) return Scalar(v);
    else if constexpr (is_floating_type_v<T>) return Scalar(double(acc_type<T>(v)));
    else return Scalar(int64_t(v));
  });
}

bool Tensor::requires_grad() const {
  auto* meta = checked()->autograd();
  return meta && meta->requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  auto* impl = checked();
  auto* meta = impl->autograd();
  MF_CHECK(!(meta && meta->grad_fn), Error,
           "requires_grad_: you can only change requires_grad of leaf tensors; use detach() first");
  MF_CHECK(!requires_grad || is_floating(impl->dtype()), TypeError,
           "requires_grad_: only floating-point tensors can require gradients, got ", dtype_name(impl->dtype()));
  if (!meta && !requires_grad) return *this;
  impl->ensure_autograd().requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  auto* meta = checked()->autograd();
  return meta ? meta->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    MF_CHECK(grad.sizes() == sizes(), ShapeError, "Tensor.grad: assigned grad has shape ",
             shape_str(grad.sizes()), " but the tensor has shape ", shape_str(sizes()));
    MF_CHECK(grad.dtype() == dtype(), TypeError, "Tensor.grad: assigned grad has dtype ",
             dtype_name(grad.dtype()), " but the tensor has dtype ", dtype_name(dtype()));
  }
  checked()->ensure_autograd().grad = grad;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> kNone;
  auto* meta = checked()->autograd();
  return meta ? meta->grad_fn : kNone;
}

uint32_t Tensor::output_nr() const {
  auto* meta = checked()->autograd();
  return meta ? meta->output_nr : 0;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  auto* impl = checked();
  auto out = std::make_shared<TensorImpl>(impl->storage(), impl->sizes(), impl->strides(), impl->offset(),
                                          impl->dtype());
  out->set_global(impl->global());  // a global tensor's shard carries no autograd
  return Tensor(std::move(out));
}

Tensor& Tensor::detach_() {
  MF_CHECK(!checked()->is_view(), Error, "detach_: can't detach views in-place; use detach() instead");
  if (auto* meta = checked()->autograd()) {
    meta->grad_fn.reset();
    meta->output_nr = 0;
    meta->requires_grad = false;
  }
  return *this;
}

void Tensor::set_data(const Tensor& src) const {
  auto* impl = checked();
  MF_CHECK(is_leaf(), Error, "set_data: only a leaf tensor's data can be replaced (this one has grad_fn ",
           grad_fn()->name(), ")");
  const TensorImpl* from = src.checked();
  impl->set_data(from->storage(), from->sizes(), from->strides(), from->offset(), from->dtype());
  impl->set_global(from->global());
}

void Tensor::retain_grad() const {
  MF_CHECK(requires_grad(), Error, "retain_grad: the tensor does not require grad");
  if (is_leaf()) return;  // leaves keep .grad anyway
  auto& meta = checked()->ensure_autograd();
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_;
  grad_fn()->add_tensor_hook(output_nr(), [weak](const Tensor& grad) {
    if (auto impl = weak.lock()) {
      auto& m = impl->ensure_autograd();
      NoGradGuard no_grad;
      m.grad = m.grad.defined() ? add(m.grad, grad) : grad.detach();
    }
    return Tensor();
  });
}

bool Tensor::retains_grad() const {
  auto* meta = checked()->autograd();
  return meta && meta->retains_grad;
}

int Tensor::register_hook(TensorHook hook) const {
  MF_CHECK(requires_grad(), Error,
           "register_hook: cannot register a hook on a tensor that doesn't require gradient");
  int handle = next_hook_handle();
  if (is_leaf()) {
    checked()->ensure_autograd().hooks.emplace_back(handle, std::move(hook));
    return handle;
  }
  return grad_fn()->add_tensor_hook(output_nr(), std::move(hook));
}

int Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const {
  MF_CHECK(requires_grad() && is_leaf(), Error,
           "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate gradients");
  int handle = next_hook_handle();
  checked()->ensure_autograd().post_accumulate_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_hook(int handle) const {
  auto* meta = checked()->autograd();
  if (!meta) return;
  std::erase_if(meta->hooks, [&](const auto& h) { return h.first == handle; });
  std::erase_if(meta->post_accumulate_hooks, [&](const auto& h) { return h.first == handle; });
  if (meta->grad_fn) meta->grad_fn->remove_tensor_hook(handle);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace mf
