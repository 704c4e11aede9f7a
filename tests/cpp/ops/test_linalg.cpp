// Matrix products against float64 reference loops written here.
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

struct Reference {
  Shape shape;
  std::vector<double> values;
};

// Offset of the matrix at batch multi-index `index` in a contiguous tensor
// of batch shape `batch` broadcast to `out_batch`.
int64_t batch_offset(const Shape& batch, const Shape& out_batch, const Shape& index, int64_t matrix_size) {
  const size_t lead = out_batch.size() - batch.size();
  int64_t offset = 0;
  for (size_t d = 0; d < batch.size(); ++d) offset = offset * batch[d] + (batch[d] == 1 ? 0 : index[lead + d]);
  return offset * matrix_size;
}

// torch.matmul in float64: vectors become matrices, batch dims broadcast.
Reference reference_matmul(const Tensor& a, const Tensor& b) {
  Shape sa = a.sizes(), sb = b.sizes();
  const bool a_vector = sa.size() == 1, b_vector = sb.size() == 1;
  if (a_vector) sa.insert(sa.begin(), 1);
  if (b_vector) sb.push_back(1);
  const int64_t n = sa[sa.size() - 2], k = sa.back(), m = sb.back();
  Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  const size_t nb = std::max(batch_a.size(), batch_b.size());
  Shape batch(nb);
  for (size_t d = 0; d < nb; ++d) {
    int64_t x = d < nb - batch_a.size() ? 1 : batch_a[d - (nb - batch_a.size())];
    int64_t y = d < nb - batch_b.size() ? 1 : batch_b[d - (nb - batch_b.size())];
    batch[d] = x == 1 ? y : x;
  }
  std::vector<double> va = values(a), vb = values(b), out;
  Shape index(nb, 0);
  for (int64_t i = 0; i < shape_numel(batch); ++i) {
    int64_t rem = i;
    for (size_t d = nb; d-- > 0;) {
      index[d] = rem % batch[d];
      rem /= batch[d];
    }
    const int64_t oa = batch_offset(batch_a, batch, index, n * k), ob = batch_offset(batch_b, batch, index, k * m);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < m; ++c) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += va[size_t(oa + r * k + p)] * vb[size_t(ob + p * m + c)];
        out.push_back(acc);
      }
  }
  Shape shape = batch;
  if (!a_vector) shape.push_back(n);
  if (!b_vector) shape.push_back(m);
  return {shape, out};
}

void expect_matches_reference(const Tensor& got, const Tensor& a, const Tensor& b, double tol = 1e-10) {
  Reference ref = reference_matmul(a, b);
  ASSERT_EQ(got.sizes(), ref.shape) << "a " << shape_str(a.sizes()) << " b " << shape_str(b.sizes());
  expect_values(got, ref.values, tol, tol);
}

// Every torch.matmul case: 1-d/2-d/batched and broadcasting batch dims.
const std::vector<std::pair<Shape, Shape>> kMatmulShapes = {
    {{3}, {3}},          {{2, 3}, {3}},          {{3}, {3, 4}},          {{2, 3}, {3, 4}},
    {{5, 2, 3}, {3}},    {{5, 2, 3}, {3, 4}},    {{3}, {5, 3, 4}},       {{2, 3}, {5, 3, 4}},
    {{5, 2, 3}, {5, 3, 4}}, {{5, 1, 2, 3}, {4, 3, 2}}, {{1, 2, 3}, {4, 3, 2}}, {{2, 1, 2, 3}, {1, 3, 3, 2}},
    {{2, 3, 1, 3}, {3, 1}}, {{1, 3}, {3, 1}},     {{4, 1, 3}, {1, 3, 5}},
};

