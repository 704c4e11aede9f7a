// The CPU kernels of MultiTableEmbedding's ops (src/one_embedding/ops.cpp,
// Note [Embedding ops] in include/meshflow/one_embedding.h): lookups and
// gradient accumulation on the host tables, over the group's ranks for
// sharded tables (Note [Sharded lookups]), and the fused updates. On a
// device they run host-staged (Note [Host-staged kernels] in
// backend/common/host_staged.h).
#include <cstring>
#include <utility>
#include <vector>

#include "meshflow/distributed/communicator.h"
#include "meshflow/one_embedding.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "one_embedding/ops.h"
#include "one_embedding/row_store.h"

namespace mf::one_embedding {
namespace {

// one_embedding_apply's attrs (apply_update in src/one_embedding/ops.cpp).
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

// --- sharded lookups (Note [Sharded lookups] in include/meshflow/one_embedding.h) ---------------------------

// This rank's keys deduplicated, and sorted by owner for the exchange.
struct Routing {
  std::vector<Key> unique;
  std::vector<int64_t> inverse;       // per key: its unique index
  std::vector<int64_t> order;         // unique indices, owners ascending
  std::vector<int64_t> position;      // per unique index: its place in order
  std::vector<int64_t> send_counts;   // per rank
};

int64_t owner_of(const Key& k, int64_t n) { return int64_t(splitmix64(k.id ^ splitmix64(k.table + 1)) % uint64_t(n)); }

Routing route(const Tensor& ids_in, const Tensor& tables_in, int64_t n) {
  const Tensor ids = contiguous(to(ids_in, DType::Int64)), tables = contiguous(to(tables_in, DType::Int64));
  const int64_t* ip = static_cast<const int64_t*>(ids.data_ptr());
  const int64_t* tp = static_cast<const int64_t*>(tables.data_ptr());
  Routing r;
  KeyIndex index;
  r.inverse.resize(size_t(ids.numel()));
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const Key key{uint64_t(ip[i]), uint64_t(tp[i])};
    const auto [u, added] = index.emplace(key, int64_t(r.unique.size()));
    if (added) r.unique.push_back(key);
    r.inverse[size_t(i)] = u;
  }
  const auto u = int64_t(r.unique.size());
  std::vector<int64_t> owner(static_cast<size_t>(u));
  r.send_counts.assign(size_t(n), 0);
  for (int64_t k = 0; k < u; ++k) ++r.send_counts[size_t(owner[size_t(k)] = owner_of(r.unique[size_t(k)], n))];
  std::vector<int64_t> start(size_t(n), 0);
  for (int64_t q = 1; q < n; ++q) start[size_t(q)] = start[size_t(q - 1)] + r.send_counts[size_t(q - 1)];
  r.order.resize(size_t(u));
  r.position.resize(size_t(u));
  for (int64_t k = 0; k < u; ++k) {
    const int64_t at = start[size_t(owner[size_t(k)])]++;
    r.order[size_t(at)] = k;
    r.position[size_t(k)] = at;
  }
  return r;
}

distributed::Communicator& group_of(const Attrs& attrs) {
  const Shape& g = attrs.get_shape("group");
  return *distributed::world().subgroup(std::vector<int>(g.begin(), g.end()));
}

std::vector<int64_t> exchange_counts(distributed::Communicator& comm, const std::vector<int64_t>& send) {
  const auto n = int64_t(send.size());
  Tensor in = make_empty({n}, DType::Int64, Device()), out = make_empty({n}, DType::Int64, Device());
  std::memcpy(in.data_ptr(), send.data(), size_t(n) * sizeof(int64_t));
  comm.all_to_all(in, std::vector<int64_t>(size_t(n), 1), out, std::vector<int64_t>(size_t(n), 1));
  const int64_t* o = static_cast<const int64_t*>(out.data_ptr());
  return std::vector<int64_t>(o, o + n);
}

// The keys of routing r in owner order, sent; the keys this rank owns come back (ids, tables).
std::pair<Tensor, Tensor> exchange_keys(distributed::Communicator& comm, const Routing& r,
                                        const std::vector<int64_t>& recv_counts) {
  const auto u = int64_t(r.unique.size());
  Tensor send = make_empty({u, 2}, DType::Int64, Device());
  int64_t* s = static_cast<int64_t*>(send.data_ptr());
  for (int64_t k = 0; k < u; ++k) {
    const Key& key = r.unique[size_t(r.order[size_t(k)])];
    s[2 * k] = int64_t(key.id);
    s[2 * k + 1] = int64_t(key.table);
  }
  int64_t total = 0;
  for (int64_t c : recv_counts) total += c;
  Tensor got = make_empty({total, 2}, DType::Int64, Device());
  comm.all_to_all(send, r.send_counts, got, recv_counts);
  Tensor ids = make_empty({total}, DType::Int64, Device()), tables = make_empty({total}, DType::Int64, Device());
  const int64_t* g = static_cast<const int64_t*>(got.data_ptr());
  for (int64_t k = 0; k < total; ++k) {
    static_cast<int64_t*>(ids.data_ptr())[k] = g[2 * k];
    static_cast<int64_t*>(tables.data_ptr())[k] = g[2 * k + 1];
  }
  return {ids, tables};
}

void sharded_lookup_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const auto t = table_set_of(attrs);
  distributed::Communicator& comm = group_of(attrs);
  const Routing r = route(in[1], in[2], comm.size());
  const std::vector<int64_t> recv_counts = exchange_counts(comm, r.send_counts);
  const auto [ids, tables] = exchange_keys(comm, r, recv_counts);
  const Tensor rows = t->lookup_keys(ids, tables);  // the rows this rank owns, asked for
  Tensor back = make_empty({int64_t(r.unique.size()), t->dim()}, t->dtype(), Device());
  comm.all_to_all(rows, recv_counts, back, r.send_counts);
  const size_t bytes = size_t(t->dim()) * back.element_size();
  const char* b = static_cast<const char*>(back.data_ptr());
  char* o = static_cast<char*>(out[0].data_ptr());
  for (size_t i = 0; i < r.inverse.size(); ++i)
    std::memcpy(o + i * bytes, b + size_t(r.position[size_t(r.inverse[i])]) * bytes, bytes);
}

