// layer_norm, group_norm and batch_norm against float64 reference loops,
// with gradchecks for every affine combination and mode.
#include <cmath>

#include "test_util.h"

namespace mf {
namespace {
using testing::expect_close;
using testing::expect_gradcheck;
using testing::expect_values;
using testing::random_tensor;
using testing::values;

// Normalises `rows` contiguous rows of `len` values; element j of row r
// uses weight/bias index weight_of(r, j) (empty vectors: no affine).
template <typename WeightOf>
std::vector<double> reference_rows(const std::vector<double>& x, int64_t rows, int64_t len, const std::vector<double>& w,
                                   const std::vector<double>& b, double eps, WeightOf weight_of) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < len; ++j) mean += x[size_t(r * len + j)];
    mean /= double(len);
    for (int64_t j = 0; j < len; ++j) var += std::pow(x[size_t(r * len + j)] - mean, 2);
    var /= double(len);
    for (int64_t j = 0; j < len; ++j) {
      size_t i = size_t(r * len + j), k = size_t(weight_of(r, j));
      y[i] = (x[i] - mean) / std::sqrt(var + eps) * (w.empty() ? 1.0 : w[k]) + (b.empty() ? 0.0 : b[k]);
    }
  }
  return y;
}

std::vector<double> maybe_values(const Tensor& t) { return t.defined() ? values(t) : std::vector<double>{}; }

TEST(LayerNorm, HandValues) {
  Tensor x = from_vector({1, 2, 3, 2, 2, 2}, {2, 3});
  const double s = 1 / std::sqrt(2.0 / 3 + 1e-5);
  expect_values(layer_norm(x, {3}), {-s, 0, s, 0, 0, 0}, 1e-6);
  Tensor w = from_vector({1, 2, 3}, {3}), b = from_vector({0.5, 0, -1}, {3});
  expect_values(layer_norm(x, {3}, w, b), {0.5 - s, 0, 3 * s - 1, 0.5, 0, -1}, 1e-6);
}

TEST(LayerNorm, Reference) {
  const Shape shape{3, 4, 5, 6};
  Tensor x = random_tensor(shape, 21, -3, 3);
  for (int64_t k : {1, 2, 3}) {
    Shape ns(shape.end() - k, shape.end());
    const int64_t len = shape_numel(ns), rows = shape_numel(shape) / len;
    Tensor w = random_tensor(ns, 22), b = random_tensor(ns, 23);
    for (DType dt : {kFloat32, kFloat64}) {
      SCOPED_TRACE("k " + std::to_string(k) + " " + dtype_name(dt));
      auto same = [](int64_t, int64_t j) { return j; };
      expect_values(layer_norm(to(x, dt), ns, to(w, dt), to(b, dt), 1e-5),
                    reference_rows(values(x), rows, len, values(w), values(b), 1e-5, same), 1e-5, 1e-5);
      expect_values(layer_norm(to(x, dt), ns, Tensor(), Tensor(), 0.1),
                    reference_rows(values(x), rows, len, {}, {}, 0.1, same), 1e-5, 1e-5);
    }
  }
}

TEST(LayerNorm, NonContiguousAndHalf) {
  Tensor base = random_tensor({8, 6}, 24);
  Tensor xt = transpose(base, 0, 1);  // (6, 8)
  Tensor w = random_tensor({8}, 25);
  expect_close(layer_norm(xt, {8}, w), layer_norm(contiguous(xt), {8}, w), 1e-12);
  Tensor ws = slice(random_tensor({16}, 26), 0, 0, 16, 2);  // strided weight
  expect_close(layer_norm(xt, {8}, ws), layer_norm(contiguous(xt), {8}, contiguous(ws)), 1e-12);
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor xl = to(contiguous(xt), dt);
    Tensor y = layer_norm(xl, {8}, to(w, dt));
    EXPECT_EQ(y.dtype(), dt);
    expect_close(y, layer_norm(to(xl, kFloat64), {8}, to(to(w, dt), kFloat64)), 2e-2, 2e-2);
  }
}

TEST(LayerNorm, EmptyAndBadInput) {
  EXPECT_EQ(layer_norm(zeros({0, 4}), {4}).sizes(), (Shape{0, 4}));
  EXPECT_THROW(layer_norm(zeros({2, 3}), {4}), ShapeError);
  EXPECT_THROW(layer_norm(zeros({3}), {2, 3}), ShapeError);
  EXPECT_THROW(layer_norm(zeros({2, 3}), {3}, zeros({4})), ShapeError);
  EXPECT_THROW(layer_norm(zeros({2, 3}), {3}, Tensor(), zeros({2, 3})), ShapeError);
  EXPECT_THROW(layer_norm(zeros({2, 3}, {.dtype = kInt32}), {3}), TypeError);
  EXPECT_THROW(layer_norm(zeros({2, 3}), {3}, Tensor(), Tensor(), -1.0), ValueError);
}

