// Note [Shared optimizer updates]
// The per-element math of the fused optimizer updates (Note [Optimizer
// updates are ops] in meshflow/optim/optimizer.h), written once for every
// backend like the elementwise functors: an update is a struct whose
// operator()(i, pointers...) updates element i of the parameter and its
// state in the compute type A (M the backend's math). The step-dependent
// scalars (Adam's bias corrections, Adagrad's decayed rate) are computed
// from the step count by MF_HOST_DEVICE functions, on the host by the CPU
// and on the device by a device's kernel, which reads the step (and
// found_inf) where they live.
#pragma once

#include <cmath>

#include "meshflow/dtype.h"
#include "meshflow/host_device.h"

namespace mf::optim_functors {

// Inputs (param, grad, momentum_buffer); see sgd_update_ in update.h.
template <typename A>
struct SGDScalars {
  A sign, weight_decay, momentum, one_minus_dampening, neg_lr;
};

template <typename M, typename T, bool kMomentum, bool kInit, bool kNesterov, bool kDecay>
struct SgdStep {
  SGDScalars<acc_type<T>> s;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, T* p, const T* g, T* buf) const {
    using A = acc_type<T>;
    const A param = A(p[i]);
    A d = s.sign * A(g[i]);
    if constexpr (kDecay) d = d + s.weight_decay * param;
    if constexpr (kMomentum) {
      A b;
      if constexpr (kInit) b = d;
      else b = A(buf[i]) * s.momentum + s.one_minus_dampening * d;
      buf[i] = T(b);
      if constexpr (kNesterov) d = d + s.momentum * A(T(b));
      else d = A(T(b));
    }
    p[i] = T(param + s.neg_lr * d);
  }
};

// Adam's hyperparameters; scalars(step) gives one step's scalars.
struct AdamConfig {
  double lr, beta1, beta2, weight_decay, eps;
  bool maximize;
};
template <typename A>
struct AdamScalars {
  A sign, weight_decay, decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps,
      neg_step_size;
};
template <typename M, typename A>
MF_HOST_DEVICE AdamScalars<A> adam_scalars(const AdamConfig& c, double step) {
  const double bias_correction1 = 1 - M::pow(c.beta1, step);
  const double bias_correction2 = 1 - M::pow(c.beta2, step);
  return {A(c.maximize ? -1.0 : 1.0), A(c.weight_decay), A(1 - c.lr * c.weight_decay), A(c.beta1), A(1 - c.beta1),
          A(c.beta2), A(1 - c.beta2), A(M::sqrt(bias_correction2)), A(c.eps), A(-(c.lr / bias_correction1))};
}

// Inputs (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq).
template <typename M, typename T, bool kDecoupled, bool kDecay, bool kAmsgrad>
struct AdamStep {
  AdamScalars<acc_type<T>> s;
  // max(a, b) that propagates NaN from either side, as torch.maximum,
  // without a branch.
  MF_FORCE_INLINE MF_HOST_DEVICE static acc_type<T> maximum(acc_type<T> a, acc_type<T> b) {
    return M::select((b > a) | (b != b), b, a);
  }
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, T* p, const T* g, T* m, T* v, T* vmax) const {
    using A = acc_type<T>;
    A param = A(p[i]);
    A grad = s.sign * A(g[i]);
    if constexpr (kDecay) {
      if constexpr (kDecoupled) param = param * s.decay_factor;
      else grad = grad + s.weight_decay * param;
    }
    const T m_new = T(A(m[i]) * s.beta1 + s.one_minus_beta1 * grad);
    const T v_new = T(A(v[i]) * s.beta2 + s.one_minus_beta2 * grad * grad);
    m[i] = m_new;
    v[i] = v_new;
    A second = A(v_new);
    if constexpr (kAmsgrad) {
      const T v_max = T(maximum(A(vmax[i]), second));
      vmax[i] = v_max;
      second = A(v_max);
    }
    const A denom = M::sqrt(second) / s.bias_correction2_sqrt + s.eps;
    p[i] = T(param + s.neg_step_size * (A(m_new) / denom));
  }
};

