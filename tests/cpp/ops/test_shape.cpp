// Views with computed strides (as_strided, diagonal) and joining/splitting
// (cat, stack, split, chunk, unbind).
#include "ops/host_ref.h"

namespace mf {
namespace {
using namespace testing;

Tensor iota(int64_t n, DType dtype = kFloat64) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(double(i));
  return from_vector(v, {n}, {.dtype = dtype});
}

// --- as_strided ------------------------------------------------------------------------

TEST(AsStrided, HandValues) {
  Tensor a = iota(10);
  Tensor w = as_strided(a, {3, 3}, {1, 1});
  EXPECT_TRUE(w.shares_storage(a));
  expect_values(w, {0, 1, 2, 1, 2, 3, 2, 3, 4});
  expect_values(as_strided(a, {2, 2}, {3, 1}, 2), {2, 3, 5, 6});
  expect_values(as_strided(a, {}, {}, 7), {7});
  EXPECT_EQ(as_strided(a, {0, 4}, {100, 1}).numel(), 0);
  // The storage offset is absolute: a view keeps its own offset by default.
  Tensor tail = slice(a, 0, 4);
  expect_values(as_strided(tail, {2}, {2}), {4, 6});
  expect_values(as_strided(tail, {2}, {2}, 0), {0, 2});
}

TEST(AsStrided, RandomAgainstStorage) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 30; ++trial) {
    Tensor base = random_tensor({4, 5}, uint32_t(trial));
    // A transposed input: as_strided still addresses the storage of base.
    Tensor input = trial % 2 ? transpose(base, 0, 1) : base;
    std::vector<double> storage = values(base);
    Shape size{int64_t(gen() % 3 + 1), int64_t(gen() % 3 + 1)};
    Shape stride{int64_t(gen() % 5), int64_t(gen() % 3)};
    int64_t last = (size[0] - 1) * stride[0] + (size[1] - 1) * stride[1];
    int64_t offset = int64_t(gen() % uint32_t(20 - last));
    Tensor got = as_strided(input, size, stride, offset);
    Host expected(size);
    for (int64_t i = 0; i < expected.numel(); ++i) {
      Shape idx = unravel(i, size);
      expected.v[size_t(i)] = storage[size_t(offset + idx[0] * stride[0] + idx[1] * stride[1])];
    }
    expect_host(got, expected);
  }
}

TEST(AsStrided, EveryDtype) {
  for (DType dt : all_dtypes()) {
    Tensor a = random_values({6}, 3, dt);
    std::vector<double> v = values(a);
    Tensor got = as_strided(a, {2, 2}, {2, 1}, 1);
    EXPECT_EQ(got.dtype(), dt);
    expect_values(got, {v[1], v[2], v[3], v[4]});
  }
}

TEST(AsStrided, Gradients) {
  Tensor x = random_tensor({8}, 11).requires_grad_();
  // Overlapping windows: every read of a position adds to its gradient.
  expect_gradcheck([](const TensorList& in) { return as_strided(in[0], {3, 3}, {2, 1}, 1); }, {x});
  Tensor m = random_tensor({3, 4}, 12).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return as_strided(transpose(in[0], 0, 1), {2, 3}, {1, 4}, 0); }, {m});
  // An expanded input reads each position twice; the gradient is split
  // between the two elements and summed back by expand's backward.
  Tensor v = random_tensor({3}, 13).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return as_strided(expand(unsqueeze(in[0], 0), {2, 3}), {3}, {1}, 0); },
                   {v});
  expect_double_backward([](const Tensor& t) { return as_strided(t, {3, 2}, {1, 2}, 1); }, x);
}

TEST(AsStrided, BadArguments) {
  Tensor a = iota(6);
  EXPECT_THROW(as_strided(a, {2, 2}, {1}), ShapeError);
  EXPECT_THROW(as_strided(a, {2, 4}, {3, 1}), ShapeError);  // needs 7 elements
  EXPECT_THROW(as_strided(a, {2}, {-1}), ValueError);
  EXPECT_THROW(as_strided(a, {-2}, {1}), ValueError);
  EXPECT_THROW(as_strided(a, {1}, {1}, 6), ShapeError);
  EXPECT_THROW(as_strided(a, {1}, {1}, -1), ValueError);
}