TEST(LayerNorm, Gradients) {
  auto x = random_tensor({3, 2, 5}, 27, -2, 2).requires_grad_();
  auto w = random_tensor({2, 5}, 28).requires_grad_();
  auto b = random_tensor({2, 5}, 29).requires_grad_();
  auto w1 = random_tensor({5}, 30).requires_grad_();
  expect_gradcheck([](const TensorList& t) { return layer_norm(t[0], {2, 5}, t[1], t[2]); }, {x, w, b});
  expect_gradcheck([](const TensorList& t) { return layer_norm(t[0], {5}, t[1]); }, {x, w1});
  expect_gradcheck([](const TensorList& t) { return layer_norm(t[0], {5}, Tensor(), t[1]); }, {x, w1});
  expect_gradcheck([](const TensorList& t) { return layer_norm(t[0], {5}); }, {x});
  // Only the affine parameters need a gradient.
  Tensor xc = random_tensor({3, 5}, 31);
  expect_gradcheck([&](const TensorList& t) { return layer_norm(xc, {5}, t[0], t[1]); }, {w1, random_tensor({5}, 37).requires_grad_()});
  auto xt = random_tensor({5, 3}, 32).requires_grad_();
  expect_gradcheck([](const TensorList& t) { return layer_norm(transpose(t[0], 0, 1), {5}); }, {xt});
}

TEST(LayerNorm, FloatBackwardMatchesDouble) {
  Tensor x = random_tensor({64, 300}, 33, -2, 2), w = random_tensor({300}, 34), b = random_tensor({300}, 35);
  Tensor g = random_tensor({64, 300}, 36);
  auto grads = [&](DType dt) {
    Tensor xd = to(x, dt).detach().requires_grad_(), wd = to(w, dt).detach().requires_grad_();
    Tensor bd = to(b, dt).detach().requires_grad_();
    layer_norm(xd, {300}, wd, bd).backward(to(g, dt));
    return TensorList{xd.grad(), wd.grad(), bd.grad()};
  };
  TensorList f = grads(kFloat32), d = grads(kFloat64);
  for (int i = 0; i < 3; ++i) expect_close(f[size_t(i)], d[size_t(i)], 1e-4, 1e-4);
}

// --- group_norm ---------------------------------------------------------------------

std::vector<double> reference_group_norm(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b,
                                         double eps) {
  const int64_t n = x.sizes()[0], c = x.sizes()[1], spatial = x.numel() / std::max<int64_t>(n * c, 1);
  const int64_t per_group = c / groups;
  return reference_rows(values(x), n * groups, per_group * spatial, maybe_values(w), maybe_values(b), eps,
                        [&](int64_t r, int64_t j) { return (r % groups) * per_group + j / spatial; });
}

TEST(GroupNorm, Reference) {
  Tensor x = random_tensor({2, 6, 3, 4}, 41, -2, 2);
  Tensor w = random_tensor({6}, 42), b = random_tensor({6}, 43);
  for (int64_t groups : {1, 2, 3, 6})
    for (DType dt : {kFloat32, kFloat64}) {
      expect_values(group_norm(to(x, dt), groups, to(w, dt), to(b, dt)),
                    reference_group_norm(x, groups, w, b, 1e-5), 1e-5, 1e-5);
      expect_values(group_norm(to(x, dt), groups), reference_group_norm(x, groups, Tensor(), Tensor(), 1e-5), 1e-5,
                    1e-5);
    }
  Tensor x2 = random_tensor({5, 4}, 44);  // (N, C): no spatial dims
  expect_values(group_norm(x2, 2, slice(w, 0, 0, 4)),
                reference_group_norm(x2, 2, slice(w, 0, 0, 4), Tensor(), 1e-5), 1e-6);
  Tensor xp = permute(random_tensor({2, 3, 4, 6}, 45), {0, 3, 1, 2});  // (2, 6, 3, 4) strided
  expect_values(group_norm(xp, 3, w, b), reference_group_norm(contiguous(xp), 3, w, b, 1e-5), 1e-6);
  Tensor xh = to(x, kBFloat16);
  expect_values(group_norm(xh, 3, to(w, kBFloat16)),
                reference_group_norm(to(xh, kFloat64), 3, to(to(w, kBFloat16), kFloat64), Tensor(), 1e-5), 3e-2, 2e-2);
}

