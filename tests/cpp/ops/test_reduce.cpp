// Reductions: sum, mean, prod, all, any, amax/amin, max/min, argmax/argmin,
// var/std, norm, logsumexp, cumsum. Each is checked against hand-derived
// values and against float64 reference loops over several memory layouts.
#include <algorithm>
#include <numeric>

#include "test_util.h"

namespace mf {
namespace {
using testing::expect_gradcheck;
using testing::expect_values;
using testing::random_tensor;
using testing::values;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The elements of x that each output of a reduction over dims combines, in
// output order (dims empty: all).
std::vector<std::vector<double>> groups(const Tensor& x, Shape dims) {
  const std::vector<double> v = values(x);
  const Shape& sizes = x.sizes();
  const int64_t nd = x.dim();
  if (dims.empty())
    for (int64_t d = 0; d < nd; ++d) dims.push_back(d);
  for (auto& d : dims) d = d < 0 ? d + nd : d;
  Shape out_strides(size_t(nd), 0);
  int64_t num_out = 1;
  for (int64_t d = nd - 1; d >= 0; --d) {
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) continue;
    out_strides[size_t(d)] = num_out;
    num_out *= sizes[size_t(d)];
  }
  std::vector<std::vector<double>> g(static_cast<size_t>(num_out));
  for (int64_t i = 0; i < int64_t(v.size()); ++i) {
    int64_t rem = i, o = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      o += (rem % sizes[size_t(d)]) * out_strides[size_t(d)];
      rem /= sizes[size_t(d)];
    }
    g[size_t(o)].push_back(v[size_t(i)]);
  }
  return g;
}

// expect_values that also accepts infinities (which must match exactly).
void expect_extended(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(expected[i])) EXPECT_EQ(got[i], expected[i]) << "element " << i;
    else if (std::isnan(expected[i])) EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
    else EXPECT_NEAR(got[i], expected[i], tol * (1 + std::fabs(expected[i]))) << "element " << i;
  }
}

using GroupFn = std::function<double(const std::vector<double>&)>;

std::vector<double> reference(const Tensor& x, const Shape& dims, const GroupFn& f) {
  std::vector<double> out;
  for (const auto& g : groups(x, dims)) out.push_back(f(g));
  return out;
}

Shape expected_shape(const Shape& sizes, Shape dims, bool keepdim) {
  const int64_t nd = int64_t(sizes.size());
  if (dims.empty())
    for (int64_t d = 0; d < nd; ++d) dims.push_back(d);
  for (auto& d : dims) d = d < 0 ? d + nd : d;
  Shape out;
  for (int64_t d = 0; d < nd; ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) out.push_back(sizes[size_t(d)]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// A random tensor of the given shape; with `binary`, values are 1 where the
// uniform draw is positive and 0 elsewhere.
Tensor random_values(const Shape& shape, uint32_t seed, double lo, double hi, DType dtype, bool binary) {
  if (!binary) return random_tensor(shape, seed, lo, hi, dtype);
  std::vector<double> v = values(random_tensor(shape, seed, lo, hi));
  for (auto& x : v) x = x > 0 ? 1 : 0;
  return from_vector(v, shape, {.dtype = dtype});
}

// The same kind of random (3, 4, 5) data in several layouts: contiguous, a
// permuted view, a strided slice and an expanded (stride 0) view.
std::vector<std::pair<std::string, Tensor>> layouts(uint32_t seed, double lo = -1.0, double hi = 1.0,
                                                    DType dtype = DType::Float64, bool binary = false) {
  auto make = [&](const Shape& shape, uint32_t s) { return random_values(shape, s, lo, hi, dtype, binary); };
  return {
      {"contiguous", make({3, 4, 5}, seed)},
      {"permuted", permute(make({5, 3, 4}, seed + 1), {1, 2, 0})},
      {"sliced", slice(make({3, 8, 5}, seed + 2), 1, 0, 8, 2)},
      {"transposed", transpose(make({5, 4, 3}, seed + 3), 0, 2)},
      {"expanded", expand(make({3, 1, 5}, seed + 4), {3, 4, 5})},
  };
}

const std::vector<Shape> kDimSets = {{}, {0}, {1}, {2}, {-1}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};

using ReduceFn = std::function<Tensor(const Tensor&, const Shape&, bool)>;

// op over every layout, dim set and keepdim against the reference f.
void check_layouts(const ReduceFn& op, const GroupFn& f, double tol = 1e-12, double lo = -1.0, double hi = 1.0) {
  for (const auto& [name, x] : layouts(7, lo, hi))
    for (const Shape& dims : kDimSets)
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(name + " dims " + shape_str(dims) + (keepdim ? " keepdim" : ""));
        Tensor got = op(x, dims, keepdim);
        EXPECT_EQ(got.sizes(), expected_shape(x.sizes(), dims, keepdim));
        expect_values(got, reference(x, dims, f), tol, tol);
      }
}

double sum_of(const std::vector<double>& g) { return std::accumulate(g.begin(), g.end(), 0.0); }
double prod_of(const std::vector<double>& g) {
  return std::accumulate(g.begin(), g.end(), 1.0, std::multiplies<double>());
}
double max_of(const std::vector<double>& g) { return *std::max_element(g.begin(), g.end()); }
double min_of(const std::vector<double>& g) { return *std::min_element(g.begin(), g.end()); }
double var_of(const std::vector<double>& g, int64_t correction) {
  const double mean = sum_of(g) / double(g.size());
  double m2 = 0;
  for (double v : g) m2 += (v - mean) * (v - mean);
  return m2 / double(int64_t(g.size()) - correction);
}

const std::vector<DType> kAllDTypes = {kBool,    kUInt8,    kInt8,    kInt16,  kInt32,
                                       kInt64,   kFloat16,  kBFloat16, kFloat32, kFloat64};

// --- sum / mean ------------------------------------------------------------------------

TEST(ReduceSum, HandValues) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(sum(a), {21});
  expect_values(sum(a, {0}), {5, 7, 9});
  expect_values(sum(a, {1}), {6, 15});
  expect_values(sum(a, {-1}, true), {6, 15});
  EXPECT_EQ(sum(a, {1}, true).sizes(), (Shape{2, 1}));
  EXPECT_EQ(sum(a).dim(), 0);
  expect_values(sum(transpose(a, 0, 1), {1}), {5, 7, 9});
}

