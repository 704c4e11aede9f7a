// Tensor: a strided view of a Storage, with optional autograd metadata.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meshflow/checked_size.h"
#include "meshflow/device.h"
#include "meshflow/dtype.h"
#include "meshflow/scalar.h"
#include "meshflow/storage.h"

namespace mf {

class Node;
class Tensor;
struct AutogradMeta;
struct GlobalMeta;  // distributed/global.h

std::string shape_str(const Shape& shape);  // "(2, 3)"
// checked_numel without an op name (Note [Checked sizes]).
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& sizes);

class TensorImpl {
 public:
  TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);
  // A contiguous tensor filling all of storage, whose numel (sizes checked
  // by checked_numel) and byte size the caller has computed: make_empty's
  // path, which skips the checks that hold by construction.
  struct Fresh {};
  TensorImpl(Fresh, Storage storage, const Shape& sizes, int64_t numel, DType dtype);
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  const Storage& storage() const { return storage_; }
  const Shape& sizes() const { return sizes_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  int64_t numel() const { return numel_; }
  int64_t dim() const { return int64_t(sizes_.size()); }
  bool is_contiguous() const { return is_contiguous_; }
  // True for the outputs of view ops (they alias another tensor's memory).
  bool is_view() const { return is_view_; }
  void set_is_view(bool v) { is_view_ = v; }
  // True for a module's parameters (nn::Module::register_parameter,
  // Python's nn.Parameter).
  bool is_parameter() const { return is_parameter_; }
  void set_is_parameter(bool v) { is_parameter_ = v; }
  // Placement, SBP and local shard of a global tensor (null for local
  // tensors); a global tensor's own sizes are the global shape and it holds
  // no data itself.
  const std::shared_ptr<const GlobalMeta>& global() const { return global_; }
  void set_global(std::shared_ptr<const GlobalMeta> global) { global_ = std::move(global); }
  // Points this tensor at other memory and metadata (PyTorch's `t.data = x`);
  // its autograd identity (grad, hooks, requires_grad) stays.
  void set_data(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);
  // Address of element 0 (nullptr for a metadata-only tensor).
  void* data() const;

  AutogradMeta* autograd() const { return autograd_.get(); }
  AutogradMeta& ensure_autograd();
  void clear_autograd();

  // The language binding's object for this tensor, or null (Note [One
  // Python object per tensor] in python/bindings/identity.cpp). Borrowed
  // while the object holds this tensor; owned once the object's last
  // reference is gone but the tensor lives on, and then released through
  // set_binding_release's function when this tensor dies. The core never
  // reads the object.
  void* binding_object() const { return binding_object_; }
  bool owns_binding_object() const { return owns_binding_object_; }
  void set_binding_object(void* object, bool owned) const {
    binding_object_ = object;
    owns_binding_object_ = owned;
  }

 private:
  Storage storage_;
  Shape sizes_;
  Shape strides_;
  int64_t offset_;
  int64_t numel_;
  DType dtype_;
  bool is_contiguous_;
  bool is_view_ = false;
  bool is_parameter_ = false;
  std::shared_ptr<const GlobalMeta> global_;
  std::unique_ptr<AutogradMeta> autograd_;
  mutable void* binding_object_ = nullptr;
  mutable bool owns_binding_object_ = false;
};

// How a tensor releases the binding object it owns (see
// TensorImpl::binding_object); set once by the binding at import.
void set_binding_release(void (*release)(void* object));

struct TensorOptions {
  DType dtype = DType::Float32;
  Device device;
  bool requires_grad = false;
};

// The dtype that factories use when none is given (float32 unless changed).
DType default_dtype();
void set_default_dtype(DType dtype);

