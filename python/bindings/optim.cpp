// meshflow._C._optim: optimizers, lr schedulers and gradient clipping
// (include/meshflow/optim.h) with torch.optim's signatures. State dicts and
// param groups cross as Python dicts of numbers, strings, tensors and lists.
#include "bindings.h"
#include "meshflow/optim.h"

namespace mf::python {
namespace {

using optim::Optimizer;
using optim::ParamGroup;
using optim::StateValue;

// --- state values ---------------------------------------------------------------------

StateValue to_state(py::handle o, int depth) {
  PyObject* p = o.ptr();
  MF_CHECK(depth < 100, ValueError, "state dict: nested deeper than 100 levels (is a list inside itself?)");
  if (o.is_none()) return {};
  if (PyBool_Check(p)) return StateValue(p == Py_True);
  if (PyLong_Check(p)) return StateValue(o.cast<int64_t>());
  if (PyFloat_Check(p)) return StateValue(PyFloat_AS_DOUBLE(p));
  if (PyUnicode_Check(p)) return StateValue(o.cast<std::string>());
  if (py::isinstance<Tensor>(o)) return StateValue(o.cast<Tensor>());
  if (PyDict_Check(p)) {
    StateValue::Dict dict;
    for (auto [key, value] : py::reinterpret_borrow<py::dict>(o)) {
      StateValue::Key k;
      if (PyUnicode_Check(key.ptr())) k = key.cast<std::string>();
      else if (PyLong_Check(key.ptr()) && !PyBool_Check(key.ptr())) k = key.cast<int64_t>();
      else throw TypeError(detail::concat("state dict: keys must be str or int, got ", public_type_name(key.ptr())));
      dict.emplace(std::move(k), to_state(value, depth + 1));
    }
    return StateValue(std::move(dict));
  }
  if (PyList_Check(p) || PyTuple_Check(p)) {
    StateValue::List list;
    for (py::handle item : o) list.push_back(to_state(item, depth + 1));
    return StateValue(std::move(list));
  }
  py::detail::make_caster<Scalar> number;  // NumPy scalars
  if (number.load(o, true)) {
    const Scalar s = py::detail::cast_op<Scalar>(number);
    return s.is_bool() ? StateValue(s.to_bool()) : s.is_integral() ? StateValue(s.to_int()) : StateValue(s.to_double());
  }
  throw TypeError(detail::concat("state dict: can't hold an object of type ", public_type_name(p)));
}

py::object from_key(const StateValue::Key& key) {
  if (const auto* i = std::get_if<int64_t>(&key)) return py::int_(*i);
  return py::str(std::get<std::string>(key));
}

py::object from_state(const StateValue& v) {
  switch (v.kind()) {
    case StateValue::Kind::None: return py::none();
    case StateValue::Kind::Bool: return py::bool_(v.to_bool());
    case StateValue::Kind::Int: return py::int_(v.to_int());
    case StateValue::Kind::Double: return py::float_(v.to_double());
    case StateValue::Kind::String: return py::str(v.to_string());
    case StateValue::Kind::Tensor: return py::cast(v.to_tensor());
    case StateValue::Kind::List: {
      py::list out;
      for (const StateValue& item : v.to_list()) out.append(from_state(item));
      return out;
    }
    case StateValue::Kind::Dict: {
      py::dict out;
      for (const auto& [key, item] : v.to_dict()) out[from_key(key)] = from_state(item);
      return out;
    }
  }
  throw Error("state dict: unknown value kind");
}

// An optimizer state dict as load_state_dict takes it: parameter indices in
// "state" given as text (a state dict that went through meshflow.save, whose
// keys are strings) become ints again.
StateValue to_optimizer_state_dict(const py::dict& d) {
  StateValue sd = to_state(d, 0);
  if (!sd.contains("state") || !sd.at("state").is_dict()) return sd;
  StateValue::Dict state;
  for (auto& [key, value] : sd.at("state").to_dict()) {
    const auto* text = std::get_if<std::string>(&key);
    const bool index = text && !text->empty() && text->find_first_not_of("0123456789") == std::string::npos &&
                       text->size() < 19;
    state.emplace(index ? StateValue::Key(int64_t(std::stoll(*text))) : key, value);
  }
  sd.at("state") = StateValue(std::move(state));
  return sd;
}

// --- parameters and param groups ------------------------------------------------------------

TensorList to_params(py::handle params, const char* what) {
  MF_CHECK(!py::isinstance<Tensor>(params), TypeError, what,
           " should be an iterable of Tensors or dicts, but got a Tensor");
  TensorList out;
  if (!py::isinstance<py::iterable>(params))
    throw TypeError(detail::concat(what, " should be an iterable of Tensors, got ", public_type_name(params.ptr())));
  for (py::handle p : params) {
    MF_CHECK(py::isinstance<Tensor>(p), TypeError, what, " should contain Tensors, got ", public_type_name(p.ptr()));
    out.push_back(p.cast<Tensor>());
  }
  return out;
}

ParamGroup to_group(const py::dict& group) {
  MF_CHECK(group.contains("params"), ValueError, "param group: a dict with the key 'params' is required");
  ParamGroup out;
  py::object params = group["params"];
  out.params = py::isinstance<Tensor>(params) ? TensorList{params.cast<Tensor>()} : to_params(params, "params");
  for (auto [key, value] : group) {
    MF_CHECK(PyUnicode_Check(key.ptr()), TypeError, "param group: keys must be str, got ", public_type_name(key.ptr()));
    const auto name = key.cast<std::string>();
    if (name != "params") out.options.emplace(name, to_state(value, 0));
  }
  return out;
}

// An optimizer's constructor argument: tensors (one group) or dicts (groups).
std::vector<ParamGroup> to_groups(py::handle params) {
  MF_CHECK(!py::isinstance<Tensor>(params), TypeError,
           "params argument given to the optimizer should be an iterable of Tensors or dicts, but got a Tensor");
  py::list items = py::list(py::reinterpret_borrow<py::object>(params));
  if (items.size() > 0 && py::isinstance<py::dict>(items[0])) {
    std::vector<ParamGroup> groups;
    for (py::handle item : items) {
      MF_CHECK(py::isinstance<py::dict>(item), TypeError, "optimizer: expected every param group to be a dict");
      groups.push_back(to_group(py::reinterpret_borrow<py::dict>(item)));
    }
    return groups;
  }
  TensorList tensors = to_params(items, "params argument given to the optimizer");
  if (tensors.empty()) return {};
  return {ParamGroup{std::move(tensors), {}}};
}

// One param group of an optimizer, looked up on every access so that it stays
// valid when groups are added.
struct GroupView {
  std::shared_ptr<Optimizer> optimizer;
  size_t index;

