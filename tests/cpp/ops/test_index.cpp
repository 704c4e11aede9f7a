// Indexing along one dim (index_select, index_add, gather, scatter,
// scatter_add) and masked_select, nonzero.
#include "ops/host_ref.h"

namespace mf {
namespace {
using namespace testing;

Shape with(Shape s, int64_t dim, int64_t v) {
  s[size_t(dim)] = v;
  return s;
}

// --- index_select / index_add ---------------------------------------------------------

Host index_select_reference(const Host& x, int64_t dim, const std::vector<int64_t>& idx) {
  Host out(with(x.shape, dim, int64_t(idx.size())));
  for (int64_t f = 0; f < out.numel(); ++f) {
    Shape i = unravel(f, out.shape);
    i[size_t(dim)] = idx[size_t(i[size_t(dim)])];
    out.v[size_t(f)] = x.at(i);
  }
  return out;
}

Host index_add_reference(const Host& x, int64_t dim, const std::vector<int64_t>& idx, const Host& src, double alpha) {
  Host out = x;
  for (int64_t f = 0; f < src.numel(); ++f) {
    Shape i = unravel(f, src.shape);
    i[size_t(dim)] = idx[size_t(i[size_t(dim)])];
    out.at(i) += alpha * src.v[size_t(f)];
  }
  return out;
}

TEST(IndexSelect, HandValues) {
  Tensor m = from_vector({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor idx = from_data<int64_t>({2, 0, 2}, {3});
  expect_values(index_select(m, 0, idx), {5, 6, 1, 2, 5, 6});
  expect_values(index_select(m, 1, from_data<int32_t>({1}, {1})), {2, 4, 6});
  expect_values(index_select(m, -1, full({}, 0, {.dtype = kInt64})), {1, 3, 5});
  EXPECT_EQ(index_select(m, 0, from_data<int64_t>({}, {0})).sizes(), (Shape{0, 2}));
  Tensor s = index_select(full({}, 7.0), 0, from_data<int64_t>({0}, {1}));
  EXPECT_EQ(s.dim(), 0);
  expect_values(s, {7});
}

TEST(IndexSelect, RandomEveryDtypeAndDim) {
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({4, 3, 5}, 1, dt);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Tensor idx = random_indices({7}, 0, x.size(dim), uint32_t(dim));
      Tensor got = index_select(non_contiguous(x), dim, idx);
      EXPECT_EQ(got.dtype(), dt);
      expect_host(got, index_select_reference(Host(x), dim, int_values(idx)));
      Tensor strided_idx = slice(random_indices({14}, 0, x.size(dim), 5), 0, 0, {}, 2);
      expect_host(index_select(x, dim, strided_idx), index_select_reference(Host(x), dim, int_values(strided_idx)));
    }
  }
}

TEST(IndexSelect, LargeParallel) {
  Tensor table = random_tensor({3000, 64}, 2, -1, 1, kFloat32);
  Tensor idx = random_indices({2000}, 0, 3000, 3);
  expect_host(index_select(table, 0, idx), index_select_reference(Host(table), 0, int_values(idx)));
  Tensor wide = random_tensor({64, 3000}, 4, -1, 1, kFloat32);
  expect_host(index_select(wide, 1, idx), index_select_reference(Host(wide), 1, int_values(idx)));
}

TEST(IndexAdd, ValuesAndReference) {
  Tensor x = zeros({3, 2});
  Tensor idx = from_data<int64_t>({0, 2, 0}, {3});
  Tensor src = from_vector({1, 2, 3, 4, 5, 6}, {3, 2});
  expect_values(index_add(x, 0, idx, src), {6, 8, 0, 0, 3, 4});  // row 0 gets rows 0 and 2
  expect_values(index_add(x, 0, idx, src, 2), {12, 16, 0, 0, 6, 8});
  expect_values(x, {0, 0, 0, 0, 0, 0});  // out of place
  for (DType dt : all_dtypes()) {
    if (dt == kBool) continue;
    Tensor base = random_values({4, 5}, 6, dt);
    for (int64_t dim = 0; dim < 2; ++dim) {
      Tensor id = random_indices({6}, 0, base.size(dim), uint32_t(7 + dim));
      Tensor s = random_values(with(base.sizes(), dim, 6), 8, dt);
      Tensor got = index_add(non_contiguous(base), dim, id, non_contiguous(s));
      EXPECT_EQ(got.dtype(), dt);
      expect_host(got, index_add_reference(Host(base), dim, int_values(id), Host(s), 1.0), 0.5);
    }
  }
  Tensor b = from_vector({0, 1, 0}, {3}, {.dtype = kBool});
  expect_values(index_add(b, 0, from_data<int64_t>({0, 0}, {2}), from_vector({1, 0}, {2}, {.dtype = kBool})),
                {1, 1, 0});
}

TEST(IndexAdd, EmbeddingBackwardShape) {
  // Many rows into a small table: the parallel split runs over columns.
  Tensor table = zeros({50, 700});
  Tensor idx = random_indices({4000}, 0, 50, 9);
  Tensor src = random_values({4000, 700}, 10, kFloat32);
  expect_host(index_add(table, 0, idx, src), index_add_reference(Host(table), 0, int_values(idx), Host(src), 1.0));
}

TEST(IndexSelectAdd, Gradients) {
  Tensor x = random_tensor({4, 3}, 11).requires_grad_();
  Tensor idx = from_data<int64_t>({3, 0, 3, 1}, {4});
  expect_gradcheck([&](const TensorList& in) { return index_select(in[0], 0, idx); }, {x});
  expect_gradcheck([&](const TensorList& in) { return index_select(transpose(in[0], 0, 1), 1, idx); }, {x});
  expect_double_backward([&](const Tensor& t) { return index_select(t, 0, idx); }, x);
  Tensor src = random_tensor({4, 4}, 12).requires_grad_();
  expect_gradcheck([&](const TensorList& in) { return index_add(in[0], 1, from_data<int64_t>({2, 0, 2, 1}, {4}), in[1], 0.5); },
                   {x, src});
  Tensor rows = random_tensor({4, 3}, 13);
  expect_double_backward([&](const Tensor& t) { return index_add(mul(t, 2.0), 0, idx, rows); }, x);
  expect_double_backward([&](const Tensor& s) { return index_add(x.detach(), 1, from_data<int64_t>({2, 0, 2, 1}, {4}), s); }, src);
}

TEST(IndexSelectAdd, BadIndex) {
  Tensor m = zeros({3, 2});
  EXPECT_THROW(index_select(m, 0, from_data<int64_t>({0, 3}, {2})), IndexError);
  EXPECT_THROW(index_select(m, 0, from_data<int64_t>({-1}, {1})), IndexError);
  EXPECT_THROW(index_select(m, 1, from_data<int64_t>({2}, {1})), IndexError);
  EXPECT_THROW(index_select(m, 2, from_data<int64_t>({0}, {1})), IndexError);
  EXPECT_THROW(index_select(m, 0, zeros({1})), TypeError);
  EXPECT_THROW(index_select(m, 0, from_data<int64_t>({0, 0}, {1, 2})), ShapeError);
  EXPECT_THROW(index_select(zeros({0, 2}), 0, from_data<int64_t>({0}, {1})), IndexError);
  Tensor src = ones({2, 2});
  EXPECT_THROW(index_add(m, 0, from_data<int64_t>({0, 5}, {2}), src), IndexError);
  EXPECT_THROW(index_add(m, 0, from_data<int64_t>({0, -4}, {2}), src), IndexError);
  EXPECT_THROW(index_add(m, 0, from_data<int64_t>({0}, {1}), src), ShapeError);
  EXPECT_THROW(index_add(m, 0, from_data<int64_t>({0, 1}, {2}), ones({2, 2}, {.dtype = kFloat64})), TypeError);
  EXPECT_THROW(index_add(zeros({2}, {.dtype = kInt64}), 0, from_data<int64_t>({0}, {1}),
                         ones({1}, {.dtype = kInt64}), 0.5),
               TypeError);
}

// --- gather / scatter -------------------------------------------------------------------

Host gather_reference(const Host& x, int64_t dim, const Host& idx) {
  Host out(idx.shape);
  for (int64_t f = 0; f < idx.numel(); ++f) {
    Shape i = unravel(f, idx.shape);
    i[size_t(dim)] = int64_t(idx.v[size_t(f)]);
    out.v[size_t(f)] = x.at(i);
  }
  return out;
}

// mode 0: copy (last write wins), 1: add, 2: fill with value.
Host scatter_reference(const Host& x, int64_t dim, const Host& idx, const Host* src, int mode, double value = 0) {
  Host out = x;
  for (int64_t f = 0; f < idx.numel(); ++f) {
    Shape i = unravel(f, idx.shape), dst = i;
    dst[size_t(dim)] = int64_t(idx.v[size_t(f)]);
    double s = mode == 2 ? value : src->at(i);
    if (mode == 1) out.at(dst) += s;
    else out.at(dst) = s;
  }
  return out;
}

TEST(Gather, HandValues) {
  Tensor m = from_vector({1, 2, 3, 4}, {2, 2});
  expect_values(gather(m, 1, from_data<int64_t>({0, 0, 1, 0}, {2, 2})), {1, 1, 4, 3});
  expect_values(gather(m, 0, from_data<int64_t>({1, 0}, {1, 2})), {3, 2});
  // Cross-entropy's pattern: one class per row.
  expect_values(gather(m, -1, from_data<int64_t>({1, 0}, {2, 1})), {2, 3});
  Tensor s = gather(from_vector({5, 6}, {2}), 0, full({}, 1, {.dtype = kInt64}));
  EXPECT_EQ(s.dim(), 0);
  expect_values(s, {6});
  EXPECT_EQ(gather(m, 0, from_data<int64_t>({}, {0, 2})).sizes(), (Shape{0, 2}));
}

TEST(Gather, RandomEveryDtypeAndDim) {
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({4, 3, 5}, 13, dt);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape ishape{3, 2, 4};
      ishape[size_t(dim)] = 6;  // may exceed x's size along dim
      Tensor idx = random_indices(ishape, 0, x.size(dim), uint32_t(14 + dim));
      Tensor got = gather(non_contiguous(x), dim, non_contiguous(idx));
      EXPECT_EQ(got.dtype(), dt);
      expect_host(got, gather_reference(Host(x), dim, Host(idx)));
    }
  }
  // Broadcast (expanded) index, as cross entropy builds it.
  Tensor x = random_tensor({5, 4}, 15);
  Tensor idx = expand(from_data<int64_t>({3, 1, 0, 2, 2}, {5, 1}), {5, 3});
  expect_host(gather(x, 1, idx), gather_reference(Host(x), 1, Host(idx)));
}

