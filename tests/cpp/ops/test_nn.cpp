// embedding and dropout.
#include <cmath>

#include "test_util.h"

namespace mf {
namespace {
using testing::expect_close;
using testing::expect_gradcheck;
using testing::expect_values;
using testing::random_tensor;
using testing::values;

// --- embedding ----------------------------------------------------------------------

TEST(Embedding, Forward) {
  Tensor w = from_vector({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  Tensor idx = from_data<int64_t>({3, 0, 3, 1, 2, 2}, {2, 3});
  Tensor y = embedding(idx, w);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 2}));
  expect_values(y, {30, 31, 0, 1, 30, 31, 10, 11, 20, 21, 20, 21});
  expect_values(embedding(from_data<int32_t>({1}, {1}), w), {10, 11});
  // padding_idx leaves the forward values alone.
  expect_values(embedding(from_data<int64_t>({1, 2}, {2}), w, 1), {10, 11, 20, 21});
  // 0-d indices give one row; empty indices give no rows.
  EXPECT_EQ(embedding(from_data<int64_t>({2}, {}), w).sizes(), (Shape{2}));
  EXPECT_EQ(embedding(from_data<int64_t>({}, {0, 3}), w).sizes(), (Shape{0, 3, 2}));
}

TEST(Embedding, ReferenceDtypesAndStrides) {
  Tensor w = random_tensor({7, 5}, 71);
  std::vector<int64_t> ids{6, 0, 2, 2, 5, 1, 3, 4};
  Tensor idx = from_data<int64_t>(ids, {2, 4});
  std::vector<double> wv = values(w), want;
  for (int64_t i : ids)
    for (int j = 0; j < 5; ++j) want.push_back(wv[size_t(i * 5 + j)]);
  for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16, kInt32}) {
    Tensor wd = to(dt == kInt32 ? mul(w, 100.0) : w, dt);
    std::vector<double> wdv = values(wd), want_dt;
    for (int64_t i : ids)
      for (int j = 0; j < 5; ++j) want_dt.push_back(wdv[size_t(i * 5 + j)]);
    Tensor y = embedding(idx, wd);
    EXPECT_EQ(y.dtype(), dt);
    expect_values(y, want_dt, 0, 0);
  }
  // Strided weight (a transposed table) and strided indices.
  Tensor wt = transpose(contiguous(transpose(w, 0, 1)), 0, 1);
  ASSERT_FALSE(wt.is_contiguous());
  expect_values(embedding(idx, wt), want, 0, 0);
  Tensor idx_t = transpose(from_data<int64_t>({6, 5, 0, 1, 2, 3, 2, 4}, {4, 2}), 0, 1);
  expect_values(embedding(idx_t, w), want, 0, 0);
}

TEST(Embedding, BackwardAccumulatesAndSkipsPadding) {
  Tensor w = random_tensor({4, 3}, 72).requires_grad_();
  Tensor idx = from_data<int64_t>({1, 3, 1, 0, 1}, {5});
  Tensor g = random_tensor({5, 3}, 73);
  embedding(idx, w, 3).backward(g);
  std::vector<double> gv = values(g), want(12, 0.0);
  std::vector<int64_t> ids{1, 3, 1, 0, 1};
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] != 3)
      for (size_t j = 0; j < 3; ++j) want[size_t(ids[i]) * 3 + j] += gv[i * 3 + j];
  expect_values(w.grad(), want, 1e-12);
  // A negative padding_idx counts from the end.
  w.set_grad(Tensor());
  embedding(idx, w, -3).backward(g);  // row 1
  std::vector<double> got = values(w.grad());
  for (size_t j = 0; j < 3; ++j) EXPECT_EQ(got[3 + j], 0.0);
  EXPECT_NE(got[9], 0.0);
}

TEST(Embedding, Gradients) {
  auto w = random_tensor({5, 3}, 74).requires_grad_();
  Tensor idx = from_data<int64_t>({4, 0, 4, 2, 2, 2}, {3, 2});
  expect_gradcheck([&](const TensorList& t) { return embedding(idx, t[0]); }, {w});
  // The padding row gets no gradient by definition (its forward value is
  // still read), so the finite-difference check uses a padding_idx absent
  // from idx; BackwardAccumulatesAndSkipsPadding covers the row itself.
  expect_gradcheck([&](const TensorList& t) { return embedding(idx, t[0], 1); }, {w});
  Tensor idx32 = from_data<int32_t>({1, 1, 3}, {3});
  expect_gradcheck([&](const TensorList& t) { return embedding(idx32, transpose(t[0], 0, 1)); },
                   {random_tensor({2, 6}, 75).requires_grad_()});
}

TEST(Embedding, DoubleBackward) {
  // The weight gradient is linear in the output gradient v; differentiate
  // it w.r.t. v (padding row excluded).
  Tensor w = random_tensor({4, 3}, 77).requires_grad_();
  Tensor idx = from_data<int64_t>({1, 3, 1, 0}, {2, 2});
  auto v = random_tensor({2, 2, 3}, 78).requires_grad_();
  expect_gradcheck(
      [&](const TensorList& t) {
        EnableGradGuard enable;
        Tensor y = embedding(idx, w, 3);
        return autograd::grad({y}, {w}, {t[0]}, {}, /*create_graph=*/true)[0];
      },
      {v});
}

