// meshflow._C._distributed: the communicators of
// include/meshflow/distributed/communicator.h. Every call that communicates
// releases the GIL, so other Python threads run while a rank waits.
#include "bindings.h"
#include "meshflow/distributed/boxing.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/distributed/pipelining.h"
#include "meshflow/distributed/reducer.h"

namespace mf::python {

namespace {

// meshflow._C._distributed: the schedules of
// include/meshflow/distributed/pipelining.h (see meshflow.distributed.pipelining).
void init_pipelining(py::module_& m) {
  namespace pp = distributed::pipelining;
  py::enum_<pp::ActionType>(m, "ActionType", "The kinds of pipeline schedule actions.")
      .value("FORWARD", pp::ActionType::Forward)
      .value("FULL_BACKWARD", pp::ActionType::Backward)
      .value("BACKWARD_INPUT", pp::ActionType::BackwardInput)
      .value("BACKWARD_WEIGHT", pp::ActionType::BackwardWeight)
      .value("SEND_F", pp::ActionType::SendForward)
      .value("RECV_F", pp::ActionType::RecvForward)
      .value("SEND_B", pp::ActionType::SendBackward)
      .value("RECV_B", pp::ActionType::RecvBackward);
  py::class_<pp::Action>(m, "Action", "One action of a pipeline schedule (stage, kind, micro-batch).")
      .def_readonly("type", &pp::Action::type)
      .def_readonly("stage_index", &pp::Action::stage)
      .def_readonly("microbatch_index", &pp::Action::microbatch)
      .def_property_readonly("tag", [](const pp::Action& a) { return pp::message_tag(a); })
      .def("__eq__", [](const pp::Action& a, const pp::Action& b) { return a == b; })
      .def("__hash__", [](const pp::Action& a) { return std::hash<std::string>()(a.str()); })
      .def("__repr__", &pp::Action::str)
      .def("__str__", &pp::Action::str);
  py::class_<pp::TimedAction>(m, "TimedAction")
      .def_readonly("action", &pp::TimedAction::action)
      .def_readonly("start", &pp::TimedAction::start)
      .def_readonly("end", &pp::TimedAction::end);
  py::class_<pp::SimulationResult>(m, "SimulationResult", "What the schedule simulator reports.")
      .def_readonly("step_time", &pp::SimulationResult::step_time)
      .def_readonly("busy", &pp::SimulationResult::busy)
      .def_readonly("rank_bubble", &pp::SimulationResult::rank_bubble)
      .def_readonly("bubble_fraction", &pp::SimulationResult::bubble_fraction)
      .def_readonly("peak_activations", &pp::SimulationResult::peak_activations)
      .def_readonly("timeline", &pp::SimulationResult::timeline);
  py::class_<pp::Schedule>(m, "PipelineSchedule", "Per-rank action lists of a pipeline schedule.")
      .def_property_readonly("kind", [](const pp::Schedule& s) { return pp::schedule_kind_name(s.kind); })
      .def_readonly("num_ranks", &pp::Schedule::num_ranks)
      .def_readonly("num_stages", &pp::Schedule::num_stages)
      .def_readonly("num_microbatches", &pp::Schedule::num_microbatches)
      .def_readonly("stage_rank", &pp::Schedule::stage_rank)
      .def_readonly("actions", &pp::Schedule::actions)
      .def("stages_of", &pp::Schedule::stages_of, py::arg("rank"))
      .def("describe", &pp::Schedule::describe)
      .def("simulate", [](const pp::Schedule& s, py::object forward, py::object backward_input,
                          py::object backward_weight, double latency) {
        // Each cost is a number for every stage or a list with one per stage.
        pp::SimulationCosts c;
        c.latency = latency;
        auto set = [](py::object value, double& uniform, std::vector<double>& per_stage) {
          if (py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value))
            uniform = value.cast<double>();
          else
            per_stage = value.cast<std::vector<double>>();
        };
        set(forward, c.forward, c.stage_forward);
        set(backward_input, c.backward_input, c.stage_backward_input);
        set(backward_weight, c.backward_weight, c.stage_backward_weight);
        return pp::simulate(s, c);
      }, py::arg("forward") = 1.0, py::arg("backward_input") = 1.0, py::arg("backward_weight") = 1.0,
         py::arg("latency") = 0.0)
      .def("formula_bubble", [](const pp::Schedule& s) { return pp::formula_bubble(s); });
  m.def("make_pipeline_schedule", [](const std::string& kind, int num_ranks, int n_microbatches, int stages_per_rank) {
    return pp::make_schedule(pp::parse_schedule_kind(kind), num_ranks, n_microbatches, stages_per_rank);
  }, py::arg("kind"), py::arg("num_ranks"), py::arg("n_microbatches"), py::arg("stages_per_rank") = 1);
}

}  // namespace