  ParamGroup& group() const {
    MF_CHECK(index < optimizer->param_groups().size(), IndexError, "param group ", index, " no longer exists");
    return optimizer->param_groups()[index];
  }
  py::object get(const std::string& key) const {
    const ParamGroup& g = group();
    if (key == "params") return py::cast(g.params);
    auto it = g.options.find(key);
    if (it == g.options.end()) throw py::key_error(key);
    return from_state(it->second);
  }
  void set(const std::string& key, py::handle value) const {
    ParamGroup& g = group();
    if (key == "params") g.params = to_params(value, "params");
    else g.options[key] = to_state(value, 0);
  }
  py::list keys() const {
    py::list out;
    out.append("params");
    for (const auto& [key, value] : group().options) out.append(from_key(key));
    return out;
  }
  py::dict to_dict() const {
    py::dict out;
    for (py::handle key : keys()) out[key] = get(key.cast<std::string>());
    return out;
  }
};

// --- schedulers -----------------------------------------------------------------------------

// A Python lr_lambda, released under the GIL (see autograd.cpp's hooks).
optim::LambdaLR::LambdaFn python_lambda(py::function fn) {
  std::shared_ptr<py::function> holder(new py::function(std::move(fn)), [](py::function* f) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete f;
  });
  return [holder](int64_t epoch) {
    py::gil_scoped_acquire gil;
    return (*holder)(epoch).cast<double>();
  };
}

// A number or a list of numbers (one per param group).
std::vector<double> per_group(py::handle value) {
  if (PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr())) return {value.cast<double>()};
  return value.cast<std::vector<double>>();
}

