// The CPU kernels of the optimizer updates (Note [Optimizer updates are ops]
// in meshflow/optim/optimizer.h): one pass over a parameter, its gradient
// and its state, vectorised by the compiler in the compute type A. The ops'
// schemas, inference and functional API live in src/optim/.
#include <cmath>

#include "backend/cpu/kernels/math.h"
#include "meshflow/op_def.h"
#include "meshflow/parallel.h"
#include "optim/update_common.h"

namespace mf::optim {
namespace {

using detail::dispatch_bool;

// --- sgd_update --------------------------------------------------------------

// Scalars of one update in the compute type A.
template <typename A>
struct SGDScalars {
  A sign, weight_decay, momentum, one_minus_dampening, neg_lr;
};

// Inputs (param, grad, momentum_buffer); see sgd_update_ in update.h.
template <typename T, bool kMomentum, bool kInit, bool kNesterov, bool kDecay>
void sgd_loop(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g, T* __restrict buf,
              const SGDScalars<acc_type<T>>& s) {
  using A = acc_type<T>;
  for (int64_t i = begin; i < end; ++i) {
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
}

void sgd_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const bool momentum = in[2].defined();
  const bool init = attrs.get_bool("init_momentum_buffer");
  const bool nesterov = attrs.get_bool("nesterov");
  const double weight_decay = attrs.get_float("weight_decay");
  detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), "sgd_update", [&]<typename T>() {
    using A = acc_type<T>;
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* buf = flat.written<T>(in[2]);
    const SGDScalars<A> s{A(attrs.get_bool("maximize") ? -1.0 : 1.0), A(weight_decay),
                          A(attrs.get_float("momentum")), A(1.0 - attrs.get_float("dampening")),
                          A(-attrs.get_float("lr"))};
    dispatch_bool(momentum, [&](auto kMomentum) {
      dispatch_bool(momentum && init, [&](auto kInit) {
        dispatch_bool(momentum && nesterov, [&](auto kNesterov) {
          dispatch_bool(weight_decay != 0, [&](auto kDecay) {
            parallel_for(0, out[0].numel(), kGrainSize, [&](int64_t b, int64_t e) {
              sgd_loop<T, kMomentum(), kInit(), kNesterov(), kDecay()>(b, e, p, g, buf, s);
            });
          });
        });
      });
    });
  });
  flat.write_back();
}

// --- adam_update -------------------------------------------------------------

template <typename A>
struct AdamScalars {
  A sign, weight_decay, decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps,
      neg_step_size;
};

// max(a, b) that propagates NaN from either side, as torch.maximum. The
// conditions combine with | rather than || so that the loop has no branch
// and vectorises.
template <typename A>
[[gnu::always_inline]] inline A maximum(A a, A b) {
  return cpu::math::select(std::isgreater(b, a) | (b != b), b, a);
}

// Inputs (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step).
template <typename T, bool kDecoupled, bool kDecay, bool kAmsgrad>
void adam_loop(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
               T* __restrict vmax, const AdamScalars<acc_type<T>>& s) {
  using A = acc_type<T>;
  for (int64_t i = begin; i < end; ++i) {
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
    const A denom = cpu::math::sqrt(second) / s.bias_correction2_sqrt + s.eps;
    p[i] = T(param + s.neg_step_size * (A(m_new) / denom));
  }
}

template <bool kDecoupled>
void adam_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const char* name = kDecoupled ? "adamw_update" : "adam_update";
  const double lr = attrs.get_float("lr"), beta1 = attrs.get_float("beta1"), beta2 = attrs.get_float("beta2");
  const double weight_decay = attrs.get_float("weight_decay");
  const bool amsgrad = attrs.get_bool("amsgrad");
  const double step = detail::increment_step(in[5]);
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), name, [&]<typename T>() {
    using A = acc_type<T>;
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* m = flat.written<T>(in[2]);
    T* v = flat.written<T>(in[3]);
    T* vmax = flat.written<T>(in[4]);
    const AdamScalars<A> s{A(attrs.get_bool("maximize") ? -1.0 : 1.0),
                           A(weight_decay),
                           A(1 - lr * weight_decay),
                           A(beta1),
                           A(1 - beta1),
                           A(beta2),
                           A(1 - beta2),
                           A(std::sqrt(bias_correction2)),
                           A(attrs.get_float("eps")),
                           A(-(lr / bias_correction1))};
    dispatch_bool(weight_decay != 0, [&](auto kDecay) {
      dispatch_bool(amsgrad, [&](auto kAmsgrad) {
        parallel_for(0, out[0].numel(), kGrainSize, [&](int64_t b, int64_t e) {
          adam_loop<T, kDecoupled, kDecay(), kAmsgrad()>(b, e, p, g, m, v, vmax, s);
        });
      });
    });
  });
  flat.write_back();
}

// --- rmsprop_update ----------------------------------------------------------

template <typename A>
struct RMSpropScalars {
  A sign, weight_decay, alpha, one_minus_alpha, eps, momentum, neg_lr;
};