TEST(GroupNorm, BadInput) {
  EXPECT_THROW(group_norm(zeros({2, 6, 3}), 4), ShapeError);
  EXPECT_THROW(group_norm(zeros({2, 6, 3}), 0), ValueError);
  EXPECT_THROW(group_norm(zeros({6}), 2), ShapeError);
  EXPECT_THROW(group_norm(zeros({2, 6, 3}), 3, zeros({3})), ShapeError);
  EXPECT_THROW(group_norm(zeros({2, 6}, {.dtype = kInt64}), 3), TypeError);
  EXPECT_EQ(group_norm(zeros({0, 6, 2}), 3).sizes(), (Shape{0, 6, 2}));
}

TEST(GroupNorm, Gradients) {
  auto x = random_tensor({2, 4, 3}, 46, -2, 2).requires_grad_();
  auto w = random_tensor({4}, 47).requires_grad_();
  auto b = random_tensor({4}, 48).requires_grad_();
  for (int64_t groups : {1, 2, 4}) {
    expect_gradcheck([groups](const TensorList& t) { return group_norm(t[0], groups, t[1], t[2]); }, {x, w, b});
    expect_gradcheck([groups](const TensorList& t) { return group_norm(t[0], groups); }, {x});
  }
  auto x2 = random_tensor({3, 4}, 49).requires_grad_();
  expect_gradcheck([](const TensorList& t) { return group_norm(t[0], 2, t[1], t[2]); }, {x2, w, b});
  Tensor xc = random_tensor({2, 4, 5}, 50);
  expect_gradcheck([&](const TensorList& t) { return group_norm(xc, 2, t[0]); }, {w});
}

// --- batch_norm ---------------------------------------------------------------------

struct BatchStats {
  std::vector<double> mean, var;  // biased var
};

BatchStats reference_stats(const Tensor& x) {
  const int64_t n = x.sizes()[0], c = x.sizes()[1], s = x.numel() / (n * c);
  std::vector<double> xv = values(x);
  BatchStats st{std::vector<double>(size_t(c), 0.0), std::vector<double>(size_t(c), 0.0)};
  for (int64_t ci = 0; ci < c; ++ci) {
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t si = 0; si < s; ++si) st.mean[size_t(ci)] += xv[size_t((ni * c + ci) * s + si)];
    st.mean[size_t(ci)] /= double(n * s);
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t si = 0; si < s; ++si)
        st.var[size_t(ci)] += std::pow(xv[size_t((ni * c + ci) * s + si)] - st.mean[size_t(ci)], 2);
    st.var[size_t(ci)] /= double(n * s);
  }
  return st;
}

std::vector<double> reference_batch_norm(const Tensor& x, const BatchStats& st, const Tensor& w, const Tensor& b,
                                         double eps) {
  const int64_t n = x.sizes()[0], c = x.sizes()[1], s = x.numel() / (n * c);
  std::vector<double> xv = values(x), wv = maybe_values(w), bv = maybe_values(b), y(xv.size());
  for (int64_t i = 0; i < int64_t(xv.size()); ++i) {
    const size_t ci = size_t((i / s) % c);
    y[size_t(i)] = (xv[size_t(i)] - st.mean[ci]) / std::sqrt(st.var[ci] + eps) * (wv.empty() ? 1 : wv[ci]) +
                   (bv.empty() ? 0 : bv[ci]);
  }
  return y;
}

