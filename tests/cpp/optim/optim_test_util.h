// Shared pieces of the optimizer tests: float64 reference updates written
// from the torch.optim algorithms, and a driver that runs an optimizer and
// the reference side by side.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshflow/optim.h"
#include "test_util.h"

namespace mf::testing::optim_ref {

using Vec = std::vector<double>;

// The reference state of one parameter: buffers under PyTorch's state keys
// and the step count.
struct State {
  std::map<std::string, Vec> buffers;
  double step = 0;
};

// One reference update of parameter p with gradient g.
using RefUpdate = std::function<void(Vec& p, const Vec& g, State& s)>;

// torch.optim.SGD (PyTorch 1.13's implementation negates the gradient for
// maximize before the weight decay is added; the docs' pseudo-code adds the
// step instead, which differs only with weight decay).
inline RefUpdate sgd(double lr, double momentum = 0, double dampening = 0, double weight_decay = 0,
                     bool nesterov = false, bool maximize = false) {
  return [=](Vec& p, const Vec& g, State& s) {
    const bool first = !s.buffers.contains("momentum_buffer");
    Vec* b = momentum != 0 ? &s.buffers["momentum_buffer"] : nullptr;
    if (b && first) b->assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = maximize ? -g[i] : g[i];
      if (weight_decay != 0) d += weight_decay * p[i];
      if (b) {
        (*b)[i] = first ? d : momentum * (*b)[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * (*b)[i] : (*b)[i];
      }
      p[i] -= lr * d;
    }
  };
}

// torch.optim.Adam / AdamW. AMSGrad keeps the maximum of the raw second
// moments (as the implementation does; the docs write it with bias-corrected
// ones).
inline RefUpdate adam(double lr, double beta1, double beta2, double eps, double weight_decay, bool amsgrad,
                      bool maximize, bool decoupled) {
  return [=](Vec& p, const Vec& g, State& s) {
    if (!s.buffers.contains("exp_avg")) {
      s.buffers["exp_avg"].assign(p.size(), 0.0);
      s.buffers["exp_avg_sq"].assign(p.size(), 0.0);
      if (amsgrad) s.buffers["max_exp_avg_sq"].assign(p.size(), 0.0);
    }
    Vec& m = s.buffers["exp_avg"];
    Vec& v = s.buffers["exp_avg_sq"];
    s.step += 1;
    const double t = s.step;
    for (size_t i = 0; i < p.size(); ++i) {
      double grad = maximize ? -g[i] : g[i];
      if (decoupled) p[i] *= 1 - lr * weight_decay;
      else if (weight_decay != 0) grad += weight_decay * p[i];
      m[i] = beta1 * m[i] + (1 - beta1) * grad;
      v[i] = beta2 * v[i] + (1 - beta2) * grad * grad;
      double second = v[i];
      if (amsgrad) {
        double& vmax = s.buffers["max_exp_avg_sq"][i];
        vmax = std::max(vmax, v[i]);
        second = vmax;
      }
      const double m_hat = m[i] / (1 - std::pow(beta1, t));
      const double v_hat = second / (1 - std::pow(beta2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  };
}

// torch.optim.RMSprop.
inline RefUpdate rmsprop(double lr, double alpha, double eps, double weight_decay, double momentum, bool centered,
                         bool maximize) {
  return [=](Vec& p, const Vec& g, State& s) {
    if (!s.buffers.contains("square_avg")) {
      s.buffers["square_avg"].assign(p.size(), 0.0);
      if (momentum > 0) s.buffers["momentum_buffer"].assign(p.size(), 0.0);
      if (centered) s.buffers["grad_avg"].assign(p.size(), 0.0);
    }
    s.step += 1;
    for (size_t i = 0; i < p.size(); ++i) {
      double grad = maximize ? -g[i] : g[i];
      if (weight_decay != 0) grad += weight_decay * p[i];
      double& v = s.buffers["square_avg"][i];
      v = alpha * v + (1 - alpha) * grad * grad;
      double v_tilde = v;
      if (centered) {
        double& ga = s.buffers["grad_avg"][i];
        ga = alpha * ga + (1 - alpha) * grad;
        v_tilde = v - ga * ga;
      }
      const double update = grad / (std::sqrt(v_tilde) + eps);
      if (momentum > 0) {
        double& b = s.buffers["momentum_buffer"][i];
        b = momentum * b + update;
        p[i] -= lr * b;
      } else {
        p[i] -= lr * update;
      }
    }
  };
}

// torch.optim.Adagrad.
inline RefUpdate adagrad(double lr, double lr_decay, double weight_decay, double initial_accumulator_value,
                         double eps, bool maximize) {
  return [=](Vec& p, const Vec& g, State& s) {
    if (!s.buffers.contains("sum")) s.buffers["sum"].assign(p.size(), initial_accumulator_value);
    s.step += 1;
    const double clr = lr / (1 + (s.step - 1) * lr_decay);
    for (size_t i = 0; i < p.size(); ++i) {
      double grad = maximize ? -g[i] : g[i];
      if (weight_decay != 0) grad += weight_decay * p[i];
      double& sum = s.buffers["sum"][i];
      sum += grad * grad;
      p[i] -= clr * grad / (std::sqrt(sum) + eps);
    }
  };
}

// Parameters of several layouts: a transposed (non-contiguous) matrix, a
// vector, a 0-d tensor and an empty tensor; leaves that require grad.
inline TensorList make_params(DType dtype, uint32_t seed) {
  TensorList params;
  params.push_back(transpose(random_tensor({5, 4}, seed, -1, 1, dtype), 0, 1));
  params.push_back(random_tensor({37}, seed + 1, -1, 1, dtype));
  params.push_back(random_tensor({}, seed + 2, -1, 1, dtype));
  params.push_back(random_tensor({0, 3}, seed + 3, -1, 1, dtype));
  for (auto& p : params) p.requires_grad_(true);
  return params;
}

// Gradient of parameter i at step k: none for parameter 1 at every third
// step (the optimizer must skip it), random values otherwise.
inline Tensor make_grad(const Tensor& p, size_t i, int k) {
  if (i == 1 && k % 3 == 2) return Tensor();
  return random_tensor(p.sizes(), uint32_t(1000 + 31 * k + 7 * int(i)), -1, 1, p.dtype());
}

// A gradient away from zero with a sign fixed per element across steps:
// no cancellation in the moments and no state underflowing the 16-bit
// floats, so a float64 reference that rounds what it stores stays within a
// few units in the last place.
inline Tensor make_steady_grad(const Tensor& p, size_t i, int k) {
  if (i == 1 && k % 3 == 2) return Tensor();
  const Vec signs = values(random_tensor(p.sizes(), uint32_t(500 + i)));
  Vec g = values(random_tensor(p.sizes(), uint32_t(1000 + 31 * k + 7 * int(i)), 0.5, 1.0));
  for (size_t j = 0; j < g.size(); ++j) g[j] = signs[j] < 0 ? -g[j] : g[j];
  return from_vector(g, p.sizes(), {.dtype = p.dtype()});
}

using GradFn = std::function<Tensor(const Tensor& p, size_t i, int k)>;

// values rounded to dtype, as a tensor of that dtype stores them.
inline Vec round_to(const Vec& v, DType dtype) {
  return values(from_vector(v, {int64_t(v.size())}, {.dtype = dtype}));
}

// Runs `steps` steps of opt on params and of the reference on their
// values, comparing parameters and every state buffer after each step. The
// reference rounds what it stores (parameters and state) to the
// parameters' dtype, as the optimizer's tensors do; it computes in float64.
inline void expect_matches_reference(optim::Optimizer& opt, const TensorList& params, const RefUpdate& ref,
                                     int steps, double atol, double rtol, const GradFn& grad_of = make_grad) {
  std::vector<Vec> ref_params;
  std::vector<State> ref_states(params.size());
  for (const auto& p : params) ref_params.push_back(values(p));
  for (int k = 0; k < steps; ++k) {
    SCOPED_TRACE("step " + std::to_string(k));
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = grad_of(params[i], i, k);
      params[i].set_grad(g);
      if (!g.defined()) continue;
      ref(ref_params[i], values(g), ref_states[i]);
      ref_params[i] = round_to(ref_params[i], params[i].dtype());
      for (auto& [name, buffer] : ref_states[i].buffers) buffer = round_to(buffer, params[i].dtype());
    }
    opt.step();
    for (size_t i = 0; i < params.size(); ++i) {
      SCOPED_TRACE("param " + std::to_string(i));
      expect_values(params[i], ref_params[i], atol, rtol);
      if (!opt.has_state(params[i])) {
        EXPECT_TRUE(ref_states[i].buffers.empty() && ref_states[i].step == 0);
        continue;
      }
      const auto& state = opt.state(params[i]);
      for (const auto& [name, buffer] : ref_states[i].buffers) {
        SCOPED_TRACE("state " + name);
        ASSERT_TRUE(state.contains(name));
        expect_values(state.at(name).to_tensor(), buffer, atol, rtol);
      }
      if (state.contains("step")) EXPECT_EQ(state.at("step").to_tensor().item<double>(), ref_states[i].step);
    }
  }
}

}  // namespace mf::testing::optim_ref
