// Fashion-MNIST (Xiao et al. 2017): 28x28 grey images of clothes in 10
// classes, 60000 for training and 10000 for testing.
#pragma once

#include <string>

#include "meshflow/data/dataset.h"

namespace mf::data {

class FashionMNIST : public Dataset {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";

  // Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte, gzip-compressed (.gz)
  // or not, from root. A missing file is an mf::Error naming it.
  explicit FashionMNIST(const std::string& root = kDefaultRoot, bool train = true);

  int64_t size() const override { return labels_.size(0); }
  // {image float32 (1, 28, 28) in [0, 1], label int64 ()}
  TensorList get(int64_t index) const override;
  TensorList get_batch(const std::vector<int64_t>& indices) const override;
  // (N, 1, 28, 28) float32 in [0, 1] and (N) int64 in [0, 10).
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }
  bool train() const { return train_; }

 private:
  Tensor images_;
  Tensor labels_;
  bool train_;
};

}  // namespace mf::data
