// tril, triu, flip, roll, pad, repeat, repeat_interleave, one_hot.
#include "ops/host_ref.h"

namespace mf {
namespace {
using namespace testing;

// --- tril / triu ---------------------------------------------------------------------

Host triangle_reference(const Host& x, int64_t diagonal, bool upper) {
  Host out = x;
  for (int64_t f = 0; f < x.numel(); ++f) {
    Shape idx = unravel(f, x.shape);
    int64_t i = idx[idx.size() - 2], j = idx[idx.size() - 1];
    bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
    if (!keep) out.v[size_t(f)] = 0;
  }
  return out;
}

TEST(Triangle, HandValues) {
  Tensor m = from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  expect_values(tril(m), {1, 0, 0, 4, 5, 0, 7, 8, 9});
  expect_values(triu(m), {1, 2, 3, 0, 5, 6, 0, 0, 9});
  expect_values(tril(m, -1), {0, 0, 0, 4, 0, 0, 7, 8, 0});
  expect_values(triu(m, 1), {0, 2, 3, 0, 0, 6, 0, 0, 0});
  expect_values(tril(m, 5), values(m));
  expect_values(triu(m, -5), values(m));
  expect_values(triu(m, 3), std::vector<double>(9, 0.0));
}

TEST(Triangle, RandomBatchedNonContiguousEveryDtype) {
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({2, 3, 4}, 7, dt);
    for (int64_t k : {-2, -1, 0, 1, 3}) {
      expect_host(tril(non_contiguous(x), k), triangle_reference(Host(x), k, false));
      expect_host(triu(x, k), triangle_reference(Host(x), k, true));
    }
    EXPECT_EQ(tril(x).dtype(), dt);
  }
  Tensor wide = random_tensor({4, 6}, 8);
  expect_host(triu(transpose(wide, 0, 1), 1), triangle_reference(Host(contiguous(transpose(wide, 0, 1))), 1, true));
  EXPECT_EQ(tril(zeros({0, 3})).numel(), 0);
  EXPECT_THROW(tril(zeros({3})), ShapeError);
  EXPECT_THROW(triu(zeros({})), ShapeError);
}

TEST(Triangle, Gradients) {
  Tensor x = random_tensor({2, 3, 3}, 9).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return tril(in[0], 0); }, {x});
  expect_gradcheck([](const TensorList& in) { return triu(in[0], 1); }, {x});
  expect_double_backward([](const Tensor& t) { return tril(t, -1); }, x);
}

// --- flip / roll ------------------------------------------------------------------------

TEST(Flip, ValuesAndReference) {
  Tensor m = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(flip(m, {0}), {4, 5, 6, 1, 2, 3});
  expect_values(flip(m, {1}), {3, 2, 1, 6, 5, 4});
  expect_values(flip(m, {0, -1}), {6, 5, 4, 3, 2, 1});
  expect_values(flip(m, {}), values(m));
  expect_values(flip(full({}, 3.0), {0}), {3});
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({3, 2, 4}, 3, dt);
    Host h(x), expected(x.sizes());
    for (int64_t f = 0; f < h.numel(); ++f) {
      Shape idx = unravel(f, h.shape), src = idx;
      src[0] = 2 - idx[0];
      src[2] = 3 - idx[2];
      expected.v[size_t(f)] = h.at(src);
    }
    Tensor got = flip(non_contiguous(x), {2, 0});
    EXPECT_EQ(got.dtype(), dt);
    expect_host(got, expected);
  }
  EXPECT_THROW(flip(m, {0, 0}), ValueError);
  EXPECT_THROW(flip(m, {2}), IndexError);
}

