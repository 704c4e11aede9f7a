// OneEmbedding: embedding tables keyed by arbitrary 64-bit ids (hash ids),
// whose rows exist once looked up, updated sparsely by fused optimizer
// rules that keep their state in the row itself (docs/embedding.md).
//
// Note [Embedding rows]
// A table set (one MultiTableEmbedding) keeps one row per (table, id) that
// was ever looked up: the embedding values first, then the optimizer's
// state (momentum buffer, Adagrad's sum, Adam's two moments), each of the
// embedding's width, so an update reads and writes one row and a lookup
// one row. Rows start with the values only; the first update of a rule
// with state widens every row once (SGD's momentum buffer starts as NaN:
// its first update takes the gradient). A row's initial values depend only on
// (seed, table, id, column), not on when or where it is first looked up, so
// that lookups in any order, on any rank, give the same model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshflow/tensor.h"

namespace mf::one_embedding {

// How a table's new rows are filled: uniform in [a, b) or normal(a, b).
struct Initializer {
  enum class Kind { Uniform, Normal };
  Kind kind = Kind::Uniform;
  double a = -0.05, b = 0.05;
};

// A fused sparse update, applied to the touched rows only.
struct UpdateRule {
  enum class Kind { SGD, Adagrad, Adam, Ftrl };
  Kind kind = Kind::SGD;
  double lr = 0.01;
  double weight_decay = 0;
  bool maximize = false;
  // SGD
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  // Adagrad
  double lr_decay = 0, initial_accumulator_value = 0, eps = 1e-10;
  // Adam / AdamW (decoupled weight decay)
  double beta1 = 0.9, beta2 = 0.999;
  bool decoupled_weight_decay = false;
  // FTRL (OneFlow's one_embedding.Ftrl; initial_accumulator_value above)
  double lr_power = -0.5, lambda1 = 0, lambda2 = 0, beta = 0;
  // The state columns the rule keeps per row (in units of the embedding width).
  int state_slots() const;
};

// Where the rows live: all in memory (cache_bytes 0), or an LRU cache of
// cache_bytes in memory over the file `path` (Note [Cached rows] in
// src/one_embedding/row_store.h).
struct StoreOptions {
  int64_t cache_bytes = 0;
  std::string path;
};

class TableSet {
 public:
  // dim: the embedding width; dtype: float32 or float64; one initializer
  // per table (per feature column of the ids).
  TableSet(int64_t dim, DType dtype, std::vector<Initializer> tables, uint64_t seed, const StoreOptions& store = {});
  ~TableSet();
  TableSet(const TableSet&) = delete;
  TableSet& operator=(const TableSet&) = delete;

  int64_t dim() const;
  DType dtype() const;
  int64_t num_tables() const;
  // Rows that exist (looked up at least once), over all tables.
  int64_t num_rows() const;

  // ids: an integer tensor (batch, num_tables), column f holding ids of
  // table f. Returns (batch, num_tables, dim): each id's row, made (and
  // initialised) if new. Throws TypeError for non-integer ids, ShapeError
  // for a column count that is not num_tables.
  Tensor lookup(const Tensor& ids);
  // Adds grad (batch, num_tables, dim), the gradient of lookup(ids), to the
  // pending gradient of each distinct (table, id) (summed over repeats and
  // over calls until apply() or clear_gradients()).
  void accumulate_gradients(const Tensor& ids, const Tensor& grad);
  // Applies rule to every row with a pending gradient, then drops them;
  // counts one step (Adam's bias correction, Adagrad's decay).
  void apply(const UpdateRule& rule);
  void clear_gradients();
  // Distinct (table, id) pairs with a pending gradient.
  int64_t num_pending() const;
  // Multiplies every pending gradient by factor (gradient unscaling,
  // accumulation averaging).
  void scale_gradients(double factor);
  // Whether some pending gradient holds an inf or NaN.
  bool pending_non_finite() const;
  // The current values of these rows (batch, num_tables, dim) without making
  // missing ones (their rows read as their initial values).
  Tensor peek(const Tensor& ids) const;

