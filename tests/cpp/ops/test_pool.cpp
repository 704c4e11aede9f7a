// Pooling against float64 reference loops written here, one window at a
// time in PyTorch's definitions.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace mf {
namespace {
using testing::expect_close;
using testing::expect_gradcheck;
using testing::expect_values;
using testing::random_tensor;
using testing::values;

Shape both(const Shape& s) { return s.size() == 1 ? Shape{s[0], s[0]} : s; }

int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const double span = double(in + 2 * p - d * (k - 1) - 1) / double(s);
  int64_t out = int64_t(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

struct PoolReference {
  Shape shape;
  std::vector<double> values;
  std::vector<double> indices;  // max only
};

PoolReference reference_pool(const Tensor& x, const Pool2dArgs& args, bool is_max) {
  const Shape k = both(args.kernel_size), s = args.stride.empty() ? k : both(args.stride), p = both(args.padding),
              d = is_max ? both(args.dilation) : Shape{1, 1};
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = pooled(h, k[0], s[0], p[0], d[0], args.ceil_mode), ow = pooled(w, k[1], s[1], p[1], d[1], args.ceil_mode);
  std::vector<double> xv = values(x);
  PoolReference ref{{n, c, oh, ow}, {}, {}};
  for (int64_t plane = 0; plane < n * c; ++plane)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double best = -INFINITY, sum = 0;
        int64_t best_at = -1, count = 0;
        for (int64_t a = 0; a < k[0]; ++a)
          for (int64_t b = 0; b < k[1]; ++b) {
            const int64_t y = i * s[0] - p[0] + a * d[0], z = j * s[1] - p[1] + b * d[1];
            if (y < 0 || y >= h || z < 0 || z >= w) continue;
            const double v = xv[size_t(plane * h * w + y * w + z)];
            if (best_at < 0 || v > best || std::isnan(v)) {
              best = v;
              best_at = y * w + z;
            }
            sum += v;
            ++count;
          }
        if (is_max) {
          ref.values.push_back(best);
          ref.indices.push_back(double(best_at));
          continue;
        }
        // The divisor counts padding but not the part of a ceil_mode window
        // beyond the padded input.
        const int64_t y0 = i * s[0] - p[0], z0 = j * s[1] - p[1];
        const int64_t y1 = std::min(y0 + k[0], h + p[0]), z1 = std::min(z0 + k[1], w + p[1]);
        const int64_t divisor = args.count_include_pad ? (y1 - y0) * (z1 - z0) : count;
        ref.values.push_back(sum / double(divisor));
      }
  return ref;
}

struct PoolCase {
  Shape x;
  Pool2dArgs args;
};

const std::vector<PoolCase> kCases = {
    {{2, 3, 6, 6}, {.kernel_size = {2}}},
    {{1, 2, 7, 9}, {.kernel_size = {3}, .stride = {2}, .padding = {1}}},
    {{2, 2, 8, 7}, {.kernel_size = {3, 2}, .stride = {1, 2}, .padding = {1, 0}, .dilation = {2, 1}}},
    {{1, 3, 6, 6}, {.kernel_size = {3}, .stride = {2}, .ceil_mode = true}},
    {{1, 2, 7, 5}, {.kernel_size = {3}, .stride = {2}, .padding = {1}, .ceil_mode = true, .count_include_pad = false}},
    {{2, 2, 5, 5}, {.kernel_size = {4}, .stride = {3}, .padding = {2}, .ceil_mode = true}},
    {{1, 1, 9, 9}, {.kernel_size = {2}, .stride = {1}}},
    // Many channels: oneDNN's JIT average pooling (Note [oneDNN average pooling]).
    {{2, 32, 9, 8}, {.kernel_size = {3}, .stride = {2}, .padding = {1}}},
    {{1, 64, 8, 8}, {.kernel_size = {2}, .count_include_pad = false}},
    {{1, 16, 7, 7}, {.kernel_size = {3}, .stride = {1}, .padding = {1}, .count_include_pad = false}},
};

bool uses_dilation(const Pool2dArgs& a) {
  for (int64_t d : a.dilation)
    if (d != 1) return true;
  return false;
}

TEST(Pool, HandValues) {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  TensorList m = max_pool2d_with_indices(x, {.kernel_size = {2}});
  expect_values(m[0], {6, 8, 14, 16});
  EXPECT_EQ(m[1].dtype(), kInt64);
  expect_values(m[1], {5, 7, 13, 15});
  expect_values(avg_pool2d(x, {.kernel_size = {2}}), {3.5, 5.5, 11.5, 13.5});
  // Padding 1, 3x3 windows: 4 real values each, divided by 9 or by 4.
  expect_values(avg_pool2d(x, {.kernel_size = {3}, .stride = {3}, .padding = {1}}), {14.0 / 9, 22.0 / 9, 46.0 / 9, 6});
  expect_values(avg_pool2d(x, {.kernel_size = {3}, .stride = {3}, .padding = {1}, .count_include_pad = false}),
                {3.5, 5.5, 11.5, 13.5});
  expect_values(adaptive_avg_pool2d(x, {1}), {8.5});
  expect_values(adaptive_avg_pool2d(x, {2, 1}), {4.5, 12.5});
}

TEST(Pool, AgainstReference) {
  uint32_t seed = 500;
  for (auto dtype : {kFloat64, kFloat32, kBFloat16, kFloat16}) {
    const double tol = dtype == kFloat64 || dtype == kFloat32 ? 1e-6 : 1e-2;
    for (const auto& c : kCases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " input " + shape_str(c.x));
      Tensor x = random_tensor(c.x, seed++, -2, 2, dtype);
      PoolReference mx = reference_pool(x, c.args, true);
      TensorList got = max_pool2d_with_indices(x, c.args);
      ASSERT_EQ(got[0].sizes(), mx.shape);
      EXPECT_EQ(got[0].dtype(), dtype);
      expect_values(got[0], mx.values, 0, 0);  // a max is exact
      expect_values(got[1], mx.indices, 0, 0);
      if (uses_dilation(c.args)) continue;
      PoolReference av = reference_pool(x, c.args, false);
      Tensor a = avg_pool2d(x, c.args);
      ASSERT_EQ(a.sizes(), av.shape);
      expect_values(a, av.values, tol, tol);
    }
  }
}

