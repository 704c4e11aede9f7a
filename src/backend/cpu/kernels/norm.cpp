// The CPU kernels of layer_norm and group_norm (Note [Row normalisation] in
// src/ops/norm.cpp): fused forward kernels that also return the per-row
// mean and rstd, and fused backward kernels for input, weight and bias.
// Statistics and gradient sums accumulate in double.
#include <cmath>

#include "backend/common/composed_kernels.h"
#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/vec_math.h"
#include "meshflow/op_def.h"
#include "meshflow/ops/shape.h"
#include "meshflow/parallel.h"

namespace mf::cpu {
namespace {

struct RowLayout {
  int64_t rows = 0, segments = 0, run = 1, groups = 1;
  int64_t row_size() const { return segments * run; }
  int64_t num_weights() const { return groups * segments; }
  int64_t weight_base(int64_t row) const { return (row % groups) * segments; }
};

// Note [Composed device kernels]'s (N, G, S, U) layout as rows.
RowLayout layout_from_attrs(const Tensor& x, const Attrs& attrs) {
  const composed_kernels::NormLayout n = composed_kernels::norm_layout(x, attrs);
  return RowLayout{.rows = n.n * n.groups, .segments = n.segments, .run = n.run, .groups = n.groups};
}

// The affine parameters (contiguous) as acc_type<T> arrays (ones and zeros
// when absent).
template <typename T>
std::pair<std::vector<acc_type<T>>, std::vector<acc_type<T>>> affine_params(const Tensor& weight, const Tensor& bias,
                                                                            int64_t n) {
  using A = acc_type<T>;
  std::vector<A> w(size_t(n), A(1)), b(size_t(n), A(0));
  for (auto [t, dst] : {std::pair{&weight, &w}, std::pair{&bias, &b}}) {
    if (!t->defined()) continue;
    const T* p = static_cast<const T*>(t->data_ptr());
    for (int64_t i = 0; i < n; ++i) (*dst)[size_t(i)] = A(p[i]);
  }
  return {std::move(w), std::move(b)};
}

int64_t row_grain(const RowLayout& l) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(l.row_size(), 1)); }

// --- forward -------------------------------------------------------------------------
// The kernels read their inputs contiguous: a copy of each other one is a
// piece of the scratch, in the order of the inputs.

template <typename T>
void forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const RowLayout& l,
             TensorList& out) {
  using A = acc_type<T>;
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(out[0].data_ptr());
  A* mean_p = static_cast<A*>(out[1].data_ptr());
  A* rstd_p = static_cast<A*>(out[2].data_ptr());
  auto [w, b] = affine_params<T>(weight, bias, l.num_weights());
  const int64_t n = l.row_size();
  parallel_for(0, l.rows, row_grain(l), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xa = xp + r * n;
      T* ya = yp + r * n;
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += double(load_acc(xa, i));
      const double mean = n > 0 ? s / double(n) : 0.0;
      double ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < n; ++i) ss += (double(load_acc(xa, i)) - mean) * (double(load_acc(xa, i)) - mean);
      const double rstd = 1.0 / std::sqrt((n > 0 ? ss / double(n) : 0.0) + eps);
      mean_p[r] = A(mean);
      rstd_p[r] = A(rstd);
      const A m = A(mean), rs = A(rstd);
      const A* wr = w.data() + l.weight_base(r);
      const A* br = b.data() + l.weight_base(r);
      if (l.run == 1) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) store_acc(ya, i, (load_acc(xa, i) - m) * rs * wr[i] + br[i]);
      } else {
        for (int64_t k = 0; k < l.segments; ++k) {
          const A scale = rs * wr[k], shift = br[k] - m * scale;
          const T* xk = xa + k * l.run;
          T* yk = ya + k * l.run;
#pragma omp simd
          for (int64_t i = 0; i < l.run; ++i) store_acc(yk, i, load_acc(xk, i) * scale + shift);
        }
      }
    }
  });
}

// --- backward ------------------------------------------------------------------------
// With xhat = (x - mean) * rstd and gw = g * w (w of the element's segment),
// over the L elements of a row:
//   dx = rstd * (gw - sum(gw) / L - xhat * sum(gw * xhat) / L)
//   dw = sum over rows of g * xhat,  db = sum over rows of g

// Rows are split into a fixed number of chunks (independent of the thread
// count) whose weight-gradient partial sums are added in order, so results
// do not depend on the number of threads.
int64_t chunk_count(const RowLayout& l) {
  return std::max<int64_t>(1, std::min({l.rows * l.row_size() / (4 * kGrainSize), l.rows, int64_t(64)}));
}

