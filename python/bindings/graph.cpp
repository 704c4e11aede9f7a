// meshflow._C._graph: the tracer, the graph IR, passes and compiled plans
// (include/meshflow/graph/*.h); meshflow.nn.Graph is built on these.
#include "bindings.h"
#include "meshflow/graph/executor.h"
#include "meshflow/graph/passes.h"
#include "meshflow/graph/trace.h"
#include "meshflow/optim.h"

namespace mf::python {

void init_graph(py::module_& parent) {
  py::module_ m = parent.def_submodule("_graph", "graph mode: tracer, IR, passes, compiled plans");
  using graph::Executable;
  using graph::Graph;
  using graph::Tracer;

  py::class_<Graph>(m, "GraphIR")
      .def_property_readonly("num_nodes", [](const Graph& g) { return g.nodes().size(); })
      .def("op_names", [](const Graph& g) {
        std::vector<std::string> names;
        for (const auto& n : g.nodes()) names.push_back(n.op->name + (n.inplace ? "_" : ""));
        return names;
      })
      .def("__str__", &Graph::str);

  py::class_<Tracer>(m, "Tracer")
      .def(py::init<>())
      .def("add_inputs", &Tracer::add_inputs, py::arg("examples"))
      .def("add_optimizer", &Tracer::add_optimizer, py::arg("optimizer"))
      .def(
          "set_grad_scaling",
          [](Tracer& t, const Tensor& scale, const Tensor& growth_tracker, double growth_factor,
             double backoff_factor, int64_t growth_interval) {
            t.set_grad_scaling({.scale = scale,
                                .growth_tracker = growth_tracker,
                                .growth_factor = growth_factor,
                                .backoff_factor = backoff_factor,
                                .growth_interval = growth_interval});
          },
          py::arg("scale"), py::arg("growth_tracker"), py::arg("growth_factor"), py::arg("backoff_factor"),
          py::arg("growth_interval"))
      .def("defer_unscaling", &Tracer::defer_unscaling)
      .def("unscale_accumulated", &Tracer::unscale_accumulated)
      .def("name_variable", &Tracer::name_variable, py::arg("tensor"), py::arg("name"))
      .def("num_updates", &Tracer::num_updates)
      .def(
          "set_pipeline_phase",
          [](Tracer& t, const std::string& phase, int32_t micro_batch) {
            const graph::Phase p = phase == "forward" ? graph::Phase::Forward
                                   : phase == "update" ? graph::Phase::Update
                                   : phase == "none"   ? graph::Phase::None
                                                       : throw ValueError("set_pipeline_phase: phase must be "
                                                                          "'none', 'forward' or 'update', got '" +
                                                                          phase + "'");
            t.set_pipeline_phase(p, micro_batch);
          },
          py::arg("phase"), py::arg("micro_batch") = -1)
      .def("enter_stage", &Tracer::enter_stage, py::arg("stage"))
      .def("exit_stage", &Tracer::exit_stage)
      .def("finish", &Tracer::finish, py::arg("outputs"))
      .def("close", &Tracer::close);

  m.def("optimize", &graph::optimize, py::arg("graph"), py::arg("exact") = false);
  m.def("is_tracing", &graph::is_tracing);
  m.def(
      "schedule_pipeline",
      [](Graph& g, const std::string& kind, int num_ranks, int n_microbatches, int stages_per_rank, int rank) {
        namespace pp = distributed::pipelining;
        const pp::Schedule s = pp::make_schedule(pp::parse_schedule_kind(kind), num_ranks, n_microbatches,
                                                 stages_per_rank);
        return graph::schedule_pipeline(g, s.actions.at(size_t(rank)));
      },
      py::arg("graph"), py::arg("kind"), py::arg("num_ranks"), py::arg("n_microbatches"), py::arg("stages_per_rank"),
      py::arg("rank"));

  py::class_<Executable>(m, "Executable")
      .def(py::init([](Graph& g, bool overlap) { return std::make_unique<Executable>(std::move(g), overlap); }),
           py::arg("graph"), py::arg("overlap_communication") = true)
      .def("run", &Executable::run, py::arg("inputs"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("graph", &Executable::graph, py::return_value_policy::reference_internal)
      .def_property_readonly("num_steps", &Executable::num_steps)
      .def_property("capture", &Executable::capture, &Executable::set_capture)
      .def_property_readonly("num_captures", &Executable::num_captures)
      .def_property_readonly("planned_bytes", [](const Executable& e) { return e.memory_plan().arena_bytes; })
      .def_property_readonly("forward_peak_bytes", &Executable::forward_peak_bytes)
      .def_property_readonly("live_peak_bytes", [](const Executable& e) { return e.memory_plan().live_peak_bytes; })
      .def_property_readonly("unplanned_bytes", [](const Executable& e) { return e.memory_plan().total_bytes; })
      .def("set_timing", &Executable::set_timing, py::arg("on"))
      .def("timeline",
           [](const Executable& e) {
             // (stage, micro-batch, phase, start, end) per span of one pipeline action
             static const char* phases[] = {"none", "forward", "backward", "update", "weight"};
             py::list out;
             for (const auto& span : e.timeline())
               out.append(py::make_tuple(span.tag.stage, span.tag.micro_batch, phases[int(span.tag.phase)],
                                         span.start, span.end));
             return out;
           })
      .def("memory_report", &Executable::memory_report, py::arg("max_rows") = 20)
      .def("profile", &Executable::profile, py::arg("inputs"), py::arg("runs") = 10, py::arg("by_shape") = false,
           py::call_guard<py::gil_scoped_release>())
      .def("__str__", &Executable::str);
}

}  // namespace mf::python
