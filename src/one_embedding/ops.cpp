// The ops of MultiTableEmbedding: lookups, gradient accumulation and fused
// updates as dispatched ops, so that eager mode and graph mode run the same
// calls (Note [Embedding ops] in include/meshflow/one_embedding.h). Their
// CPU kernels: backend/cpu/kernels/one_embedding.cpp.
#include <mutex>
#include <unordered_map>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/one_embedding.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "one_embedding/ops.h"

namespace mf::one_embedding {

namespace {

std::mutex g_mutex;
std::unordered_map<int64_t, std::weak_ptr<TableSet>>& registry() {
  static std::unordered_map<int64_t, std::weak_ptr<TableSet>> r;
  return r;
}
int64_t g_next_id = 1;

}  // namespace

std::shared_ptr<TableSet> table_set_of(const Attrs& attrs) {
  const int64_t id = attrs.get_int("table_set");
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = registry().find(id);
  auto tables = it == registry().end() ? nullptr : it->second.lock();
  MF_CHECK(tables != nullptr, Error, "MultiTableEmbedding: the embedding this op reads (", id,
           ") no longer exists; a compiled graph must not outlive its embeddings");
  return tables;
}

namespace {

const OpDef& accumulate_op() {
  static const OpDef& op = dispatch::op("one_embedding_accumulate");
  return op;
}

// The rows of keys (shadow, ids, tables): (n, dim) in the tables' dtype.
std::vector<TensorMeta> rows_of_keys(const TensorList& in, const Attrs& attrs) {
  const auto t = table_set_of(attrs);
  MF_CHECK(in[1].dim() == 1 && in[2].dim() == 1 && in[1].numel() == in[2].numel(), ShapeError,
           "MultiTableEmbedding lookup: ids and tables must be 1-d of equal length, got ", shape_str(in[1].sizes()),
           " and ", shape_str(in[2].sizes()));
  return {{{in[1].numel(), t->dim()}, t->dtype(), in[1].device()}};
}

// An in-place op's result: input 0.
std::vector<TensorMeta> like_input0(const TensorList& in, const Attrs&) {
  return {{in[0].sizes(), in[0].dtype(), in[0].device()}};
}

// --- sharded lookups (Note [Sharded lookups] in include/meshflow/one_embedding.h) ---------------------------

MF_REGISTER_OP(OpDef{
    .name = "one_embedding_sharded_lookup",
    .inputs = {"shadow", "ids", "tables"},
    .infer = rows_of_keys,
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& accumulate = dispatch::op("one_embedding_sharded_accumulate");
      const Tensor token =
          dispatch::apply_one(accumulate, {ctx.inputs[1], ctx.inputs[2], ctx.grad_outputs[0]}, ctx.attrs);
      table_set_of(ctx.attrs)->add_token(token);
      return TensorList{Tensor(), Tensor(), Tensor()};
    },
    .save_inputs = 0b110,
    .collective = true,
});

MF_REGISTER_OP(OpDef{
    .name = "one_embedding_sharded_accumulate",
    .inputs = {"ids", "tables", "grad"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{{1}, DType::Float32, in[0].device()}};
    },
    .differentiable = false,
    .collective = true,
});

MF_REGISTER_OP(OpDef{
    .name = "one_embedding_lookup",
    .inputs = {"shadow", "ids", "tables"},
    .infer = rows_of_keys,
    .backward = [](const BackwardContext& ctx) {
      // The gradient goes to the table set's pending gradients (by an op, so
      // a trace records it); its token joins the next update's inputs.
      const Tensor token = dispatch::apply_one(accumulate_op(), {ctx.inputs[1], ctx.inputs[2], ctx.grad_outputs[0]},
                                               ctx.attrs);
      table_set_of(ctx.attrs)->add_token(token);
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
    .differentiable = false,
    .sbp = sbp::broadcast_only(),
});

MF_REGISTER_OP(OpDef{
    .name = "one_embedding_apply",
    // tokens: the accumulations applied; found_inf (last, optional): a grad
    // scaler's flag, set when the step is skipped (Note [Skipped updates]).
    .inputs = {"shadow", "tokens", "found_inf"},
    .variadic = true,
    .infer = like_input0,
    .differentiable = false,
    .inplace = true,
    .sbp = sbp::broadcast_only(),
});

// A graph grad scaler's unscaling of an embedding's gradients: after the
// accumulations (the tokens), multiply them by inv_scale and set found_inf
// if one holds an inf or NaN; over a sharded group the ranks agree.
MF_REGISTER_OP(OpDef{
    .name = "one_embedding_unscale",
    .inputs = {"found_inf", "inv_scale", "tokens"},
    .variadic = true,
    .infer = like_input0,
    .differentiable = false,
    .inplace = true,
    .collective = true,
});

std::mutex g_shadow_mutex;
std::unordered_map<const TensorImpl*, std::pair<int64_t, std::vector<int>>>& shadows() {
  static std::unordered_map<const TensorImpl*, std::pair<int64_t, std::vector<int>>> m;
  return m;
}

}  // namespace

void register_shadow(const Tensor& shadow, int64_t table_set, const std::vector<int>& group) {
  std::lock_guard<std::mutex> lock(g_shadow_mutex);
  shadows()[shadow.impl()] = {table_set, group};
}

void unregister_shadow(uintptr_t shadow) {
  std::lock_guard<std::mutex> lock(g_shadow_mutex);
  shadows().erase(reinterpret_cast<const TensorImpl*>(shadow));
}

bool unscale_if_embedding(const Tensor& param, const Tensor& found_inf, const Tensor& inv_scale) {
  std::pair<int64_t, std::vector<int>> entry;
  {
    std::lock_guard<std::mutex> lock(g_shadow_mutex);
    auto it = shadows().find(param.impl());
    if (it == shadows().end()) return false;
    entry = it->second;
  }
  static const OpDef& op = dispatch::op("one_embedding_unscale");
  const auto& [table_set, group] = entry;
  TensorList inputs{found_inf, inv_scale};
  for (const Tensor& t : table_set_of({{"table_set", table_set}})->take_tokens()) inputs.push_back(t);
  NoGradGuard no_grad;
  dispatch::apply_inplace(op, inputs, {{"table_set", table_set}, {"group", Shape(group.begin(), group.end())}});
  return true;
}

int64_t register_table_set(const std::shared_ptr<TableSet>& tables) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int64_t id = g_next_id++;
  registry()[id] = tables;
  return id;
}

Tensor lookup(const Tensor& shadow, const Tensor& ids, const Tensor& tables, int64_t table_set,
              const std::vector<int>& group, bool average) {
  if (group.size() > 1) {
    static const OpDef& op = dispatch::op("one_embedding_sharded_lookup");
    return dispatch::apply_one(op, {shadow, ids, tables},
                               {{"table_set", table_set},
                                {"group", Shape(group.begin(), group.end())},
                                {"average", int64_t(average)}});
  }
  static const OpDef& op = dispatch::op("one_embedding_lookup");
  return dispatch::apply_one(op, {shadow, ids, tables}, {{"table_set", table_set}});
}

void apply_update(const Tensor& shadow, int64_t table_set, const UpdateRule& r, double grad_scale) {
  static const OpDef& op = dispatch::op("one_embedding_apply");
  TensorList inputs{shadow};
  for (const Tensor& t : table_set_of({{"table_set", table_set}})->take_tokens()) inputs.push_back(t);
  inputs.push_back(Tensor());  // found_inf: a graph grad scaler's flag takes this place
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
