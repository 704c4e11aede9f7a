// The recurrent layers' per-unit math, written once for the CPU's loops
// (src/backend/cpu/kernels/rnn.cpp) and the device walks (rnn_kernels.h):
// the modes, a sequence's steps, and one hidden unit's forward and backward
// step as MF_HOST_DEVICE functions over a backend's math M (Note [Fused
// recurrent layers] in src/ops/rnn.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshflow/error.h"
#include "meshflow/host_device.h"
#include "meshflow/tensor.h"

namespace mf::rnn_math {

enum class RnnMode { Tanh, Relu, Lstm, Gru };

inline int64_t rnn_gates(RnnMode m) { return m == RnnMode::Lstm ? 4 : m == RnnMode::Gru ? 3 : 1; }
// The per-row values the backward needs besides the outputs.
inline int64_t rnn_workspace_width(RnnMode m, int64_t h) {
  return m == RnnMode::Lstm ? 5 * h : m == RnnMode::Gru ? 4 * h : 0;
}

// The steps of a sequence: row counts and first rows.
struct RnnSteps {
  std::vector<int64_t> sizes, offsets;
  int64_t batch = 0, rows = 0;
  int64_t count() const { return int64_t(sizes.size()); }
};

// The ops' attrs, as every device's kernels read them: the "mode" and the
// steps of an input of these sizes with these "batch_sizes" (empty: a
// (T, B, I) input of T steps of B rows).
inline RnnMode rnn_mode(const std::string& s) {
  if (s == "rnn_tanh") return RnnMode::Tanh;
  if (s == "rnn_relu") return RnnMode::Relu;
  if (s == "lstm") return RnnMode::Lstm;
  if (s == "gru") return RnnMode::Gru;
  MF_CHECK(false, ValueError, "rnn: unknown mode '", s, "' (expected rnn_tanh, rnn_relu, lstm or gru)");
  return RnnMode::Tanh;
}

inline RnnSteps rnn_steps(const Shape& input_sizes, const Shape& batch_sizes) {
  RnnSteps s;
  if (batch_sizes.empty()) {
    s.sizes.assign(size_t(input_sizes[0]), input_sizes[1]);
    s.batch = input_sizes[1];
  } else {
    s.sizes.assign(batch_sizes.begin(), batch_sizes.end());
    s.batch = batch_sizes[0];
  }
  for (int64_t n : s.sizes) s.offsets.push_back(s.rows), s.rows += n;
  return s;
}

// f.template operator()<T>() for float32 or float64; TypeError otherwise.
template <typename F>
void dispatch_rnn_dtype(DType d, F&& f) {
  if (d == DType::Float32) return f.template operator()<float>();
  if (d == DType::Float64) return f.template operator()<double>();
  MF_CHECK(false, TypeError, "rnn: expected float32 or float64 tensors, got ", dtype_name(d));
}

template <typename M, typename T>
MF_FORCE_INLINE MF_HOST_DEVICE T sigmoid(T v) {
  return T(1) / (T(1) + M::exp(-v));
}

// Unit j of one row in a forward step: xg and hg are the row's gate
// pre-activations from the input (with b_ih) and from the state (without
// b_hh, which may be null), h_old the unit's state, c the unit's cell
// (lstm, updated), wr the row's workspace (lstm, gru). Returns the new state.
template <typename M, typename T>
MF_FORCE_INLINE MF_HOST_DEVICE T forward_unit(RnnMode mode, int64_t hidden, int64_t j, const T* xg, const T* hg,
                                              const T* bhh, T h_old, T* c, T* wr) {
  auto pre = [&](int64_t gate) {
    const int64_t q = gate * hidden + j;
    return xg[q] + hg[q] + (bhh ? bhh[q] : T(0));
  };
  if (mode == RnnMode::Tanh) return M::tanh(pre(0));
  if (mode == RnnMode::Relu) {
    const T p = pre(0);
    return p > T(0) ? p : T(0);
  }
  if (mode == RnnMode::Lstm) {
    const T i = sigmoid<M>(pre(0)), f = sigmoid<M>(pre(1)), gg = M::tanh(pre(2)), o = sigmoid<M>(pre(3));
    *c = f * *c + i * gg;
    wr[j] = i, wr[hidden + j] = f, wr[2 * hidden + j] = gg, wr[3 * hidden + j] = o, wr[4 * hidden + j] = *c;
    return o * M::tanh(*c);
  }
  const T rg = sigmoid<M>(pre(0)), z = sigmoid<M>(pre(1));
  const T hnl = hg[2 * hidden + j] + (bhh ? bhh[2 * hidden + j] : T(0));
  const T nn = M::tanh(xg[2 * hidden + j] + rg * hnl);
  wr[j] = rg, wr[hidden + j] = z, wr[2 * hidden + j] = nn, wr[3 * hidden + j] = hnl;
  return (T(1) - z) * nn + z * h_old;
}

// Unit j of one row in a backward step: dht is the state's gradient (the
// carried one plus the output's), y the unit's output, wr the row's
// workspace, hp and cp the previous state and cell. Writes the gates'
// gradients into the row's dx (and, for gru, dh_gates), the carried cell
// gradient *dc (lstm) and, for gru, the direct path's part of *dh.
template <typename M, typename T>
MF_FORCE_INLINE MF_HOST_DEVICE void backward_unit(RnnMode mode, int64_t hidden, int64_t j, T dht, T y, const T* wr,
                                                  T hp, T cp, T* dc, T* dx, T* dh_gates, T* dh) {
  if (mode == RnnMode::Tanh) {
    dx[j] = dht * (T(1) - y * y);
  } else if (mode == RnnMode::Relu) {
    dx[j] = y > T(0) ? dht : T(0);
  } else if (mode == RnnMode::Lstm) {
    const T i = wr[j], f = wr[hidden + j], gg = wr[2 * hidden + j], o = wr[3 * hidden + j];
    const T tc = M::tanh(wr[4 * hidden + j]);
    const T dct = *dc + dht * o * (T(1) - tc * tc);
    dx[j] = dct * gg * i * (T(1) - i);
    dx[hidden + j] = dct * cp * f * (T(1) - f);
    dx[2 * hidden + j] = dct * i * (T(1) - gg * gg);
    dx[3 * hidden + j] = dht * tc * o * (T(1) - o);
    *dc = dct * f;
  } else {
    const T rg = wr[j], z = wr[hidden + j], nn = wr[2 * hidden + j], hnl = wr[3 * hidden + j];
    const T dn = dht * (T(1) - z) * (T(1) - nn * nn);
    const T dr = dn * hnl * rg * (T(1) - rg), dz = dht * (hp - nn) * z * (T(1) - z);
    dx[j] = dh_gates[j] = dr;
    dx[hidden + j] = dh_gates[hidden + j] = dz;
    dx[2 * hidden + j] = dn;
    dh_gates[2 * hidden + j] = dn * rg;
    *dh = dht * z;  // the direct path h_prev -> h; the product adds the gates' part
  }
}

}  // namespace mf::rnn_math