TEST(ReduceSum, LayoutsAgainstReference) {
  check_layouts([](const Tensor& x, const Shape& d, bool k) { return sum(x, d, k); }, sum_of);
}

TEST(ReduceSum, IntegerAndBoolInputsSumToInt64) {
  Tensor i = from_vector({1, -2, 3, 100, 100, 100}, {2, 3}, {.dtype = kInt8});
  Tensor s = sum(i, {1});
  EXPECT_EQ(s.dtype(), kInt64);
  expect_values(s, {2, 300});  // no int8 overflow: accumulates in int64
  Tensor b = from_vector({1, 0, 1, 1}, {4}, {.dtype = kBool});
  EXPECT_EQ(sum(b).dtype(), kInt64);
  expect_values(sum(b), {3});
  for (DType d : kAllDTypes) {
    SCOPED_TRACE(dtype_name(d));
    Tensor x = to(from_vector({1, 0, 1, 1, 0, 1}, {3, 2}), d);
    EXPECT_EQ(sum(x).dtype(), is_floating(d) ? d : kInt64);
    expect_values(sum(x, {0}), {2, 2});
    expect_values(sum(transpose(x, 0, 1), {1}), {2, 2});
  }
}

TEST(ReduceSum, ExplicitDType) {
  Tensor i = from_vector({1, 2, 3}, {3}, {.dtype = kInt32});
  Tensor s = sum(i, {}, false, kFloat64);
  EXPECT_EQ(s.dtype(), kFloat64);
  expect_values(s, {6});
  Tensor h = full({3000}, 30.0, {.dtype = kFloat16});
  Tensor f = sum(h, {}, false, kFloat32);
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_values(f, {90000});  // beyond float16's range
}

TEST(ReduceSum, HalfAccumulatesInFloat) {
  // 0.1 in float16 is below half an ulp of 256: a float16 accumulator stalls.
  for (DType d : {kFloat16, kBFloat16}) {
    Tensor x = full({20000}, 0.1, {.dtype = d});
    const double exact = 20000 * values(x)[0];
    EXPECT_NEAR(sum(x).item<double>(), exact, exact * 8e-3) << dtype_name(d);
    Tensor m = full({20000, 3}, 0.1, {.dtype = d});
    expect_values(sum(m, {0}), {exact, exact, exact}, 0, 8e-3);
  }
}

// The kernels read float16 with their own (vectorisable) conversion: every
// bit pattern must give the value Half::to_float gives.
TEST(ReduceSum, Float16ReadsEveryPatternExactly) {
  Tensor h = make_empty({65536, 1}, kFloat16);
  Half* p = h.data<Half>();
  for (int64_t i = 0; i < 65536; ++i) p[i] = Half::from_bits(uint16_t(i));
  const std::vector<double> expected = values(reshape(h, {65536}));
  expect_extended(amax(h, {1}), expected, 0);
  expect_extended(mean(h, {1}), expected, 0);
  expect_extended(cumsum(h, 1), expected, 0);
  expect_extended(max(h, 1).values, expected, 0);
}

// float32 sums of a million elements match the float64 sum to ~1e-6
// relative, along inner runs, outer rows and the split-range paths.
TEST(ReduceSum, Float32Accuracy) {
  Tensor x = random_tensor({1000000}, 11, 0.0, 1.0, kFloat32);
  const double exact = sum_of(values(x));
  EXPECT_NEAR(sum(x).item<double>(), exact, exact * 1e-6);
  Tensor rows = reshape(x, {100000, 10});
  expect_values(sum(rows, {0}), reference(rows, {0}, sum_of), 0, 1e-6);
  Tensor cols = reshape(x, {4, 250000});
  expect_values(sum(cols, {1}), reference(cols, {1}, sum_of), 0, 1e-6);
  expect_values(sum(transpose(cols, 0, 1), {0}), reference(cols, {1}, sum_of), 0, 1e-6);
  Tensor wide = reshape(x, {1000, 1000});
  expect_values(sum(wide, {0}), reference(wide, {0}, sum_of), 0, 1e-6);
  expect_values(sum(wide, {1}), reference(wide, {1}, sum_of), 0, 1e-6);
  expect_values(mean(x), {exact / 1e6}, 0, 1e-6);
}

TEST(ReduceSum, SameResultOnAnyThreadCount) {
  Tensor x = random_tensor({3, 300000}, 12, 0.0, 1.0, kFloat32);
  const int threads = get_num_threads();
  set_num_threads(1);
  std::vector<double> one = values(sum(x)), one_rows = values(sum(x, {1})), one_cols = values(sum(x, {0}));
  set_num_threads(2);
  std::vector<double> two = values(sum(x)), two_rows = values(sum(x, {1})), two_cols = values(sum(x, {0}));
  set_num_threads(threads);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one_rows, two_rows);
  EXPECT_EQ(one_cols, two_cols);
}

