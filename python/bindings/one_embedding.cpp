// meshflow._C._one_embedding: the rows of a MultiTableEmbedding
// (include/meshflow/one_embedding.h); meshflow.one_embedding is built on it.
#include "bindings.h"
#include "meshflow/one_embedding.h"

namespace mf::python {

namespace {

one_embedding::UpdateRule rule_from(const std::string& kind, const py::dict& options) {
  using one_embedding::UpdateRule;
  UpdateRule rule;
  rule.kind = kind == "sgd"       ? UpdateRule::Kind::SGD
              : kind == "adagrad" ? UpdateRule::Kind::Adagrad
              : kind == "adam"    ? UpdateRule::Kind::Adam
              : kind == "ftrl"    ? UpdateRule::Kind::Ftrl
                                  : throw ValueError("MultiTableEmbedding: no sparse update rule '" + kind +
                                                     "' (sgd, adagrad, adam, ftrl)");
  for (const auto& [key, value] : options) {
    const std::string k = py::str(key);
    if (k == "lr") rule.lr = value.cast<double>();
    else if (k == "weight_decay") rule.weight_decay = value.cast<double>();
    else if (k == "maximize") rule.maximize = value.cast<bool>();
    else if (k == "momentum") rule.momentum = value.cast<double>();
    else if (k == "dampening") rule.dampening = value.cast<double>();
    else if (k == "nesterov") rule.nesterov = value.cast<bool>();
    else if (k == "lr_decay") rule.lr_decay = value.cast<double>();
    else if (k == "initial_accumulator_value") rule.initial_accumulator_value = value.cast<double>();
    else if (k == "eps") rule.eps = value.cast<double>();
    else if (k == "beta1") rule.beta1 = value.cast<double>();
    else if (k == "beta2") rule.beta2 = value.cast<double>();
    else if (k == "decoupled_weight_decay") rule.decoupled_weight_decay = value.cast<bool>();
    else if (k == "lr_power") rule.lr_power = value.cast<double>();
    else if (k == "lambda1") rule.lambda1 = value.cast<double>();
    else if (k == "lambda2") rule.lambda2 = value.cast<double>();
    else if (k == "beta") rule.beta = value.cast<double>();
    else throw ValueError("MultiTableEmbedding: unknown update option '" + k + "'");
  }
  return rule;
}

}  // namespace

void init_one_embedding(py::module_& parent) {
  py::module_ m = parent.def_submodule("_one_embedding", "OneEmbedding's tables (include/meshflow/one_embedding.h)");
  using one_embedding::Initializer;
  using one_embedding::TableSet;
  using one_embedding::UpdateRule;

  py::class_<TableSet, std::shared_ptr<TableSet>>(m, "TableSet")
      .def(py::init([](int64_t dim, DType dtype, const std::vector<std::tuple<std::string, double, double>>& tables,
                       uint64_t seed, int64_t cache_bytes, const std::string& path) {
             std::vector<Initializer> inits;
             for (const auto& [kind, a, b] : tables) {
               MF_CHECK(kind == "uniform" || kind == "normal", ValueError,
                        "MultiTableEmbedding: an initializer is 'uniform' or 'normal', got '", kind, "'");
               inits.push_back({kind == "uniform" ? Initializer::Kind::Uniform : Initializer::Kind::Normal, a, b});
             }
             return std::make_shared<TableSet>(dim, dtype, std::move(inits), seed,
                                               one_embedding::StoreOptions{cache_bytes, path});
           }),
           py::arg("dim"), py::arg("dtype"), py::arg("tables"), py::arg("seed"), py::arg("cache_bytes") = 0,
           py::arg("path") = "")
      .def_property_readonly("dim", &TableSet::dim)
      .def_property_readonly("num_tables", &TableSet::num_tables)
      .def_property_readonly("num_rows", &TableSet::num_rows)
      .def_property_readonly("num_pending", &TableSet::num_pending)
      .def("lookup", &TableSet::lookup, py::arg("ids"))
      .def("peek", &TableSet::peek, py::arg("ids"))
      .def("accumulate_gradients", &TableSet::accumulate_gradients, py::arg("ids"), py::arg("grad"))
      .def("lookup_keys", &TableSet::lookup_keys, py::arg("ids"), py::arg("tables"))
      .def("peek_keys", &TableSet::peek_keys, py::arg("ids"), py::arg("tables"))
      .def("accumulate_key_gradients", &TableSet::accumulate_key_gradients, py::arg("ids"), py::arg("tables"),
           py::arg("grad"))
      .def("clear_gradients", &TableSet::clear_gradients)
      .def("export_rows",
           [](const TableSet& t) {
             auto r = t.export_rows();
             return py::make_tuple(r.ids, r.tables, r.rows);
           })
      .def(
          "import_rows",
          [](TableSet& t, const Tensor& ids, const Tensor& tables, const Tensor& rows, int slots,
             const std::string& kind, int64_t step) {
            const UpdateRule::Kind k = kind == "sgd" ? UpdateRule::Kind::SGD
                                       : kind == "adagrad" ? UpdateRule::Kind::Adagrad
                                       : kind == "adam"    ? UpdateRule::Kind::Adam
                                       : kind == "ftrl"    ? UpdateRule::Kind::Ftrl
                                                           : throw ValueError("MultiTableEmbedding: a snapshot of an "
                                                                              "unknown rule '" + kind + "'");
            t.import_rows({ids, tables, rows}, slots, k, step);
          },
          py::arg("ids"), py::arg("tables"), py::arg("rows"), py::arg("slots"), py::arg("kind"), py::arg("step"))
      .def_property_readonly("state_slots", &TableSet::state_slots)
      .def_property_readonly("state_kind",
                             [](const TableSet& t) {
                               switch (t.state_kind()) {
                                 case UpdateRule::Kind::SGD: return "sgd";
                                 case UpdateRule::Kind::Adagrad: return "adagrad";
                                 case UpdateRule::Kind::Adam: return "adam";
                                 case UpdateRule::Kind::Ftrl: return "ftrl";
                               }
                               return "sgd";
                             })
      .def_property_readonly("step", &TableSet::step)
      .def("scale_gradients", &TableSet::scale_gradients, py::arg("factor"))
      .def("pending_non_finite", &TableSet::pending_non_finite)
      .def(
          "apply", [](TableSet& t, const std::string& kind, const py::dict& options) { t.apply(rule_from(kind, options)); },
          py::arg("kind"), py::arg("options"));
  m.def("register", &one_embedding::register_table_set, py::arg("tables"));
  m.def("lookup", &one_embedding::lookup, py::arg("shadow"), py::arg("ids"), py::arg("tables"), py::arg("table_set"),
        py::arg("group") = std::vector<int>{}, py::arg("average") = true);
  m.def(
      "apply_update",
      [](const Tensor& shadow, int64_t table_set, const std::string& kind, const py::dict& options, double grad_scale) {
        one_embedding::apply_update(shadow, table_set, rule_from(kind, options), grad_scale);
      },
      py::arg("shadow"), py::arg("table_set"), py::arg("kind"), py::arg("options"), py::arg("grad_scale") = 1.0);
  m.def("take_tokens", [](TableSet& t) { return t.take_tokens(); }, py::arg("tables"));
  m.def("register_shadow", &one_embedding::register_shadow, py::arg("shadow"), py::arg("table_set"),
        py::arg("group"));
  m.def("unregister_shadow", &one_embedding::unregister_shadow, py::arg("impl_id"));
}

}  // namespace mf::python