TEST(Gather, LargeParallel) {
  Tensor logits = random_tensor({20000, 10}, 16, -1, 1, kFloat32);
  Tensor target = random_indices({20000, 1}, 0, 10, 17);
  expect_host(gather(logits, 1, target), gather_reference(Host(logits), 1, Host(target)));
  Tensor idx = random_indices({300, 200}, 0, 300, 18);
  Tensor x = random_tensor({300, 200}, 19, -1, 1, kFloat32);
  expect_host(gather(x, 0, idx), gather_reference(Host(x), 0, Host(idx)));
}

TEST(Scatter, HandValues) {
  Tensor x = zeros({2, 3});
  Tensor idx = from_data<int64_t>({2, 0, 1, 2}, {2, 2});
  Tensor src = from_vector({1, 2, 3, 4}, {2, 2});
  expect_values(scatter(x, 1, idx, src), {2, 0, 1, 0, 3, 4});
  expect_values(scatter(x, 1, idx, 9.0), {9, 0, 9, 0, 9, 9});
  expect_values(scatter_add(x, 0, from_data<int64_t>({1, 1, 1, 0}, {2, 2}), src), {0, 4, 0, 4, 2, 0});
  Tensor dup = from_data<int64_t>({0, 0, 0}, {3});
  expect_values(scatter_add(zeros({2}), 0, dup, from_vector({1, 2, 3}, {3})), {6, 0});
  expect_values(scatter(zeros({2}), 0, dup, from_vector({1, 2, 3}, {3})), {3, 0});  // last write wins
  expect_values(x, {0, 0, 0, 0, 0, 0});  // out of place
  // src larger than index: only its leading block is read.
  expect_values(scatter(zeros({3}), 0, from_data<int64_t>({2}, {1}), from_vector({5, 6, 7}, {3})), {0, 0, 5});
  Tensor z = scatter(full({}, 1.0), 0, full({}, 0, {.dtype = kInt64}), full({}, 4.0));
  EXPECT_EQ(z.dim(), 0);
  expect_values(z, {4});
}