TEST(ReduceSum, EmptyAndZeroDim) {
  Tensor e = zeros({0, 3});
  expect_values(sum(e), {0});
  expect_values(sum(e, {0}), {0, 0, 0});
  EXPECT_EQ(sum(e, {1}).sizes(), (Shape{0}));
  Tensor s = full({}, 2.5);
  expect_values(sum(s), {2.5});
  expect_values(sum(s, {0}), {2.5});
  EXPECT_EQ(sum(s, {-1}, true).dim(), 0);
  EXPECT_TRUE(std::isnan(mean(e).item<double>()));
  expect_values(mean(s), {2.5});
}

TEST(ReduceSum, BadDims) {
  Tensor a = zeros({2, 3});
  EXPECT_THROW(sum(a, {2}), IndexError);
  EXPECT_THROW(sum(a, {-3}), IndexError);
  EXPECT_THROW(sum(a, {0, -2}), ValueError);
  EXPECT_THROW(mean(zeros({2}, {.dtype = kInt64})), TypeError);
}

TEST(ReduceMean, Values) {
  check_layouts([](const Tensor& x, const Shape& d, bool k) { return mean(x, d, k); },
                [](const std::vector<double>& g) { return sum_of(g) / double(g.size()); });
  Tensor h = full({10, 4}, 60000.0, {.dtype = kFloat16});
  expect_values(mean(h, {0}), {60000, 60000, 60000, 60000}, 0, 1e-3);  // the sum overflows float16
}

TEST(ReduceSum, Gradients) {
  Tensor x = random_tensor({3, 4}, 5).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return sum(v[0], {1}); }, {x});
  expect_gradcheck([](const TensorList& v) { return sum(v[0], {0}, true); }, {x});
  expect_gradcheck([](const TensorList& v) { return mean(v[0], {1}); }, {x});
  expect_gradcheck([](const TensorList& v) { return mean(v[0]); }, {x});
}

// Layouts that coalesce to more dims than the kernel walks directly are
// copied first; the results must not change.
TEST(ReduceSum, ManyUnmergeableDims) {
  Shape shape(14, 2), reversed;
  for (int64_t d = 13; d >= 0; --d) reversed.push_back(d);
  Tensor x = permute(random_tensor(shape, 41), reversed);  // 14 dims, no two mergeable
  for (const Shape& dims : std::vector<Shape>{{13}, {0}, {0, 5, 9}}) {
    SCOPED_TRACE(shape_str(dims));
    expect_values(sum(x, dims), reference(x, dims, sum_of), 1e-12, 1e-12);
    expect_values(amax(x, dims), reference(x, dims, max_of));
  }
  expect_values(max(x, 13).indices,
                reference(x, {13}, [](const std::vector<double>& g) { return double(g[1] > g[0]); }));
  expect_values(argmin(x, 0), reference(x, {0}, [](const std::vector<double>& g) { return double(g[1] < g[0]); }));
  std::vector<double> v = values(x), expected = v;
  // Dim 6 has size 2 and row-major stride 2^7: the second element of each
  // line adds the first.
  for (size_t i = 0; i < v.size(); ++i)
    if ((i >> 7) & 1) expected[i] = v[i] + v[i - (size_t(1) << 7)];
  expect_values(cumsum(x, 6), expected, 1e-12, 1e-12);
}

// --- prod / all / any --------------------------------------------------------------------

TEST(ReduceProd, Values) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(prod(a), {720});
  expect_values(prod(a, 0), {4, 10, 18});
  expect_values(prod(a, 1, true), {6, 120});
  EXPECT_EQ(prod(a, 1, true).sizes(), (Shape{2, 1}));
  for (const auto& [name, x] : layouts(8, 0.5, 1.5))
    for (int64_t d : {0, 1, 2, -1}) {
      SCOPED_TRACE(name);
      expect_values(prod(x, d), reference(x, {d}, prod_of), 1e-12, 1e-12);
    }
  Tensor i = from_vector({2, 3, 4}, {3}, {.dtype = kInt16});
  EXPECT_EQ(prod(i).dtype(), kInt64);
  expect_values(prod(i), {24});
  expect_values(prod(from_vector({1, 0, 1}, {3}, {.dtype = kBool})), {0});
  expect_values(prod(zeros({0, 2}), 0), {1, 1});
  expect_values(prod(zeros({0})), {1});
  expect_values(prod(full({}, 3.0)), {3});
  Tensor h = full({8}, 2.0, {.dtype = kFloat16});
  EXPECT_EQ(prod(h).dtype(), kFloat16);
  expect_values(prod(h), {256});
}

TEST(ReduceLogical, AllAny) {
  Tensor a = from_vector({1, 0, 2, 3, 4, 0.5}, {2, 3});
  expect_values(all(a), {0});
  expect_values(any(a), {1});
  expect_values(all(a, 0), {1, 0, 1});
  expect_values(all(a, 1), {0, 1});
  expect_values(any(zeros({2, 2}), 1, true), {0, 0});
  EXPECT_EQ(any(zeros({2, 2}), 1, true).sizes(), (Shape{2, 1}));
  EXPECT_EQ(all(a).dtype(), kBool);
  EXPECT_EQ(all(to(a, kUInt8)).dtype(), kUInt8);
  expect_values(all(zeros({0})), {1});
  expect_values(any(zeros({0})), {0});
  expect_values(all(from_vector({kNan}, {1})), {1});
  expect_values(all(full({}, 2.0)), {1});
  expect_values(any(full({}, 0.0), 0), {0});
  EXPECT_EQ(any(full({}, 0.0), 0, true).dim(), 0);
  EXPECT_THROW(all(a, 2), IndexError);
  for (DType d : kAllDTypes) {
    SCOPED_TRACE(dtype_name(d));
    Tensor x = to(from_vector({1, 0, 2, 3, 4, 5}, {2, 3}), d);
    expect_values(all(transpose(x, 0, 1), 0), {0, 1});
    expect_values(any(x, 1), {1, 1});
  }
  for (const auto& [name, positive] : layouts(9, -0.2, 1.0, kBool, true)) {
    SCOPED_TRACE(name);
    for (int64_t d : {0, 1, 2}) {
      expect_values(all(positive, d), reference(positive, {d}, [](const std::vector<double>& g) {
                      return double(std::all_of(g.begin(), g.end(), [](double v) { return v != 0; }));
                    }));
      expect_values(any(positive, d), reference(positive, {d}, [](const std::vector<double>& g) {
                      return double(std::any_of(g.begin(), g.end(), [](double v) { return v != 0; }));
                    }));
    }
  }
}