TEST(Matmul, HandValues) {
  Tensor a = from_vector({1, 2, 3, 4}, {2, 2});
  Tensor b = from_vector({5, 6, 7, 8}, {2, 2});
  expect_values(matmul(a, b), {19, 22, 43, 50});
  expect_values(mm(a, b), {19, 22, 43, 50});
  expect_values(matmul(a, from_vector({1, -1}, {2})), {-1, -1});
  expect_values(matmul(from_vector({1, -1}, {2}), b), {-2, -2});
  Tensor d = dot(from_vector({1, 2, 3}, {3}), from_vector({4, 5, 6}, {3}));
  EXPECT_EQ(d.dim(), 0);
  EXPECT_EQ(d.item<double>(), 32.0);
  expect_values(outer(from_vector({1, 2}, {2}), from_vector({3, 4, 5}, {3})), {3, 4, 5, 6, 8, 10});
}

TEST(Matmul, AllBroadcastCasesAgainstReference) {
  uint32_t seed = 10;
  for (auto dtype : {kFloat64, kFloat32}) {
    for (const auto& [sa, sb] : kMatmulShapes) {
      Tensor a = random_tensor(sa, seed++, -1, 1, dtype), b = random_tensor(sb, seed++, -1, 1, dtype);
      Tensor got = matmul(a, b);
      EXPECT_EQ(got.dtype(), dtype);
      expect_matches_reference(got, a, b, dtype == kFloat64 ? 1e-12 : 1e-5);
    }
  }
}

TEST(Matmul, NonContiguousOperands) {
  for (auto dtype : {kFloat64, kFloat32}) {
    const double tol = dtype == kFloat64 ? 1e-12 : 1e-5;
    Tensor x = random_tensor({6, 5}, 1, -1, 1, dtype), y = random_tensor({4, 6}, 2, -1, 1, dtype);
    // Transposed operands (BLAS transposes, no copy).
    expect_matches_reference(matmul(t(x), t(y)), t(x), t(y), tol);
    // Column-sliced (leading dim larger than the row) and row-strided.
    Tensor xs = narrow(x, 1, 1, 3), ys = slice(y, 0, 0, 4, 2);
    expect_matches_reference(matmul(ys, x), ys, x, tol);
    expect_matches_reference(matmul(t(xs), xs), t(xs), xs, tol);
    // Neither stride is 1: copied.
    Tensor xx = slice(slice(x, 1, 0, 5, 2), 0, 0, 6, 2);  // (3, 3)
    expect_matches_reference(matmul(xx, xx), xx, xx, tol);
    // Batch dims permuted, expanded batch (stride 0) and expanded rows.
    Tensor batched = random_tensor({3, 4, 2, 5}, 3, -1, 1, dtype);
    Tensor pa = permute(batched, {1, 0, 3, 2});  // (4, 3, 5, 2)
    Tensor pb = random_tensor({3, 2, 4}, 4, -1, 1, dtype);
    expect_matches_reference(matmul(pa, pb), pa, pb, tol);
    Tensor ea = expand(random_tensor({1, 2, 5}, 5, -1, 1, dtype), {3, 2, 5});
    Tensor eb = expand(random_tensor({5, 1}, 6, -1, 1, dtype), {5, 4});
    expect_matches_reference(matmul(ea, eb), ea, eb, tol);
    expect_matches_reference(bmm(ea, expand(eb, {3, 5, 4})), ea, expand(eb, {3, 5, 4}), tol);
    // A vector that is a strided column.
    Tensor v = select(x, 1, 2);  // (6), stride 5
    expect_matches_reference(matmul(y, v), y, v, tol);
    expect_matches_reference(matmul(select(y, 0, 1), x), select(y, 0, 1), x, tol);
    // Non-foldable 3-d a with a 2-d b.
    Tensor nf = transpose(random_tensor({2, 3, 4}, 7, -1, 1, dtype), 0, 1);  // (3, 2, 4)
    Tensor w = random_tensor({4, 5}, 8, -1, 1, dtype);
    expect_matches_reference(matmul(nf, w), nf, w, tol);
  }
}

TEST(Matmul, LargeThreadedAndSmallBatched) {
  Tensor a = random_tensor({300, 200}, 11, -1, 1, kFloat32), b = random_tensor({200, 250}, 12, -1, 1, kFloat32);
  expect_matches_reference(matmul(a, b), a, b, 1e-4);
  Tensor sa = random_tensor({64, 7, 9}, 13), sb = random_tensor({64, 9, 5}, 14);
  expect_matches_reference(bmm(sa, sb), sa, sb, 1e-12);
}