// Inputs (param, grad, square_avg, grad_avg, momentum_buffer, step).
template <typename T, bool kDecay, bool kCentered, bool kMomentum>
void rmsprop_loop(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g, T* __restrict sq,
                  T* __restrict ga, T* __restrict buf, const RMSpropScalars<acc_type<T>>& s) {
  using A = acc_type<T>;
  for (int64_t i = begin; i < end; ++i) {
    const A param = A(p[i]);
    A grad = s.sign * A(g[i]);
    if constexpr (kDecay) grad = grad + s.weight_decay * param;
    const T sq_new = T(A(sq[i]) * s.alpha + s.one_minus_alpha * grad * grad);
    sq[i] = sq_new;
    A avg;
    if constexpr (kCentered) {
      const T ga_new = T(A(ga[i]) * s.alpha + s.one_minus_alpha * grad);
      ga[i] = ga_new;
      avg = cpu::math::sqrt(A(T(A(sq_new) - A(ga_new) * A(ga_new))));
    } else {
      avg = cpu::math::sqrt(A(sq_new));
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
}

void rmsprop_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const double weight_decay = attrs.get_float("weight_decay");
  const bool centered = in[3].defined(), momentum = in[4].defined();
  detail::increment_step(in[5]);
  detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), "rmsprop_update", [&]<typename T>() {
    using A = acc_type<T>;
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* sq = flat.written<T>(in[2]);
    T* ga = flat.written<T>(in[3]);
    T* buf = flat.written<T>(in[4]);
    const double alpha = attrs.get_float("alpha");
    const RMSpropScalars<A> s{A(attrs.get_bool("maximize") ? -1.0 : 1.0), A(weight_decay), A(alpha), A(1 - alpha),
                              A(attrs.get_float("eps")), A(attrs.get_float("momentum")), A(-attrs.get_float("lr"))};
    dispatch_bool(weight_decay != 0, [&](auto kDecay) {
      dispatch_bool(centered, [&](auto kCentered) {
        dispatch_bool(momentum, [&](auto kMomentum) {
          parallel_for(0, out[0].numel(), kGrainSize, [&](int64_t b, int64_t e) {
            rmsprop_loop<T, kDecay(), kCentered(), kMomentum()>(b, e, p, g, sq, ga, buf, s);
          });
        });
      });
    });
  });
  flat.write_back();
}

// --- adagrad_update ----------------------------------------------------------

template <typename A>
struct AdagradScalars {
  A sign, weight_decay, eps, neg_clr;
};

// Inputs (param, grad, sum, step).
template <typename T, bool kDecay>
void adagrad_loop(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g, T* __restrict sum,
                  const AdagradScalars<acc_type<T>>& s) {
  using A = acc_type<T>;
  for (int64_t i = begin; i < end; ++i) {
    const A param = A(p[i]);
    A grad = s.sign * A(g[i]);
    if constexpr (kDecay) grad = grad + s.weight_decay * param;
    const T sum_new = T(A(sum[i]) + grad * grad);
    sum[i] = sum_new;
    const A std = A(T(cpu::math::sqrt(A(sum_new)))) + s.eps;
    p[i] = T(param + s.neg_clr * (grad / A(T(std))));
  }
}

void adagrad_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const double weight_decay = attrs.get_float("weight_decay");
  const double step = detail::increment_step(in[3]);
  const double clr = attrs.get_float("lr") / (1 + (step - 1) * attrs.get_float("lr_decay"));
  detail::FlatOperands flat;
  dispatch_floating(out[0].dtype(), "adagrad_update", [&]<typename T>() {
    using A = acc_type<T>;
    T* p = flat.written<T>(out[0]);
    const T* g = flat.read<T>(in[1]);
    T* sum = flat.written<T>(in[2]);
    const AdagradScalars<A> s{A(attrs.get_bool("maximize") ? -1.0 : 1.0), A(weight_decay),
                              A(attrs.get_float("eps")), A(-clr)};
    dispatch_bool(weight_decay != 0, [&](auto kDecay) {
      parallel_for(0, out[0].numel(), kGrainSize,
                   [&](int64_t b, int64_t e) { adagrad_loop<T, kDecay()>(b, e, p, g, sum, s); });
    });
  });
  flat.write_back();
}

}  // namespace

MF_REGISTER_KERNEL("sgd_update", DeviceType::CPU, detail::skip_if_found_inf(sgd_kernel));
MF_REGISTER_KERNEL("adam_update", DeviceType::CPU, detail::skip_if_found_inf(adam_kernel<false>));
MF_REGISTER_KERNEL("adamw_update", DeviceType::CPU, detail::skip_if_found_inf(adam_kernel<true>));
MF_REGISTER_KERNEL("rmsprop_update", DeviceType::CPU, detail::skip_if_found_inf(rmsprop_kernel));
MF_REGISTER_KERNEL("adagrad_update", DeviceType::CPU, detail::skip_if_found_inf(adagrad_kernel));

}  // namespace mf::optim
