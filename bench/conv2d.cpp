// conv2d forward and backward (input + weight gradients): mf::conv2d and
// autograd against the same oneDNN primitives called directly, measured
// alternately in one run; and mf::conv_transpose2d, which is the
// backward-data primitive (the input gradient of the same convolution). Both sides take NCHW tensors in and give NCHW
// tensors out: oneDNN picks its layouts (format `any`) and reorders convert
// (the direct side's primitives, reorders, buffers and scratchpads are
// prebuilt, so it measures pure oneDNN work). N=32, C=64, 32x32, K=64, 3x3,
// pad 1, no bias, float32; 2 threads. Prints median times and the median of
// per-pair ratios (back-to-back calls, order alternating, so drifting
// machine load cancels) over 15 pairs after a warm-up.
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "meshflow/meshflow.h"

namespace {

using dnnl::memory;
using tag = memory::format_tag;

double ms_per_call(const std::function<void()>& fn, int iters) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count() / iters;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

mf::Tensor random_tensor(const mf::Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(size_t(mf::shape_numel(shape)));
  for (auto& x : v) x = dist(gen);
  return mf::from_vector(v, shape);
}

// A reorder between two layouts, built once; a no-op when they agree.
struct Conversion {
  memory from, to;
  dnnl::reorder primitive;
  bool needed = false;
  Conversion() = default;
  Conversion(const memory& src, const memory& dst) : from(src), to(dst), needed(src.get_desc() != dst.get_desc()) {
    if (needed) primitive = dnnl::reorder(from, to);
  }
  void run(dnnl::stream& s) {
    if (needed) primitive.execute(s, from, to);
  }
};

// Direct oneDNN: primitives, reorders, buffers and scratchpads built once;
// every call reorders between NCHW and oneDNN's chosen layouts (as the
// framework must do).
struct DirectConv {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  memory fwd_x, fwd_w, fwd_y, bd_gy, bd_w, bd_gx, bw_x, bw_gy, bw_gw;  // oneDNN layouts
  memory fwd_scratch, bd_scratch, bw_scratch;
  Conversion x_in, w_in, y_out, gy_in, w_in_bd, gx_out, x_in_bw, gy_in_bw, gw_out;

  DirectConv(const mf::Tensor& xt, const mf::Tensor& wt, const mf::Tensor& yt, const mf::Tensor& gyt,
             const mf::Tensor& gxt, const mf::Tensor& gwt) {
    const memory::dims xd{32, 64, 32, 32}, wd{64, 64, 3, 3}, yd{32, 64, 32, 32};
    const memory::dims strides{1, 1}, dilates{0, 0}, padding{1, 1};
    const auto f32 = memory::data_type::f32;
    memory::desc xa(xd, f32, tag::any), wa(wd, f32, tag::any), ya(yd, f32, tag::any);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto algo = dnnl::algorithm::convolution_direct;
    dnnl::convolution_forward::primitive_desc fwd_pd(
        {dnnl::prop_kind::forward_training, algo, xa, wa, ya, strides, dilates, padding, padding}, attr, engine);
    dnnl::convolution_backward_data::primitive_desc bwd_data_pd({algo, xa, wa, ya, strides, dilates, padding, padding},
                                                                attr, engine, fwd_pd);
    dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd(
        {algo, xa, wa, ya, strides, dilates, padding, padding}, attr, engine, fwd_pd);
    fwd = dnnl::convolution_forward(fwd_pd);
    bwd_data = dnnl::convolution_backward_data(bwd_data_pd);
    bwd_weights = dnnl::convolution_backward_weights(bwd_weights_pd);
    auto user = [&](const memory::dims& d, tag t, const mf::Tensor& data) {
      return memory({d, f32, t}, engine, data.data_ptr());
    };
    const memory x = user(xd, tag::nchw, xt), w = user(wd, tag::oihw, wt), y = user(yd, tag::nchw, yt);
    const memory gy = user(yd, tag::nchw, gyt), gx = user(xd, tag::nchw, gxt), gw = user(wd, tag::oihw, gwt);
    fwd_x = memory(fwd_pd.src_desc(), engine);
    fwd_w = memory(fwd_pd.weights_desc(), engine);
    fwd_y = memory(fwd_pd.dst_desc(), engine);
    bd_gy = memory(bwd_data_pd.diff_dst_desc(), engine);
    bd_w = memory(bwd_data_pd.weights_desc(), engine);
    bd_gx = memory(bwd_data_pd.diff_src_desc(), engine);
    bw_x = memory(bwd_weights_pd.src_desc(), engine);
    // Both backward directions share one reordered grad_y when they can.
    const bool shared_gy = bwd_weights_pd.diff_dst_desc() == bd_gy.get_desc();
    bw_gy = shared_gy ? bd_gy : memory(bwd_weights_pd.diff_dst_desc(), engine);
    bw_gw = memory(bwd_weights_pd.diff_weights_desc(), engine);
    fwd_scratch = memory(fwd_pd.scratchpad_desc(), engine);
    bd_scratch = memory(bwd_data_pd.scratchpad_desc(), engine);
    bw_scratch = memory(bwd_weights_pd.scratchpad_desc(), engine);
    x_in = Conversion(x, fwd_x);
    w_in = Conversion(w, fwd_w);
    y_out = Conversion(fwd_y, y);
    gy_in = Conversion(gy, bd_gy);
    w_in_bd = Conversion(w, bd_w);
    gx_out = Conversion(bd_gx, gx);
    x_in_bw = Conversion(x, bw_x);
    gy_in_bw = shared_gy ? Conversion() : Conversion(gy, bw_gy);
    gw_out = Conversion(bw_gw, gw);
  }