TEST(Matmul, ReducedPrecision) {
  for (auto dtype : {kBFloat16, kFloat16}) {
    for (const auto& [sa, sb] : kMatmulShapes) {
      Tensor a = random_tensor(sa, 21, -1, 1, dtype), b = random_tensor(sb, 22, -1, 1, dtype);
      Tensor got = matmul(a, b);
      EXPECT_EQ(got.dtype(), dtype);
      // The reference uses the same rounded inputs; the output is rounded once.
      expect_matches_reference(got, a, b, 2e-2);
    }
    Tensor x = random_tensor({40, 30}, 23, -1, 1, dtype), y = random_tensor({40, 20}, 24, -1, 1, dtype);
    expect_matches_reference(matmul(t(x), y), t(x), y, 5e-2);
    Tensor t0 = random_tensor({20}, 25, -1, 1, dtype);
    Tensor got = addmm(t0, t(x), y, 0.5, 2.0);
    Reference ref = reference_matmul(t(x), y);
    std::vector<double> tv = values(t0), expected;
    for (size_t i = 0; i < ref.values.size(); ++i) expected.push_back(0.5 * tv[i % 20] + 2.0 * ref.values[i]);
    expect_values(got, expected, 1e-1, 2e-2);
  }
}

TEST(Matmul, IntegerDtypes) {
  for (auto dtype : {kInt64, kInt32, kInt16, kInt8, kUInt8}) {
    Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = dtype});
    Tensor b = from_vector({1, 0, 2, 1, 0, 3}, {3, 2}, {.dtype = dtype});
    Tensor c = matmul(a, b);
    EXPECT_EQ(c.dtype(), dtype);
    expect_values(c, {5, 11, 14, 23});
    Tensor batched = matmul(expand(a, {2, 2, 3}), b);
    expect_values(batched, {5, 11, 14, 23, 5, 11, 14, 23});
    expect_values(addmm(from_vector({1, 1}, {2}, {.dtype = dtype}), a, b, 2, 3), {17, 35, 44, 71});
  }
  // Wraps like the C type, as PyTorch does.
  Tensor big = full({1, 2}, 100, {.dtype = kInt8});
  expect_values(matmul(big, full({2, 1}, 2, {.dtype = kInt8})), {-112});
  Tensor i64 = from_vector({3e9, 1}, {1, 2}, {.dtype = kInt64});
  EXPECT_EQ(matmul(i64, from_vector({2, 5}, {2, 1}, {.dtype = kInt64})).item<int64_t>(), int64_t(6000000005));
}

TEST(Matmul, ZeroSize) {
  Tensor e = matmul(zeros({0, 3}), ones({3, 4}));
  EXPECT_EQ(e.sizes(), (Shape{0, 4}));
  Tensor z = matmul(ones({2, 0}), ones({0, 3}));
  EXPECT_EQ(z.sizes(), (Shape{2, 3}));
  expect_values(z, std::vector<double>(6, 0.0));
  expect_values(addmm(full({3}, 2.0), ones({2, 0}), ones({0, 3}), 1.5), std::vector<double>(6, 3.0));
  EXPECT_EQ(bmm(zeros({0, 2, 3}), zeros({0, 3, 4})).sizes(), (Shape{0, 2, 4}));
  EXPECT_EQ(dot(zeros({0}), zeros({0})).item<double>(), 0.0);
  EXPECT_EQ(matmul(zeros({2, 0, 3}), zeros({3})).sizes(), (Shape{2, 0}));
  EXPECT_EQ(matmul(zeros({0, 2, 3}, {.dtype = kBFloat16}), zeros({3, 4}, {.dtype = kBFloat16})).sizes(),
            (Shape{0, 2, 4}));
}

