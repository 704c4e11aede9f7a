// nn::Module: the base of every layer. A module owns named parameters,
// buffers and child modules, in registration order, and everything that
// walks them (parameters(), state_dict(), train(), to(dtype), ...) follows
// that order the way PyTorch does: a module's own parameters, then its own
// buffers, then each child's entries under "<child>.".
//
// Note [Modules across C++ and Python]
// The same objects serve both languages. C++ layers (linear.h, ...) register
// their parameters in the constructor and read them back by slot in
// forward(), so replacing `lin.weight` from Python is seen by C++. Python
// subclasses (meshflow.nn.Module) register through attribute assignment; a
// child registered from Python carries an `owner` handle that keeps its
// Python object (and so its Python forward) alive as long as the parent
// holds it. Hooks are type-erased so that the Python front end can store
// Python callables next to C++ ones.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/distributed/placement.h"
#include "meshflow/tensor.h"

namespace mf::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A hook registered on a module. C++ hooks are ForwardHook / ForwardPreHook;
// other front ends derive their own kinds.
struct Hook {
  virtual ~Hook() = default;
};
// Runs after forward with the input and the output; a defined return value
// replaces the output. With always_call it also runs when forward throws
// (with an undefined output, its result ignored), before the exception
// propagates.
struct ForwardHook : Hook {
  std::function<Tensor(class Module&, const Tensor& input, const Tensor& output)> fn;
  bool always_call = false;
};
// Runs before forward; a defined return value replaces the input.
struct ForwardPreHook : Hook {
  std::function<Tensor(class Module&, const Tensor& input)> fn;
};

