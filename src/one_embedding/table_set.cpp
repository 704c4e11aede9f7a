// TableSet: the rows of one MultiTableEmbedding in memory; see Note
// [Embedding rows] in include/meshflow/one_embedding.h.
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "meshflow/error.h"
#include "meshflow/one_embedding.h"
#include "one_embedding/row_store.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"

namespace mf::one_embedding {

namespace {

// A uniform in (0, 1) from a hash.
double unit(uint64_t h) { return (double(h >> 11) + 0.5) * 0x1.0p-53; }

// The initial value of column j of row (table, id): a function of the
// seed, the table, the id and the column only.
double initial_value(const Initializer& init, uint64_t seed, const Key& key, int64_t j) {
  const uint64_t h = splitmix64(seed ^ splitmix64(key.id ^ splitmix64(key.table + 1)) ^ splitmix64(uint64_t(j)));
  if (init.kind == Initializer::Kind::Uniform) return init.a + (init.b - init.a) * unit(h);
  const double u1 = unit(h), u2 = unit(splitmix64(h));
  return init.a + init.b * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

int UpdateRule::state_slots() const {
  switch (kind) {
    case Kind::SGD: return momentum != 0 ? 1 : 0;
    case Kind::Adagrad: return 1;
    case Kind::Adam: return 2;
    case Kind::Ftrl: return 2;
  }
  return 0;
}

struct TableSet::Impl {
  int64_t dim;
  DType dtype;
  std::vector<Initializer> tables;
  uint64_t seed;
  // Rows: (1 + slots) * dim values each, in dtype.
  int slots = 0;
  std::vector<double> state_initial;  // per slot: what a new row's state starts at
  UpdateRule::Kind state_kind = UpdateRule::Kind::SGD;
  std::unique_ptr<RowStore> store;
  KeyIndex pending_index;
  std::vector<Key> pending_keys;
  std::vector<double> pending;  // dim per pending key
  TensorList tokens;            // Note [Embedding ops]
  int64_t step = 0;

  int64_t width() const { return (1 + slots) * dim; }
  size_t element_size() const { return dtype == DType::Float64 ? sizeof(double) : sizeof(float); }
  int64_t num_rows() const { return store->size(); }

  template <typename T>
  T* make_row(const Key& key) {
    T* p = reinterpret_cast<T*>(store->insert(key));
    for (int64_t j = 0; j < dim; ++j) p[j] = T(initial_value(tables[size_t(key.table)], seed, key, j));
    for (int s = 0; s < slots; ++s)
      for (int64_t j = 0; j < dim; ++j) p[(1 + s) * dim + j] = T(state_initial[size_t(s)]);
    return p;
  }

  template <typename T>
  T* row(const Key& key, bool make) {
    char* r = store->find(key);
    return r ? reinterpret_cast<T*>(r) : make ? make_row<T>(key) : nullptr;
  }

  template <typename T>
  void widen(int new_slots, const std::vector<double>& initial) {
    store->restride(int64_t((1 + new_slots) * dim * int64_t(sizeof(T))), [&](char* tail) {
      T* t = reinterpret_cast<T*>(tail);
      for (int s = 0; s < new_slots; ++s)
        for (int64_t j = 0; j < dim; ++j) t[s * dim + j] = T(initial[size_t(s)]);
    });
    slots = new_slots;
    state_initial = initial;
  }

  template <typename T>
  void apply(const UpdateRule& rule) {
    ++step;
    const double sign = rule.maximize ? -1.0 : 1.0;
    auto update = [&](T* w, const double* g) {
      switch (rule.kind) {
        case UpdateRule::Kind::SGD: {
          T* buf = w + dim;
          for (int64_t j = 0; j < dim; ++j) {
            double d = sign * g[j] + rule.weight_decay * double(w[j]);
            if (rule.momentum != 0) {
              // A new buffer holds NaN: its first update takes the gradient, as torch's does.
              const double b =
                  std::isnan(double(buf[j])) ? d : rule.momentum * double(buf[j]) + (1 - rule.dampening) * d;
              buf[j] = T(b);
              d = rule.nesterov ? d + rule.momentum * b : b;
            }
            w[j] = T(double(w[j]) - rule.lr * d);
          }
          break;
        }
        case UpdateRule::Kind::Adagrad: {
          T* sum = w + dim;
          const double clr = rule.lr / (1 + double(step - 1) * rule.lr_decay);
          for (int64_t j = 0; j < dim; ++j) {
            const double d = sign * g[j] + rule.weight_decay * double(w[j]);
            const double s = double(sum[j]) + d * d;
            sum[j] = T(s);
            w[j] = T(double(w[j]) - clr * d / (std::sqrt(double(T(s))) + rule.eps));
          }
          break;
        }
        case UpdateRule::Kind::Adam: {
          T* m = w + dim;
          T* v = w + 2 * dim;
          const double bias1 = 1 - std::pow(rule.beta1, double(step));
          const double bias2_sqrt = std::sqrt(1 - std::pow(rule.beta2, double(step)));
          for (int64_t j = 0; j < dim; ++j) {
            double wj = double(w[j]);
            double d = sign * g[j];
            if (rule.decoupled_weight_decay) wj *= 1 - rule.lr * rule.weight_decay;
            else d += rule.weight_decay * wj;
            const double mj = rule.beta1 * double(m[j]) + (1 - rule.beta1) * d;
            const double vj = rule.beta2 * double(v[j]) + (1 - rule.beta2) * d * d;
            m[j] = T(mj);
            v[j] = T(vj);
            const double denom = std::sqrt(double(T(vj))) / bias2_sqrt + rule.eps;
            w[j] = T(wj - rule.lr / bias1 * double(T(mj)) / denom);
          }
          break;
        }
        case UpdateRule::Kind::Ftrl: {
          T* acc = w + dim;
          T* z = w + 2 * dim;
          for (int64_t j = 0; j < dim; ++j) {
            const double wj = double(w[j]);
            const double d = sign * g[j] + rule.weight_decay * wj;
            const double a = double(acc[j]), a_new = a + d * d;
            const double sigma = (std::pow(a_new, -rule.lr_power) - std::pow(a, -rule.lr_power)) / rule.lr;
            const double zj = double(z[j]) + d - sigma * wj;
            acc[j] = T(a_new);
            z[j] = T(zj);
            w[j] = std::abs(zj) <= rule.lambda1
                       ? T(0)
                       : T(((zj > 0 ? 1.0 : -1.0) * rule.lambda1 - zj) /
                           ((rule.beta + std::pow(a_new, -rule.lr_power)) / rule.lr + rule.lambda2));
          }
          break;
        }
      }
    };
    const auto n = int64_t(pending_keys.size());
    auto row_of = [&](int64_t k) {
      T* w = row<T>(pending_keys[size_t(k)], false);
      MF_CHECK(w != nullptr, Error, "internal: MultiTableEmbedding: a pending gradient's row is gone");
      return w;
    };
    if (store->batch_limit() != INT64_MAX) {  // the cache may evict: one row at a time
      for (int64_t k = 0; k < n; ++k) update(row_of(k), pending.data() + k * dim);
      return;
    }
    // In memory rows stay put: find them all, then update them in parallel
    // (distinct rows: no two threads touch one).
    std::vector<T*> rows(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) rows[size_t(k)] = row_of(k);
    parallel_for(0, n, std::max<int64_t>(1, 4096 / dim), [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) update(rows[size_t(k)], pending.data() + k * dim);
    });
  }
};

TableSet::TableSet(int64_t dim, DType dtype, std::vector<Initializer> tables, uint64_t seed, const StoreOptions& store)
    : impl_(std::make_unique<Impl>()) {
  MF_CHECK(dim > 0, ValueError, "MultiTableEmbedding: embedding_dim must be positive, got ", dim);
  MF_CHECK(dtype == DType::Float32 || dtype == DType::Float64, TypeError,
           "MultiTableEmbedding: dtype must be float32 or float64, got ", dtype_name(dtype));
  MF_CHECK(!tables.empty(), ValueError, "MultiTableEmbedding: at least one table is needed");
  for (const Initializer& t : tables)
    MF_CHECK(t.kind == Initializer::Kind::Normal ? t.b >= 0 : t.a <= t.b, ValueError,
             "MultiTableEmbedding: an initializer needs low <= high (uniform) or std >= 0 (normal), got ", t.a, ", ",
             t.b);
  impl_->dim = dim;
  impl_->dtype = dtype;
  impl_->tables = std::move(tables);
  impl_->seed = seed;
  const int64_t stride = dim * int64_t(impl_->element_size());
  if (store.cache_bytes > 0) {
    MF_CHECK(!store.path.empty(), ValueError, "MultiTableEmbedding: a cached store needs a file path");
    impl_->store = cached_row_store(stride, store.cache_bytes, store.path);
  } else {
    impl_->store = memory_row_store(stride);
  }
}

TableSet::~TableSet() = default;

int64_t TableSet::dim() const { return impl_->dim; }
DType TableSet::dtype() const { return impl_->dtype; }
int64_t TableSet::num_tables() const { return int64_t(impl_->tables.size()); }
int64_t TableSet::num_rows() const { return impl_->num_rows(); }
int64_t TableSet::num_pending() const { return int64_t(impl_->pending_keys.size()); }

namespace {

void check_ids(const Tensor& ids, int64_t tables) {
  MF_CHECK(ids.defined() && !is_floating(ids.dtype()) && ids.dtype() != DType::Bool, TypeError,
           "MultiTableEmbedding: ids must be an integer tensor, got ",
           ids.defined() ? dtype_name(ids.dtype()) : "None");
  MF_CHECK(ids.dim() == 2 && ids.size(1) == tables, ShapeError,
           "MultiTableEmbedding: ids must have shape (batch, num_tables=", tables, "), got ", shape_str(ids.sizes()));
}

}  // namespace

namespace {

// (ids, tables) of a (batch, num_tables) id matrix: column f is table f.
std::pair<Tensor, Tensor> flatten_keys(const Tensor& ids_in, int64_t tables) {
  check_ids(ids_in, tables);
  const Tensor ids = contiguous(to(ids_in, DType::Int64));
  const int64_t n = ids.numel();
  Tensor columns = make_empty({n}, DType::Int64, Device());
  int64_t* c = static_cast<int64_t*>(columns.data_ptr());
  for (int64_t i = 0; i < n; ++i) c[i] = i % tables;
  return {reshape(ids, {n}), columns};
}

}  // namespace

Tensor TableSet::lookup(const Tensor& ids) {
  const auto [flat, columns] = flatten_keys(ids, num_tables());
  return reshape(lookup_keys(flat, columns), {ids.size(0), num_tables(), dim()});
}

Tensor TableSet::peek(const Tensor& ids) const {
  const auto [flat, columns] = flatten_keys(ids, num_tables());
  return reshape(peek_keys(flat, columns), {ids.size(0), num_tables(), dim()});
}

void TableSet::accumulate_gradients(const Tensor& ids, const Tensor& grad) {
  const auto [flat, columns] = flatten_keys(ids, num_tables());
  const Shape expected{ids.size(0), num_tables(), dim()};
  MF_CHECK(grad.defined() && grad.sizes() == expected, ShapeError, "MultiTableEmbedding: the gradient must have shape ",
           shape_str(expected), ", got ", grad.defined() ? shape_str(grad.sizes()) : "None");
  accumulate_key_gradients(flat, columns, reshape(contiguous(grad), {flat.numel(), dim()}));
}

namespace {

// Checked int64 (ids, tables) vectors of equal length, tables in range.
std::pair<Tensor, Tensor> checked_keys(const Tensor& ids, const Tensor& tables, int64_t num_tables) {
  MF_CHECK(ids.defined() && tables.defined() && ids.dim() == 1 && tables.dim() == 1 && ids.numel() == tables.numel(),
           ShapeError, "MultiTableEmbedding: keys are two 1-d tensors of equal length (ids, tables), got ",
           ids.defined() ? shape_str(ids.sizes()) : "None", " and ",
           tables.defined() ? shape_str(tables.sizes()) : "None");
  MF_CHECK(!is_floating(ids.dtype()) && !is_floating(tables.dtype()), TypeError,
           "MultiTableEmbedding: ids and tables must be integer tensors");
  Tensor t = contiguous(to(tables, DType::Int64));
  const int64_t* tp = static_cast<const int64_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i)
    MF_CHECK(tp[i] >= 0 && tp[i] < num_tables, IndexError, "MultiTableEmbedding: table ", tp[i], " out of range [0, ",
             num_tables, ")");
  return {contiguous(to(ids, DType::Int64)), t};
}

}  // namespace

Tensor TableSet::lookup_keys(const Tensor& ids_in, const Tensor& tables_in) {
  const auto [ids, tables] = checked_keys(ids_in, tables_in, num_tables());
  const int64_t n = ids.numel(), dim = impl_->dim;
  const int64_t* ip = static_cast<const int64_t*>(ids.data_ptr());
  const int64_t* tp = static_cast<const int64_t*>(tables.data_ptr());
  Tensor out = make_empty({n, dim}, impl_->dtype, Device());
  if (n > impl_->store->batch_limit()) {
    std::unordered_map<Key, char, KeyHash> distinct;
    for (int64_t i = 0; i < n; ++i) distinct.emplace(Key{uint64_t(ip[i]), uint64_t(tp[i])}, 0);
    MF_CHECK(int64_t(distinct.size()) <= impl_->store->batch_limit(), ValueError,
             "MultiTableEmbedding: the cache holds ", impl_->store->batch_limit(), " rows, fewer than the ",
             distinct.size(), " distinct ids of one lookup; give make_cached_ssd_store_options a larger "
             "cache_budget_mb");
  }
  auto run = [&]<typename T>() {
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(o + i * dim, impl_->row<T>(Key{uint64_t(ip[i]), uint64_t(tp[i])}, true), size_t(dim) * sizeof(T));
  };
  if (impl_->dtype == DType::Float64) run.template operator()<double>();
  else run.template operator()<float>();
  return out;
}

Tensor TableSet::peek_keys(const Tensor& ids_in, const Tensor& tables_in) const {
  const auto [ids, tables] = checked_keys(ids_in, tables_in, num_tables());
  const int64_t n = ids.numel(), dim = impl_->dim;
  const int64_t* ip = static_cast<const int64_t*>(ids.data_ptr());
  const int64_t* tp = static_cast<const int64_t*>(tables.data_ptr());
  Tensor out = make_empty({n, dim}, impl_->dtype, Device());
  auto run = [&]<typename T>() {
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      const Key key{uint64_t(ip[i]), uint64_t(tp[i])};
      T* dst = o + i * dim;
      if (const char* r = impl_->store->find(key)) {
        std::memcpy(dst, r, size_t(dim) * sizeof(T));
      } else {
        for (int64_t j = 0; j < dim; ++j) dst[j] = T(initial_value(impl_->tables[size_t(key.table)], impl_->seed, key, j));
      }
    }
  };
  if (impl_->dtype == DType::Float64) run.template operator()<double>();
  else run.template operator()<float>();
  return out;
}

