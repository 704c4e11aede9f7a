// Layers over the composite functional ops (meshflow/ops/functional.h):
// ReLU6, Hardtanh, GLU, CosineSimilarity and the L1 / smooth-L1 / Huber
// losses, with torch.nn's constructor arguments.
#pragma once

#include <string>

#include "meshflow/nn/module.h"

namespace mf::nn {

class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0, bool inplace = false,
                    std::string type_name = "Hardtanh");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const double min_val, max_val;
  const bool inplace;
};
class ReLU6 : public Hardtanh {
 public:
  explicit ReLU6(bool inplace = false) : Hardtanh(0.0, 6.0, inplace, "ReLU6") {}
  std::string extra_repr() const override;
};
class GLU : public Module {
 public:
  explicit GLU(int64_t dim = -1);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const int64_t dim;
};
class CosineSimilarity : public Module {
 public:
  explicit CosineSimilarity(int64_t dim = 1, double eps = 1e-8);
  Tensor forward(const Tensor& x1, const Tensor& x2);
  using Module::forward;
  std::string extra_repr() const override;
  const int64_t dim;
  const double eps;
};
class L1Loss : public Module {
 public:
  explicit L1Loss(std::string reduction = "mean");
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
};
class SmoothL1Loss : public Module {
 public:
  explicit SmoothL1Loss(std::string reduction = "mean", double beta = 1.0);
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
  const double beta;
};
class HuberLoss : public Module {
 public:
  explicit HuberLoss(std::string reduction = "mean", double delta = 1.0);
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
  const double delta;
};
class BCELoss : public Module {
 public:
  explicit BCELoss(const Tensor& weight = Tensor(), std::string reduction = "mean");
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
};
class KLDivLoss : public Module {
 public:
  explicit KLDivLoss(std::string reduction = "mean", bool log_target = false);
  Tensor forward(const Tensor& input, const Tensor& target);
  using Module::forward;
  const std::string reduction;
  const bool log_target;
};

}  // namespace mf::nn