TEST(Embedding, LargeBackwardMatchesReference) {
  // Enough work to split over threads: the sum must still be exact per row.
  const int64_t rows = 50, dim = 64, n = 4000;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back((i * 7919) % rows);
  Tensor idx = from_data<int64_t>(ids, {n});
  Tensor w = zeros({rows, dim}, {.dtype = kFloat64}).requires_grad_();
  Tensor g = random_tensor({n, dim}, 76);
  embedding(idx, w).backward(g);
  std::vector<double> gv = values(g), want(size_t(rows * dim), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) want[size_t(ids[size_t(i)] * dim + j)] += gv[size_t(i * dim + j)];
  expect_values(w.grad(), want, 1e-10);
}

TEST(Embedding, BadInput) {
  Tensor w = zeros({4, 2});
  EXPECT_THROW(embedding(from_data<int64_t>({4}, {1}), w), IndexError);
  EXPECT_THROW(embedding(from_data<int64_t>({-1}, {1}), w), IndexError);
  EXPECT_THROW(embedding(from_vector({1}, {1}), w), TypeError);
  EXPECT_THROW(embedding(from_data<int64_t>({1}, {1}), zeros({4})), ShapeError);
  EXPECT_THROW(embedding(from_data<int64_t>({1}, {1}), w, 4), ValueError);
  EXPECT_THROW(embedding(from_data<int64_t>({1}, {1}), w, -5), ValueError);
}

// --- dropout ------------------------------------------------------------------------

TEST(Dropout, IdentityCases) {
  Tensor x = random_tensor({10}, 81);
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));
  expect_values(dropout(x, 1.0, true), std::vector<double>(10, 0.0));
  EXPECT_EQ(dropout(zeros({0, 3}), 0.5).sizes(), (Shape{0, 3}));
}

TEST(Dropout, Statistics) {
  const int64_t n = 200000;
  Tensor x = ones({n});
  for (double p : {0.1, 0.5, 0.8}) {
    std::vector<double> y = values(dropout(x, p));
    int64_t zeros_count = 0;
    for (double v : y) {
      if (v == 0.0) zeros_count++;
      else EXPECT_NEAR(v, 1.0 / (1.0 - p), 1e-6);
    }
    const double frac = double(zeros_count) / double(n);
    EXPECT_NEAR(frac, p, 5 * std::sqrt(p * (1 - p) / double(n))) << "p = " << p;
  }
}

TEST(Dropout, MaskFollowsPhilox) {
  manual_seed(1234);
  const uint64_t seed = default_generator().seed(), offset = default_generator().offset();
  Tensor x = random_tensor({3, 7}, 82, 1, 2);  // no zeros in x
  std::vector<double> y = values(dropout(x, 0.4));
  for (int64_t i = 0; i < 21; ++i) {
    const uint32_t word = philox(seed, offset + uint64_t(i / 4))[size_t(i % 4)];
    EXPECT_EQ(y[size_t(i)] != 0.0, uniform_float(word) < 0.6f) << "element " << i;
  }
  EXPECT_EQ(default_generator().offset(), offset + 6);  // ceil(21 / 4) counters reserved
}

TEST(Dropout, DeterministicAndThreadIndependent) {
  Tensor x = random_tensor({300, 300}, 83);
  const int threads = get_num_threads();
  manual_seed(7);
  Tensor a = dropout(x, 0.3);
  Tensor b = dropout(x, 0.3);
  manual_seed(7);
  set_num_threads(1);
  Tensor c = dropout(x, 0.3);
  set_num_threads(threads);
  expect_values(c, values(a), 0, 0);
  std::vector<double> av = values(a), bv = values(b);
  EXPECT_NE(av, bv);  // successive calls draw fresh masks
  // Non-contiguous input: element i of the logical order uses counter i.
  Tensor xt = transpose(x, 0, 1);
  manual_seed(9);
  Tensor d1 = dropout(xt, 0.3);
  manual_seed(9);
  expect_values(d1, values(dropout(contiguous(xt), 0.3)), 0, 0);
}

TEST(Dropout, GradientUsesTheMask) {
  Tensor x = random_tensor({4, 5}, 84).requires_grad_();
  manual_seed(3);
  Tensor y = dropout(x, 0.25);
  Tensor g = random_tensor({4, 5}, 85);
  y.backward(g);
  std::vector<double> yv = values(y), xv = values(x), gv = values(g), got = values(x.grad());
  for (size_t i = 0; i < yv.size(); ++i) {
    const bool kept = yv[i] != 0.0;
    if (kept) EXPECT_NEAR(yv[i], xv[i] / 0.75, 1e-12);
    EXPECT_NEAR(got[i], kept ? gv[i] / 0.75 : 0.0, 1e-12);
  }
  expect_gradcheck(
      [](const TensorList& t) {
        manual_seed(11);  // the same mask on every evaluation
        return dropout(t[0], 0.5);
      },
      {x});
}

TEST(Dropout, HalfAndBadInput) {
  Tensor x = ones({1000}, {.dtype = kBFloat16});
  manual_seed(5);
  Tensor y = dropout(x, 0.5);
  EXPECT_EQ(y.dtype(), kBFloat16);
  for (double v : values(y)) EXPECT_TRUE(v == 0.0 || v == 2.0);
  // NaN stays NaN in dropped positions too (x * 0), as in PyTorch.
  for (double v : values(dropout(full({64}, NAN), 0.5))) EXPECT_TRUE(std::isnan(v));
  EXPECT_THROW(dropout(x, 1.5), ValueError);
  EXPECT_THROW(dropout(x, -0.1), ValueError);
  EXPECT_THROW(dropout(x, NAN), ValueError);
  EXPECT_THROW(dropout(zeros({3}, {.dtype = kInt64}), 0.5), TypeError);
}

}  // namespace
}  // namespace mf