// --- amax / amin / max / min / argmax / argmin -------------------------------------------

// Index of the first maximum (or minimum) of g.
double first_extremum(const std::vector<double>& g, bool is_max) {
  auto it = is_max ? std::max_element(g.begin(), g.end()) : std::min_element(g.begin(), g.end());
  return double(it - g.begin());
}

TEST(ReduceExtremum, HandValues) {
  Tensor a = from_vector({3, 7, 1, 7, -2, 5}, {2, 3});
  expect_values(max(a), {7});
  expect_values(min(a), {-2});
  expect_values(amax(a, {0}), {7, 7, 5});
  expect_values(amin(a, {1}, true), {1, -2});
  EXPECT_EQ(amin(a, {1}, true).sizes(), (Shape{2, 1}));
  auto [v, i] = max(a, 1);
  expect_values(v, {7, 7});
  expect_values(i, {1, 0});
  EXPECT_EQ(i.dtype(), kInt64);
  auto [mv, mi] = min(a, 0, true);
  EXPECT_EQ(mv.sizes(), (Shape{1, 3}));
  expect_values(mv, {3, -2, 1});
  expect_values(mi, {0, 1, 0});
  expect_values(argmax(a), {1});  // the first of the two 7s
  expect_values(argmin(a), {4});
  expect_values(argmax(a, 0), {1, 0, 1});
  expect_values(argmin(a, -1, true), {2, 1});
  EXPECT_EQ(argmin(a, -1, true).sizes(), (Shape{2, 1}));
  EXPECT_EQ(argmax(a).dtype(), kInt64);
}

TEST(ReduceExtremum, TiesGiveTheFirstIndex) {
  Tensor t = full({5, 70}, 2.0);
  auto [v, i] = max(t, 0);
  expect_values(i, std::vector<double>(70, 0.0));
  expect_values(max(t, 1).indices, std::vector<double>(5, 0.0));
  expect_values(argmin(transpose(t, 0, 1), 1), std::vector<double>(70, 0.0));
  expect_values(argmax(t), {0});
}

TEST(ReduceExtremum, NanPropagates) {
  Tensor a = from_vector({1, kNan, 3, kNan, 2, 0}, {2, 3});
  EXPECT_TRUE(std::isnan(max(a).item<double>()));
  EXPECT_TRUE(std::isnan(min(a).item<double>()));
  expect_values(amax(a, {0}), {kNan, kNan, 3});
  expect_values(amin(a, {1}), {kNan, kNan});
  expect_values(argmax(a), {1});
  expect_values(argmin(a), {1});
  auto [v, i] = max(a, 1);
  expect_values(v, {kNan, kNan});
  expect_values(i, {1, 0});
  expect_values(min(a, 0).indices, {1, 0, 1});
  // Along the vectorised lane path (reduced dim outer) and a long line.
  std::vector<double> w(300, 1.0);
  w[150] = kNan;
  w[250] = kNan;
  Tensor wn = from_vector(w, {3, 100});
  expect_values(argmax(wn, 0), reference(wn, {0}, [](const std::vector<double>& g) {
                  for (size_t k = 0; k < g.size(); ++k)
                    if (std::isnan(g[k])) return double(k);
                  return 0.0;
                }));
  EXPECT_EQ(argmin(wn).item<int64_t>(), 150);
  for (DType d : {kFloat16, kBFloat16, kFloat32}) {
    Tensor h = to(a, d);
    EXPECT_TRUE(std::isnan(amax(h).item<double>())) << dtype_name(d);
    expect_values(argmax(h, 1), {1, 0});
  }
}

TEST(ReduceExtremum, LayoutsAgainstReference) {
  check_layouts([](const Tensor& x, const Shape& d, bool k) { return amax(x, d, k); }, max_of);
  check_layouts([](const Tensor& x, const Shape& d, bool k) { return amin(x, d, k); }, min_of);
  for (const auto& [name, x] : layouts(13)) {
    SCOPED_TRACE(name);
    expect_values(max(x), {max_of(values(x))});
    expect_values(min(x), {min_of(values(x))});
    expect_values(argmax(x), {first_extremum(values(x), true)});
    expect_values(argmin(x), {first_extremum(values(x), false)});
    for (int64_t d : {0, 1, 2, -1})
      for (bool keepdim : {false, true}) {
        auto [v, i] = max(x, d, keepdim);
        EXPECT_EQ(v.sizes(), expected_shape(x.sizes(), {d}, keepdim));
        EXPECT_EQ(i.sizes(), v.sizes());
        expect_values(v, reference(x, {d}, max_of));
        expect_values(i, reference(x, {d}, [](const std::vector<double>& g) { return first_extremum(g, true); }));
        auto [mv, mi] = min(x, d, keepdim);
        expect_values(mv, reference(x, {d}, min_of));
        expect_values(mi, reference(x, {d}, [](const std::vector<double>& g) { return first_extremum(g, false); }));
        expect_values(argmax(x, d, keepdim),
                      reference(x, {d}, [](const std::vector<double>& g) { return first_extremum(g, true); }));
        expect_values(argmin(x, d, keepdim),
                      reference(x, {d}, [](const std::vector<double>& g) { return first_extremum(g, false); }));
      }
  }
}