// in: the inputs, contiguous.
template <typename T>
void backward(const TensorList& in, TensorList& out, const RowLayout& l, bool need_input, bool need_affine) {
  using A = acc_type<T>;
  const Tensor &g = in[0], &x = in[1], &mean = in[2], &rstd = in[3];
  const T* gp = static_cast<const T*>(g.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  const A* mean_p = static_cast<const A*>(mean.data_ptr());
  const A* rstd_p = static_cast<const A*>(rstd.data_ptr());
  std::vector<A> w = affine_params<T>(in[4], Tensor(), l.num_weights()).first;
  T* dxp = need_input ? static_cast<T*>(out[0].data_ptr()) : nullptr;
  const int64_t n = l.row_size(), nw = l.num_weights(), chunks = chunk_count(l);
  // Partial dw (first nw) and db (next nw) of each chunk.
  std::vector<double> partial(need_affine ? size_t(chunks * 2 * nw) : 0, 0.0);
  parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    std::vector<double> seg_g(size_t(l.segments)), seg_gx(size_t(l.segments));
    for (int64_t chunk = cb; chunk < ce; ++chunk) {
      double* dw = need_affine ? partial.data() + chunk * 2 * nw : nullptr;
      double* db = need_affine ? dw + nw : nullptr;
      for (int64_t r = l.rows * chunk / chunks; r < l.rows * (chunk + 1) / chunks; ++r) {
        const T* ga = gp + r * n;
        const T* xa = xp + r * n;
        const A m = mean_p[r], rs = rstd_p[r];
        const A* wr = w.data() + l.weight_base(r);
        double sum_gw = 0, sum_gwx = 0;
        if (l.run == 1) {
#pragma omp simd reduction(+ : sum_gw, sum_gwx)
          for (int64_t i = 0; i < n; ++i) {
            const double gw = double(load_acc(ga, i)) * double(wr[i]);
            sum_gw += gw;
            sum_gwx += gw * double((load_acc(xa, i) - m) * rs);
          }
          if (need_affine) {
            double* dwr = dw + l.weight_base(r);
            double* dbr = db + l.weight_base(r);
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) {
              dwr[i] += double(load_acc(ga, i)) * double((load_acc(xa, i) - m) * rs);
              dbr[i] += double(load_acc(ga, i));
            }
          }
        } else {
          for (int64_t k = 0; k < l.segments; ++k) {
            const T* gk = ga + k * l.run;
            const T* xk = xa + k * l.run;
            double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
            for (int64_t i = 0; i < l.run; ++i) {
              sg += double(load_acc(gk, i));
              sgx += double(load_acc(gk, i)) * double((load_acc(xk, i) - m) * rs);
            }
            seg_g[size_t(k)] = sg, seg_gx[size_t(k)] = sgx;
            sum_gw += sg * double(wr[k]);
            sum_gwx += sgx * double(wr[k]);
          }
          if (need_affine)
            for (int64_t k = 0; k < l.segments; ++k) {
              dw[l.weight_base(r) + k] += seg_gx[size_t(k)];
              db[l.weight_base(r) + k] += seg_g[size_t(k)];
            }
        }
        if (!need_input) continue;
        const A a = A(sum_gw / double(n)), b = A(sum_gwx / double(n));
        T* da = dxp + r * n;
        if (l.run == 1) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) store_acc(da, i, rs * (load_acc(ga, i) * wr[i] - a - (load_acc(xa, i) - m) * rs * b));
        } else {
          for (int64_t k = 0; k < l.segments; ++k) {
            const T* gk = ga + k * l.run;
            const T* xk = xa + k * l.run;
            T* dk = da + k * l.run;
            const A wk = wr[k];
#pragma omp simd
            for (int64_t i = 0; i < l.run; ++i) store_acc(dk, i, rs * (load_acc(gk, i) * wk - a - (load_acc(xk, i) - m) * rs * b));
          }
        }
      }
    }
  });
  if (!need_affine) return;
  T* dwp = static_cast<T*>(out[1].data_ptr());
  T* dbp = static_cast<T*>(out[2].data_ptr());
  for (int64_t j = 0; j < nw; ++j) {
    double sw = 0, sb = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      sw += partial[size_t(chunk * 2 * nw + j)];
      sb += partial[size_t(chunk * 2 * nw + nw + j)];
    }
    dwp[j] = T(sw), dbp[j] = T(sb);
  }
}

void forward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const RowLayout l = layout_from_attrs(in[0], attrs);
  Scratch taken(out);
  const Tensor x = dense(in[0], taken), weight = dense(in[1], taken), bias = dense(in[2], taken);
  dispatch_floating(in[0].dtype(), "norm", [&]<typename T>() {
    forward<T>(x, weight, bias, attrs.get_float("eps"), l, out);
  });
}

void backward_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  const RowLayout l = layout_from_attrs(in[1], attrs);
  Scratch taken(out);
  TensorList dense_in;
  for (size_t i = 0; i < 5; ++i) dense_in.push_back(dense(in[i], taken));
  dispatch_floating(in[1].dtype(), "norm_backward", [&]<typename T>() {
    backward<T>(dense_in, out, l, attrs.get_bool("need_input"), attrs.get_bool("need_affine"));
  });
}

}  // namespace

MF_REGISTER_KERNEL("layer_norm", DeviceType::CPU, forward_kernel, dense_inputs_scratch("layer_norm", {0, 1, 2}));
MF_REGISTER_KERNEL("group_norm", DeviceType::CPU, forward_kernel, dense_inputs_scratch("group_norm", {0, 1, 2}));
MF_REGISTER_KERNEL("layer_norm_backward", DeviceType::CPU, backward_kernel,
                   dense_inputs_scratch("layer_norm_backward", {0, 1, 2, 3, 4}));
MF_REGISTER_KERNEL("group_norm_backward", DeviceType::CPU, backward_kernel,
                   dense_inputs_scratch("group_norm_backward", {0, 1, 2, 3, 4}));

}  // namespace mf::cpu