TEST(Scatter, RandomEveryDtypeAndDim) {
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({4, 3, 5}, 20, dt);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape ishape{3, 2, 4};
      ishape[size_t(dim)] = 6;
      Tensor idx = random_indices(ishape, 0, x.size(dim), uint32_t(21 + dim));
      Tensor src = random_values({6, 6, 6}, 22, dt);
      Host hsrc(src);
      Tensor nsrc = non_contiguous(src);
      expect_host(scatter(non_contiguous(x), dim, idx, nsrc), scatter_reference(Host(x), dim, Host(idx), &hsrc, 0));
      Tensor added = scatter_add(x, dim, non_contiguous(idx), nsrc);
      EXPECT_EQ(added.dtype(), dt);
      if (dt != kBool) expect_host(added, scatter_reference(Host(x), dim, Host(idx), &hsrc, 1), 0.5);
      double fill = dt == kBool ? 1 : 3;
      expect_host(scatter(x, dim, idx, Scalar(fill)), scatter_reference(Host(x), dim, Host(idx), nullptr, 2, fill));
    }
  }
}

TEST(Scatter, LargeWithDuplicates) {
  // Cross entropy's backward: one class per row, many rows.
  Tensor grad = random_values({20000, 1}, 23, kFloat32);
  Tensor target = random_indices({20000, 1}, 0, 10, 24);
  Tensor z = zeros({20000, 10});
  Host hg(grad);
  expect_host(scatter_add(z, 1, target, grad), scatter_reference(Host(z), 1, Host(target), &hg, 1));
  // Heavy duplicates along dim 0.
  Tensor idx = random_indices({5000, 40}, 0, 7, 25);
  Tensor src = random_values({5000, 40}, 26, kFloat32);
  Host hs(src);
  Tensor base = zeros({7, 40});
  expect_host(scatter_add(base, 0, idx, src), scatter_reference(Host(base), 0, Host(idx), &hs, 1));
  expect_host(scatter(base, 0, idx, src), scatter_reference(Host(base), 0, Host(idx), &hs, 0));
}