TEST(Pool, NonContiguousUnbatchedAndNaN) {
  Tensor x = permute(random_tensor({2, 7, 6, 3}, 600), {0, 3, 1, 2});  // channels-last (2, 3, 7, 6)
  Pool2dArgs args{.kernel_size = {3}, .stride = {2}, .padding = {1}};
  expect_values(max_pool2d(x, args), reference_pool(x, args, true).values, 0, 0);
  expect_values(avg_pool2d(x, args), reference_pool(x, args, false).values, 1e-12, 1e-12);
  Tensor x3 = random_tensor({3, 5, 5}, 601);
  Tensor m3 = max_pool2d(x3, args);
  EXPECT_EQ(m3.sizes(), (Shape{3, 3, 3}));
  expect_close(m3, squeeze(max_pool2d(unsqueeze(x3, 0), args), 0), 0, 0);
  EXPECT_EQ(avg_pool2d(x3, args).sizes(), (Shape{3, 3, 3}));
  EXPECT_EQ(adaptive_avg_pool2d(x3, {2}).sizes(), (Shape{3, 2, 2}));
  // NaN wins a max window; -inf windows still point inside themselves.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor special = from_vector({1, nan, 3, 4, -inf, -inf, -inf, -inf}, {1, 2, 2, 2}, {.dtype = kFloat64});
  TensorList m = max_pool2d_with_indices(special, {.kernel_size = {2}});
  EXPECT_TRUE(std::isnan(values(m[0])[0]));
  expect_values(m[1], {1, 0});
  EXPECT_EQ(max_pool2d(zeros({0, 2, 4, 4}), {.kernel_size = {2}}).sizes(), (Shape{0, 2, 2, 2}));
}

TEST(Pool, AdaptiveAgainstReference) {
  for (const auto& [in, out] : std::vector<std::pair<Shape, Shape>>{
           {{2, 3, 5, 7}, {3, 4}}, {{1, 2, 6, 6}, {1, 1}}, {{1, 1, 4, 3}, {8, 5}}, {{2, 1, 9, 4}, {4, 4}}}) {
    for (auto dtype : {kFloat64, kFloat32, kBFloat16}) {
      Tensor x = random_tensor(in, 700, -1, 1, dtype);
      std::vector<double> xv = values(x), expected;
      for (int64_t plane = 0; plane < in[0] * in[1]; ++plane)
        for (int64_t i = 0; i < out[0]; ++i)
          for (int64_t j = 0; j < out[1]; ++j) {
            const int64_t y0 = int64_t(std::floor(double(i * in[2]) / out[0]));
            const int64_t y1 = int64_t(std::ceil(double((i + 1) * in[2]) / out[0]));
            const int64_t z0 = int64_t(std::floor(double(j * in[3]) / out[1]));
            const int64_t z1 = int64_t(std::ceil(double((j + 1) * in[3]) / out[1]));
            double sum = 0;
            for (int64_t y = y0; y < y1; ++y)
              for (int64_t z = z0; z < z1; ++z) sum += xv[size_t(plane * in[2] * in[3] + y * in[3] + z)];
            expected.push_back(sum / double((y1 - y0) * (z1 - z0)));
          }
      Tensor got = adaptive_avg_pool2d(x, out);
      EXPECT_EQ(got.sizes(), (Shape{in[0], in[1], out[0], out[1]}));
      const double tol = dtype == kBFloat16 ? 1e-2 : 1e-6;
      expect_values(got, expected, tol, tol);
    }
  }
}

TEST(Pool, Gradients) {
  uint32_t seed = 800;
  for (const auto& c : kCases) {
    if (shape_numel(c.x) > 512) continue;  // finite differences per element: keep it small
    SCOPED_TRACE("input " + shape_str(c.x));
    Tensor x = random_tensor(c.x, seed++).requires_grad_();
    const Pool2dArgs args = c.args;
    expect_gradcheck([args](const TensorList& v) { return max_pool2d(v[0], args); }, {x});
    if (!uses_dilation(args)) expect_gradcheck([args](const TensorList& v) { return avg_pool2d(v[0], args); }, {x});
  }
  Tensor x = random_tensor({2, 2, 5, 7}, 900).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return adaptive_avg_pool2d(v[0], {3, 4}); }, {x});
  expect_gradcheck([](const TensorList& v) { return adaptive_avg_pool2d(v[0], {7, 9}); }, {x});
}