TEST(Roll, ValuesAndReference) {
  Tensor v = from_vector({1, 2, 3, 4, 5}, {5});
  expect_values(roll(v, {2}, {0}), {4, 5, 1, 2, 3});
  expect_values(roll(v, {-1}, {0}), {2, 3, 4, 5, 1});
  expect_values(roll(v, {7}, {0}), {4, 5, 1, 2, 3});
  Tensor m = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(roll(m, {1}, {}), {6, 1, 2, 3, 4, 5});  // flattened
  expect_values(roll(m, {1, 1}, {0, 1}), {6, 4, 5, 3, 1, 2});
  expect_values(roll(m, {1, 1}, {1, 1}), {2, 3, 1, 5, 6, 4});  // a dim twice rolls by the sum
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({3, 4, 2}, 4, dt);
    Host h(x), expected(x.sizes());
    for (int64_t f = 0; f < h.numel(); ++f) {
      Shape idx = unravel(f, h.shape), dst = idx;
      dst[1] = ((idx[1] - 5) % 4 + 4) % 4;
      dst[0] = (idx[0] + 1) % 3;
      expected.at(dst) = h.v[size_t(f)];
    }
    expect_host(roll(non_contiguous(x), {-5, 1}, {1, 0}), expected);
  }
  EXPECT_EQ(roll(zeros({0, 3}), {2}, {0}).numel(), 0);
  EXPECT_THROW(roll(m, {1, 2}, {0}), ValueError);
  EXPECT_THROW(roll(m, {1, 2}, {}), ValueError);
  EXPECT_THROW(roll(m, {1}, {2}), IndexError);
}

TEST(FlipRoll, Gradients) {
  Tensor x = random_tensor({3, 4}, 5).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return flip(in[0], {1}); }, {x});
  expect_gradcheck([](const TensorList& in) { return roll(in[0], {2, -1}, {1, 0}); }, {x});
  expect_gradcheck([](const TensorList& in) { return roll(in[0], {5}, {}); }, {x});
  expect_double_backward([](const Tensor& t) { return roll(flip(t, {0}), {1}, {1}); }, x);
}

// --- pad ---------------------------------------------------------------------------------

TEST(Pad, HandValues) {
  Tensor v = from_vector({1, 2, 3}, {3});
  expect_values(pad(v, {1, 2}), {0, 1, 2, 3, 0, 0});
  expect_values(pad(v, {1, 0}, 9.0), {9, 1, 2, 3});
  expect_values(pad(v, {-1, 1}), {2, 3, 0});  // negative pads crop
  expect_values(pad(v, {-3, 0}), std::vector<double>{});
  Tensor m = from_vector({1, 2, 3, 4}, {2, 2});
  expect_values(pad(m, {0, 1, 1, 0}), {0, 0, 0, 1, 2, 0, 3, 4, 0});
  expect_values(pad(m, {}), values(m));
  EXPECT_THROW(pad(v, {1}), ValueError);
  EXPECT_THROW(pad(v, {1, 1, 1, 1}), ValueError);
  EXPECT_THROW(pad(v, {-2, -2}), ShapeError);
}

TEST(Pad, RandomAgainstReference) {
  std::mt19937 gen(3);
  for (int trial = 0; trial < 20; ++trial) {
    DType dt = all_dtypes()[size_t(trial) % all_dtypes().size()];
    Tensor x = random_values({2, 3, 4}, uint32_t(trial), dt);
    Shape pads;
    for (int i = 0; i < 2 + 2 * (trial % 2); ++i) pads.push_back(int64_t(gen() % 4) - 1);
    double value = dt == kBool ? 1.0 : 7.0;
    Tensor got = pad(non_contiguous(x), pads, value);
    Host h(x);
    Shape out = x.sizes();
    for (size_t p = 0; p < pads.size() / 2; ++p) out[2 - p] += pads[2 * p] + pads[2 * p + 1];
    Host expected(out, value);
    for (int64_t f = 0; f < expected.numel(); ++f) {
      Shape idx = unravel(f, out), src = idx;
      bool inside = true;
      for (size_t p = 0; p < pads.size() / 2; ++p) {
        src[2 - p] = idx[2 - p] - pads[2 * p];
        inside = inside && src[2 - p] >= 0 && src[2 - p] < x.size(int64_t(2 - p));
      }
      if (inside) expected.v[size_t(f)] = h.at(src);
    }
    EXPECT_EQ(got.dtype(), dt);
    expect_host(got, expected);
  }
}

TEST(Pad, Gradients) {
  Tensor x = random_tensor({2, 3, 4}, 6).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return pad(in[0], {1, 2, 0, 1}); }, {x});
  expect_gradcheck([](const TensorList& in) { return pad(in[0], {-1, 2, 1, -2}, 3.0); }, {x});
  expect_double_backward([](const Tensor& t) { return pad(t, {2, -1}); }, x);
}

// --- repeat / repeat_interleave ---------------------------------------------------------