TEST(ReduceExtremum, LongLinesSplitOverChunks) {
  // Few outputs with long lines take the chunked path; the winner must be
  // the first occurrence across chunk boundaries.
  const int64_t n = 300000;
  std::vector<double> v(size_t(2 * n), 0.0);
  v[size_t(200000)] = 5;
  v[size_t(250000)] = 5;
  v[size_t(n + 10)] = -3;
  v[size_t(n + 299999)] = -3;
  Tensor x = from_vector(v, {2, n}, {.dtype = kFloat32});
  auto [mv, mi] = max(x, 1);
  expect_values(mv, {5, 0});
  expect_values(mi, {200000, 0});
  expect_values(argmin(x, 1), {0, 10});
  EXPECT_EQ(argmax(x).item<int64_t>(), 200000);
  EXPECT_EQ(argmin(x).item<int64_t>(), n + 10);
  expect_values(amax(x, {1}), {5, 0});
  expect_values(amin(transpose(x, 0, 1), {0}), {0, -3});
}

TEST(ReduceExtremum, AllDTypes) {
  for (DType d : kAllDTypes) {
    SCOPED_TRACE(dtype_name(d));
    Tensor x = to(from_vector({0, 1, 1, 0, 1, 0}, {2, 3}), d);
    EXPECT_EQ(amax(x).dtype(), d);
    expect_values(amax(x, {0}), {0, 1, 1});
    expect_values(amin(x, {1}), {0, 0});
    auto [v, i] = max(transpose(x, 0, 1), 1);
    EXPECT_EQ(v.dtype(), d);
    expect_values(v, {0, 1, 1});
    expect_values(i, {0, 0, 0});
    expect_values(min(x, 1).indices, {0, 0});
    if (d != kBool) {
      expect_values(argmax(x), {1});
      expect_values(argmin(x, 1), {0, 0});
    }
  }
  Tensor i8 = from_vector({-128, 127, -5}, {3}, {.dtype = kInt8});
  expect_values(max(i8), {127});
  expect_values(min(i8), {-128});
  Tensor i64 = from_data<int64_t>({int64_t(1) << 62, -(int64_t(1) << 62), 3}, {3});
  EXPECT_EQ(max(i64).item<int64_t>(), int64_t(1) << 62);
  EXPECT_EQ(argmin(i64).item<int64_t>(), 1);
}

TEST(ReduceExtremum, EmptyAndZeroDim) {
  Tensor e = zeros({0, 3});
  EXPECT_THROW(max(e), Error);
  EXPECT_THROW(amin(e), Error);
  EXPECT_THROW(argmax(e), IndexError);
  EXPECT_THROW(max(e, 0), IndexError);
  EXPECT_THROW(amax(e, {0}), IndexError);
  EXPECT_THROW(argmin(e, 0), IndexError);
  EXPECT_EQ(amax(e, {1}).sizes(), (Shape{0}));
  auto [v, i] = max(e, 1);
  EXPECT_EQ(v.sizes(), (Shape{0}));
  EXPECT_EQ(i.sizes(), (Shape{0}));
  EXPECT_EQ(argmax(e, 1).sizes(), (Shape{0}));
  Tensor s = full({}, 4.0);
  expect_values(max(s), {4});
  expect_values(amax(s, {0}), {4});
  auto [sv, si] = min(s, 0);
  EXPECT_EQ(sv.dim(), 0);
  expect_values(sv, {4});
  expect_values(si, {0});
  expect_values(argmax(s), {0});
  expect_values(argmax(s, -1), {0});
}

TEST(ReduceExtremum, BadInput) {
  Tensor a = zeros({2, 3});
  EXPECT_THROW(max(a, 2), IndexError);
  EXPECT_THROW(argmax(a, -3), IndexError);
  EXPECT_THROW(amax(a, {0, 0}), ValueError);
  EXPECT_THROW(argmax(zeros({2}, {.dtype = kBool})), TypeError);
}

// --- var / std / norm / logsumexp --------------------------------------------------------

TEST(ReduceStats, VarStdHandValues) {
  Tensor a = from_vector({1, 2, 3, 4}, {4});
  expect_values(var(a), {5.0 / 3.0});
  expect_values(var(a, {}, 0), {1.25});
  expect_values(std(a), {std::sqrt(5.0 / 3.0)});
  expect_values(std(a, {0}, 0, true), {std::sqrt(1.25)});
  EXPECT_EQ(std(a, {0}, 0, true).sizes(), (Shape{1}));
  Tensor m = from_vector({1, 2, 3, 4, 6, 8}, {2, 3});
  expect_values(var(m, {1}), {1, 4});
  expect_values(var(m, {0}), {4.5, 8, 12.5});
  expect_values(var(m, {1}, 2), {2, 8});
  // A large offset does not swamp the variance (two-pass).
  Tensor shifted = add(random_tensor({1000}, 3, 0, 1, kFloat32), 1e4);
  expect_values(var(shifted), {var_of(values(shifted), 1)}, 0, 1e-3);
}