TEST(Matmul, AddmmBaddbmm) {
  Tensor t0 = random_tensor({3, 4}, 31), a = random_tensor({3, 5}, 32), b = random_tensor({5, 4}, 33);
  Reference ref = reference_matmul(a, b);
  std::vector<double> tv = values(t0), expected;
  for (size_t i = 0; i < tv.size(); ++i) expected.push_back(0.25 * tv[i] - 2.0 * ref.values[i]);
  expect_values(addmm(t0, a, b, 0.25, -2.0), expected, 1e-12, 1e-12);
  // Broadcast t (a bias row) and beta = 0 ignoring NaN in t.
  Tensor row = random_tensor({4}, 34);
  std::vector<double> rv = values(row);
  expected.clear();
  for (size_t i = 0; i < ref.values.size(); ++i) expected.push_back(rv[i % 4] + ref.values[i]);
  expect_values(addmm(row, a, b), expected, 1e-12, 1e-12);
  Tensor nan_t = full({3, 4}, std::numeric_limits<double>::quiet_NaN(), {.dtype = kFloat64});
  expect_values(addmm(nan_t, a, b, 0.0), ref.values, 1e-12, 1e-12);
  // baddbmm with a (1, n, m) t.
  Tensor ba = random_tensor({2, 3, 5}, 35), bb = random_tensor({2, 5, 4}, 36), bt = random_tensor({1, 3, 4}, 37);
  Reference bref = reference_matmul(ba, bb);
  std::vector<double> btv = values(bt);
  expected.clear();
  for (size_t i = 0; i < bref.values.size(); ++i) expected.push_back(2.0 * btv[i % 12] + 0.5 * bref.values[i]);
  expect_values(baddbmm(bt, ba, bb, 2.0, 0.5), expected, 1e-12, 1e-12);
}

TEST(Matmul, Linear) {
  Tensor w = random_tensor({4, 3}, 41), bias = random_tensor({4}, 42);
  std::vector<double> wv = values(w), bv = values(bias);
  for (const Shape& xs : {Shape{3}, Shape{5, 3}, Shape{2, 5, 3}, Shape{2, 1, 2, 3}}) {
    Tensor x = random_tensor(xs, 43);
    std::vector<double> xv = values(x), expected, expected_no_bias;
    for (size_t r = 0; r < xv.size() / 3; ++r)
      for (size_t o = 0; o < 4; ++o) {
        double acc = 0;
        for (size_t i = 0; i < 3; ++i) acc += xv[r * 3 + i] * wv[o * 3 + i];
        expected_no_bias.push_back(acc);
        expected.push_back(acc + bv[o]);
      }
    Shape out_shape = xs;
    out_shape.back() = 4;
    Tensor y = linear(x, w, bias);
    EXPECT_EQ(y.sizes(), out_shape);
    expect_values(y, expected, 1e-12, 1e-12);
    expect_values(linear(x, w), expected_no_bias, 1e-12, 1e-12);
  }
  // A non-foldable 3-d input.
  Tensor x = transpose(random_tensor({5, 2, 3}, 44), 0, 1);
  expect_close(linear(x, w, bias), add(matmul(x, t(w)), bias), 1e-12, 1e-12);
}

TEST(Matmul, Gradients) {
  uint32_t seed = 50;
  for (const auto& [sa, sb] : kMatmulShapes) {
    Tensor a = random_tensor(sa, seed++).requires_grad_(), b = random_tensor(sb, seed++).requires_grad_();
    SCOPED_TRACE(shape_str(sa) + " @ " + shape_str(sb));
    expect_gradcheck([](const TensorList& x) { return matmul(x[0], x[1]); }, {a, b});
  }
  Tensor x = random_tensor({4, 3}, 60).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return matmul(t(v[0]), v[0]); }, {x});
  Tensor p = random_tensor({3}, 61).requires_grad_(), q = random_tensor({4}, 62).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return outer(v[0], v[1]); }, {p, q});
  Tensor r = random_tensor({3}, 63).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return dot(v[0], v[1]); }, {p, r});
  expect_gradcheck([](const TensorList& v) { return mv(v[0], v[1]); }, {x, p});
}