template <typename A>
struct RMSpropScalars {
  A sign, weight_decay, alpha, one_minus_alpha, eps, momentum, neg_lr;
};

// Inputs (param, grad, square_avg, grad_avg, momentum_buffer).
template <typename M, typename T, bool kDecay, bool kCentered, bool kMomentum>
struct RMSpropStep {
  RMSpropScalars<acc_type<T>> s;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, T* p, const T* g, T* sq, T* ga, T* buf) const {
    using A = acc_type<T>;
    const A param = A(p[i]);
    A grad = s.sign * A(g[i]);
    if constexpr (kDecay) grad = grad + s.weight_decay * param;
    const T sq_new = T(A(sq[i]) * s.alpha + s.one_minus_alpha * grad * grad);
    sq[i] = sq_new;
    A avg;
    if constexpr (kCentered) {
      const T ga_new = T(A(ga[i]) * s.alpha + s.one_minus_alpha * grad);
      ga[i] = ga_new;
      avg = M::sqrt(A(T(A(sq_new) - A(ga_new) * A(ga_new))));
    } else {
      avg = M::sqrt(A(sq_new));
    }
    avg = A(T(avg)) + s.eps;
    if constexpr (kMomentum) {
      const T b = T(A(buf[i]) * s.momentum + grad / A(T(avg)));
      buf[i] = b;
      p[i] = T(param + s.neg_lr * A(b));
    } else {
      p[i] = T(param + s.neg_lr * (grad / A(T(avg))));
    }
  }
};

// Adagrad's hyperparameters; scalars(step) decays the rate.
struct AdagradConfig {
  double lr, lr_decay, weight_decay, eps;
  bool maximize;
};
template <typename A>
struct AdagradScalars {
  A sign, weight_decay, eps, neg_clr;
};
template <typename A>
MF_HOST_DEVICE AdagradScalars<A> adagrad_scalars(const AdagradConfig& c, double step) {
  const double clr = c.lr / (1 + (step - 1) * c.lr_decay);
  return {A(c.maximize ? -1.0 : 1.0), A(c.weight_decay), A(c.eps), A(-clr)};
}

// Inputs (param, grad, sum).
template <typename M, typename T, bool kDecay>
struct AdagradStep {
  AdagradScalars<acc_type<T>> s;
  MF_FORCE_INLINE MF_HOST_DEVICE void operator()(int64_t i, T* p, const T* g, T* sum) const {
    using A = acc_type<T>;
    const A param = A(p[i]);
    A grad = s.sign * A(g[i]);
    if constexpr (kDecay) grad = grad + s.weight_decay * param;
    const T sum_new = T(A(sum[i]) + grad * grad);
    sum[i] = sum_new;
    const A std = A(T(M::sqrt(A(sum_new)))) + s.eps;
    p[i] = T(param + s.neg_clr * (grad / A(T(std))));
  }
};

// The step functors of one step count (run_stepped's `make`).
template <typename M, typename T, bool kDecoupled, bool kDecay, bool kAmsgrad>
struct MakeAdam {
  AdamConfig config;
  MF_FORCE_INLINE MF_HOST_DEVICE AdamStep<M, T, kDecoupled, kDecay, kAmsgrad> operator()(double step) const {
    return {adam_scalars<M, acc_type<T>>(config, step)};
  }
};
template <typename M, typename T, bool kDecay>
struct MakeAdagrad {
  AdagradConfig config;
  MF_FORCE_INLINE MF_HOST_DEVICE AdagradStep<M, T, kDecay> operator()(double step) const {
    return {adagrad_scalars<acc_type<T>>(config, step)};
  }
};
// An update that counts its steps but has no scalar that depends on them (RMSprop).
template <typename F>
struct Fixed {
  F f;
  MF_FORCE_INLINE MF_HOST_DEVICE F operator()(double) const { return f; }
};

}  // namespace mf::optim_functors