void TableSet::accumulate_key_gradients(const Tensor& ids_in, const Tensor& tables_in, const Tensor& grad_in) {
  const auto [ids, tables] = checked_keys(ids_in, tables_in, num_tables());
  const int64_t n = ids.numel(), dim = impl_->dim;
  MF_CHECK(grad_in.defined() && grad_in.sizes() == Shape({n, dim}), ShapeError,
           "MultiTableEmbedding: the gradient of ", n, " keys must have shape ", shape_str(Shape({n, dim})), ", got ",
           grad_in.defined() ? shape_str(grad_in.sizes()) : "None");
  const Tensor grad = contiguous(to(grad_in, DType::Float64));
  const double* g = static_cast<const double*>(grad.data_ptr());
  const int64_t* ip = static_cast<const int64_t*>(ids.data_ptr());
  const int64_t* tp = static_cast<const int64_t*>(tables.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    const Key key{uint64_t(ip[i]), uint64_t(tp[i])};
    MF_CHECK(impl_->store->find(key) != nullptr, ValueError, "MultiTableEmbedding: a gradient for id ", ip[i],
             " of table ", tp[i], ", which was never looked up");
    const auto [index, added] = impl_->pending_index.emplace(key, int64_t(impl_->pending_keys.size()));
    if (added) {
      impl_->pending_keys.push_back(key);
      impl_->pending.resize(impl_->pending.size() + size_t(dim), 0.0);
    }
    double* dst = impl_->pending.data() + index * dim;
    for (int64_t j = 0; j < dim; ++j) dst[j] += g[i * dim + j];
  }
}

