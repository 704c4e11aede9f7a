// meshflow._C: autocast state and the gradient-scaling ops behind
// meshflow.amp (python/meshflow/amp.py).
#include "bindings.h"
#include "meshflow/amp.h"

namespace mf::python {

void init_amp(py::module_& m) {
  auto device_type = [](const std::string& name) { return autocast::parse_device_type(name); };
  m.def("is_autocast_enabled", [=](const std::string& d) { return autocast::is_enabled(device_type(d)); },
        py::arg("device_type") = "cpu");
  m.def("set_autocast_enabled", [=](const std::string& d, bool e) { autocast::set_enabled(device_type(d), e); },
        py::arg("device_type"), py::arg("enabled"));
  m.def("get_autocast_dtype", [=](const std::string& d) { return autocast::get_dtype(device_type(d)); },
        py::arg("device_type") = "cpu");
  m.def("set_autocast_dtype", [=](const std::string& d, DType t) { autocast::set_dtype(device_type(d), t); },
        py::arg("device_type"), py::arg("dtype"));
  m.def("_autocast_default_dtype", [=](const std::string& d) { return autocast::default_dtype(device_type(d)); },
        py::arg("device_type"));
  m.def("is_autocast_cache_enabled", &autocast::is_cache_enabled);
  m.def("set_autocast_cache_enabled", &autocast::set_cache_enabled, py::arg("enabled"));
  m.def("autocast_increment_nesting", &autocast::increment_nesting);
  m.def("autocast_decrement_nesting", &autocast::decrement_nesting);
  m.def("clear_autocast_cache", &autocast::clear_cache);
  m.def("_autocast_cache_size", &autocast::cache_size);
  m.def("_amp_foreach_non_finite_check_and_unscale_", &amp::non_finite_check_and_unscale_, py::arg("grads"),
        py::arg("found_inf"), py::arg("inv_scale"));
  m.def("_amp_update_scale_",
        [](const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
           double backoff_factor, int64_t growth_interval) {
          amp::update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
          return scale;
        },
        py::arg("scale"), py::arg("growth_tracker"), py::arg("found_inf"), py::arg("growth_factor"),
        py::arg("backoff_factor"), py::arg("growth_interval"));
}

}  // namespace mf::python