  // The same by keys: ids and tables are 1-d integer tensors of equal length
  // n (key i is id ids[i] of table tables[i]); rows come as (n, dim). A
  // sharded embedding's owner serves the keys other ranks send it this way.
  Tensor lookup_keys(const Tensor& ids, const Tensor& tables);
  Tensor peek_keys(const Tensor& ids, const Tensor& tables) const;
  void accumulate_key_gradients(const Tensor& ids, const Tensor& tables, const Tensor& grad);

  // Every row, for a snapshot: ids (n), tables (n) and the rows (n, (1 +
  // state_slots()) * dim) in dtype, values then optimizer state.
  struct Rows {
    Tensor ids, tables, rows;
  };
  Rows export_rows() const;
  // Replaces every row by these (the layout of export_rows with `slots`
  // state columns of rule kind `kind`, after `step` updates); drops pending
  // gradients.
  void import_rows(const Rows& rows, int slots, UpdateRule::Kind kind, int64_t step);
  int state_slots() const;
  UpdateRule::Kind state_kind() const;
  int64_t step() const;

  // The tokens of the gradient accumulations since the last update (Note
  // [Embedding ops]): the next update op takes them as inputs.
  void add_token(const Tensor& token);
  TensorList take_tokens();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Note [Sharded lookups]: over a group of n ranks every table is split by
// a hash of (id, table) and each rank keeps the rows it owns. A lookup
// (one_embedding_sharded_lookup, a collective) dedupes this rank's keys,
// sends each distinct key to its owner and gets its row back (all-to-alls
// of the counts, the keys and the rows); its backward
// (one_embedding_sharded_accumulate) sums the gradient of each distinct key
// and sends it to the owner the same way. For local ids (each rank its own
// batch and loss) the owner adds what every rank sent divided by n: the
// mean over ranks that DistributedDataParallel gives the dense layers, so a
// model trained on n ranks' batches equals one process on their union. For
// global ids (split over the ranks, the output global too) the gradients
// are already those of the global loss, and the owner sums them. Every rank must look up (and run backward) the same
// number of times; the exchanges run on the group's own communicator.
//
// Note [Embedding ops]: lookups, gradient accumulation and updates are
// dispatched ops (src/one_embedding/ops.cpp) on a registered TableSet,
// named by an id attr, so a graph trace records them like any op:
// one_embedding_lookup (shadow, ids, tables) -> rows, whose backward runs
// one_embedding_accumulate (ids, tables, grad) -> a one-element token; and
// one_embedding_apply, in place on the embedding's shadow parameter, whose
// inputs after the shadow are the tokens of the accumulations it applies.
// The tokens order every accumulation before the update, and the update is
// an optimizer update of the shadow (its learning rate follows the
// parameter group in a compiled plan).
int64_t register_table_set(const std::shared_ptr<TableSet>& tables);
// group: the world ranks the tables are sharded over (Note [Sharded
// lookups]); one rank or none: all rows here. average: the owners divide
// the gradients all ranks sent by the ranks (local batches, as under DDP)
// rather than summing them (the global view's exact gradient).
Tensor lookup(const Tensor& shadow, const Tensor& ids, const Tensor& tables, int64_t table_set,
              const std::vector<int>& group = {}, bool average = true);
// grad_scale multiplies the pending gradients first (gradient accumulation).
void apply_update(const Tensor& shadow, int64_t table_set, const UpdateRule& rule, double grad_scale = 1.0);
// A graph grad scaler (Note [Graph grad scaling] in graph/trace.h): the
// shadow parameter of an embedding names its table set; for such a
// parameter unscale_if_embedding records the unscaling of the embedding's
// gradients into found_inf (one_embedding_unscale) and returns true.
void register_shadow(const Tensor& shadow, int64_t table_set, const std::vector<int>& group);
// Forgets a shadow (its embedding is gone), by its TensorImpl's address.
void unregister_shadow(uintptr_t shadow);
bool unscale_if_embedding(const Tensor& param, const Tensor& found_inf, const Tensor& inv_scale);

}  // namespace mf::one_embedding
