// meshflow._C._profiler: sessions and spans of the profiler
// (include/meshflow/profiler.h); meshflow.profiler is built on it.
#include "bindings.h"
#include "meshflow/profiler.h"

namespace mf::python {

void init_profiler(py::module_& m) {
  py::module_ p = m.def_submodule("_profiler", "the profiler's sessions (meshflow.profiler)");
  p.def("start", &profiler::start, py::arg("record_shapes"));
  p.def("set_recording", &profiler::set_recording, py::arg("on"));
  p.def("enabled", &profiler::enabled);
  p.def("active", &profiler::active);
  p.def("now_ns", &profiler::now_ns);
  p.def("thread_id", &profiler::thread_id);
  p.def("set_thread_name", &profiler::set_thread_name, py::arg("name"));
  // A span the caller timed: [start_ns, end_ns) on this thread.
  p.def(
      "add",
      [](std::string name, const std::string& category, int64_t start_ns, int64_t end_ns) {
        // Categories outlive the event: only the known ones are accepted.
        static const char* const kCategories[] = {"user", "data", "step"};
        const char* cat = nullptr;
        for (const char* c : kCategories)
          if (category == c) cat = c;
        MF_CHECK(cat, ValueError, "profiler: unknown span category '", category, "' (user, data, step)");
        MF_CHECK(end_ns >= start_ns, ValueError, "profiler: a span ends (", end_ns, ") before it starts (",
                 start_ns, ")");
        profiler::Event e;
        e.name = std::move(name);
        e.category = cat;
        e.start_ns = start_ns;
        e.end_ns = end_ns;
        e.thread = profiler::thread_id();
        profiler::add(std::move(e));
      },
      py::arg("name"), py::arg("category"), py::arg("start_ns"), py::arg("end_ns"));
  // (events, threads, wall_minus_steady_ns); an event is (name, category,
  // start_ns, end_ns, thread, input shapes, args).
  p.def("stop", [] {
    profiler::Trace trace = profiler::stop();
    py::list events;
    for (profiler::Event& e : trace.events) {
      py::list shapes;
      for (const auto& s : e.shapes) shapes.append(py::cast(s));
      events.append(py::make_tuple(std::move(e.name), e.category, e.start_ns, e.end_ns, e.thread, shapes,
                                   std::move(e.args)));
    }
    py::dict threads;
    for (const auto& [id, name] : trace.threads) threads[py::int_(id)] = name;
    return py::make_tuple(events, threads, trace.wall_minus_steady_ns);
  });
}

}  // namespace mf::python