TEST(BatchNorm, TrainingUpdatesRunningStats) {
  for (const Shape& shape : {Shape{8, 3}, Shape{4, 3, 5}, Shape{2, 3, 2, 3}, Shape{3, 70}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t c = shape[1];
    Tensor x = random_tensor(shape, 51, -2, 3);
    Tensor w = random_tensor({c}, 52), b = random_tensor({c}, 53);
    for (DType dt : {kFloat32, kFloat64}) {
      Tensor rm = to(random_tensor({c}, 54), dt), rv = to(random_tensor({c}, 55, 0.5, 2), dt);
      std::vector<double> rm0 = values(rm), rv0 = values(rv);
      const uint32_t v0 = rm.version();
      BatchStats st = reference_stats(x);
      Tensor y = batch_norm(to(x, dt), rm, rv, to(w, dt), to(b, dt), true, 0.2, 1e-3);
      expect_values(y, reference_batch_norm(x, st, w, b, 1e-3), 1e-5, 1e-5);
      const double count = double(x.numel() / c);
      std::vector<double> want_rm, want_rv;
      for (size_t i = 0; i < size_t(c); ++i) {
        want_rm.push_back(0.8 * rm0[i] + 0.2 * st.mean[i]);
        want_rv.push_back(0.8 * rv0[i] + 0.2 * st.var[i] * count / (count - 1));
      }
      expect_values(rm, want_rm, 1e-6, 1e-6);
      expect_values(rv, want_rv, 1e-6, 1e-6);
      EXPECT_GT(rm.version(), v0);
    }
  }
}

TEST(BatchNorm, EvalUsesRunningStats) {
  Tensor x = random_tensor({4, 3, 5}, 56);
  Tensor rm = random_tensor({3}, 57), rv = random_tensor({3}, 58, 0.5, 2);
  Tensor w = random_tensor({3}, 59);
  BatchStats st{values(rm), values(rv)};
  expect_values(batch_norm(x, rm, rv, w, Tensor(), false), reference_batch_norm(x, st, w, Tensor(), 1e-5), 1e-10);
  expect_values(batch_norm(to(x, kFloat32), to(rm, kFloat32), to(rv, kFloat32), Tensor(), Tensor(), false),
                reference_batch_norm(x, st, Tensor(), Tensor(), 1e-5), 1e-5);
  expect_values(rm, st.mean);  // untouched
  // Training without running stats uses batch statistics and updates nothing.
  expect_values(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true),
                reference_batch_norm(x, reference_stats(x), Tensor(), Tensor(), 1e-5), 1e-10);
}

TEST(BatchNorm, NonContiguousAndHalf) {
  Tensor x = permute(random_tensor({5, 4, 3}, 60), {0, 2, 1});  // (5, 3, 4) strided
  Tensor rm = zeros({3}, {.dtype = kFloat64}), rv = ones({3}, {.dtype = kFloat64});
  Tensor rm_strided = slice(zeros({6}, {.dtype = kFloat64}), 0, 0, 6, 2);
  Tensor rv_strided = slice(ones({6}, {.dtype = kFloat64}), 0, 0, 6, 2);
  expect_close(batch_norm(x, rm_strided, rv_strided, Tensor(), Tensor(), true),
               batch_norm(contiguous(x), rm, rv, Tensor(), Tensor(), true), 1e-12);
  expect_close(rm_strided, rm, 1e-12);
  expect_close(rv_strided, rv, 1e-12);
  Tensor xc = contiguous(x);
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor xl = to(xc, dt);
    Tensor rm32 = zeros({3}), rv32 = ones({3});
    Tensor y = batch_norm(xl, rm32, rv32, Tensor(), Tensor(), true);
    EXPECT_EQ(y.dtype(), dt);
    expect_values(y, reference_batch_norm(to(xl, kFloat64), reference_stats(to(xl, kFloat64)), Tensor(), Tensor(), 1e-5),
                  3e-2, 2e-2);
    std::vector<double> want_rm = reference_stats(to(xl, kFloat64)).mean;
    for (double& m : want_rm) m *= 0.1;  // running_mean started at 0, momentum 0.1
    expect_values(rm32, want_rm, 1e-3, 1e-3);
  }
}

