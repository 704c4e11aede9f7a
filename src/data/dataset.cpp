// TensorDataset, Subset and random_split.
#include "meshflow/data/dataset.h"

#include <cmath>

#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"

namespace mf::data {

void check_index(const char* what, int64_t index, int64_t size) {
  MF_CHECK(index >= 0 && index < size, IndexError, what, ": index ", index, " is out of range for a dataset of size ",
           size);
}

TensorList Dataset::get_batch(const std::vector<int64_t>& indices) const {
  MF_CHECK(!indices.empty(), ValueError, "Dataset.get_batch: expected at least one index");
  std::vector<TensorList> columns;
  for (int64_t index : indices) {
    TensorList example = get(index);
    if (columns.empty()) columns.resize(example.size());
    MF_CHECK(example.size() == columns.size(), ShapeError, "Dataset.get_batch: example ", index, " has ",
             example.size(), " tensors but example ", indices[0], " has ", columns.size());
    for (size_t k = 0; k < example.size(); ++k) columns[k].push_back(std::move(example[k]));
  }
  TensorList batch;
  batch.reserve(columns.size());
  for (const auto& column : columns) batch.push_back(stack(column, 0));
  return batch;
}

// --- TensorDataset ------------------------------------------------------------

TensorDataset::TensorDataset(TensorList tensors) : tensors_(std::move(tensors)) {
  MF_CHECK(!tensors_.empty(), ValueError, "TensorDataset: expected at least one tensor");
  for (size_t k = 0; k < tensors_.size(); ++k) {
    MF_CHECK(tensors_[k].defined() && tensors_[k].dim() > 0, ShapeError, "TensorDataset: tensor ", k,
             " must have at least one dimension (dim 0 indexes the examples)");
    MF_CHECK(tensors_[k].size(0) == tensors_[0].size(0), ShapeError,
             "TensorDataset: size mismatch between tensors: tensor 0 has ", tensors_[0].size(0), " examples (shape ",
             shape_str(tensors_[0].sizes()), ") but tensor ", k, " has ", tensors_[k].size(0), " (shape ",
             shape_str(tensors_[k].sizes()), ")");
  }
  size_ = tensors_[0].size(0);
}

TensorList TensorDataset::get(int64_t index) const {
  check_index("TensorDataset", index, size_);
  TensorList example;
  example.reserve(tensors_.size());
  for (const auto& t : tensors_) example.push_back(select(t, 0, index));
  return example;
}

TensorList TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (int64_t index : indices) check_index("TensorDataset", index, size_);
  Tensor rows = from_data(indices, {int64_t(indices.size())});
  TensorList batch;
  batch.reserve(tensors_.size());
  for (const auto& t : tensors_) batch.push_back(index_select(t, 0, rows));
  return batch;
}

// --- Subset -------------------------------------------------------------------

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  MF_CHECK(dataset_ != nullptr, ValueError, "Subset: the dataset is null");
  const int64_t n = dataset_->size();
  for (size_t i = 0; i < indices_.size(); ++i)
    MF_CHECK(indices_[i] >= 0 && indices_[i] < n, IndexError, "Subset: indices[", i, "] = ", indices_[i],
             " is out of range for a dataset of size ", n);
}

TensorList Subset::get(int64_t index) const {
  check_index("Subset", index, size());
  return dataset_->get(indices_[size_t(index)]);
}

TensorList Subset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (int64_t index : indices) {
    check_index("Subset", index, size());
    mapped.push_back(indices_[size_t(index)]);
  }
  return dataset_->get_batch(mapped);
}

// --- random_split -------------------------------------------------------------

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths, Generator& generator) {
  MF_CHECK(dataset != nullptr, ValueError, "random_split: the dataset is null");
  int64_t total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    MF_CHECK(lengths[i] >= 0, ValueError, "random_split: lengths[", i, "] = ", lengths[i], " is negative");
    total += lengths[i];
  }
  MF_CHECK(total == dataset->size(), ValueError, "random_split: sum of input lengths (", total,
           ") does not equal the length of the input dataset (", dataset->size(), ")");
  Tensor order = randperm(total, Device(), &generator);
  const int64_t* p = order.data<int64_t>();
  std::vector<std::shared_ptr<Subset>> splits;
  int64_t offset = 0;
  for (int64_t length : lengths) {
    splits.push_back(std::make_shared<Subset>(dataset, std::vector<int64_t>(p + offset, p + offset + length)));
    offset += length;
  }
  return splits;
}

std::vector<std::shared_ptr<Subset>> random_split_fractions(std::shared_ptr<const Dataset> dataset,
                                                            const std::vector<double>& fractions,
                                                            Generator& generator) {
  MF_CHECK(dataset != nullptr, ValueError, "random_split: the dataset is null");
  MF_CHECK(!fractions.empty(), ValueError, "random_split: expected at least one fraction");
  double sum = 0;
  for (size_t i = 0; i < fractions.size(); ++i) {
    MF_CHECK(fractions[i] >= 0 && fractions[i] <= 1, ValueError, "random_split: fraction at index ", i, " (",
             fractions[i], ") is not between 0 and 1");
    sum += fractions[i];
  }
  // math.isclose(sum, 1) with its default relative tolerance, and sum <= 1.
  MF_CHECK(std::fabs(sum - 1.0) <= 1e-9 && sum <= 1.0, ValueError, "random_split: fractions must sum to 1, got ",
           sum);
  const int64_t n = dataset->size();
  std::vector<int64_t> lengths;
  int64_t assigned = 0;
  for (double f : fractions) {
    lengths.push_back(int64_t(std::floor(double(n) * f)));
    assigned += lengths.back();
  }
  for (int64_t i = 0; i < n - assigned; ++i) lengths[size_t(i) % lengths.size()] += 1;
  return random_split(std::move(dataset), lengths, generator);
}

}  // namespace mf::data
