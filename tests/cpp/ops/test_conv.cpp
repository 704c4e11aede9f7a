// conv2d against float64 reference loops written here (forward and both
// gradients), on the oneDNN path (float32, bfloat16) and im2col (float64).
#include "test_util.h"

namespace mf {
namespace {
using testing::expect_gradcheck;
using testing::expect_values;
using testing::random_tensor;
using testing::values;

struct ConvCase {
  Shape x, w;
  Conv2dArgs args;
  bool bias;
};

// Output size along one dim.
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

// args with every 1-element field repeated for both dims.
Conv2dArgs both_dims(Conv2dArgs a) {
  for (Shape* s : {&a.stride, &a.padding, &a.dilation})
    if (s->size() == 1) s->push_back(s->front());
  return a;
}

// Calls fn(y_index, x_index, w_index) for every term of the convolution
// sum that hits the input (padding contributes nothing).
template <typename F>
void for_each_term(const Shape& xs, const Shape& ws, const Conv2dArgs& args, const F& fn) {
  const Conv2dArgs a = both_dims(args);
  const int64_t n_ = xs[0], c_ = xs[1], h = xs[2], w = xs[3], o_ = ws[0], cg = ws[1], kh = ws[2], kw = ws[3];
  const int64_t og = o_ / a.groups;
  const int64_t oh = out_size(h, kh, a.stride[0], a.padding[0], a.dilation[0]);
  const int64_t ow = out_size(w, kw, a.stride[1], a.padding[1], a.dilation[1]);
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t o = 0; o < o_; ++o)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy = oy * a.stride[0] - a.padding[0] + ky * a.dilation[0];
                const int64_t ix = ox * a.stride[1] - a.padding[1] + kx * a.dilation[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                const int64_t ci = (o / og) * cg + c;
                const int64_t xi = ((n * c_ + ci) * h + iy) * w + ix;
                const int64_t wi = ((o * cg + c) * kh + ky) * kw + kx;
                const int64_t yi = ((n * o_ + o) * oh + oy) * ow + ox;
                fn(yi, xi, wi);
              }
}

Shape conv_shape(const Shape& xs, const Shape& ws, const Conv2dArgs& args) {
  const Conv2dArgs a = both_dims(args);
  return {xs[0], ws[0], out_size(xs[2], ws[2], a.stride[0], a.padding[0], a.dilation[0]),
          out_size(xs[3], ws[3], a.stride[1], a.padding[1], a.dilation[1])};
}

std::vector<double> reference_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dArgs& a) {
  Shape ys = conv_shape(x.sizes(), w.sizes(), a);
  std::vector<double> xv = values(x), wv = values(w), y(size_t(shape_numel(ys)), 0.0);
  for_each_term(x.sizes(), w.sizes(), a, [&](int64_t yi, int64_t xi, int64_t wi) { y[size_t(yi)] += xv[size_t(xi)] * wv[size_t(wi)]; });
  if (b.defined()) {
    std::vector<double> bv = values(b);
    const int64_t pixels = ys[2] * ys[3];
    for (size_t i = 0; i < y.size(); ++i) y[i] += bv[size_t((int64_t(i) / pixels) % ys[1])];
  }
  return y;
}

const std::vector<ConvCase> kCases = {
    {{2, 3, 7, 6}, {4, 3, 3, 3}, {}, true},
    {{2, 4, 8, 9}, {6, 2, 3, 2}, {.stride = {2}, .padding = {1}, .groups = 2}, true},
    {{1, 4, 9, 9}, {4, 1, 3, 3}, {.padding = {2}, .dilation = {2}, .groups = 4}, false},
    {{3, 2, 5, 5}, {3, 2, 1, 1}, {.stride = {2, 1}}, true},
    {{2, 6, 10, 7}, {4, 3, 5, 3}, {.stride = {1, 2}, .padding = {2, 1}, .dilation = {1, 2}, .groups = 2}, true},
    {{4, 16, 12, 12}, {32, 16, 3, 3}, {.padding = {1}}, true},
};

TEST(Conv2d, HandValues) {
  // A 3x3 input, a 2x2 kernel of ones: sums of 2x2 blocks, plus bias.
  Tensor x = from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Tensor w = ones({1, 1, 2, 2});
  expect_values(conv2d(x, w, from_vector({0.5}, {1})), {12.5, 16.5, 24.5, 28.5});
  expect_values(conv2d(x, w, Tensor(), {.padding = {1}, .dilation = {1}}),
                {1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9});
  expect_values(conv2d(x, w, Tensor(), {.stride = {2}, .padding = {1}}), {1, 5, 11, 28});
}