TEST(BatchNorm, BadInput) {
  Tensor rm = zeros({3}), rv = ones({3});
  EXPECT_THROW(batch_norm(zeros({1, 3}), rm, rv, Tensor(), Tensor(), true), ValueError);
  EXPECT_NO_THROW(batch_norm(zeros({1, 3}), rm, rv, Tensor(), Tensor(), false));
  EXPECT_THROW(batch_norm(zeros({4, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false), ValueError);
  EXPECT_THROW(batch_norm(zeros({4, 3}), zeros({4}), ones({4}), Tensor(), Tensor(), true), ShapeError);
  EXPECT_THROW(batch_norm(zeros({4, 3}), rm, rv, zeros({2}), Tensor(), true), ShapeError);
  EXPECT_THROW(batch_norm(zeros({4}), rm, rv, Tensor(), Tensor(), true), ShapeError);
  EXPECT_THROW(batch_norm(zeros({4, 3}, {.dtype = kInt32}), rm, rv, Tensor(), Tensor(), true), TypeError);
  EXPECT_THROW(batch_norm(zeros({4, 3}), rm, Tensor(), Tensor(), Tensor(), true), ValueError);
}

TEST(BatchNorm, Gradients) {
  for (const Shape& shape : {Shape{4, 3}, Shape{3, 2, 4}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t c = shape[1];
    auto x = random_tensor(shape, 61, -2, 2).requires_grad_();
    auto w = random_tensor({c}, 62).requires_grad_();
    auto b = random_tensor({c}, 63).requires_grad_();
    Tensor rm = random_tensor({c}, 64), rv = random_tensor({c}, 65, 0.5, 2);
    for (bool training : {true, false}) {
      expect_gradcheck(
          [&](const TensorList& t) { return batch_norm(t[0], rm, rv, t[1], t[2], training); }, {x, w, b});
      expect_gradcheck([&](const TensorList& t) { return batch_norm(t[0], rm, rv, Tensor(), Tensor(), training); },
                       {x});
      expect_gradcheck([&](const TensorList& t) { return batch_norm(t[0], rm, rv, t[1], Tensor(), training); }, {x, w});
    }
    expect_gradcheck([&](const TensorList& t) { return batch_norm(t[0], Tensor(), Tensor(), t[1], t[2], true); },
                     {x, w, b});
  }
  auto xt = random_tensor({3, 5}, 66).requires_grad_();  // used as (5, 3)
  expect_gradcheck([](const TensorList& t) { return batch_norm(transpose(t[0], 0, 1), Tensor(), Tensor(), Tensor(), Tensor(), true); },
                   {xt});
}

// Gradient of a gradient: d/d(inputs) of sum(w * J^T v), with v the
// upstream gradient (also differentiated), for every norm and mode.
// The gradient graph is built by the composite backward (create_graph), so
// first check that it computes the same gradient as the fused backward.
void expect_double_gradcheck(const std::function<Tensor(const TensorList&)>& f, TensorList inputs, size_t differentiated) {
  auto v = random_tensor(f(inputs).sizes(), 68).requires_grad_();
  {
    TensorList wrt(inputs.begin(), inputs.begin() + int64_t(differentiated));
    TensorList fused = autograd::grad({f(inputs)}, wrt, {v});
    TensorList composite = autograd::grad({f(inputs)}, wrt, {v}, {}, /*create_graph=*/true);
    for (size_t i = 0; i < wrt.size(); ++i) expect_close(composite[i], fused[i], 1e-10, 1e-8);
  }
  inputs.push_back(v);
  expect_gradcheck(
      [&](const TensorList& t) {
        EnableGradGuard enable;  // the numeric pass runs under no_grad
        TensorList args(t.begin(), t.end() - 1);
        TensorList wrt(t.begin(), t.begin() + int64_t(differentiated));
        TensorList g = autograd::grad({f(args)}, wrt, {t.back()}, {}, /*create_graph=*/true);
        Tensor total = sum(mul(g[0], g[0]));
        for (size_t i = 1; i < g.size(); ++i) total = add(total, sum(mul(g[i], g[i])));
        return total;
      },
      inputs);
}

TEST(Norms, DoubleBackward) {
  auto x = random_tensor({3, 4, 2}, 69, -2, 2).requires_grad_();
  auto w = random_tensor({4}, 70).requires_grad_();
  auto b = random_tensor({4}, 71).requires_grad_();
  auto w2 = random_tensor({4, 2}, 72).requires_grad_();
  auto b2 = random_tensor({4, 2}, 73).requires_grad_();
  Tensor rm = random_tensor({4}, 74), rv = random_tensor({4}, 75, 0.5, 2);
  expect_double_gradcheck([](const TensorList& t) { return layer_norm(t[0], {4, 2}, t[1], t[2]); }, {x, w2, b2}, 3);
  expect_double_gradcheck([](const TensorList& t) { return layer_norm(t[0], {2}); }, {x}, 1);
  expect_double_gradcheck([](const TensorList& t) { return group_norm(t[0], 2, t[1], t[2]); }, {x, w, b}, 3);
  for (bool training : {true, false})
    expect_double_gradcheck(
        [&](const TensorList& t) { return batch_norm(t[0], rm, rv, t[1], t[2], training); }, {x, w, b}, 3);
  auto x2 = random_tensor({5, 4}, 76, -2, 2).requires_grad_();
  expect_double_gradcheck([](const TensorList& t) { return batch_norm(t[0], Tensor(), Tensor(), t[1], Tensor(), true); },
                          {x2, w}, 2);
}

}  // namespace
}  // namespace mf