TEST(Matmul, AddmmLinearGradients) {
  Tensor t0 = random_tensor({4}, 70).requires_grad_(), a = random_tensor({3, 5}, 71).requires_grad_();
  Tensor b = random_tensor({5, 4}, 72).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return addmm(v[0], v[1], v[2], 0.5, 1.5); }, {t0, a, b});
  Tensor bt = random_tensor({3, 1}, 73).requires_grad_(), ba = random_tensor({2, 3, 5}, 74).requires_grad_();
  Tensor bb = random_tensor({2, 5, 4}, 75).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return baddbmm(v[0], v[1], v[2], 2.0, -1.0); }, {bt, ba, bb});
  Tensor x = random_tensor({2, 3, 5}, 76).requires_grad_(), w = random_tensor({4, 5}, 77).requires_grad_();
  Tensor bias = random_tensor({4}, 78).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return linear(v[0], v[1], v[2]); }, {x, w, bias});
  expect_gradcheck([](const TensorList& v) { return linear(v[0], v[1]); }, {x, w});
}

TEST(Matmul, DoubleBackward) {
  // d/da of sum(grad_a(a, b) * w) where grad_a = g @ b^T: differentiates the
  // backward, which is itself written with matmul.
  Tensor a = random_tensor({2, 3, 4}, 80).requires_grad_(), b = random_tensor({4, 2}, 81).requires_grad_();
  expect_gradcheck(
      [](const TensorList& v) {
        EnableGradGuard grad_mode;  // the numeric pass runs under no_grad
        Tensor y = matmul(v[0], v[1]);
        Tensor loss = sum(mul(y, y));
        return autograd::grad({loss}, {v[0]}, {}, {}, /*create_graph=*/true)[0];
      },
      {a, b});
}

TEST(Matmul, Errors) {
  try {
    matmul(zeros({2, 5}), zeros({4, 3}));
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "matmul: a.shape[-1] (5) must equal b.shape[-2] (4); shapes (2, 5) and (4, 3)");
  }
  EXPECT_THROW(matmul(zeros({3}), zeros({4})), ShapeError);
  EXPECT_THROW(matmul(zeros({}), zeros({3})), ShapeError);
  EXPECT_THROW(matmul(zeros({2, 2, 3}), zeros({3, 3, 4})), ShapeError);
  EXPECT_THROW(matmul(zeros({2, 3}), zeros({3, 4}, {.dtype = kFloat64})), TypeError);
  EXPECT_THROW(matmul(zeros({2, 3}, {.dtype = kBool}), zeros({3, 4}, {.dtype = kBool})), TypeError);
  EXPECT_THROW(mm(zeros({2, 3, 4}), zeros({4, 2})), ShapeError);
  EXPECT_THROW(bmm(zeros({2, 3, 4}), zeros({3, 4, 2})), ShapeError);
  EXPECT_THROW(bmm(zeros({3, 4}), zeros({4, 2})), ShapeError);
  EXPECT_THROW(mv(zeros({3, 4}), zeros({3})), ShapeError);
  EXPECT_THROW(dot(zeros({3}), zeros({4})), ShapeError);
  EXPECT_THROW(dot(zeros({3, 1}), zeros({3})), ShapeError);
  EXPECT_THROW(outer(zeros({3, 1}), zeros({3})), ShapeError);
  EXPECT_THROW(addmm(zeros({3}), zeros({2, 4}), zeros({4, 5})), ShapeError);
  EXPECT_THROW(addmm(zeros({5}, {.dtype = kFloat64}), zeros({2, 4}), zeros({4, 5})), TypeError);
  EXPECT_THROW(addmm(zeros({5}, {.dtype = kInt32}), zeros({2, 4}, {.dtype = kInt32}),
                     zeros({4, 5}, {.dtype = kInt32}), 0.5),
               TypeError);
  EXPECT_THROW(baddbmm(zeros({1}), zeros({2, 2, 4}), zeros({3, 4, 5})), ShapeError);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({3})), ShapeError);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 2})), ShapeError);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 3}), zeros({3})), ShapeError);
  EXPECT_THROW(linear(zeros({}), zeros({4, 3})), ShapeError);
}

}  // namespace
}  // namespace mf
