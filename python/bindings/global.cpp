// The global view for Python: mf.placement, mf.sbp, Tensor.to_global /
// to_local / placement / sbp / is_global, and the conversion used by the
// global factories.
#include "bindings.h"
#include "meshflow/dispatch.h"
#include "meshflow/distributed/global.h"
#include "meshflow/distributed/sbp_rules.h"

namespace mf::python {
namespace {

// Nested lists of ranks -> (flat ranks, mesh shape).
void flatten_ranks(py::handle ranks, std::vector<int>& flat, Shape& shape, size_t depth) {
  if (py::isinstance<py::int_>(ranks)) {
    MF_CHECK(depth > 0, TypeError, "placement: ranks must be a list of ints (or nested lists), got an int");
    flat.push_back(ranks.cast<int>());
    return;
  }
  MF_CHECK(py::isinstance<py::sequence>(ranks) && !py::isinstance<py::str>(ranks), TypeError,
           "placement: ranks must be a list of ints or nested lists of ints, got ",
           std::string(py::str(py::type::handle_of(ranks))));
  auto seq = py::reinterpret_borrow<py::sequence>(ranks);
  const int64_t n = int64_t(seq.size());
  if (shape.size() <= depth) {
    shape.push_back(n);
  } else {
    MF_CHECK(shape[depth] == n, ValueError, "placement: the rank lists of one mesh level must have equal lengths");
  }
  for (py::handle item : seq) {
    if (depth + 1 < shape.size() || !py::isinstance<py::int_>(item)) {
      flatten_ranks(item, flat, shape, depth + 1);
    } else {
      flat.push_back(item.cast<int>());
    }
  }
}

Placement make_placement(py::handle type, py::handle ranks) {
  std::vector<int> flat;
  Shape shape;
  flatten_ranks(ranks, flat, shape, 0);
  Device device = py::isinstance<Device>(type) ? type.cast<Device>() : Device(std::string(py::str(type)));
  return Placement(device.type(), flat, shape);
}

NdSbp to_nd_sbp(py::handle sbp) {
  if (py::isinstance<Sbp>(sbp)) return {sbp.cast<Sbp>()};
  MF_CHECK(py::isinstance<py::sequence>(sbp), TypeError,
           "sbp must be an sbp (mf.sbp.split(0), mf.sbp.broadcast, mf.sbp.partial_sum) or a tuple of them");
  NdSbp out;
  for (py::handle s : sbp) {
    MF_CHECK(py::isinstance<Sbp>(s), TypeError, "sbp: every entry must be an sbp, got ",
             std::string(py::str(py::type::handle_of(s))));
    out.push_back(s.cast<Sbp>());
  }
  return out;
}


}  // namespace

py::object sbp_tuple(const NdSbp& sbp) {
  py::tuple t(sbp.size());
  for (size_t i = 0; i < sbp.size(); ++i) t[i] = py::cast(sbp[i]);
  return t;
}

NdSbp nd_sbp_arg(py::handle sbp, const Placement& placement) {
  NdSbp nd = to_nd_sbp(sbp);
  // A single sbp on an n-D mesh means that sbp on every axis, as in OneFlow.
  if (nd.size() == 1 && placement.ndim() > 1) nd.assign(size_t(placement.ndim()), nd[0]);
  return nd;
}

namespace {

Tensor to_global(const Tensor& t, std::optional<Placement> placement, py::handle sbp) {
  if (t.is_global()) {
    Placement p = placement.value_or(placement_of(t));
    NdSbp s = sbp.is_none() ? sbp_of(t) : nd_sbp_arg(sbp, p);
    return mf::to_global(t, p, s);
  }
  MF_CHECK(placement.has_value(), ValueError, "to_global: a local tensor needs a placement");
  MF_CHECK(!sbp.is_none(), ValueError, "to_global: a local tensor needs an sbp");
  return mf::to_global(t, *placement, nd_sbp_arg(sbp, *placement));
}

}  // namespace

void init_global(py::module_& m) {
  py::class_<Sbp>(m, "sbp", "One mesh axis's layout: split(axis), broadcast or partial_sum.")
      .def_static("split", &Sbp::split, py::arg("axis"))
      .def_property_readonly("axis", [](const Sbp& s) -> py::object {
        return s.is_split() ? py::cast(s.axis()) : py::none();
      })
      .def("__eq__", [](const Sbp& a, const Sbp& b) { return a == b; })
      .def("__hash__", [](const Sbp& s) { return py::hash(py::str(s.str())); })
      .def("__repr__", [](const Sbp& s) {
        if (s.is_split()) return "meshflow.sbp.split(dim=" + std::to_string(s.axis()) + ")";
        return std::string(s.is_broadcast() ? "meshflow.sbp.broadcast" : "meshflow.sbp.partial_sum");
      });
  auto sbp_cls = m.attr("sbp");
  sbp_cls.attr("broadcast") = py::cast(Sbp::broadcast());
  sbp_cls.attr("partial_sum") = py::cast(Sbp::partial_sum());

  py::class_<Placement>(m, "placement", "Where a global tensor lives: a device type and a mesh of ranks.")
      .def(py::init(&make_placement), py::arg("type"), py::arg("ranks"))
      .def_property_readonly("type", [](const Placement& p) { return std::string(device_type_name(p.type())); })
      .def_property_readonly("ranks", [](const Placement& p) {
        py::object flat = py::cast(p.ranks());
        return py::module_::import("numpy").attr("array")(flat).attr("reshape")(py::cast(p.hierarchy())).attr("tolist")();
      })
      .def_property_readonly("hierarchy", [](const Placement& p) { return py::tuple(py::cast(p.hierarchy())); })
      .def("__eq__", [](const Placement& a, const Placement& b) { return a == b; })
      .def("__hash__", [](const Placement& p) { return py::hash(py::str(p.str())); })
      .def("__repr__", &Placement::str);

  auto tensor = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  tensor.def_property_readonly("is_global", &Tensor::is_global)
      .def_property_readonly("placement", [](const Tensor& t) -> py::object {
        return t.is_global() ? py::cast(placement_of(t)) : py::none();
      })
      .def_property_readonly("sbp", [](const Tensor& t) -> py::object {
        return t.is_global() ? sbp_tuple(sbp_of(t)) : py::none();
      })
      // The layout ops read a ZeRO-3 parameter in (GlobalMeta::compute_sbp), or None.
      .def_property_readonly("_compute_sbp", [](const Tensor& t) -> py::object {
        if (!t.is_global() || !t.impl()->global()->compute_sbp) return py::none();
        return sbp_tuple(*t.impl()->global()->compute_sbp);
      })
      .def("to_global", &to_global, py::arg("placement") = py::none(), py::arg("sbp") = py::none())
      .def("to_local", [](const Tensor& t) {
        MF_CHECK(t.is_global(), ValueError, "to_local: the tensor is not global");
        return mf::to_local(t);
      });

  // For the per-signature tests (tests/python/dist_scripts/sbp_matrix.py):
  // the op calls a function makes, replayed on global inputs with each of
  // the op's SBP signatures forced.
  py::class_<dispatch::RecordedCall>(m, "_RecordedCall")
      .def_property_readonly("op", [](const dispatch::RecordedCall& c) { return c.op->name; })
      .def_property_readonly("attrs", [](const dispatch::RecordedCall& c) { return c.attrs.str(); })
      .def_readonly("inputs", &dispatch::RecordedCall::inputs)
      .def_readonly("inplace", &dispatch::RecordedCall::inplace)
      .def_property_readonly("differentiable", [](const dispatch::RecordedCall& c) { return c.op->differentiable; })
      .def("signatures",
           [](const dispatch::RecordedCall& c, int64_t parts) {
             py::list out;
             for (const SbpSignature& sig : distributed::sbp_candidates(*c.op, c.inputs, c.attrs, parts))
               out.append(py::make_tuple(sbp_tuple(sig.inputs), sbp_tuple(sig.outputs)));
             return out;
           },
           py::arg("parts"))
      .def(
          "run",
          [](const dispatch::RecordedCall& c, const TensorList& inputs, std::optional<std::vector<size_t>> force) {
            std::optional<distributed::ForceSignature> guard;
            if (force) guard.emplace(*c.op, *force);
            if (c.inplace) return TensorList{dispatch::apply_inplace(*c.op, inputs, c.attrs)};
            return dispatch::apply(*c.op, inputs, c.attrs);
          },
          py::arg("inputs"), py::arg("force") = py::none());
  m.def(
      "_record_calls",
      [](const py::function& fn) {
        dispatch::CallRecorder recorder;
        fn();
        return std::move(recorder.calls);
      },
      py::arg("fn"));

  m.def("_global_from_full", [](const Tensor& full, const Placement& p, py::handle sbp) {
    return global_from_full(full, p, nd_sbp_arg(sbp, p));
  }, py::arg("full"), py::arg("placement"), py::arg("sbp"));
}

}  // namespace mf::python