void init_distributed(py::module_& parent) {
  using distributed::Communicator;
  using distributed::ReduceOp;
  using release_gil = py::call_guard<py::gil_scoped_release>;
  py::module_ m = parent.def_submodule("_distributed", "processes and collectives (see meshflow.distributed)");

  py::enum_<ReduceOp>(m, "ReduceOp", "The reduction of all_reduce and reduce_scatter.")
      .value("SUM", ReduceOp::Sum)
      .value("MAX", ReduceOp::Max)
      .value("MIN", ReduceOp::Min)
      .value("PRODUCT", ReduceOp::Prod);

  py::class_<distributed::Work, std::shared_ptr<distributed::Work>>(
      m, "Work",
      "A nonblocking send or receive (isend / irecv) or a queued collective (async_op=True); wait() is bounded "
      "by the communicator's timeout and rethrows the operation's error.")
      .def("wait", [](distributed::Work& w) {
        w.wait();
        return true;
      }, release_gil())
      .def("is_completed", &distributed::Work::is_completed, release_gil());

  py::class_<Communicator, std::shared_ptr<Communicator>>(m, "Communicator",
                                                          "A group of processes (see meshflow.distributed).")
      .def("rank", &Communicator::rank)
      .def("size", &Communicator::size)
      .def("world_ranks", &Communicator::world_ranks)
      .def("backend", &Communicator::backend)
      .def("all_reduce", &Communicator::all_reduce, py::arg("tensor"), py::arg("op") = ReduceOp::Sum, release_gil())
      .def("broadcast", &Communicator::broadcast, py::arg("tensor"), py::arg("root"), release_gil())
      .def("all_gather", &Communicator::all_gather, py::arg("input"), py::arg("output"), py::arg("counts"),
           release_gil())
      .def("reduce_scatter", &Communicator::reduce_scatter, py::arg("input"), py::arg("output"), py::arg("counts"),
           py::arg("op") = ReduceOp::Sum, release_gil())
      .def("all_to_all", &Communicator::all_to_all, py::arg("input"), py::arg("send_counts"), py::arg("output"),
           py::arg("recv_counts"), release_gil())
      .def("send", &Communicator::send, py::arg("tensor"), py::arg("dst"), py::arg("tag") = 0, release_gil())
      .def("recv", &Communicator::recv, py::arg("tensor"), py::arg("src"), py::arg("tag") = 0, release_gil())
      .def("isend", &Communicator::isend, py::arg("tensor"), py::arg("dst"), py::arg("tag") = 0, release_gil())
      .def("irecv", &Communicator::irecv, py::arg("tensor"), py::arg("src"), py::arg("tag") = 0, release_gil())
      .def("barrier", &Communicator::barrier, release_gil())
      // Note [Asynchronous collectives]: queued on the communicator's thread.
      .def("all_reduce_async", &Communicator::all_reduce_async, py::arg("tensor"), py::arg("op") = ReduceOp::Sum,
           release_gil())
      .def("broadcast_async", &Communicator::broadcast_async, py::arg("tensor"), py::arg("root"), release_gil())
      .def("all_gather_async", &Communicator::all_gather_async, py::arg("input"), py::arg("output"),
           py::arg("counts"), release_gil())
      .def("reduce_scatter_async", &Communicator::reduce_scatter_async, py::arg("input"), py::arg("output"),
           py::arg("counts"), py::arg("op") = ReduceOp::Sum, release_gil())
      .def("all_to_all_async", &Communicator::all_to_all_async, py::arg("input"), py::arg("send_counts"),
           py::arg("output"), py::arg("recv_counts"), release_gil())
      .def("barrier_async", &Communicator::barrier_async, release_gil())
      .def("subgroup", &Communicator::subgroup, py::arg("ranks"), release_gil());

  py::class_<distributed::GradientReducer>(m, "GradientReducer",
                                            "Bucketed gradient averaging of DistributedDataParallel.")
      .def(py::init<TensorList, int64_t, distributed::Communicator*, bool>(), py::arg("params"),
           py::arg("bucket_cap_bytes"), py::arg("comm") = nullptr, py::arg("gradient_as_bucket_view") = false)
      .def_property("sync", &distributed::GradientReducer::sync, &distributed::GradientReducer::set_sync)
      .def_property_readonly("bucket_params", &distributed::GradientReducer::bucket_params);
  m.def("broadcast_tensors", &distributed::broadcast_tensors, py::arg("tensors"), py::arg("root") = 0,
        py::arg("comm") = nullptr, release_gil());

  init_pipelining(m);

  m.def("world", &distributed::world, py::return_value_policy::reference, release_gil());
  m.def("device_group", &distributed::device_group, py::arg("ranks"), py::arg("device"), release_gil());
  m.def("_set_test_comm_delay", &distributed::set_test_comm_delay, py::arg("kind"), py::arg("seconds"));
  m.def("get_rank", &distributed::get_rank, release_gil());
  m.def("get_world_size", &distributed::get_world_size, release_gil());
  m.def("get_local_rank", &distributed::get_local_rank, release_gil());
  m.def("barrier", &distributed::barrier, release_gil());
  m.def("comm_timeout", &distributed::comm_timeout);
  m.def("set_comm_timeout", &distributed::set_comm_timeout, py::arg("seconds"));
  m.def("started_by_mpi", &distributed::started_by_mpi);
  m.def("_abort_job", &distributed::abort_job, py::arg("code"));
}

}  // namespace mf::python
