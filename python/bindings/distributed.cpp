// meshflow._C._distributed: the communicators of
// include/meshflow/distributed/communicator.h. Every call that communicates
// releases the GIL, so other Python threads run while a rank waits.
#include "bindings.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/distributed/reducer.h"

namespace mf::python {

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
      .def("barrier", &Communicator::barrier, release_gil())
      .def("subgroup", &Communicator::subgroup, py::arg("ranks"), release_gil());

  py::class_<distributed::GradientReducer>(m, "GradientReducer",
                                            "Bucketed gradient averaging of DistributedDataParallel.")
      .def(py::init<TensorList, int64_t, distributed::Communicator*>(), py::arg("params"),
           py::arg("bucket_cap_bytes"), py::arg("comm") = nullptr)
      .def_property("sync", &distributed::GradientReducer::sync, &distributed::GradientReducer::set_sync)
      .def_property_readonly("bucket_params", &distributed::GradientReducer::bucket_params);
  m.def("broadcast_tensors", &distributed::broadcast_tensors, py::arg("tensors"), py::arg("root") = 0,
        py::arg("comm") = nullptr, release_gil());

  m.def("world", &distributed::world, py::return_value_policy::reference, release_gil());
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