// --- diagonal ---------------------------------------------------------------------------

TEST(Diagonal, HandValues) {
  Tensor m = reshape(iota(12), {3, 4});
  Tensor d = diagonal(m);
  EXPECT_TRUE(d.shares_storage(m));
  expect_values(d, {0, 5, 10});
  expect_values(diagonal(m, 1), {1, 6, 11});
  expect_values(diagonal(m, -1), {4, 9});
  expect_values(diagonal(m, 2), {2, 7});
  EXPECT_EQ(diagonal(m, 5).sizes(), (Shape{0}));
  EXPECT_EQ(diagonal(m, -4).sizes(), (Shape{0}));
  expect_values(diagonal(m, 0, 1, 0), {0, 5, 10});
}

TEST(Diagonal, RandomAgainstReference) {
  Tensor t = random_tensor({3, 4, 5}, 21);
  Host h(t);
  for (int64_t offset : {-2, 0, 1, 3}) {
    for (auto [d1, d2] : {std::pair<int64_t, int64_t>{2, 0}, {0, 1}, {-1, 1}}) {
      Tensor got = diagonal(non_contiguous(t), offset, d1, d2);
      int64_t a = (d1 + 3) % 3, b = (d2 + 3) % 3, other = 3 - a - b;
      int64_t len = std::max<int64_t>(0, offset >= 0 ? std::min(t.size(a), t.size(b) - offset)
                                                     : std::min(t.size(a) + offset, t.size(b)));
      Host expected({t.size(other), len});
      for (int64_t o = 0; o < t.size(other); ++o)
        for (int64_t i = 0; i < len; ++i) {
          Shape idx(3);
          idx[size_t(other)] = o;
          idx[size_t(a)] = offset >= 0 ? i : i - offset;
          idx[size_t(b)] = offset >= 0 ? i + offset : i;
          expected.at({o, i}) = h.at(idx);
        }
      expect_host(got, expected);
    }
  }
}

TEST(Diagonal, GradientsAndErrors) {
  Tensor x = random_tensor({3, 4, 2}, 22).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return diagonal(in[0], 1, 0, 1); }, {x});
  expect_gradcheck([](const TensorList& in) { return diagonal(in[0], -1, 2, 0); }, {x});
  expect_double_backward([](const Tensor& t) { return diagonal(t, 0, 1, 0); }, x);
  EXPECT_THROW(diagonal(iota(3)), ShapeError);
  EXPECT_THROW(diagonal(x, 0, 1, 1), ValueError);
  EXPECT_THROW(diagonal(x, 0, 0, 3), IndexError);
  for (DType dt : all_dtypes()) {
    Tensor m = random_values({2, 2}, 5, dt);
    std::vector<double> v = values(m);
    expect_values(diagonal(m), {v[0], v[3]});
  }
}

// --- cat / stack ---------------------------------------------------------------------------

TEST(Cat, HandValues) {
  Tensor a = from_vector({1, 2, 3, 4}, {2, 2});
  expect_values(cat({a, from_vector({5, 6}, {1, 2})}), {1, 2, 3, 4, 5, 6});
  expect_values(cat({a, from_vector({7, 8}, {2, 1})}, 1), {1, 2, 7, 3, 4, 8});
  expect_values(cat({a, a}, -1), {1, 2, 1, 2, 3, 4, 3, 4});
  EXPECT_EQ(cat({zeros({0, 2}), a}).sizes(), (Shape{2, 2}));
  // 1-d empty tensors are skipped (PyTorch's legacy rule).
  expect_values(cat({zeros({0}), a, zeros({0})}), {1, 2, 3, 4});
  EXPECT_EQ(cat({zeros({0}), zeros({0})}).sizes(), (Shape{0}));
  Tensor only = cat({a});
  EXPECT_FALSE(only.shares_storage(a));
  expect_values(only, {1, 2, 3, 4});
}