TEST(ReduceStats, VarStdAgainstReference) {
  for (int64_t correction : {0, 1, 2}) {
    SCOPED_TRACE(correction);
    check_layouts([=](const Tensor& x, const Shape& d, bool k) { return var(x, d, correction, k); },
                  [=](const std::vector<double>& g) { return var_of(g, correction); }, 1e-10);
    check_layouts([=](const Tensor& x, const Shape& d, bool k) { return std(x, d, correction, k); },
                  [=](const std::vector<double>& g) { return std::sqrt(var_of(g, correction)); }, 1e-10);
  }
}

TEST(ReduceStats, VarEdgeCases) {
  EXPECT_TRUE(std::isnan(var(full({1}, 3.0)).item<double>()));  // n - correction = 0
  expect_values(var(full({1}, 3.0), {}, 0), {0});
  EXPECT_TRUE(std::isnan(var(zeros({0})).item<double>()));
  expect_values(std(zeros({0, 2}), {0}), {kNan, kNan});
  expect_values(var(full({}, 2.0), {}, 0), {0});
  for (DType d : {kFloat16, kBFloat16, kFloat32}) {
    Tensor x = to(from_vector({1, 2, 3, 4}, {2, 2}), d);
    EXPECT_EQ(var(x).dtype(), d);
    expect_values(var(x, {1}), {0.5, 0.5}, 1e-3, 1e-2);
  }
  EXPECT_THROW(var(zeros({3}, {.dtype = kInt32})), TypeError);
  EXPECT_THROW(std(zeros({3}, {.dtype = kBool})), TypeError);
  EXPECT_THROW(var(zeros({3}), {1}), IndexError);
}

TEST(ReduceStats, NormValues) {
  Tensor a = from_vector({3, -4, 0, 12}, {2, 2});
  expect_values(norm(a), {13});
  expect_values(norm(a, 1), {19});
  expect_values(norm(a, kInf), {12});
  expect_values(norm(a, -kInf), {0});
  expect_extended(norm(from_vector({1, -kInf}, {2})), {kInf});
  expect_values(norm(a, 0), {3});
  expect_values(norm(a, 2, {1}), {5, 12});
  expect_values(norm(a, 2, {0}, true), {3, std::sqrt(160.0)});
  EXPECT_EQ(norm(a, 2, {0}, true).sizes(), (Shape{1, 2}));
  for (double p : {0.0, 0.5, 1.0, 2.0, 3.0, -1.5, kInf, -kInf}) {
    SCOPED_TRACE(p);
    check_layouts([=](const Tensor& x, const Shape& d, bool k) { return norm(x, p, d, k); },
                  [=](const std::vector<double>& g) {
                    if (std::isinf(p)) {
                      double r = p > 0 ? 0 : kInf;
                      for (double v : g) r = p > 0 ? std::max(r, std::fabs(v)) : std::min(r, std::fabs(v));
                      return r;
                    }
                    double s = 0;
                    for (double v : g) s += p == 0 ? double(v != 0) : std::pow(std::fabs(v), p);
                    return p == 0 ? s : std::pow(s, 1.0 / p);
                  },
                  1e-10);
  }
}

TEST(ReduceStats, NormEdgeCases) {
  // The norm of nothing is 0 for every p (torch.norm).
  for (double p : {2.0, 1.0, 0.0, 3.0, -1.5, kInf, -kInf}) {
    SCOPED_TRACE(p);
    expect_values(norm(zeros({0}), p), {0});
    expect_values(norm(zeros({0, 3}), p, {0}), {0, 0, 0});
    EXPECT_EQ(norm(zeros({0, 3}), p, {1}).sizes(), (Shape{0}));
  }
  expect_values(norm(full({}, -2.0)), {2});
  for (DType d : {kFloat16, kBFloat16}) {
    Tensor h = full({100}, 30.0, {.dtype = d});
    EXPECT_EQ(norm(h).dtype(), d);
    expect_values(norm(h), {300}, 0, 1e-2);  // the sum of squares exceeds float16's range
  }
  EXPECT_THROW(norm(zeros({3}, {.dtype = kInt64})), TypeError);
}

TEST(ReduceStats, LogSumExp) {
  Tensor a = from_vector({0, std::log(3.0), 1000, 1000}, {2, 2});
  expect_values(logsumexp(a, {1}), {std::log(4.0), 1000 + std::log(2.0)});
  expect_extended(logsumexp(from_vector({-kInf, -kInf}, {2}), {0}), {-kInf});
  expect_extended(logsumexp(from_vector({kInf, 1}, {2}), {0}), {kInf});
  expect_extended(logsumexp(from_vector({-kInf, 2}, {2}), {0}), {2});
  expect_extended(logsumexp(zeros({0, 2}), {0}), {-kInf, -kInf});
  expect_values(logsumexp(full({}, 1.5), {0}), {1.5});
  check_layouts([](const Tensor& x, const Shape& d, bool k) { return logsumexp(x, d, k); },
                [](const std::vector<double>& g) {
                  double s = 0;
                  for (double v : g) s += std::exp(v);
                  return std::log(s);
                },
                1e-10, -5, 5);
  Tensor i = from_vector({1, 2}, {2}, {.dtype = kInt64});
  EXPECT_EQ(logsumexp(i, {0}).dtype(), kFloat32);
  expect_values(logsumexp(i, {0}), {std::log(std::exp(1.0) + std::exp(2.0))});
  Tensor h = from_vector({1, 2, 3}, {3}, {.dtype = kFloat16});
  EXPECT_EQ(logsumexp(h, {0}).dtype(), kFloat16);
  expect_values(logsumexp(h, {0}), {std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0))}, 0, 2e-3);
}

// --- cumsum ------------------------------------------------------------------------------