TEST(GatherScatter, Gradients) {
  Tensor x = random_tensor({3, 4}, 27).requires_grad_();
  Tensor idx = from_data<int64_t>({0, 3, 3, 1, 2, 2, 0, 0}, {2, 4});
  expect_gradcheck([&](const TensorList& in) { return gather(in[0], 1, idx); }, {x});
  expect_gradcheck([&](const TensorList& in) { return gather(in[0], 0, from_data<int64_t>({2, 0, 1, 1}, {1, 4})); },
                   {x});
  expect_double_backward([&](const Tensor& t) { return gather(t, 1, idx); }, x);
  Tensor src = random_tensor({2, 5}, 28).requires_grad_();
  Tensor unique = from_data<int64_t>({3, 0, 1, 2, 2, 1, 0, 3}, {2, 4});
  expect_gradcheck([&](const TensorList& in) { return scatter(in[0], 1, unique, in[1]); }, {x, src});
  expect_gradcheck([&](const TensorList& in) { return scatter_add(in[0], 1, idx, in[1]); }, {x, src});
  expect_gradcheck([&](const TensorList& in) { return scatter(in[0], 1, idx, 2.5); }, {x});
  expect_double_backward([&](const Tensor& t) { return scatter_add(t, 1, idx, mul(t.detach(), 1.0)); }, x);
  expect_double_backward([&](const Tensor& s) { return scatter(x.detach(), 1, unique, s); }, src);
}

TEST(GatherScatter, BadInput) {
  Tensor m = zeros({2, 3});
  Tensor i = from_data<int64_t>({0, 3}, {2, 1});
  EXPECT_THROW(gather(m, 1, i), IndexError);
  EXPECT_THROW(gather(m, 1, from_data<int64_t>({0, -1}, {2, 1})), IndexError);
  EXPECT_THROW(gather(m, 0, from_data<int64_t>({2}, {1, 1})), IndexError);
  EXPECT_THROW(gather(m, 2, from_data<int64_t>({0}, {1, 1})), IndexError);
  EXPECT_THROW(gather(m, 1, from_data<int64_t>({0}, {1})), ShapeError);
  EXPECT_THROW(gather(m, 1, from_data<int64_t>({0, 0, 0}, {3, 1})), ShapeError);
  EXPECT_THROW(gather(m, 1, zeros({2, 1})), TypeError);
  Tensor src = ones({2, 1});
  EXPECT_THROW(scatter(m, 1, i, src), IndexError);
  EXPECT_THROW(scatter(m, 1, from_data<int64_t>({-1, 0}, {2, 1}), src), IndexError);
  EXPECT_THROW(scatter(m, 1, i, 1.0), IndexError);
  EXPECT_THROW(scatter_add(m, 1, i, src), IndexError);
  EXPECT_THROW(scatter_add(m, 0, from_data<int64_t>({0, 2}, {2, 1}), src), IndexError);
  EXPECT_THROW(scatter(m, 1, from_data<int64_t>({0, 0}, {1, 2}), src), ShapeError);  // index wider than src
  EXPECT_THROW(scatter(m, 1, from_data<int64_t>({0, 0}, {2, 1}), ones({2, 1}, {.dtype = kFloat64})), TypeError);
  EXPECT_THROW(scatter_add(m, 1, from_data<int64_t>({0, 0}, {2}), src), ShapeError);
}

