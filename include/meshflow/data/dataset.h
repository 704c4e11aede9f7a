// Map-style datasets: an example is a TensorList ({image, label}, ...)
// found by its index, as torch.utils.data.Dataset.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "meshflow/generator.h"
#include "meshflow/tensor.h"

namespace mf::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example `index` (0 <= index < size()). Must be safe to call from several
  // threads at once: a DataLoader's workers share one dataset.
  virtual TensorList get(int64_t index) const = 0;
  // The examples at `indices`, each tensor stacked along a new dim 0. The
  // default stacks get() results; datasets holding big tensors gather the
  // rows at once. Same thread-safety rule as get().
  virtual TensorList get_batch(const std::vector<int64_t>& indices) const;
};

// Example i is {t[i] for t in tensors}; all tensors share their dim 0 size.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(TensorList tensors);
  int64_t size() const override { return size_; }
  TensorList get(int64_t index) const override;
  TensorList get_batch(const std::vector<int64_t>& indices) const override;
  const TensorList& tensors() const { return tensors_; }

 private:
  TensorList tensors_;
  int64_t size_;
};

// The examples of `dataset` at `indices`, in that order.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return int64_t(indices_.size()); }
  TensorList get(int64_t index) const override;
  TensorList get_batch(const std::vector<int64_t>& indices) const override;
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

// Splits `dataset` into disjoint random subsets of the given lengths (which
// sum to dataset->size()), as torch.utils.data.random_split. The
// permutation comes from `generator`.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths, Generator& generator);
// The same with fractions summing to 1: split i gets floor(size * f[i])
// examples, and the remainder goes one by one to splits 0, 1, ... (PyTorch's
// rule). A separate name because {3, 7} would also convert to doubles.
std::vector<std::shared_ptr<Subset>> random_split_fractions(std::shared_ptr<const Dataset> dataset,
                                                            const std::vector<double>& fractions,
                                                            Generator& generator);

// Throws IndexError unless 0 <= index < size (negative indices are not
// wrapped: a dataset index is a position, as in a C++ container).
void check_index(const char* what, int64_t index, int64_t size);

}  // namespace mf::data
