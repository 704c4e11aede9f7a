// sort (stable), argsort, topk.
#include <algorithm>
#include <numeric>

#include "ops/host_ref.h"

namespace mf {
namespace {
using namespace testing;

// Reference: stable order of one line, NaN largest.
std::vector<int64_t> reference_order(const std::vector<double>& line, bool descending) {
  std::vector<int64_t> order(line.size());
  std::iota(order.begin(), order.end(), 0);
  auto key_less = [](double a, double b) { return std::isnan(b) ? !std::isnan(a) : a < b; };
  std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
    return descending ? key_less(line[size_t(j)], line[size_t(i)]) : key_less(line[size_t(i)], line[size_t(j)]);
  });
  return order;
}

// Checks values/indices of sort (keep = n) or topk along dim against the reference.
void check_along_dim(const Tensor& x, const ValuesIndices& got, int64_t dim, int64_t keep, bool descending,
                     bool sorted = true) {
  Host h(x);
  Shape out_shape = x.sizes();
  out_shape[size_t(dim)] = keep;
  ASSERT_EQ(got.values.sizes(), out_shape);
  ASSERT_EQ(got.indices.sizes(), out_shape);
  ASSERT_EQ(got.indices.dtype(), kInt64);
  ASSERT_EQ(got.values.dtype(), x.dtype());
  Host values_expected(out_shape), indices_expected(out_shape);
  Shape line_shape = x.sizes();
  line_shape[size_t(dim)] = 1;
  const int64_t n = x.size(dim);
  for (int64_t l = 0; l < shape_numel(line_shape); ++l) {
    Shape idx = unravel(l, line_shape);
    std::vector<double> line;
    for (int64_t j = 0; j < n; ++j) {
      idx[size_t(dim)] = j;
      line.push_back(h.at(idx));
    }
    std::vector<int64_t> order = reference_order(line, descending);
    order.resize(size_t(keep));
    if (!sorted) std::sort(order.begin(), order.end());
    for (int64_t j = 0; j < keep; ++j) {
      idx[size_t(dim)] = j;
      values_expected.at(idx) = line[size_t(order[size_t(j)])];
      indices_expected.at(idx) = double(order[size_t(j)]);
    }
  }
  expect_host(got.values, values_expected);
  expect_host(got.indices, indices_expected);
}

TEST(Sort, HandValues) {
  Tensor v = from_vector({3, 1, 2, 1}, {4});
  auto r = sort(v);
  expect_values(r.values, {1, 1, 2, 3});
  expect_values(r.indices, {1, 3, 2, 0});  // stable: the first 1 stays first
  auto d = sort(v, 0, true);
  expect_values(d.values, {3, 2, 1, 1});
  expect_values(d.indices, {0, 2, 1, 3});
  expect_values(argsort(v), {1, 3, 2, 0});
  Tensor nan = from_vector({2, NAN, -1, NAN}, {4});
  auto n = sort(nan);
  expect_values(n.indices, {2, 0, 1, 3});
  expect_values(sort(nan, 0, true).indices, {1, 3, 0, 2});
  auto s = sort(full({}, 4.0));
  EXPECT_EQ(s.values.dim(), 0);
  expect_values(s.indices, {0});
  EXPECT_EQ(sort(zeros({0, 3}), 0).values.sizes(), (Shape{0, 3}));
  EXPECT_THROW(sort(v, 1), IndexError);
}

TEST(Sort, RandomEveryDtypeAndDim) {
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({3, 5, 4}, 17, dt);  // small integers: many ties
    for (int64_t dim = 0; dim < 3; ++dim)
      for (bool desc : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " dim " + std::to_string(dim) + (desc ? " desc" : " asc"));
        check_along_dim(x, sort(non_contiguous(x), dim, desc), dim, x.size(dim), desc);
      }
    expect_host(argsort(x, -1, true), Host(sort(x, 2, true).indices));
  }
}

TEST(TopK, HandValues) {
  Tensor v = from_vector({1, 5, 3, 5, 2}, {5});
  auto t = topk(v, 2);
  expect_values(t.values, {5, 5});
  expect_values(t.indices, {1, 3});
  auto s = topk(v, 3, 0, false);
  expect_values(s.values, {1, 2, 3});
  expect_values(s.indices, {0, 4, 2});
  auto u = topk(v, 3, 0, true, false);  // unsorted: input order
  expect_values(u.indices, {1, 2, 3});
  expect_values(u.values, {5, 3, 5});
  EXPECT_EQ(topk(v, 0).values.sizes(), (Shape{0}));
  expect_values(topk(from_vector({1, NAN, 3}, {3}), 1).indices, {1});
  auto z = topk(full({}, 2.0), 1);
  EXPECT_EQ(z.values.dim(), 0);
  EXPECT_THROW(topk(v, 6), IndexError);
  EXPECT_THROW(topk(v, -1), IndexError);
  EXPECT_THROW(topk(v, 1, 1), IndexError);
}

TEST(TopK, RandomEveryDtype) {
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({4, 6}, 23, dt);
    for (int64_t dim = 0; dim < 2; ++dim)
      for (int64_t k : {int64_t(1), x.size(dim) / 2, x.size(dim)})
        for (bool largest : {true, false}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " dim " + std::to_string(dim) + " k " + std::to_string(k));
          check_along_dim(x, topk(non_contiguous(x), k, dim, largest), dim, k, largest);
          check_along_dim(x, topk(x, k, dim, largest, false), dim, k, largest, false);
        }
  }
}

TEST(Sort, Gradients) {
  Tensor x = random_tensor({3, 5}, 29).requires_grad_();
  expect_gradcheck([](const TensorList& in) { return sort(in[0], 1).values; }, {x});
  expect_gradcheck([](const TensorList& in) { return sort(in[0], 0, true).values; }, {x});
  expect_gradcheck([](const TensorList& in) { return topk(in[0], 2, 1).values; }, {x});
  expect_gradcheck([](const TensorList& in) { return topk(in[0], 2, 0, false, false).values; }, {x});
  expect_double_backward([](const Tensor& t) { return topk(t, 3, 1).values; }, x);
  Tensor a = sort(x, 1).indices;
  EXPECT_FALSE(a.requires_grad());
}

}  // namespace
}  // namespace mf