TEST(Cat, RandomAgainstReference) {
  for (int64_t dim = 0; dim < 3; ++dim) {
    TensorList parts;
    std::vector<Host> hosts;
    for (int i = 0; i < 3; ++i) {
      Shape s{2, 3, 4};
      s[size_t(dim)] = i + 1;
      Tensor t = random_tensor(s, uint32_t(10 * dim + i));
      hosts.emplace_back(t);
      parts.push_back(i == 1 ? non_contiguous(t) : t);
    }
    Tensor got = cat(parts, dim);
    Shape out{2, 3, 4};
    out[size_t(dim)] = 6;
    Host expected(out);
    for (int64_t f = 0; f < expected.numel(); ++f) {
      Shape idx = unravel(f, out);
      int64_t k = idx[size_t(dim)], part = 0;
      while (k >= hosts[size_t(part)].shape[size_t(dim)]) k -= hosts[size_t(part++)].shape[size_t(dim)];
      Shape src = idx;
      src[size_t(dim)] = k;
      expected.v[size_t(f)] = hosts[size_t(part)].at(src);
    }
    expect_host(got, expected);
  }
}

TEST(Cat, DtypesAndPromotion) {
  for (DType dt : all_dtypes()) {
    Tensor a = random_values({2, 3}, 1, dt), b = random_values({1, 3}, 2, dt);
    Tensor got = cat({a, b});
    EXPECT_EQ(got.dtype(), dt);
    std::vector<double> expected = values(a), vb = values(b);
    expected.insert(expected.end(), vb.begin(), vb.end());
    expect_values(got, expected);
    Tensor c = cat({transpose(a, 0, 1), transpose(a, 0, 1)}, 1);
    EXPECT_EQ(c.sizes(), (Shape{3, 4}));
  }
  Tensor i = from_vector({1, 2}, {2}, {.dtype = kInt32});
  Tensor f = from_vector({0.5}, {1}, {.dtype = kFloat32});
  Tensor r = cat({i, f});
  EXPECT_EQ(r.dtype(), kFloat32);
  expect_values(r, {1, 2, 0.5});
  EXPECT_EQ(cat({from_vector({1}, {1}, {.dtype = kBool}), from_vector({3}, {1}, {.dtype = kUInt8})}).dtype(), kUInt8);
}

TEST(Cat, Gradients) {
  Tensor a = random_tensor({2, 3}, 31).requires_grad_();
  Tensor b = random_tensor({2, 1}, 32).requires_grad_();
  Tensor c = random_tensor({2, 2}, 33).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return cat({in[0], in[1], in[2]}, 1); }, {a, b, c});
  Tensor d = random_tensor({3, 2}, 34).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return cat({in[0], transpose(in[1], 0, 1)}, -2); }, {a, d});
  expect_double_backward([&](const Tensor& t) { return cat({t, mul(t, 2.0)}, 0); }, a);
  // More inputs than the 32 bits of an op's save mask.
  TensorList many;
  for (int i = 0; i < 40; ++i) many.push_back(full({1}, double(i), {.dtype = kFloat64}).requires_grad_());
  Tensor y = cat(many);
  sum(mul(y, y)).backward();
  for (int i = 0; i < 40; ++i) expect_values(many[size_t(i)].grad(), {2.0 * i});
}

TEST(Cat, BadInput) {
  Tensor a = zeros({2, 3});
  EXPECT_THROW(cat({}), ValueError);
  EXPECT_THROW(cat({a, zeros({2, 4})}), ShapeError);
  EXPECT_THROW(cat({a, zeros({2})}), ShapeError);
  EXPECT_THROW(cat({a, zeros({})}), ShapeError);
  EXPECT_THROW(cat({a, a}, 2), IndexError);
  EXPECT_THROW(cat({a, Tensor()}), Error);
}