using TensorHook = std::function<Tensor(const Tensor& grad)>;
// Runs with a leaf after a gradient was accumulated into its .grad.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // --- metadata ---------------------------------------------------------
  // size()/stride()'s errors (IndexError) for a dim out of range.
  [[noreturn]] int64_t size_out_of_range(int64_t dim) const;
  [[noreturn]] int64_t stride_out_of_range(int64_t dim) const;
  const Shape& sizes() const { return checked()->sizes(); }
  const Shape& shape() const { return sizes(); }
  const Shape& strides() const { return checked()->strides(); }
  // size(-1) is the last dimension; out of range throws IndexError.
  int64_t size(int64_t dim) const {
    const int64_t* s = at_dim(sizes(), dim);
    return s ? *s : size_out_of_range(dim);
  }
  int64_t stride(int64_t dim) const {
    const int64_t* s = at_dim(strides(), dim);
    return s ? *s : stride_out_of_range(dim);
  }
  // The entry of dim (negative: from the end), or null out of range.
  static const int64_t* at_dim(const Shape& s, int64_t dim) {
    const int64_t n = int64_t(s.size());
    if (dim < -n || dim >= n) [[unlikely]]
      return nullptr;
    return &s[size_t(dim < 0 ? dim + n : dim)];
  }
  int64_t dim() const { return checked()->dim(); }
  int64_t numel() const { return checked()->numel(); }
  DType dtype() const { return checked()->dtype(); }
  Device device() const { return checked()->device(); }
  int64_t storage_offset() const { return checked()->offset(); }
  bool is_contiguous() const { return checked()->is_contiguous(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  size_t element_size() const { return itemsize(dtype()); }
  const Storage& storage() const { return checked()->storage(); }
  bool shares_storage(const Tensor& other) const { return storage() == other.storage(); }
  // Host memory that a device copies without staging (pin_memory()).
  bool is_pinned() const { return storage() && storage()->pinned(); }
  // A tensor of the global view (distributed/global.h).
  bool is_global() const { return checked()->global() != nullptr; }

  void* data_ptr() const { return checked()->data(); }
  // Typed pointer to element 0; throws TypeError if T is not the dtype.
  template <typename T>
  T* data() const {
    MF_CHECK(dtype_of<T>() == dtype(), TypeError, "Tensor.data: requested ",
             dtype_name(dtype_of<T>()), " but the tensor is ", dtype_name(dtype()));
    return static_cast<T*>(data_ptr());
  }
  // The value of a one-element tensor.
  Scalar item() const;
  template <typename T>
  T item() const { return item().to<T>(); }

  // --- autograd -----------------------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);
  // Accumulated gradient of a leaf (undefined before the first backward).
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<Node>& grad_fn() const;
  uint32_t output_nr() const;
  bool is_leaf() const;
  // Reverse-mode differentiation from this tensor; a scalar needs no gradient.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  // A tensor sharing this one's data but outside the autograd graph.
  Tensor detach() const;
  // Takes this tensor out of the autograd graph in place: it becomes a leaf
  // that does not require grad (its .grad and hooks are kept, as PyTorch's).
  Tensor& detach_();
  // Makes this leaf use src's data, shape and dtype (PyTorch's `t.data = src`);
  // Module::to(dtype) converts parameters this way, so references held by
  // optimizers stay valid. Throws Error for a non-leaf.
  void set_data(const Tensor& src) const;
  // Keep .grad of a non-leaf after backward.
  void retain_grad() const;
  bool retains_grad() const;
  // hook(grad) runs when the gradient of this tensor is computed; a defined
  // return value replaces the gradient. Returns a handle for remove_hook.
  int register_hook(TensorHook hook) const;
  void remove_hook(int handle) const;
  // hook(leaf) runs after each gradient is accumulated into this leaf's
  // .grad (PyTorch's register_post_accumulate_grad_hook); remove_hook
  // removes it. Throws Error for a non-leaf or a tensor without grad.
  int register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const;
  // Counter of in-place writes to the storage.
  uint32_t version() const { return storage()->version(); }
  void bump_version() const { storage()->bump_version(); }

  // --- text -----------------------------------------------------------------
  // Formats like PyTorch: "tensor([[1., 2.],\n        [3., 4.]])".
  std::string to_string() const;

 private:
  TensorImpl* checked() const {
    if (!impl_) [[unlikely]]
      throw_undefined();
    return impl_.get();
  }
  [[noreturn]] static void throw_undefined();
  std::shared_ptr<TensorImpl> impl_;
};

// An op's inputs or outputs: four inline (Note [Inline shapes]).
using TensorList = SmallVector<Tensor, 4>;

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Wraps dim (may be negative) into [0, ndim); throws IndexError naming op.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

// --- raw construction (no dispatch, no autograd) -----------------------------
// An uninitialised contiguous tensor from the device's allocator.
Tensor make_empty(const Shape& sizes, DType dtype, Device device = Device());
// A view of t's storage with other sizes/strides/offset; throws ShapeError
// unless every element it can address lies inside the storage (Note [View
// bounds] in tensor.cpp).
Tensor make_view(const Tensor& t, Shape sizes, Shape strides, int64_t offset);
// A tensor with metadata but no memory (graph tracing).
Tensor make_meta(const Shape& sizes, DType dtype, Device device = Device());

}  // namespace mf