void TableSet::add_token(const Tensor& token) { impl_->tokens.push_back(token); }

TensorList TableSet::take_tokens() {
  TensorList out;
  out.swap(impl_->tokens);
  return out;
}

int TableSet::state_slots() const { return impl_->slots; }
UpdateRule::Kind TableSet::state_kind() const { return impl_->state_kind; }
int64_t TableSet::step() const { return impl_->step; }

TableSet::Rows TableSet::export_rows() const {
  const int64_t n = num_rows(), width = impl_->width();
  Rows out{make_empty({n}, DType::Int64, Device()), make_empty({n}, DType::Int64, Device()),
           make_empty({n, width}, impl_->dtype, Device())};
  int64_t* ip = static_cast<int64_t*>(out.ids.data_ptr());
  int64_t* tp = static_cast<int64_t*>(out.tables.data_ptr());
  char* rows = static_cast<char*>(out.rows.data_ptr());
  const size_t bytes = size_t(width) * impl_->element_size();
  int64_t i = 0;
  impl_->store->for_each([&](const Key& key, const char* row) {
    ip[i] = int64_t(key.id);
    tp[i] = int64_t(key.table);
    std::memcpy(rows + size_t(i) * bytes, row, bytes);
    ++i;
  });
  return out;
}

void TableSet::import_rows(const Rows& in, int slots, UpdateRule::Kind kind, int64_t step) {
  MF_CHECK(slots >= 0 && slots <= 2, ValueError, "MultiTableEmbedding: a snapshot with ", slots,
           " state columns per row (at most 2)");
  const int64_t width = (1 + slots) * impl_->dim;
  const auto [ids, tables] = checked_keys(in.ids, in.tables, num_tables());
  const int64_t n = ids.numel();
  MF_CHECK(in.rows.defined() && in.rows.sizes() == Shape({n, width}), ShapeError,
           "MultiTableEmbedding: a snapshot's rows must have shape ", shape_str(Shape({n, width})),
           " for embedding_dim ", impl_->dim, " and ", slots, " state columns, got ",
           in.rows.defined() ? shape_str(in.rows.sizes()) : "None");
  const Tensor rows = contiguous(to(in.rows, impl_->dtype));
  clear_gradients();
  impl_->store->clear();
  impl_->store->restride(width * int64_t(impl_->element_size()), [](char*) {});
  impl_->slots = slots;
  impl_->state_kind = kind;
  impl_->step = step;
  impl_->state_initial.assign(size_t(slots), 0.0);
  if (kind == UpdateRule::Kind::SGD && slots == 1) impl_->state_initial[0] = std::nan("");
  const int64_t* ip = static_cast<const int64_t*>(ids.data_ptr());
  const int64_t* tp = static_cast<const int64_t*>(tables.data_ptr());
  const size_t bytes = size_t(width) * impl_->element_size();
  for (int64_t i = 0; i < n; ++i) {
    const Key key{uint64_t(ip[i]), uint64_t(tp[i])};
    MF_CHECK(impl_->store->find(key) == nullptr, ValueError, "MultiTableEmbedding: a snapshot holds id ", ip[i],
             " of table ", tp[i], " twice");
    std::memcpy(impl_->store->insert(key), static_cast<const char*>(rows.data_ptr()) + size_t(i) * bytes, bytes);
  }
}