std::vector<double> cumsum_reference(const Tensor& x, int64_t dim) {
  std::vector<double> v = values(x);
  const Shape& sz = x.sizes();
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= sz[size_t(d)];
  const int64_t n = sz[size_t(dim)], outer = x.numel() / std::max<int64_t>(1, n * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j)
      for (int64_t i = 1; i < n; ++i) v[size_t((o * n + i) * inner + j)] += v[size_t((o * n + i - 1) * inner + j)];
  return v;
}

TEST(ReduceCumsum, Values) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(cumsum(a, 1), {1, 3, 6, 4, 9, 15});
  expect_values(cumsum(a, 0), {1, 2, 3, 5, 7, 9});
  expect_values(cumsum(a, -1), {1, 3, 6, 4, 9, 15});
  for (const auto& [name, x] : layouts(21))
    for (int64_t d : {0, 1, 2}) {
      SCOPED_TRACE(name + " dim " + std::to_string(d));
      Tensor got = cumsum(x, d);
      EXPECT_EQ(got.sizes(), x.sizes());
      expect_values(got, cumsum_reference(x, d), 1e-12, 1e-12);
    }
  Tensor wide = random_tensor({7, 200}, 22);
  expect_values(cumsum(wide, 0), cumsum_reference(wide, 0), 1e-12, 1e-12);
  expect_values(cumsum(transpose(wide, 0, 1), 1), cumsum_reference(contiguous(transpose(wide, 0, 1)), 1), 1e-12,
                1e-12);
}

TEST(ReduceCumsum, DTypes) {
  Tensor i = from_vector({100, 100, 100}, {3}, {.dtype = kInt8});
  EXPECT_EQ(cumsum(i, 0).dtype(), kInt64);
  expect_values(cumsum(i, 0), {100, 200, 300});
  Tensor b = from_vector({1, 0, 1}, {3}, {.dtype = kBool});
  EXPECT_EQ(cumsum(b, 0).dtype(), kInt64);
  expect_values(cumsum(b, 0), {1, 1, 2});
  EXPECT_EQ(cumsum(i, 0, kFloat32).dtype(), kFloat32);
  for (DType d : kAllDTypes) {
    SCOPED_TRACE(dtype_name(d));
    Tensor x = to(from_vector({1, 0, 1, 1}, {2, 2}), d);
    expect_values(cumsum(x, 0), {1, 0, 2, 1});
    EXPECT_EQ(cumsum(x, 1).dtype(), is_floating(d) ? d : kInt64);
  }
  // float32 accumulates in double: a million small increments stay exact.
  Tensor f = full({1 << 20}, 0.1, {.dtype = kFloat32});
  const double step = values(f)[0];
  EXPECT_NEAR(values(cumsum(f, 0)).back(), step * double(1 << 20), 1e-6 * step * double(1 << 20));
}

TEST(ReduceCumsum, EdgeCases) {
  EXPECT_EQ(cumsum(zeros({0, 3}), 0).sizes(), (Shape{0, 3}));
  EXPECT_EQ(cumsum(zeros({3, 0}), 0).sizes(), (Shape{3, 0}));
  expect_values(cumsum(full({}, 2.0), 0), {2});
  EXPECT_EQ(cumsum(full({}, 2.0), 0).dim(), 0);
  EXPECT_THROW(cumsum(zeros({2, 2}), 2), IndexError);
}

TEST(ReduceCumsum, Gradients) {
  Tensor x = random_tensor({3, 4}, 23).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return cumsum(v[0], 1); }, {x});
  expect_gradcheck([](const TensorList& v) { return cumsum(v[0], 0); }, {x});
  expect_gradcheck([](const TensorList& v) { return cumsum(transpose(v[0], 0, 1), 1); }, {x});
}

// --- backward ----------------------------------------------------------------------------

// d(sum(f(x)))/dx for x given as values.
Tensor grad_of(const std::function<Tensor(const Tensor&)>& f, const std::vector<double>& x, const Shape& shape) {
  Tensor t = from_vector(x, shape, {.dtype = kFloat64, .requires_grad = true});
  sum(f(t)).backward();
  return t.grad();
}

TEST(ReduceGrad, Prod) {
  Tensor x = random_tensor({3, 4}, 31, 0.5, 1.5).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return prod(v[0]); }, {x});
  expect_gradcheck([](const TensorList& v) { return prod(v[0], 0); }, {x});
  expect_gradcheck([](const TensorList& v) { return prod(v[0], -1, true); }, {x});
  // Rows with no, one, two and three zeros (prod is multilinear, so central
  // differences are exact at zeros too).
  Tensor z = from_vector({2, 0.5, 3, 1.5, 2, 0, 3, 1.5, 0, 0, 4, 1.5, 0, 0, 0, 2}, {4, 4}, {.dtype = kFloat64});
  z.requires_grad_();
  expect_gradcheck([](const TensorList& v) { return prod(v[0], 1); }, {z});
  expect_gradcheck([](const TensorList& v) { return prod(transpose(v[0], 0, 1), 0); }, {z});
  expect_values(grad_of([](const Tensor& t) { return prod(t); }, {2, 0, 3}, {3}), {0, 6, 0});
  expect_values(grad_of([](const Tensor& t) { return prod(t); }, {0, 0, 3}, {3}), {0, 0, 0});
  expect_values(grad_of([](const Tensor& t) { return prod(t); }, {2, 4}, {2}), {4, 2});
  expect_values(grad_of([](const Tensor& t) { return prod(t, 0); }, {5}, {}), {1});
}

