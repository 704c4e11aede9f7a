// meshflow._C.data: the C++ datasets and loaders behind meshflow.utils.data
// and meshflow.datasets. Waiting for or building a batch releases the GIL.
#include "bindings.h"

#include "meshflow/data.h"

namespace mf::python {

void init_data(py::module_& parent) {
  using namespace mf::data;
  py::module_ m = parent.def_submodule("data", "C++ datasets and batch loading (see meshflow.utils.data)");

  py::class_<Dataset, std::shared_ptr<Dataset>>(m, "Dataset", "A C++ map-style dataset.")
      .def("__len__", &Dataset::size)
      .def("get", &Dataset::get, py::arg("index"), py::call_guard<py::gil_scoped_release>())
      .def("get_batch", &Dataset::get_batch, py::arg("indices"), py::call_guard<py::gil_scoped_release>());

  py::class_<TensorDataset, Dataset, std::shared_ptr<TensorDataset>>(m, "TensorDataset")
      .def(py::init<TensorList>(), py::arg("tensors"))
      .def_property_readonly("tensors", [](const TensorDataset& d) { return to_tuple(d.tensors()); });

  py::class_<Subset, Dataset, std::shared_ptr<Subset>>(m, "Subset")
      .def(py::init([](std::shared_ptr<Dataset> dataset, std::vector<int64_t> indices) {
        return std::make_shared<Subset>(std::move(dataset), std::move(indices));
      }), py::arg("dataset"), py::arg("indices"))
      .def_property_readonly("indices", &Subset::indices);

  py::class_<FashionMNIST, Dataset, std::shared_ptr<FashionMNIST>>(m, "FashionMNIST")
      .def(py::init<const std::string&, bool>(), py::arg("root") = FashionMNIST::kDefaultRoot,
           py::arg("train") = true, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly_static("default_root", [](py::object) { return FashionMNIST::kDefaultRoot; })
      .def_property_readonly("images", &FashionMNIST::images)
      .def_property_readonly("labels", &FashionMNIST::labels)
      .def_property_readonly("train", &FashionMNIST::train);

  py::class_<TextDataset, Dataset, std::shared_ptr<TextDataset>>(m, "TextDataset")
      .def(py::init<const std::string&, int64_t, const std::string&>(), py::arg("path"), py::arg("block_size"),
           py::arg("mode") = "char", py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("vocab_size", &TextDataset::vocab_size)
      .def_property_readonly("block_size", &TextDataset::block_size)
      .def_property_readonly("mode", &TextDataset::mode)
      .def_property_readonly("tokens", &TextDataset::tokens)
      .def("encode", &TextDataset::encode, py::arg("text"))
      .def("decode", [](const TextDataset& d, const Tensor& ids) {
        const std::string text = d.decode(ids);
        if (d.mode() == "byte") return py::object(py::bytes(text));
        return py::object(py::str(text));
      }, py::arg("ids"));

  py::class_<BatchIterator>(m, "BatchIterator",
                            "One pass over batches of indices; workers build batches ahead in order.")
      .def(py::init([](std::shared_ptr<Dataset> dataset, std::vector<std::vector<int64_t>> batches,
                       int64_t num_workers, int64_t prefetch_factor) {
        return new BatchIterator(std::move(dataset), std::move(batches), num_workers, prefetch_factor);
      }), py::arg("dataset"), py::arg("batches"), py::arg("num_workers") = 0, py::arg("prefetch_factor") = 2)
      .def("__len__", &BatchIterator::size)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", [](BatchIterator& it) {
        std::optional<TensorList> batch;
        {
          py::gil_scoped_release release;
          batch = it.next();
        }
        if (!batch) throw py::stop_iteration();
        return std::move(*batch);
      });

  py::class_<DataLoader>(m, "DataLoader", "The C++ DataLoader (batches of a C++ dataset).")
      .def(py::init([](std::shared_ptr<Dataset> dataset, int64_t batch_size, bool shuffle, bool drop_last,
                       int64_t num_workers, int64_t prefetch_factor, std::optional<uint64_t> seed) {
        return new DataLoader(std::move(dataset), {.batch_size = batch_size,
                                                   .shuffle = shuffle,
                                                   .drop_last = drop_last,
                                                   .num_workers = num_workers,
                                                   .prefetch_factor = prefetch_factor,
                                                   .seed = seed});
      }), py::arg("dataset"), py::arg("batch_size") = 1, py::arg("shuffle") = false, py::arg("drop_last") = false,
           py::arg("num_workers") = 0, py::arg("prefetch_factor") = 2, py::arg("seed") = py::none())
      .def("__len__", &DataLoader::size)
      .def("__iter__", &DataLoader::epoch)
      .def_property_readonly("generator", &DataLoader::generator, py::return_value_policy::reference_internal);
}

}  // namespace mf::python