// --- masked_select / nonzero -----------------------------------------------------------

TEST(MaskedSelect, ValuesBroadcastGrad) {
  Tensor m = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor mask = from_vector({1, 0, 1, 0, 0, 1}, {2, 3}, {.dtype = kBool});
  expect_values(masked_select(m, mask), {1, 3, 6});
  Tensor row_mask = from_vector({0, 1, 1}, {3}, {.dtype = kBool});
  expect_values(masked_select(m, row_mask), {2, 3, 5, 6});
  expect_values(masked_select(from_vector({7, 8}, {2, 1}), row_mask), {7, 7, 8, 8});
  expect_values(masked_select(full({}, 2.0), full({}, true, {.dtype = kBool})), {2});
  EXPECT_EQ(masked_select(m, zeros({2, 3}, {.dtype = kBool})).sizes(), (Shape{0}));
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({3, 4}, 30, dt);
    Tensor mk = random_values({3, 4}, 31, kBool);
    std::vector<double> xv = values(x), mv = values(mk), expected;
    for (size_t k = 0; k < xv.size(); ++k)
      if (mv[k] != 0) expected.push_back(xv[k]);
    Tensor got = masked_select(non_contiguous(x), non_contiguous(mk));
    EXPECT_EQ(got.dtype(), dt);
    expect_values(got, expected);
  }
  Tensor x = random_tensor({2, 3}, 32).requires_grad_();
  expect_gradcheck([&](const TensorList& in) { return masked_select(in[0], mask); }, {x});
  expect_double_backward([&](const Tensor& t) { return masked_select(t, mask); }, x);
  Tensor v = random_tensor({3}, 33).requires_grad_();
  expect_gradcheck([&](const TensorList& in) { return masked_select(in[0], mask); }, {v});
  expect_gradcheck([&](const TensorList& in) { return masked_select(in[0], row_mask); }, {x});
  EXPECT_THROW(masked_select(m, zeros({2, 3})), TypeError);
  EXPECT_THROW(masked_select(m, zeros({4}, {.dtype = kBool})), ShapeError);
}

TEST(Nonzero, ValuesEveryDtype) {
  Tensor m = from_vector({0, 1, 0, 2, 0, 3}, {2, 3});
  Tensor nz = nonzero(m);
  EXPECT_EQ(nz.dtype(), kInt64);
  EXPECT_EQ(nz.sizes(), (Shape{3, 2}));
  expect_values(nz, {0, 1, 1, 0, 1, 2});
  EXPECT_EQ(nonzero(zeros({3})).sizes(), (Shape{0, 1}));
  EXPECT_EQ(nonzero(full({}, 5.0)).sizes(), (Shape{1, 0}));
  EXPECT_EQ(nonzero(zeros({})).sizes(), (Shape{0, 0}));
  expect_values(nonzero(from_vector({NAN, 0}, {2})), {0});
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({3, 4, 2}, 34, dt);
    Host h(x);
    std::vector<double> expected;
    for (int64_t f = 0; f < h.numel(); ++f)
      if (h.v[size_t(f)] != 0)
        for (int64_t c : unravel(f, h.shape)) expected.push_back(double(c));
    Tensor got = nonzero(non_contiguous(x));
    EXPECT_EQ(got.size(1), 3);
    expect_values(got, expected);
  }
  // Enough elements for the parallel count/write split.
  Tensor big = random_values({300, 400}, 35, kInt32);
  Host hb(big);
  std::vector<double> expected;
  for (int64_t f = 0; f < hb.numel(); ++f)
    if (hb.v[size_t(f)] != 0) expected.insert(expected.end(), {double(f / 400), double(f % 400)});
  expect_values(nonzero(big), expected);
}

}  // namespace
}  // namespace mf