TEST(ReduceGrad, ProdDoubleBackwardAtZeros) {
  // sum of d prod / d x_i = x1 x2 + x0 x2 + x0 x1; its gradient is
  // (x1 + x2, x0 + x2, x0 + x1).
  for (const auto& x : std::vector<std::vector<double>>{{2, 3, 4}, {0, 3, 4}, {0, 0, 4}, {0, 0, 0}}) {
    Tensor t = from_vector(x, {3}, {.dtype = kFloat64, .requires_grad = true});
    TensorList g = autograd::grad({prod(t)}, {t}, {}, {}, true);
    TensorList gg = autograd::grad({sum(g[0])}, {t});
    expect_values(gg[0], {x[1] + x[2], x[0] + x[2], x[0] + x[1]});
  }
}

TEST(ReduceGrad, Extremum) {
  Tensor x = random_tensor({3, 4, 5}, 32).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return amax(v[0], {1}); }, {x});
  expect_gradcheck([](const TensorList& v) { return amin(v[0], {0, 2}, true); }, {x});
  expect_gradcheck([](const TensorList& v) { return max(v[0]); }, {x});
  expect_gradcheck([](const TensorList& v) { return min(v[0]); }, {x});
  expect_gradcheck([](const TensorList& v) { return max(v[0], 2).values; }, {x});
  expect_gradcheck([](const TensorList& v) { return min(v[0], 0, true).values; }, {x});
  expect_gradcheck([](const TensorList& v) { return max(transpose(v[0], 0, 2), 1).values; }, {x});
  // Ties: amax and max() split the gradient, max(dim) picks the first.
  expect_values(grad_of([](const Tensor& t) { return amax(t, {1}); }, {1, 3, 3, 5, 2, 5}, {2, 3}),
                {0, 0.5, 0.5, 0.5, 0, 0.5});
  expect_values(grad_of([](const Tensor& t) { return max(t); }, {1, 3, 3, 3}, {4}), {0, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  expect_values(grad_of([](const Tensor& t) { return min(t, 1).values; }, {1, 3, 1, 2, 2, 4}, {2, 3}),
                {1, 0, 0, 1, 0, 0});
  expect_values(grad_of([](const Tensor& t) { return amax(t); }, {1, kNan, 2}, {3}), {0, 1, 0});
  expect_values(grad_of([](const Tensor& t) { return max(t, 0).values; }, {7}, {}), {1});
  expect_values(grad_of([](const Tensor& t) { return amin(t); }, {7}, {}), {1});
  // Indices and argmax carry no gradient.
  Tensor y = random_tensor({3}, 33).requires_grad_();
  EXPECT_FALSE(max(y, 0).indices.requires_grad());
  EXPECT_FALSE(argmax(y).requires_grad());
  EXPECT_FALSE(all(y).requires_grad());
}

TEST(ReduceGrad, VarStd) {
  Tensor x = random_tensor({3, 4}, 34).requires_grad_();
  for (int64_t correction : {0, 1}) {
    expect_gradcheck([=](const TensorList& v) { return var(v[0], {}, correction); }, {x});
    expect_gradcheck([=](const TensorList& v) { return var(v[0], {1}, correction, true); }, {x});
    expect_gradcheck([=](const TensorList& v) { return std(v[0], {0}, correction); }, {x});
    expect_gradcheck([=](const TensorList& v) { return std(v[0], {}, correction, true); }, {x});
  }
  expect_values(grad_of([](const Tensor& t) { return var(t); }, {1, 2, 3, 6}, {4}),
                {2 * (1 - 3.0) / 3, 2 * (2 - 3.0) / 3, 0, 2 * (6 - 3.0) / 3});
}

TEST(ReduceGrad, Norm) {
  Tensor x = random_tensor({3, 4}, 35, 0.2, 1.0).requires_grad_();
  Tensor signed_x = from_vector(values(mul(x, from_vector({1, -1, 1, -1}, {4}, {.dtype = kFloat64}))), {3, 4},
                                {.dtype = kFloat64})
                        .requires_grad_();
  for (double p : {1.0, 2.0, 3.0, 0.5, 1.5, kInf, -kInf}) {
    SCOPED_TRACE(p);
    expect_gradcheck([=](const TensorList& v) { return norm(v[0], p); }, {signed_x});
    expect_gradcheck([=](const TensorList& v) { return norm(v[0], p, {1}); }, {signed_x});
    expect_gradcheck([=](const TensorList& v) { return norm(v[0], p, {0}, true); }, {signed_x});
  }
  expect_values(grad_of([](const Tensor& t) { return norm(t); }, {0, 0}, {2}), {0, 0});
  expect_values(grad_of([](const Tensor& t) { return norm(t); }, {3, -4}, {2}), {0.6, -0.8});
  expect_values(grad_of([](const Tensor& t) { return norm(t, kInf); }, {3, -3, 1}, {3}), {0.5, -0.5, 0});
  expect_values(grad_of([](const Tensor& t) { return norm(t, 0); }, {3, -3, 1}, {3}), {0, 0, 0});
  expect_values(grad_of([](const Tensor& t) { return norm(t, 1); }, {3, -3, 0}, {3}), {1, -1, 0});
}

TEST(ReduceGrad, LogSumExp) {
  Tensor x = random_tensor({3, 4}, 36, -3, 3).requires_grad_();
  expect_gradcheck([](const TensorList& v) { return logsumexp(v[0], {1}); }, {x});
  expect_gradcheck([](const TensorList& v) { return logsumexp(v[0], {0}, true); }, {x});
  expect_gradcheck([](const TensorList& v) { return logsumexp(v[0], {}); }, {x});
  expect_values(grad_of([](const Tensor& t) { return logsumexp(t, {0}); }, {0, 0}, {2}), {0.5, 0.5});
  expect_values(grad_of([](const Tensor& t) { return logsumexp(t, {0}); }, {1000, 1000}, {2}), {0.5, 0.5});
}

}  // namespace
}  // namespace mf