void sharded_accumulate_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  // Each distinct key's summed gradient goes to its owner, which adds
  // what every rank sent divided by the ranks: DDP's mean.
  const auto t = table_set_of(attrs);
  distributed::Communicator& comm = group_of(attrs);
  const Routing r = route(in[0], in[1], comm.size());
  const int64_t dim = t->dim(), u = int64_t(r.unique.size());
  const Tensor grad = contiguous(to(in[2], DType::Float64));
  const double* g = static_cast<const double*>(grad.data_ptr());
  Tensor send = zeros({u, dim}, {.dtype = DType::Float64});
  double* s = static_cast<double*>(send.data_ptr());
  for (size_t i = 0; i < r.inverse.size(); ++i) {
    double* dst = s + r.position[size_t(r.inverse[i])] * dim;
    for (int64_t j = 0; j < dim; ++j) dst[j] += g[int64_t(i) * dim + j];
  }
  const std::vector<int64_t> recv_counts = exchange_counts(comm, r.send_counts);
  const auto [ids, tables] = exchange_keys(comm, r, recv_counts);
  Tensor got = make_empty({ids.numel(), dim}, DType::Float64, Device());
  comm.all_to_all(send, r.send_counts, got, recv_counts);
  if (attrs.get_int("average")) {  // local batches, as under DDP: the mean over ranks
    double* gp = static_cast<double*>(got.data_ptr());
    const double inv = 1.0 / double(comm.size());
    for (int64_t k = 0; k < got.numel(); ++k) gp[k] *= inv;
  }
  t->accumulate_key_gradients(ids, tables, got);
  *static_cast<float*>(out[0].data_ptr()) = 0.0f;
}

void lookup_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const Tensor rows = table_set_of(attrs)->lookup_keys(in[1], in[2]);
  std::memcpy(out[0].data_ptr(), rows.data_ptr(), size_t(rows.numel()) * rows.element_size());
}

void accumulate_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  table_set_of(attrs)->accumulate_key_gradients(in[0], in[1], in[2]);
  *static_cast<float*>(out[0].data_ptr()) = 0.0f;
}

void apply_kernel(const TensorList& in, TensorList&, const Attrs& attrs) {
  const auto t = table_set_of(attrs);
  const Tensor& flag = in.back();
  if (in.size() > 1 && flag.defined() && *static_cast<const float*>(flag.data_ptr()) != 0.0f) {
    t->clear_gradients();  // a skipped step: no update, no step counted
    return;
  }
  const double scale = attrs.get_float("grad_scale");
  if (scale != 1.0) t->scale_gradients(scale);
  t->apply(rule_of(attrs));
}

void unscale_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const auto t = table_set_of(attrs);
  t->scale_gradients(double(*static_cast<const float*>(in[1].data_ptr())));
  Tensor bad = full({1}, Scalar(t->pending_non_finite() ? 1.0 : 0.0), {.dtype = DType::Float32});
  const Shape& g = attrs.get_shape("group");
  if (g.size() > 1) group_of(attrs).all_reduce(bad);
  if (*static_cast<const float*>(bad.data_ptr()) != 0.0f) *static_cast<float*>(out[0].data_ptr()) = 1.0f;
}

}  // namespace

MF_REGISTER_KERNEL("one_embedding_sharded_lookup", DeviceType::CPU, sharded_lookup_kernel);
MF_REGISTER_KERNEL("one_embedding_sharded_accumulate", DeviceType::CPU, sharded_accumulate_kernel);
MF_REGISTER_KERNEL("one_embedding_lookup", DeviceType::CPU, lookup_kernel);
MF_REGISTER_KERNEL("one_embedding_accumulate", DeviceType::CPU, accumulate_kernel);
MF_REGISTER_KERNEL("one_embedding_apply", DeviceType::CPU, apply_kernel);
MF_REGISTER_KERNEL("one_embedding_unscale", DeviceType::CPU, unscale_kernel);

}  // namespace mf::one_embedding