template <typename T>
py::class_<T, optim::LRScheduler, std::shared_ptr<T>> scheduler_class(py::module_& m, const char* name) {
  return py::class_<T, optim::LRScheduler, std::shared_ptr<T>>(m, name);
}

void init_schedulers(py::module_& m) {
  py::class_<optim::LRScheduler, std::shared_ptr<optim::LRScheduler>>(m, "LRScheduler")
      .def("step", [](optim::LRScheduler& s, std::optional<int64_t> epoch) {
        if (epoch) s.step(*epoch);
        else s.step();
      }, py::arg("epoch") = py::none())
      .def("get_last_lr", &optim::LRScheduler::get_last_lr)
      .def_property_readonly("last_epoch", &optim::LRScheduler::last_epoch)
      .def_property_readonly("base_lrs", &optim::LRScheduler::base_lrs)
      .def_property_readonly("optimizer", &optim::LRScheduler::optimizer, py::return_value_policy::reference)
      .def("state_dict", [](const optim::LRScheduler& s) { return from_state(s.state_dict()); })
      .def("load_state_dict", [](optim::LRScheduler& s, const py::dict& d) { s.load_state_dict(to_state(d, 0)); },
           py::arg("state_dict"));
  // Each scheduler keeps a reference to its optimizer: keep_alive<1, 2> makes
  // the Python optimizer outlive the Python scheduler.
  scheduler_class<optim::StepLR>(m, "StepLR")
      .def(py::init<Optimizer&, int64_t, double, int64_t>(), py::keep_alive<1, 2>(), py::arg("optimizer"),
           py::arg("step_size"), py::arg("gamma") = 0.1, py::arg("last_epoch") = -1);
  scheduler_class<optim::MultiStepLR>(m, "MultiStepLR")
      .def(py::init<Optimizer&, std::vector<int64_t>, double, int64_t>(), py::keep_alive<1, 2>(),
           py::arg("optimizer"), py::arg("milestones"), py::arg("gamma") = 0.1, py::arg("last_epoch") = -1);
  scheduler_class<optim::ExponentialLR>(m, "ExponentialLR")
      .def(py::init<Optimizer&, double, int64_t>(), py::keep_alive<1, 2>(), py::arg("optimizer"), py::arg("gamma"),
           py::arg("last_epoch") = -1);
  scheduler_class<optim::CosineAnnealingLR>(m, "CosineAnnealingLR")
      .def(py::init<Optimizer&, int64_t, double, int64_t>(), py::keep_alive<1, 2>(), py::arg("optimizer"),
           py::arg("T_max"), py::arg("eta_min") = 0.0, py::arg("last_epoch") = -1);
  scheduler_class<optim::LinearLR>(m, "LinearLR")
      .def(py::init<Optimizer&, double, double, int64_t, int64_t>(), py::keep_alive<1, 2>(), py::arg("optimizer"),
           py::arg("start_factor") = 1.0 / 3, py::arg("end_factor") = 1.0, py::arg("total_iters") = 5,
           py::arg("last_epoch") = -1);
  scheduler_class<optim::LambdaLR>(m, "LambdaLR")
      .def(py::init([](Optimizer& optimizer, py::object lr_lambda, int64_t last_epoch) {
        if (py::isinstance<py::function>(lr_lambda))
          return std::make_shared<optim::LambdaLR>(optimizer, python_lambda(lr_lambda), last_epoch);
        std::vector<optim::LambdaLR::LambdaFn> fns;
        for (py::handle fn : lr_lambda) fns.push_back(python_lambda(py::reinterpret_borrow<py::function>(fn)));
        return std::make_shared<optim::LambdaLR>(optimizer, std::move(fns), last_epoch);
      }), py::keep_alive<1, 2>(), py::arg("optimizer"), py::arg("lr_lambda"), py::arg("last_epoch") = -1);
  scheduler_class<optim::SequentialLR>(m, "SequentialLR")
      .def(py::init<Optimizer&, std::vector<std::shared_ptr<optim::LRScheduler>>, std::vector<int64_t>, int64_t>(),
           py::keep_alive<1, 2>(), py::keep_alive<1, 3>(), py::arg("optimizer"), py::arg("schedulers"),
           py::arg("milestones"), py::arg("last_epoch") = -1);
  scheduler_class<optim::OneCycleLR>(m, "OneCycleLR")
      .def(py::init([](Optimizer& optimizer, py::handle max_lr, std::optional<int64_t> total_steps,
                       std::optional<int64_t> epochs, std::optional<int64_t> steps_per_epoch, double pct_start,
                       std::string anneal_strategy, bool cycle_momentum, py::handle base_momentum,
                       py::handle max_momentum, double div_factor, double final_div_factor, bool three_phase,
                       int64_t last_epoch) {
        optim::OneCycleLROptions o{.max_lr = per_group(max_lr), .total_steps = total_steps, .epochs = epochs,
                                   .steps_per_epoch = steps_per_epoch, .pct_start = pct_start,
                                   .anneal_strategy = std::move(anneal_strategy), .cycle_momentum = cycle_momentum,
                                   .base_momentum = per_group(base_momentum), .max_momentum = per_group(max_momentum),
                                   .div_factor = div_factor, .final_div_factor = final_div_factor,
                                   .three_phase = three_phase, .last_epoch = last_epoch};
        return std::make_shared<optim::OneCycleLR>(optimizer, o);
      }), py::keep_alive<1, 2>(), py::arg("optimizer"), py::arg("max_lr"), py::arg("total_steps") = py::none(),
           py::arg("epochs") = py::none(), py::arg("steps_per_epoch") = py::none(), py::arg("pct_start") = 0.3,
           py::arg("anneal_strategy") = "cos", py::arg("cycle_momentum") = true, py::arg("base_momentum") = 0.85,
           py::arg("max_momentum") = 0.95, py::arg("div_factor") = 25.0, py::arg("final_div_factor") = 1e4,
           py::arg("three_phase") = false, py::arg("last_epoch") = -1)
      .def_property_readonly("total_steps", &optim::OneCycleLR::total_steps);
  scheduler_class<optim::CosineAnnealingWarmRestarts>(m, "CosineAnnealingWarmRestarts")
      .def(py::init<Optimizer&, int64_t, int64_t, double, int64_t>(), py::keep_alive<1, 2>(), py::arg("optimizer"),
           py::arg("T_0"), py::arg("T_mult") = 1, py::arg("eta_min") = 0.0, py::arg("last_epoch") = -1)
      .def("step", [](optim::CosineAnnealingWarmRestarts& s, std::optional<double> epoch) {
        if (epoch) s.step_to(*epoch);
        else s.step();
      }, py::arg("epoch") = py::none());
  scheduler_class<optim::CyclicLR>(m, "CyclicLR")
      .def(py::init([](Optimizer& optimizer, py::handle base_lr, py::handle max_lr, double step_size_up,
                       std::optional<double> step_size_down, std::string mode, double gamma, py::object scale_fn,
                       std::string scale_mode, bool cycle_momentum, py::handle base_momentum, py::handle max_momentum,
                       int64_t last_epoch) {
        optim::CyclicLROptions o{.base_lr = per_group(base_lr), .max_lr = per_group(max_lr),
                                 .step_size_up = step_size_up, .step_size_down = step_size_down,
                                 .mode = std::move(mode), .gamma = gamma, .scale_fn = nullptr,
                                 .scale_mode = std::move(scale_mode),
                                 .cycle_momentum = cycle_momentum, .base_momentum = per_group(base_momentum),
                                 .max_momentum = per_group(max_momentum), .last_epoch = last_epoch};
        if (!scale_fn.is_none()) {
          auto fn = std::make_shared<py::object>(std::move(scale_fn));
          std::shared_ptr<py::object> held(fn.get(), [fn](py::object*) mutable {
            py::gil_scoped_acquire gil;
            fn.reset();
          });
          o.scale_fn = [held](double x) {
            py::gil_scoped_acquire gil;
            return (*held)(x).cast<double>();
          };
        }
        return std::make_shared<optim::CyclicLR>(optimizer, o);
      }), py::keep_alive<1, 2>(), py::arg("optimizer"), py::arg("base_lr"), py::arg("max_lr"),
           py::arg("step_size_up") = 2000, py::arg("step_size_down") = py::none(), py::arg("mode") = "triangular",
           py::arg("gamma") = 1.0, py::arg("scale_fn") = py::none(), py::arg("scale_mode") = "cycle",
           py::arg("cycle_momentum") = true, py::arg("base_momentum") = 0.8, py::arg("max_momentum") = 0.9,
           py::arg("last_epoch") = -1);
  py::class_<optim::ReduceLROnPlateau, std::shared_ptr<optim::ReduceLROnPlateau>>(m, "ReduceLROnPlateau")
      .def(py::init([](Optimizer& optimizer, std::string mode, double factor, int64_t patience, double threshold,
                       std::string threshold_mode, int64_t cooldown, py::handle min_lr, double eps, bool verbose) {
        return std::make_shared<optim::ReduceLROnPlateau>(
            optimizer, optim::ReduceLROnPlateau::Options{std::move(mode), factor, patience, threshold,
                                                         std::move(threshold_mode), cooldown, per_group(min_lr), eps});
      }), py::keep_alive<1, 2>(), py::arg("optimizer"), py::arg("mode") = "min", py::arg("factor") = 0.1,
           py::arg("patience") = 10, py::arg("threshold") = 1e-4, py::arg("threshold_mode") = "rel",
           py::arg("cooldown") = 0, py::arg("min_lr") = 0.0, py::arg("eps") = 1e-8, py::arg("verbose") = false)
      .def("step", [](optim::ReduceLROnPlateau& s, py::object metrics, std::optional<int64_t> epoch) {
        s.step(py::float_(metrics).cast<double>(), epoch);  // float(metrics), as PyTorch (a 1-element tensor too)
      }, py::arg("metrics"), py::arg("epoch") = py::none())
      .def("get_last_lr", &optim::ReduceLROnPlateau::get_last_lr)
      .def("is_better", &optim::ReduceLROnPlateau::is_better, py::arg("a"), py::arg("best"))
      .def_property_readonly("in_cooldown", &optim::ReduceLROnPlateau::in_cooldown)
      .def_property_readonly("last_epoch", &optim::ReduceLROnPlateau::last_epoch)
      .def_property_readonly("best", &optim::ReduceLROnPlateau::best)
      .def_property_readonly("num_bad_epochs", &optim::ReduceLROnPlateau::num_bad_epochs)
      .def_property_readonly("cooldown_counter", &optim::ReduceLROnPlateau::cooldown_counter)
      .def_property_readonly("optimizer", &optim::ReduceLROnPlateau::optimizer, py::return_value_policy::reference)
      .def("state_dict", [](const optim::ReduceLROnPlateau& s) { return from_state(s.state_dict()); })
      .def("load_state_dict", [](optim::ReduceLROnPlateau& s, const py::dict& d) { s.load_state_dict(to_state(d, 0)); },
           py::arg("state_dict"));
  py::class_<optim::ChainedScheduler, std::shared_ptr<optim::ChainedScheduler>>(m, "ChainedScheduler")
      .def(py::init<std::vector<std::shared_ptr<optim::LRScheduler>>>(), py::keep_alive<1, 2>(),
           py::arg("schedulers"))
      .def("step", &optim::ChainedScheduler::step)
      .def("get_last_lr", &optim::ChainedScheduler::get_last_lr)
      .def_property_readonly("optimizer", &optim::ChainedScheduler::optimizer, py::return_value_policy::reference)
      .def("state_dict", [](const optim::ChainedScheduler& s) { return from_state(s.state_dict()); })
      .def("load_state_dict", [](optim::ChainedScheduler& s, const py::dict& d) { s.load_state_dict(to_state(d, 0)); },
           py::arg("state_dict"));
}

}  // namespace

