// The ops of MultiTableEmbedding: lookups, gradient accumulation and fused
// updates as dispatched ops, so that eager mode and graph mode run the same
// calls (Note [Embedding ops] in include/meshflow/one_embedding.h).
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/one_embedding.h"
#include "meshflow/ops/creation.h"

namespace mf::one_embedding {

namespace {

std::mutex g_mutex;
std::unordered_map<int64_t, std::weak_ptr<TableSet>>& registry() {
  static std::unordered_map<int64_t, std::weak_ptr<TableSet>> r;
  return r;
}
int64_t g_next_id = 1;

std::shared_ptr<TableSet> of(const Attrs& attrs) {
  const int64_t id = attrs.get_int("table_set");
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = registry().find(id);
  auto tables = it == registry().end() ? nullptr : it->second.lock();
  MF_CHECK(tables != nullptr, Error, "MultiTableEmbedding: the embedding this op reads (", id,
           ") no longer exists; a compiled graph must not outlive its embeddings");
  return tables;
}

const OpDef& accumulate_op() {
  static const OpDef& op = dispatch::op("one_embedding_accumulate");
  return op;
}

UpdateRule rule_of(const Attrs& a) {
  UpdateRule r;
  r.kind = UpdateRule::Kind(a.get_int("kind"));
  r.lr = a.get_float("lr");
  r.weight_decay = a.get_float("weight_decay");
  r.maximize = a.get_int("maximize") != 0;
  r.momentum = a.get_float("momentum");
  r.dampening = a.get_float("dampening");
  r.nesterov = a.get_int("nesterov") != 0;
  r.lr_decay = a.get_float("lr_decay");
  r.initial_accumulator_value = a.get_float("initial_accumulator_value");
  r.eps = a.get_float("eps");
  r.beta1 = a.get_float("beta1");
  r.beta2 = a.get_float("beta2");
  r.decoupled_weight_decay = a.get_int("decoupled_weight_decay") != 0;
  r.lr_power = a.get_float("lr_power");
  r.lambda1 = a.get_float("lambda1");
  r.lambda2 = a.get_float("lambda2");
  r.beta = a.get_float("beta");
  return r;
}

MF_REGISTER_OP(OpDef{
    .name = "one_embedding_lookup",
    .inputs = {"shadow", "ids", "tables"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const auto t = of(attrs);
      MF_CHECK(in[1].dim() == 1 && in[2].dim() == 1 && in[1].numel() == in[2].numel(), ShapeError,
               "one_embedding_lookup: ids and tables must be 1-d of equal length, got ", shape_str(in[1].sizes()),
               " and ", shape_str(in[2].sizes()));
      return std::vector<TensorMeta>{{{in[1].numel(), t->dim()}, t->dtype(), in[1].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      const Tensor rows = of(attrs)->lookup_keys(in[1], in[2]);
      std::memcpy(out[0].data_ptr(), rows.data_ptr(), size_t(rows.numel()) * rows.element_size());
    },
    .backward = [](const BackwardContext& ctx) {
      // The gradient goes to the table set's pending gradients (by an op, so
      // a trace records it); its token joins the next update's inputs.
      const Tensor token = dispatch::apply_one(accumulate_op(), {ctx.inputs[1], ctx.inputs[2], ctx.grad_outputs[0]},
                                               ctx.attrs);
      of(ctx.attrs)->add_token(token);
      return TensorList{Tensor(), Tensor(), Tensor()};
    },
    .save_inputs = 0b110,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "one_embedding_accumulate",
    .inputs = {"ids", "tables", "grad"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{{1}, DType::Float32, in[0].device()}};
    },
    .cpu_kernel = [](const TensorList& in, TensorList& out, const Attrs& attrs) {
      of(attrs)->accumulate_key_gradients(in[0], in[1], in[2]);
      *static_cast<float*>(out[0].data_ptr()) = 0.0f;
    },
    .differentiable = false,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "one_embedding_apply",
    .inputs = {"shadow", "tokens"},
    .variadic = true,
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .cpu_kernel = [](const TensorList&, TensorList&, const Attrs& attrs) {
      const auto t = of(attrs);
      const double scale = attrs.get_float("grad_scale");
      if (scale != 1.0) t->scale_gradients(scale);
      t->apply(rule_of(attrs));
    },
    .differentiable = false,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

}  // namespace

int64_t register_table_set(const std::shared_ptr<TableSet>& tables) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int64_t id = g_next_id++;
  registry()[id] = tables;
  return id;
}

Tensor lookup(const Tensor& shadow, const Tensor& ids, const Tensor& tables, int64_t table_set) {
  static const OpDef& op = dispatch::op("one_embedding_lookup");
  return dispatch::apply_one(op, {shadow, ids, tables}, {{"table_set", table_set}});
}

void apply_update(const Tensor& shadow, int64_t table_set, const UpdateRule& r, double grad_scale) {
  static const OpDef& op = dispatch::op("one_embedding_apply");
  TensorList inputs{shadow};
  for (const Tensor& t : of({{"table_set", table_set}})->take_tokens()) inputs.push_back(t);
  NoGradGuard no_grad;
  dispatch::apply_inplace(op, inputs,
                          {{"table_set", table_set},
                           {"kind", int64_t(r.kind)},
                           {"lr", r.lr},
                           {"weight_decay", r.weight_decay},
                           {"maximize", int64_t(r.maximize)},
                           {"momentum", r.momentum},
                           {"dampening", r.dampening},
                           {"nesterov", int64_t(r.nesterov)},
                           {"lr_decay", r.lr_decay},
                           {"initial_accumulator_value", r.initial_accumulator_value},
                           {"eps", r.eps},
                           {"beta1", r.beta1},
                           {"beta2", r.beta2},
                           {"decoupled_weight_decay", int64_t(r.decoupled_weight_decay)},
                           {"lr_power", r.lr_power},
                           {"lambda1", r.lambda1},
                           {"lambda2", r.lambda2},
                           {"beta", r.beta},
                           {"grad_scale", grad_scale}});
}

}  // namespace mf::one_embedding