TEST(Stack, ValuesGradsErrors) {
  Tensor a = from_vector({1, 2, 3}, {3}), b = from_vector({4, 5, 6}, {3});
  expect_values(stack({a, b}), {1, 2, 3, 4, 5, 6});
  Tensor s1 = stack({a, b}, 1);
  EXPECT_EQ(s1.sizes(), (Shape{3, 2}));
  expect_values(s1, {1, 4, 2, 5, 3, 6});
  EXPECT_EQ(stack({a, b}, -1).sizes(), (Shape{3, 2}));
  EXPECT_EQ(stack({zeros({}), zeros({})}).sizes(), (Shape{2}));
  Tensor x = random_tensor({2, 3}, 41).requires_grad_(), y = random_tensor({2, 3}, 42).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return stack({in[0], in[1], in[0]}, 1); }, {x, y});
  EXPECT_THROW(stack({a, zeros({4})}), ShapeError);
  EXPECT_THROW(stack({}), ValueError);
  EXPECT_THROW(stack({a, b}, 3), IndexError);
}

// --- split / chunk / unbind ------------------------------------------------------------------

TEST(Split, BySizeAndSizes) {
  Tensor t = reshape(iota(10), {5, 2});
  TensorList parts = split(t, 2);
  ASSERT_EQ(parts.size(), 3u);
  expect_values(parts[0], {0, 1, 2, 3});
  expect_values(parts[2], {8, 9});
  EXPECT_TRUE(parts[1].shares_storage(t));
  TensorList cols = split(t, 1, 1);
  ASSERT_EQ(cols.size(), 2u);
  expect_values(cols[1], {1, 3, 5, 7, 9});
  TensorList uneven = split(t, Shape{1, 0, 4});
  ASSERT_EQ(uneven.size(), 3u);
  EXPECT_EQ(uneven[1].sizes(), (Shape{0, 2}));
  expect_values(uneven[2], {2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(split(zeros({0, 3}), 2).size(), 1u);
  EXPECT_EQ(split(t, 7).size(), 1u);
  EXPECT_THROW(split(t, Shape{2, 2}), ShapeError);
  EXPECT_THROW(split(t, Shape{6, -1}), ValueError);
  EXPECT_THROW(split(t, -1), ValueError);
  EXPECT_THROW(split(t, 0), ValueError);
  EXPECT_THROW(split(t, 1, 2), IndexError);
  EXPECT_THROW(split(zeros({}), 1), ShapeError);
}

TEST(Split, Gradients) {
  Tensor x = random_tensor({5, 3}, 51).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return split(in[0], 2)[2]; }, {x});
  expect_gradcheck([](const TensorList& in) { return split(in[0], Shape{1, 2}, 1)[1]; }, {x});
  expect_gradcheck([](const TensorList& in) { return chunk(in[0], 2, 0)[0]; }, {x});
  expect_gradcheck([](const TensorList& in) { return unbind(in[0], 1)[2]; }, {x});
}

TEST(Chunk, Counts) {
  Tensor t = iota(5);
  TensorList c = chunk(t, 2);
  ASSERT_EQ(c.size(), 2u);
  expect_values(c[0], {0, 1, 2});
  expect_values(c[1], {3, 4});
  EXPECT_EQ(chunk(t, 5).size(), 5u);
  EXPECT_EQ(chunk(iota(6), 4).size(), 3u);  // chunks of 2, as in PyTorch
  EXPECT_EQ(chunk(t, 9).size(), 5u);
  TensorList empty = chunk(zeros({0}), 3);
  ASSERT_EQ(empty.size(), 3u);
  EXPECT_EQ(empty[2].numel(), 0);
  EXPECT_THROW(chunk(t, 0), ValueError);
}

TEST(Unbind, Values) {
  Tensor t = reshape(iota(6), {2, 3});
  TensorList rows = unbind(t);
  ASSERT_EQ(rows.size(), 2u);
  expect_values(rows[1], {3, 4, 5});
  TensorList cols = unbind(t, -1);
  ASSERT_EQ(cols.size(), 3u);
  EXPECT_EQ(cols[0].sizes(), (Shape{2}));
  expect_values(cols[2], {2, 5});
  EXPECT_TRUE(unbind(zeros({0, 2})).empty());
  EXPECT_THROW(unbind(zeros({})), IndexError);
  EXPECT_THROW(unbind(t, 2), IndexError);
}

}  // namespace
}  // namespace mf