TEST(Pool, ReducedPrecisionGradientsMatchFloat64) {
  // float32/bfloat16 average pooling runs on oneDNN where it agrees with
  // PyTorch, max pooling everywhere on the loops; compare with float64,
  // whose gradients the gradchecks above verify.
  uint32_t seed = 950;
  for (const auto& c : kCases) {
    SCOPED_TRACE("input " + shape_str(c.x));
    Tensor x64 = random_tensor(c.x, seed++);
    for (auto dtype : {kFloat32, kBFloat16}) {
      const double tol = dtype == kFloat32 ? 1e-6 : 2e-2;
      // The reference sees the same rounded values (and so the same ties).
      Tensor x = to(x64, dtype).requires_grad_(), xr = to(to(x64, dtype), kFloat64).requires_grad_();
      std::vector<std::function<Tensor(const Tensor&)>> pools{
          [&](const Tensor& t) { return max_pool2d(t, c.args); },
          [&](const Tensor& t) { return adaptive_avg_pool2d(t, {3, 2}); }};
      if (!uses_dilation(c.args)) pools.push_back([&](const Tensor& t) { return avg_pool2d(t, c.args); });
      for (const auto& pool : pools) {
        Tensor y = pool(x), yr = pool(xr);
        Tensor gr = random_tensor(yr.sizes(), seed++);
        Tensor g = autograd::grad({y}, {x}, {to(gr, dtype)})[0];
        expect_close(g, autograd::grad({yr}, {xr}, {gr})[0], tol, tol);
      }
    }
  }
}

TEST(Pool, DoubleBackward) {
  // The gradient of each pool depends on x only through max positions (max)
  // or not at all (averages): differentiate sum(pool(x)^2)'s gradient.
  Tensor x = random_tensor({1, 2, 6, 5}, 1000).requires_grad_();
  auto second = [](std::function<Tensor(const Tensor&)> pool) {
    return [pool](const TensorList& v) {
      EnableGradGuard grad_mode;  // the numeric pass runs under no_grad
      Tensor y = pool(v[0]);
      return autograd::grad({sum(mul(y, y))}, {v[0]}, {}, {}, /*create_graph=*/true)[0];
    };
  };
  const Pool2dArgs args{.kernel_size = {3}, .stride = {2}, .padding = {1}};
  expect_gradcheck(second([args](const Tensor& t) { return max_pool2d(t, args); }), {x});
  expect_gradcheck(second([args](const Tensor& t) { return avg_pool2d(t, args); }), {x});
  expect_gradcheck(second([](const Tensor& t) { return adaptive_avg_pool2d(t, {4, 3}); }), {x});
}

TEST(Pool, Errors) {
  Tensor x = zeros({1, 2, 5, 5});
  EXPECT_THROW(max_pool2d(zeros({5, 5}), {.kernel_size = {2}}), ShapeError);
  EXPECT_THROW(max_pool2d(zeros({1, 2, 0, 5}), {.kernel_size = {2}}), ShapeError);
  EXPECT_THROW(max_pool2d(x, {.kernel_size = {0}}), ValueError);
  EXPECT_THROW(max_pool2d(x, {.kernel_size = {2}, .stride = {0}}), ValueError);
  EXPECT_THROW(max_pool2d(x, {.kernel_size = {2}, .padding = {2}}), ValueError);  // more than half the kernel
  EXPECT_THROW(max_pool2d(x, {.kernel_size = {2}, .dilation = {0}}), ValueError);
  EXPECT_THROW(max_pool2d(x, {.kernel_size = {6}}), ShapeError);  // output too small
  EXPECT_THROW(max_pool2d(x, {.kernel_size = {3}, .dilation = {3}}), ShapeError);
  EXPECT_THROW(max_pool2d(x, {.kernel_size = {1, 2, 3}}), ValueError);
  EXPECT_THROW(max_pool2d(zeros({1, 2, 5, 5}, {.dtype = kInt64}), {.kernel_size = {2}}), TypeError);
  EXPECT_THROW(avg_pool2d(zeros({1, 2, 5, 5}, {.dtype = kInt32}), {.kernel_size = {2}}), TypeError);
  EXPECT_THROW(avg_pool2d(x, {.kernel_size = {2}, .dilation = {2}}), ValueError);
  EXPECT_THROW(avg_pool2d(x, {.kernel_size = {7}}), ShapeError);
  EXPECT_THROW(adaptive_avg_pool2d(x, {-1, 2}), ValueError);
  EXPECT_THROW(adaptive_avg_pool2d(x, {1, 2, 3}), ValueError);
  EXPECT_THROW(adaptive_avg_pool2d(zeros({2, 5}), {1}), ShapeError);
}

}  // namespace
}  // namespace mf