  void forward() {
    x_in.run(stream);
    w_in.run(stream);
    fwd.execute(stream, {{DNNL_ARG_SRC, fwd_x}, {DNNL_ARG_WEIGHTS, fwd_w}, {DNNL_ARG_DST, fwd_y},
                         {DNNL_ARG_SCRATCHPAD, fwd_scratch}});
    y_out.run(stream);
    stream.wait();
  }

  void backward_data() {
    gy_in.run(stream);
    w_in_bd.run(stream);
    bwd_data.execute(stream, {{DNNL_ARG_DIFF_DST, bd_gy}, {DNNL_ARG_WEIGHTS, bd_w}, {DNNL_ARG_DIFF_SRC, bd_gx},
                              {DNNL_ARG_SCRATCHPAD, bd_scratch}});
    gx_out.run(stream);
    stream.wait();
  }

  void backward() {
    backward_data();
    x_in_bw.run(stream);
    gy_in_bw.run(stream);
    bwd_weights.execute(stream, {{DNNL_ARG_SRC, bw_x}, {DNNL_ARG_DIFF_DST, bw_gy}, {DNNL_ARG_DIFF_WEIGHTS, bw_gw},
                                 {DNNL_ARG_SCRATCHPAD, bw_scratch}});
    gw_out.run(stream);
    stream.wait();
  }
};

}  // namespace

int main() {
  mf::set_num_threads(2);
  mf::Tensor x = random_tensor({32, 64, 32, 32}, 1).requires_grad_();
  mf::Tensor w = random_tensor({64, 64, 3, 3}, 2).requires_grad_();
  mf::Tensor gy = random_tensor({32, 64, 32, 32}, 3);
  mf::Tensor y_direct = mf::empty({32, 64, 32, 32}), gx_direct = mf::empty({32, 64, 32, 32});
  mf::Tensor gw_direct = mf::empty({64, 64, 3, 3});
  DirectConv direct(x, w, y_direct, gy, gx_direct, gw_direct);

  mf::Tensor y;
  mf::Tensor y_graph = mf::conv2d(x, w, mf::Tensor(), {.padding = {1}});
  mf::TensorList grads;
  auto mf_forward = [&] {
    mf::NoGradGuard no_grad;
    y = mf::conv2d(x, w, mf::Tensor(), {.padding = {1}});
  };
  auto mf_backward = [&] { grads = mf::autograd::grad({y_graph}, {x, w}, {gy}, /*retain_graph=*/true); };
  mf::Tensor y_transposed;
  auto mf_transposed = [&] {
    mf::NoGradGuard no_grad;
    y_transposed = mf::conv_transpose2d(gy, w, mf::Tensor(), {.padding = {1}});
  };

  constexpr int kSamples = 15;
  mf_forward();
  mf_backward();
  mf_transposed();
  direct.forward();
  direct.backward();
  std::vector<double> mf_fwd, mf_bwd, dn_fwd, dn_bwd, fwd_ratio, bwd_ratio, mf_tr, dn_tr, tr_ratio;
  auto pair = [](int s, const std::function<void()>& a, const std::function<void()>& b, std::vector<double>& ta,
                 std::vector<double>& tb, std::vector<double>& ratio) {
    double x, y;
    if (s % 2 == 0) {
      x = ms_per_call(a, 1);
      y = ms_per_call(b, 1);
    } else {
      y = ms_per_call(b, 1);
      x = ms_per_call(a, 1);
    }
    ta.push_back(x);
    tb.push_back(y);
    ratio.push_back(y / x);
  };
  for (int s = 0; s < kSamples; ++s) {
    pair(s, mf_forward, [&] { direct.forward(); }, mf_fwd, dn_fwd, fwd_ratio);
    pair(s, mf_backward, [&] { direct.backward(); }, mf_bwd, dn_bwd, bwd_ratio);
    pair(s, mf_transposed, [&] { direct.backward_data(); }, mf_tr, dn_tr, tr_ratio);
  }
  std::printf("conv2d float32 N=32 C=64 32x32 K=64 3x3 pad 1 (no bias), %d threads, medians of %d sample pairs\n",
              mf::get_num_threads(), kSamples);
  std::printf("%-30s %10s %12s %8s\n", "", "mf ms", "oneDNN ms", "ratio");
  std::printf("%-30s %10.2f %12.2f %8.3f\n", "forward", median(mf_fwd), median(dn_fwd), median(fwd_ratio));
  std::printf("%-30s %10.2f %12.2f %8.3f\n", "backward (input + weight)", median(mf_bwd), median(dn_bwd),
              median(bwd_ratio));
  std::printf("%-30s %10.2f %12.2f %8.3f\n", "conv_transpose2d (bwd data)", median(mf_tr), median(dn_tr),
              median(tr_ratio));
  std::printf("(ratio = oneDNN time / mf time; >= 0.95 is the aim)\n");
  // The two sides computed the same thing.
  auto max_diff = [](const mf::Tensor& p, const mf::Tensor& q) {
    double out = 0;
    const float *a = p.data<float>(), *b = q.data<float>();
    for (int64_t i = 0; i < p.numel(); ++i) out = std::max(out, double(std::abs(a[i] - b[i])));
    return out;
  };
  const double y_diff = max_diff(y, y_direct), transposed_diff = max_diff(y_transposed, gx_direct);
  std::printf("max |y_mf - y_direct| = %.3g, max |conv_transpose2d - backward data| = %.3g\n", y_diff,
              transposed_diff);
  return y_diff < 1e-3 && transposed_diff < 1e-3 ? 0 : 1;
}