void TableSet::scale_gradients(double factor) {
  for (double& g : impl_->pending) g *= factor;
}

bool TableSet::pending_non_finite() const {
  for (double g : impl_->pending)
    if (!std::isfinite(g)) return true;
  return false;
}

void TableSet::clear_gradients() {
  impl_->pending_index.clear();
  impl_->pending_keys.clear();
  impl_->pending.clear();
}

void TableSet::apply(const UpdateRule& rule) {
  MF_CHECK(rule.lr >= 0, ValueError, "MultiTableEmbedding: the learning rate must be >= 0, got ", rule.lr);
  MF_CHECK(rule.kind != UpdateRule::Kind::Ftrl || (rule.lr > 0 && rule.initial_accumulator_value > 0), ValueError,
           "MultiTableEmbedding: FTRL needs lr > 0 and initial_accumulator_value > 0, got ", rule.lr, " and ",
           rule.initial_accumulator_value);
  const int slots = rule.state_slots();
  if (slots != impl_->slots || (slots > 0 && rule.kind != impl_->state_kind)) {
    MF_CHECK(impl_->slots == 0, ValueError,
             "MultiTableEmbedding: the rows hold the state of another optimizer rule; an embedding keeps one "
             "optimizer for its whole training");
    std::vector<double> initial(size_t(slots), 0.0);
    if (rule.kind == UpdateRule::Kind::Adagrad || rule.kind == UpdateRule::Kind::Ftrl)
      initial[0] = rule.initial_accumulator_value;
    if (rule.kind == UpdateRule::Kind::SGD && slots == 1) initial[0] = std::nan("");  // no momentum buffer yet
    if (impl_->dtype == DType::Float64) impl_->widen<double>(slots, initial);
    else impl_->widen<float>(slots, initial);
    impl_->state_kind = rule.kind;
  }
  if (impl_->dtype == DType::Float64) impl_->apply<double>(rule);
  else impl_->apply<float>(rule);
  clear_gradients();
}

}  // namespace mf::one_embedding