TEST(Repeat, ValuesAndReference) {
  Tensor v = from_vector({1, 2}, {2});
  expect_values(repeat(v, {3}), {1, 2, 1, 2, 1, 2});
  Tensor r = repeat(v, {2, 2});
  EXPECT_EQ(r.sizes(), (Shape{2, 4}));
  expect_values(r, {1, 2, 1, 2, 1, 2, 1, 2});
  EXPECT_EQ(repeat(v, {0, 1}).sizes(), (Shape{0, 2}));
  Tensor same = repeat(v, {1});
  EXPECT_FALSE(same.shares_storage(v));
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({2, 3}, 9, dt);
    Host h(x);
    Shape reps{2, 1, 3};
    Shape out{2, 2, 9};
    Host expected(out);
    for (int64_t f = 0; f < expected.numel(); ++f) {
      Shape idx = unravel(f, out);
      expected.v[size_t(f)] = h.at({idx[1] % 2, idx[2] % 3});
    }
    Tensor got = repeat(non_contiguous(x), reps);
    EXPECT_EQ(got.dtype(), dt);
    expect_host(got, expected);
  }
  EXPECT_THROW(repeat(zeros({2, 2}), {2}), ShapeError);
  EXPECT_THROW(repeat(v, {-1}), ValueError);
}

TEST(RepeatInterleave, Values) {
  Tensor m = from_vector({1, 2, 3, 4}, {2, 2});
  expect_values(repeat_interleave(m, 2), {1, 1, 2, 2, 3, 3, 4, 4});
  Tensor r0 = repeat_interleave(m, 2, 0);
  EXPECT_EQ(r0.sizes(), (Shape{4, 2}));
  expect_values(r0, {1, 2, 1, 2, 3, 4, 3, 4});
  expect_values(repeat_interleave(m, 3, -1), {1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4});
  expect_values(repeat_interleave(full({}, 5.0), 3), {5, 5, 5});
  EXPECT_EQ(repeat_interleave(m, 0, 1).sizes(), (Shape{2, 0}));
  EXPECT_FALSE(repeat_interleave(m, 1, 0).shares_storage(m));
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({3, 2}, 10, dt);
    std::vector<double> xv = values(non_contiguous(x)), expected;
    for (double e : xv) expected.insert(expected.end(), {e, e});
    expect_values(repeat_interleave(non_contiguous(x), 2), expected);
  }
  EXPECT_THROW(repeat_interleave(m, -1), ValueError);
  EXPECT_THROW(repeat_interleave(m, 2, 2), IndexError);
}

TEST(Repeat, Gradients) {
  Tensor x = random_tensor({2, 3}, 12).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return repeat(in[0], {2, 1, 2}); }, {x});
  expect_gradcheck([](const TensorList& in) { return repeat_interleave(in[0], 3, 1); }, {x});
  expect_gradcheck([](const TensorList& in) { return repeat_interleave(in[0], 2); }, {x});
  expect_double_backward([](const Tensor& t) { return repeat(t, {3, 2}); }, x);
}

// --- one_hot -------------------------------------------------------------------------------

TEST(OneHot, ValuesAndErrors) {
  Tensor labels = from_data<int64_t>({0, 2, 1}, {3});
  Tensor oh = one_hot(labels);
  EXPECT_EQ(oh.dtype(), kInt64);
  EXPECT_EQ(oh.sizes(), (Shape{3, 3}));
  expect_values(oh, {1, 0, 0, 0, 0, 1, 0, 1, 0});
  expect_values(one_hot(labels, 4), {1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0});
  Tensor m = from_data<int32_t>({3, 0, 1, 1}, {2, 2});
  Tensor om = one_hot(transpose(m, 0, 1), 5);
  EXPECT_EQ(om.sizes(), (Shape{2, 2, 5}));
  // transpose(m) = [[3, 1], [0, 1]]
  expect_values(om, {0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0});
  EXPECT_EQ(one_hot(from_data<int64_t>({}, {0}), 3).sizes(), (Shape{0, 3}));
  expect_values(one_hot(full({}, 1, {.dtype = kInt64}), 2), {0, 1});
  EXPECT_THROW(one_hot(labels, 2), IndexError);
  EXPECT_THROW(one_hot(from_data<int64_t>({1, -1}, {2}), 3), IndexError);
  EXPECT_THROW(one_hot(from_data<int64_t>({1, -1}, {2})), IndexError);
  EXPECT_THROW(one_hot(from_data<int64_t>({}, {0})), ValueError);
  EXPECT_THROW(one_hot(zeros({2})), TypeError);
}

}  // namespace
}  // namespace mf