// What load_state_dict did not match (PyTorch's _IncompatibleKeys).
struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  struct Child {
    std::string name;
    std::shared_ptr<Module> module;  // null: a slot set to None
    // Keeps a front end's object of the child alive: set at registration
    // from Python, or by the front end when it first hands out a child made
    // in C++, so that the child is one object there (a cache of the front
    // end's, hence mutable).
    mutable std::shared_ptr<void> owner;
  };
  struct Buffer {
    std::string name;
    Tensor tensor;  // undefined: a slot set to None
    bool persistent = true;
  };

  // type_name is the class name used by repr ("Linear", "Sequential").
  explicit Module(std::string type_name = "Module");
  virtual ~Module() = default;
  Module& operator=(const Module&) = delete;

  // A copy of m of its own type: its fields (a layer's configuration and
  // slots), training flag and hooks, sharing m's tensors and children. A
  // front end's deepcopy starts from it and then puts copies of the
  // tensors and children in their slots.
  template <typename M>
  static std::shared_ptr<M> shallow_copy(const M& m) {
    return std::shared_ptr<M>(new M(m));
  }

  const std::string& type_name() const { return type_name_; }
  void set_type_name(std::string name) { type_name_ = std::move(name); }

  // The call of a module on one tensor: pre-hooks, forward, hooks.
  Tensor operator()(const Tensor& input);
  // One-tensor forward; modules with other signatures (losses, attention)
  // add overloads and leave this one throwing TypeError.
  virtual Tensor forward(const Tensor& input);

  // --- registration -------------------------------------------------------
  // Registers (or replaces) parameter `name`. A defined tensor must be a
  // leaf; it is marked as a parameter and requires grad when requires_grad.
  // Throws ValueError for a bad name or one already used by a buffer or
  // child.
  void register_parameter(const std::string& name, const Tensor& param, bool requires_grad = true);
  void register_buffer(const std::string& name, const Tensor& buffer, bool persistent = true);
  // Registers (or replaces) child `name`; returns it.
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module,
                                     std::shared_ptr<void> owner = nullptr) {
    add_child(name, module, std::move(owner));
    return module;
  }
  // Removes a child, or sets a parameter or buffer to None (its name stays
  // registered, as after PyTorch's `module.bias = None`); returns whether
  // the name existed.
  bool unregister(const std::string& name);
  // Puts t in parameter `name`'s slot (the name must exist) without the
  // leaf check or marking t a parameter, and returns what the slot held.
  // For the span of a forward only: fully_shard runs a layer on the
  // gathered tensor in place of its shard this way, then swaps it back.
  Tensor swap_parameter(const std::string& name, Tensor t);

  // --- lookup (own entries only) --------------------------------------------
  bool has_parameter(const std::string& name) const;
  bool has_buffer(const std::string& name) const;
  bool has_child(const std::string& name) const;
  // Throws ValueError when there is no such entry.
  const Tensor& parameter(const std::string& name) const;
  const Tensor& buffer(const std::string& name) const;
  std::shared_ptr<Module> child(const std::string& name) const;
  const Child& child_entry(const std::string& name) const;
  // The module at a dotted path ("layer1.0.conv1"); "" is this module.
  std::shared_ptr<Module> submodule(const std::string& path);
  const NamedTensors& own_parameters() const { return params_; }
  const std::vector<Buffer>& own_buffers() const { return buffers_; }
  const std::vector<Child>& own_children() const { return children_; }

  // --- traversal ----------------------------------------------------------
  // Each tensor or module is listed once even when shared.
  NamedTensors named_parameters(bool recurse = true, const std::string& prefix = "") const;
  TensorList parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true, const std::string& prefix = "") const;
  TensorList buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  // This module first (named `prefix`), then its descendants depth first.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(const std::string& prefix = "");
  std::vector<std::shared_ptr<Module>> modules();

  // --- state ----------------------------------------------------------------
  // Parameters and persistent buffers, detached (sharing memory), by dotted
  // name.
  NamedTensors state_dict(const std::string& prefix = "") const;
  // Copies values into the parameters and buffers (dtype converted). Shape
  // mismatches always throw ShapeError; with strict, missing or unexpected
  // keys throw Error listing them; otherwise they are returned, missing
  // keys in state_dict() order, unexpected ones grouped by the module they
  // would belong to (in named_modules() order), as PyTorch lists them.
  LoadResult load_state_dict(const NamedTensors& state, bool strict = true);
  LoadResult load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Sets this module's flag only (Python's `module.training = False`).
  void set_training_flag(bool on) { training_ = on; }
  void zero_grad(bool set_to_none = true);
  void requires_grad_(bool requires_grad = true);
  // Converts floating-point parameters, their gradients and buffers in place
  // (their identity stays, so optimizers keep working).
  void to(DType dtype);
  // Moves every parameter and buffer (and a parameter's .grad) to device,
  // in place: references held by optimizers stay valid.
  void to(Device device);
  // Makes every parameter and buffer a global tensor on placement with sbp
  // (one entry per mesh axis), in place: the values are those of the
  // placement's first rank, sent to the others. Collective over all ranks.
  void to_global(const Placement& placement, const NdSbp& sbp);
  // fn on every descendant, children first, then on this module.
  void apply(const std::function<void(Module&)>& fn);

  // --- hooks ----------------------------------------------------------------
  // Returns a handle for remove_hook.
  int register_forward_hook(std::shared_ptr<Hook> hook);
  int register_forward_pre_hook(std::shared_ptr<Hook> hook);
  void remove_hook(int handle);
  const std::vector<std::pair<int, std::shared_ptr<Hook>>>& forward_hooks() const { return hooks_; }
  const std::vector<std::pair<int, std::shared_ptr<Hook>>>& forward_pre_hooks() const { return pre_hooks_; }

  // --- text -----------------------------------------------------------------
  // The text inside "Linear(...)": "in_features=4, out_features=2, bias=True".
  virtual std::string extra_repr() const { return ""; }
  // PyTorch's nested repr.
  std::string repr() const;

 protected:
  Module(const Module&) = default;  // shallow_copy's

  // Parameter / buffer slots for layers to read in forward().
  const Tensor& param_at(size_t slot) const { return params_[slot].second; }
  const Tensor& buffer_at(size_t slot) const { return buffers_[slot].tensor; }
  // Slot of an entry registered by this module's constructor.
  size_t param_slot(const std::string& name) const;
  size_t buffer_slot(const std::string& name) const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module, std::shared_ptr<void> owner);
  void check_new_name(const std::string& name, const char* what, int allowed) const;
  void collect_state(NamedTensors& out, const std::string& prefix) const;

  std::string type_name_;
  bool training_ = true;
  NamedTensors params_;
  std::vector<Buffer> buffers_;
  std::vector<Child> children_;
  std::vector<std::pair<int, std::shared_ptr<Hook>>> hooks_;
  std::vector<std::pair<int, std::shared_ptr<Hook>>> pre_hooks_;
};

using ModulePtr = std::shared_ptr<Module>;

// Adds C++ hooks from lambdas.
int register_forward_hook(Module& m, std::function<Tensor(Module&, const Tensor&, const Tensor&)> fn);
int register_forward_pre_hook(Module& m, std::function<Tensor(Module&, const Tensor&)> fn);

}  // namespace mf::nn
