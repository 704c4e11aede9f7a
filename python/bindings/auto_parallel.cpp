// meshflow._C._auto_parallel: the call log, cost model, search and plan of
// meshflow/distributed/auto_parallel.h (used by meshflow.nn.graph and
// meshflow.distributed.auto).
#include <cmath>
#include <memory>

#include "bindings.h"
#include "meshflow/distributed/auto_parallel.h"

namespace mf::python {
namespace {

using namespace distributed::auto_parallel;


// A guard usable as a Python context manager.
template <class Guard, class Arg>
struct PyGuard {
  Arg* arg;
  py::object keep;  // the argument stays alive while the guard is
  std::unique_ptr<Guard> guard;
  size_t followed = 0;  // FollowPlan: the calls it forced, kept after exit
};

}  // namespace

void init_auto_parallel(py::module_& parent) {
  py::module_ m = parent.def_submodule("_auto_parallel", "the SBP strategy search (see meshflow.distributed.auto)");

  py::class_<CostModel>(m, "CostModel")
      .def(py::init<>())
      .def_readwrite("gemm_flops", &CostModel::gemm_flops)
      .def_readwrite("gemm_flops_f64", &CostModel::gemm_flops_f64)
      .def_readwrite("gemm_flops_16", &CostModel::gemm_flops_16)
      .def_readwrite("gemm_half_intensity", &CostModel::gemm_half_intensity)
      .def_readwrite("conv_efficiency", &CostModel::conv_efficiency)
      .def_readwrite("attention_efficiency", &CostModel::attention_efficiency)
      .def_readwrite("memory_bandwidth", &CostModel::memory_bandwidth)
      .def_readwrite("transpose_bandwidth", &CostModel::transpose_bandwidth)
      .def_readwrite("op_overhead", &CostModel::op_overhead)
      .def_readwrite("op_bandwidth", &CostModel::op_bandwidth)
      .def_readwrite("sync_latency", &CostModel::sync_latency)
      .def("set_collective",
           [](CostModel& c, const std::string& kind, int64_t ranks, std::vector<std::pair<double, double>> points) {
             MF_CHECK(kind == "all_reduce" || kind == "all_gather" || kind == "reduce_scatter" || kind == "all_to_all",
                      ValueError, "CostModel.set_collective: kind must be all_reduce, all_gather, reduce_scatter or "
                      "all_to_all, got '", kind, "'");
             MF_CHECK(ranks >= 2, ValueError, "CostModel.set_collective: ranks must be >= 2, got ", ranks);
             MF_CHECK(!points.empty(), ValueError, "CostModel.set_collective: expected at least one (bytes, seconds) point");
             for (size_t i = 0; i < points.size(); ++i) {
               const auto& [x, y] = points[i];
               MF_CHECK(std::isfinite(x) && std::isfinite(y) && x >= 0 && y >= 0 && (i == 0 || x > points[i - 1].first),
                        ValueError, "CostModel.set_collective: points must be finite (bytes, seconds) >= 0 with bytes "
                        "increasing; point ", i, " is (", x, ", ", y, ")");
             }
             c.collectives[kind][ranks] = CollectiveFit{std::move(points)};
           },
           py::arg("kind"), py::arg("ranks"), py::arg("points"))
      .def("collectives",
           [](const CostModel& c) {
             py::dict out;
             for (const auto& [kind, fits] : c.collectives) {
               py::dict per;
               for (const auto& [ranks, fit] : fits) per[py::int_(ranks)] = fit.points;
               out[py::str(kind)] = per;
             }
             return out;
           })
      .def("collective", &CostModel::collective, py::arg("kind"), py::arg("ranks"), py::arg("bytes"));

  py::class_<CallLog>(m, "CallLog")
      .def(py::init<>())
      .def(
          "add_source",
          [](CallLog& log, const Tensor& t, std::string name, bool pinned, int64_t copies) {
            const int64_t s = log.add_source(t, std::move(name), pinned);
            log.sources[size_t(s)].copies = std::max<int64_t>(log.sources[size_t(s)].copies, copies);
            return s;
          },
          py::arg("tensor"), py::arg("name"), py::arg("pinned"), py::arg("copies"))
      .def("tie", &CallLog::tie, py::arg("tensor"), py::arg("source"))
      .def("add_input", &CallLog::add_input, py::arg("tensor"))
      // Drops the log's hold on the traced tensors (their metadata kept
      // every id unique while logging); the records stay for reports.
      .def("release_tensors",
           [](CallLog& l) {
             l.ids.clear();
             l.keep.clear();
           })
      .def_property_readonly("num_calls", [](const CallLog& l) { return l.calls.size(); })
      .def_property_readonly("num_sources", [](const CallLog& l) { return l.sources.size(); })
      .def_property_readonly("placement", [](const CallLog& l) -> py::object {
        return l.placement ? py::cast(*l.placement) : py::none();
      })
      .def("source_name", [](const CallLog& l, size_t s) { return l.sources.at(s).name; })
      .def("source_shape", [](const CallLog& l, size_t s) { return l.sources.at(s).shape; })
      // (kind, call or source index, output index, shape, dtype name) of a value.
      .def("value", [](const CallLog& l, size_t v) {
        const ValueRecord& r = l.values.at(v);
        const char* kind = r.kind == ValueKind::Output ? "output" : r.kind == ValueKind::Source ? "source" : "fixed";
        return py::make_tuple(kind, r.node, r.index, r.shape, std::string(dtype_name(r.dtype)));
      });

  using LogGuard = PyGuard<LogCalls, CallLog>;
  py::class_<LogGuard>(m, "LogCalls")
      .def(py::init([](py::object log) { return LogGuard{log.cast<CallLog*>(), log, nullptr}; }))
      .def("__enter__", [](LogGuard& g) { g.guard = std::make_unique<LogCalls>(*g.arg); })
      .def("__exit__", [](LogGuard& g, py::args) { g.guard.reset(); });

  py::class_<Plan>(m, "Plan")
      .def_readonly("step_time", &Plan::step_time)
      .def_readonly("compute_time", &Plan::compute_time)
      .def_readonly("communication_time", &Plan::communication_time)
      .def_readonly("communication_bytes", &Plan::communication_bytes)
      .def_readonly("memory", &Plan::memory)
      .def_readonly("parameter_memory", &Plan::parameter_memory)
      .def_readonly("peak_values", &Plan::peak_values)
      .def_readonly("search_seconds", &Plan::search_seconds)
      .def_readonly("core_nodes", &Plan::core_nodes)
      .def_readonly("memory_limit_met", &Plan::memory_limit_met)
      .def_property_readonly("num_calls", [](const Plan& p) { return p.calls.size(); })
      .def_property_readonly("sources", [](const Plan& p) {
        py::list out;
        for (const NdSbp& s : p.sources) out.append(sbp_tuple(s));
        return out;
      });

  m.def("remesh", &remesh, py::arg("log"), py::arg("mesh"));
  m.def("measure_op_rates", &measure_op_rates, py::arg("log"), py::arg("model"), py::arg("seconds"),
        py::arg("plan") = nullptr);
  m.def(
      "search",
      [](const CallLog& log, const CostModel& model, double memory_limit) {
        py::gil_scoped_release release;
        return search(log, model, SearchOptions{.memory_limit = memory_limit});
      },
      py::arg("log"), py::arg("model"), py::arg("memory_limit") = 0.0);

  // One row per call: (op, input shapes, input layouts, output layouts,
  // compute seconds, boxing seconds, boxing bytes, collectives, whether it
  // reads a transposed operand).
  m.def(
      "report",
      [](const CallLog& log, const CostModel& model, const Plan& plan) {
        py::list rows;
        const std::vector<CallCost> costs = call_costs(log, model, plan);
        for (size_t c = 0; c < log.calls.size(); ++c) {
          const CallCost& cost = costs[c];
          const CallRecord& rec = log.calls[c];
          py::list shapes, ins, outs;
          for (int64_t v : rec.inputs) shapes.append(v < 0 ? py::object(py::none()) : py::cast(log.values[size_t(v)].shape));
          for (size_t i = 0; i < cost.inputs.size(); ++i)
            ins.append(rec.inputs[i] < 0 ? py::object(py::none()) : py::object(sbp_tuple(cost.inputs[i])));
          for (const NdSbp& s : cost.outputs) outs.append(sbp_tuple(s));
          rows.append(py::dict(py::arg("op") = rec.op->name, py::arg("input_shapes") = shapes,
                               py::arg("inputs") = ins, py::arg("outputs") = outs, py::arg("compute") = cost.compute,
                               py::arg("boxing") = cost.boxing, py::arg("boxing_bytes") = cost.boxing_bytes,
                               py::arg("collectives") = cost.collectives, py::arg("transposed") = rec.transposed,
                               py::arg("rate_key") = rec.rate_key, py::arg("forwarded") = rec.forwarded));
        }
        return rows;
      },
      py::arg("log"), py::arg("model"), py::arg("plan"));

  // Each call's part of a pipeline stage's step: "forward", "backward_input",
  // "backward_weight" or "update" (Note [Pipeline parts of calls]).
  m.def(
      "call_parts",
      [](const CallLog& log, const std::vector<int64_t>& input_sources) {
        static const char* names[] = {"forward", "backward_input", "backward_weight", "update"};
        py::list out;
        for (CallPart part : call_parts(log, input_sources)) out.append(names[int(part)]);
        return out;
      },
      py::arg("log"), py::arg("input_sources"));

  using FollowGuard = PyGuard<FollowPlan, Plan>;
  py::class_<FollowGuard>(m, "FollowPlan")
      .def(py::init([](py::object plan) { return FollowGuard{plan.cast<Plan*>(), plan, nullptr}; }))
      .def("__enter__", [](FollowGuard& g) { g.guard = std::make_unique<FollowPlan>(*g.arg); })
      .def("__exit__",
           [](FollowGuard& g, py::args) {
             if (g.guard) g.followed = g.guard->followed();
             g.guard.reset();
           })
      .def_property_readonly("followed", [](const FollowGuard& g) { return g.guard ? g.guard->followed() : g.followed; });
}

}  // namespace mf::python