TEST(Conv2d, ForwardAgainstReference) {
  uint32_t seed = 100;
  for (auto dtype : {kFloat64, kFloat32, kBFloat16, kFloat16}) {
    const double tol = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-4 : 3e-2;
    for (const auto& c : kCases) {
      Tensor x = random_tensor(c.x, seed++, -1, 1, dtype), w = random_tensor(c.w, seed++, -1, 1, dtype);
      Tensor b = c.bias ? random_tensor({c.w[0]}, seed++, -1, 1, dtype) : Tensor();
      Tensor y = conv2d(x, w, b, c.args);
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " x " + shape_str(c.x) + " w " + shape_str(c.w));
      EXPECT_EQ(y.dtype(), dtype);
      ASSERT_EQ(y.sizes(), conv_shape(c.x, c.w, c.args));
      // 16-bit outputs are rounded once: relative to the sum of |terms| ~ sqrt(K).
      expect_values(y, reference_conv(x, w, b, c.args), tol * (dtype == kFloat64 ? 1 : 4), tol);
    }
  }
}

TEST(Conv2d, BackwardAgainstReference) {
  uint32_t seed = 200;
  for (auto dtype : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    const double tol = dtype == kFloat64 ? 1e-10 : dtype == kFloat32 ? 1e-4 : dtype == kFloat16 ? 2e-2 : 1e-1;
    for (const auto& c : kCases) {
      Tensor x = random_tensor(c.x, seed++, -1, 1, dtype).requires_grad_();
      Tensor w = random_tensor(c.w, seed++, -1, 1, dtype).requires_grad_();
      Tensor b = random_tensor({c.w[0]}, seed++, -1, 1, dtype).requires_grad_();
      Tensor y = conv2d(x, w, b, c.args);
      Tensor gy = random_tensor(y.sizes(), seed++, -1, 1, dtype);
      TensorList g = autograd::grad({y}, {x, w, b}, {gy});
      std::vector<double> xv = values(x), wv = values(w), gyv = values(gy);
      std::vector<double> gx(xv.size(), 0.0), gw(wv.size(), 0.0), gb(size_t(c.w[0]), 0.0);
      for_each_term(c.x, c.w, c.args, [&](int64_t yi, int64_t xi, int64_t wi) {
        gx[size_t(xi)] += gyv[size_t(yi)] * wv[size_t(wi)];
        gw[size_t(wi)] += gyv[size_t(yi)] * xv[size_t(xi)];
      });
      const int64_t pixels = y.size(2) * y.size(3);
      for (size_t i = 0; i < gyv.size(); ++i) gb[size_t((int64_t(i) / pixels) % c.w[0])] += gyv[i];
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " x " + shape_str(c.x) + " w " + shape_str(c.w));
      expect_values(g[0], gx, tol * 4, tol);
      expect_values(g[1], gw, tol * 10, tol);
      expect_values(g[2], gb, tol * 10, tol);
    }
  }
}

TEST(Conv2d, NonContiguousAndUnbatched) {
  for (auto dtype : {kFloat32, kFloat64}) {
    const double tol = dtype == kFloat64 ? 1e-12 : 1e-4;
    // Channels-last storage viewed as NCHW; a weight stored (O, KH, KW, C).
    Tensor x = permute(random_tensor({2, 8, 7, 5}, 1, -1, 1, dtype), {0, 3, 1, 2});  // (2, 5, 8, 7)
    Tensor w = permute(random_tensor({4, 3, 3, 5}, 2, -1, 1, dtype), {0, 3, 1, 2});  // (4, 5, 3, 3)
    Tensor b = slice(random_tensor({8}, 3, -1, 1, dtype), 0, 0, 8, 2);
    Conv2dArgs args{.padding = {1}};
    expect_values(conv2d(x, w, b, args), reference_conv(x, w, b, args), tol, tol);
    // A sliced batch and an expanded (stride-0) input.
    Tensor xs = slice(random_tensor({4, 5, 6, 6}, 4, -1, 1, dtype), 0, 0, 4, 2);
    expect_values(conv2d(xs, w, b, args), reference_conv(xs, w, b, args), tol, tol);
    Tensor xe = expand(random_tensor({1, 5, 6, 6}, 5, -1, 1, dtype), {3, 5, 6, 6});
    expect_values(conv2d(xe, w, b, args), reference_conv(xe, w, b, args), tol, tol);
    // (C, H, W) input.
    Tensor x3 = random_tensor({5, 6, 4}, 6, -1, 1, dtype);
    Tensor y3 = conv2d(x3, w, b, args);
    EXPECT_EQ(y3.sizes(), (Shape{4, 6, 4}));
    expect_values(y3, reference_conv(unsqueeze(x3, 0), w, b, args), tol, tol);
  }
}

TEST(Conv2d, ZeroSize) {
  Tensor w = ones({4, 3, 3, 3});
  Tensor y = conv2d(zeros({0, 3, 5, 5}), w, ones({4}));
  EXPECT_EQ(y.sizes(), (Shape{0, 4, 3, 3}));
  EXPECT_EQ(conv2d(ones({2, 3, 5, 5}), ones({0, 3, 3, 3})).sizes(), (Shape{2, 0, 3, 3}));
  // No input channels: the output is the bias.
  Tensor yb = conv2d(ones({1, 0, 4, 4}), ones({2, 0, 3, 3}), from_vector({1.5, -2}, {2}));
  expect_values(yb, {1.5, 1.5, 1.5, 1.5, -2, -2, -2, -2});
  Tensor x = zeros({0, 3, 5, 5}, {.dtype = kFloat64}).requires_grad_();
  Tensor wg = ones({4, 3, 3, 3}, {.dtype = kFloat64}).requires_grad_();
  TensorList g = autograd::grad({sum(conv2d(x, wg))}, {x, wg});
  EXPECT_EQ(g[0].sizes(), x.sizes());
  expect_values(g[1], std::vector<double>(108, 0.0));
}