void init_optim(py::module_& parent) {
  py::module_ m = parent.def_submodule("_optim", "optimizers and lr schedulers (see meshflow.optim)");

  // Note [Skipped updates]: `with _SkipUpdatesIf(found_inf): opt.step()`.
  struct SkipGuard {
    Tensor flag;
    std::unique_ptr<optim::SkipUpdatesIf> guard;
  };
  py::class_<SkipGuard>(m, "_SkipUpdatesIf")
      .def(py::init([](const Tensor& flag) { return SkipGuard{flag, nullptr}; }), py::arg("found_inf"))
      .def("__enter__", [](SkipGuard& g) { g.guard = std::make_unique<optim::SkipUpdatesIf>(g.flag); })
      .def("__exit__", [](SkipGuard& g, py::args) { g.guard.reset(); });

  py::class_<GroupView>(m, "ParamGroup", "One parameter group: a dict-like view of its params and options.")
      .def("__getitem__", &GroupView::get)
      .def("__setitem__", &GroupView::set)
      .def("__contains__", [](const GroupView& g, const std::string& key) {
        return key == "params" || g.group().options.contains(key);
      })
      .def("__len__", [](const GroupView& g) { return g.group().options.size() + 1; })
      .def("__iter__", [](const GroupView& g) { return py::iter(g.keys()); })
      .def("keys", &GroupView::keys)
      .def("items", [](const GroupView& g) { return g.to_dict().attr("items")(); })
      .def("values", [](const GroupView& g) { return g.to_dict().attr("values")(); })
      .def("get", [](const GroupView& g, const std::string& key, py::object fallback) {
        return key == "params" || g.group().options.contains(key) ? g.get(key) : fallback;
      }, py::arg("key"), py::arg("default") = py::none())
      .def("__eq__", [](const GroupView& g, py::handle other) { return g.to_dict().equal(other); })
      .def("__repr__", [](const GroupView& g) { return py::repr(g.to_dict()); });

  py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "Optimizer")
      .def("step", [](Optimizer& o, py::object closure) -> py::object {
        if (closure.is_none()) {
          o.step();
          return py::none();
        }
        return py::cast(o.step([&closure] { return closure().cast<Tensor>(); }));
      }, py::arg("closure") = py::none())
      .def("zero_grad", &Optimizer::zero_grad, py::arg("set_to_none") = true)
      .def_property_readonly("param_groups", [](const std::shared_ptr<Optimizer>& o) {
        py::list out;
        for (size_t i = 0; i < o->param_groups().size(); ++i) out.append(GroupView{o, i});
        return out;
      })
      .def("add_param_group", [](Optimizer& o, const py::dict& group) { o.add_param_group(to_group(group)); },
           py::arg("param_group"))
      .def_property_readonly("defaults", [](const Optimizer& o) { return from_state(StateValue(o.defaults())); })
      .def("state_dict", [](const Optimizer& o) { return from_state(o.state_dict()); })
      .def("load_state_dict", [](Optimizer& o, const py::dict& d) { o.load_state_dict(to_optimizer_state_dict(d)); },
           py::arg("state_dict"))
      // Note [ZeRO as layouts] (graph.config.enable_zero).
      .def("_set_zero", &Optimizer::set_zero, py::arg("stage"), py::arg("min_size"))
      .def_property_readonly("_zero_stage", &Optimizer::zero_stage)
      .def("__repr__", [](const Optimizer& o) {
        std::string text = o.name() + " (";
        for (size_t i = 0; i < o.param_groups().size(); ++i) {
          text += "\nParameter Group " + std::to_string(i);
          for (const auto& [key, value] : o.param_groups()[i].options)
            text += "\n    " + std::get<std::string>(key) + ": " + value.str();
        }
        return text + "\n)";
      });

  py::class_<optim::SGD, Optimizer, std::shared_ptr<optim::SGD>>(m, "SGD")
      .def(py::init([](py::handle params, std::optional<double> lr, double momentum, double dampening,
                       double weight_decay, bool nesterov, bool maximize, py::handle foreach) {
        optim::SGDOptions o{.lr = lr, .momentum = momentum, .dampening = dampening, .weight_decay = weight_decay,
                            .nesterov = nesterov, .maximize = maximize};
        return std::make_shared<optim::SGD>(to_groups(params), o);
      }), py::arg("params"), py::arg("lr") = py::none(), py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("nesterov") = false, py::kw_only(), py::arg("maximize") = false,
           py::arg("foreach") = py::none());
  py::class_<optim::Adam, Optimizer, std::shared_ptr<optim::Adam>>(m, "Adam")
      .def(py::init([](py::handle params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay, bool amsgrad, bool maximize, py::handle foreach) {
        optim::AdamOptions o{.lr = lr, .betas = betas, .eps = eps, .weight_decay = weight_decay, .amsgrad = amsgrad,
                             .maximize = maximize};
        return std::make_shared<optim::Adam>(to_groups(params), o);
      }), py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("amsgrad") = false, py::kw_only(),
           py::arg("maximize") = false, py::arg("foreach") = py::none());
  py::class_<optim::AdamW, optim::Adam, std::shared_ptr<optim::AdamW>>(m, "AdamW")
      .def(py::init([](py::handle params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay, bool amsgrad, bool maximize, py::handle foreach) {
        optim::AdamWOptions o{.lr = lr, .betas = betas, .eps = eps, .weight_decay = weight_decay, .amsgrad = amsgrad,
                              .maximize = maximize};
        return std::make_shared<optim::AdamW>(to_groups(params), o);
      }), py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 1e-2, py::arg("amsgrad") = false, py::kw_only(),
           py::arg("maximize") = false, py::arg("foreach") = py::none());
  py::class_<optim::RMSprop, Optimizer, std::shared_ptr<optim::RMSprop>>(m, "RMSprop")
      .def(py::init([](py::handle params, double lr, double alpha, double eps, double weight_decay, double momentum,
                       bool centered, py::handle foreach, bool maximize) {
        optim::RMSpropOptions o{.lr = lr, .alpha = alpha, .eps = eps, .weight_decay = weight_decay,
                                .momentum = momentum, .centered = centered, .maximize = maximize};
        return std::make_shared<optim::RMSprop>(to_groups(params), o);
      }), py::arg("params"), py::arg("lr") = 1e-2, py::arg("alpha") = 0.99, py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("momentum") = 0.0, py::arg("centered") = false,
           py::arg("foreach") = py::none(), py::arg("maximize") = false);
  py::class_<optim::Adagrad, Optimizer, std::shared_ptr<optim::Adagrad>>(m, "Adagrad")
      .def(py::init([](py::handle params, double lr, double lr_decay, double weight_decay,
                       double initial_accumulator_value, double eps, py::handle foreach, bool maximize) {
        optim::AdagradOptions o{.lr = lr, .lr_decay = lr_decay, .weight_decay = weight_decay,
                                .initial_accumulator_value = initial_accumulator_value, .eps = eps,
                                .maximize = maximize};
        return std::make_shared<optim::Adagrad>(to_groups(params), o);
      }), py::arg("params"), py::arg("lr") = 1e-2, py::arg("lr_decay") = 0.0, py::arg("weight_decay") = 0.0,
           py::arg("initial_accumulator_value") = 0.0, py::arg("eps") = 1e-10, py::arg("foreach") = py::none(),
           py::kw_only(), py::arg("maximize") = false);

  init_schedulers(m);

  m.def("clip_grad_norm_", [](py::handle parameters, double max_norm, py::handle norm_type, bool error_if_nonfinite) {
    TensorList params = py::isinstance<Tensor>(parameters) ? TensorList{parameters.cast<Tensor>()}
                                                           : to_params(parameters, "clip_grad_norm_: parameters");
    const double p = py::isinstance<py::str>(norm_type) && norm_type.cast<std::string>() == "inf"
                         ? std::numeric_limits<double>::infinity()
                         : norm_type.cast<double>();
    return nn::utils::clip_grad_norm_(params, max_norm, p, error_if_nonfinite);
  }, py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0, py::arg("error_if_nonfinite") = false);
}

}  // namespace mf::python