TEST(Conv2d, Gradients) {
  const std::vector<ConvCase> cases = {
      {{2, 2, 5, 4}, {3, 2, 3, 2}, {.padding = {1}}, true},
      {{1, 4, 6, 6}, {4, 2, 2, 3}, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {2, 1}, .groups = 2}, true},
      {{2, 3, 5, 5}, {3, 1, 3, 3}, {.stride = {2}, .groups = 3}, false},
  };
  uint32_t seed = 300;
  for (const auto& c : cases) {
    Tensor x = random_tensor(c.x, seed++).requires_grad_(), w = random_tensor(c.w, seed++).requires_grad_();
    Tensor b = c.bias ? random_tensor({c.w[0]}, seed++).requires_grad_() : Tensor();
    const Conv2dArgs args = c.args;
    expect_gradcheck([args](const TensorList& v) { return conv2d(v[0], v[1], v[2], args); }, {x, w, b});
  }
}

TEST(Conv2d, DoubleBackward) {
  const Conv2dArgs args{.stride = {2, 1}, .padding = {1}, .groups = 2};
  Tensor x = random_tensor({2, 4, 5, 4}, 400).requires_grad_(), w = random_tensor({2, 2, 3, 3}, 401).requires_grad_();
  Tensor b = random_tensor({2}, 402).requires_grad_();
  for (size_t wrt = 0; wrt < 3; ++wrt) {
    SCOPED_TRACE("second derivative through the gradient of input " + std::to_string(wrt));
    expect_gradcheck(
        [args, wrt](const TensorList& v) {
          EnableGradGuard grad_mode;  // the numeric pass runs under no_grad
          Tensor y = conv2d(v[0], v[1], v[2], args);
          Tensor loss = sum(mul(y, y));
          return autograd::grad({loss}, {v[0], v[1], v[2]}, {}, {}, /*create_graph=*/true)[wrt];
        },
        {x, w, b});
  }
}

TEST(Conv2d, Errors) {
  Tensor x = zeros({2, 4, 8, 8}), w = zeros({6, 4, 3, 3});
  EXPECT_THROW(conv2d(zeros({4, 8}), w), ShapeError);
  EXPECT_THROW(conv2d(zeros({1, 2, 4, 8, 8}), w), ShapeError);
  EXPECT_THROW(conv2d(x, zeros({6, 4, 3})), ShapeError);
  EXPECT_THROW(conv2d(x, zeros({6, 3, 3, 3})), ShapeError);                        // channels
  EXPECT_THROW(conv2d(x, zeros({6, 2, 3, 3}), Tensor(), {.groups = 4}), ShapeError);  // 4 != 2 * 4
  EXPECT_THROW(conv2d(x, zeros({6, 1, 3, 3}), Tensor(), {.groups = 4}), ShapeError);  // 6 % 4
  EXPECT_THROW(conv2d(x, w, Tensor(), {.groups = 0}), ValueError);
  EXPECT_THROW(conv2d(x, w, zeros({5})), ShapeError);
  EXPECT_THROW(conv2d(x, w, zeros({6}, {.dtype = kFloat64})), TypeError);
  EXPECT_THROW(conv2d(x, zeros({6, 4, 3, 3}, {.dtype = kFloat64})), TypeError);
  EXPECT_THROW(conv2d(zeros({2, 4, 8, 8}, {.dtype = kInt32}), zeros({6, 4, 3, 3}, {.dtype = kInt32})), TypeError);
  EXPECT_THROW(conv2d(x, zeros({6, 4, 9, 3})), ShapeError);  // kernel larger than the input
  EXPECT_THROW(conv2d(x, w, Tensor(), {.dilation = {4}}), ShapeError);
  EXPECT_NO_THROW(conv2d(x, zeros({6, 4, 9, 3}), Tensor(), {.padding = {1}}));
  EXPECT_THROW(conv2d(x, w, Tensor(), {.stride = {0}}), ValueError);
  EXPECT_THROW(conv2d(x, w, Tensor(), {.padding = {-1}}), ValueError);
  EXPECT_THROW(conv2d(x, w, Tensor(), {.dilation = {1, 0}}), ValueError);
  EXPECT_THROW(conv2d(x, w, Tensor(), {.stride = {1, 1, 1}}), ValueError);
  EXPECT_THROW(conv2d(x, zeros({6, 4, 0, 3})), ShapeError);
  try {
    conv2d(x, zeros({6, 3, 3, 3}));
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("the input has 4 channels"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mf
