// Random factories and fills: statistics on large samples, reproducibility
// from manual_seed, independence from the thread count, and the counter
// scheme of Note [Counter-based random ops] (src/ops/random.cpp).
#include <algorithm>
#include <set>

#include "test_util.h"

namespace mf {
namespace {
using testing::expect_values;
using testing::values;

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}
double var_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / double(v.size() - 1);
}

// Runs f with n threads, restoring the previous setting.
template <typename F>
auto with_threads(int n, const F& f) {
  const int before = get_num_threads();
  set_num_threads(n);
  auto result = f();
  set_num_threads(before);
  return result;
}

TEST(Random, RandIsUniform) {
  manual_seed(1);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor r = rand({1000, 1000}, {.dtype = dt});
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_EQ(r.sizes(), (Shape{1000, 1000}));
    std::vector<double> v = values(r);
    EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0);
    EXPECT_LE(*std::max_element(v.begin(), v.end()), 1.0);
    if (!is_reduced_floating(dt)) EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0);
    EXPECT_NEAR(mean_of(v), 0.5, 2e-3);
    EXPECT_NEAR(var_of(v), 1.0 / 12, 1e-3);
    // Each tenth of [0, 1) gets a tenth of the draws.
    std::vector<int64_t> bins(10, 0);
    for (double x : v) bins[std::min<size_t>(9, size_t(x * 10))]++;
    if (!is_reduced_floating(dt))
      for (int64_t b : bins) EXPECT_NEAR(double(b) / double(v.size()), 0.1, 3e-3);
  }
}

TEST(Random, RandnIsStandardNormal) {
  manual_seed(2);
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<double> v = values(randn({1000000}, {.dtype = dt}));
    EXPECT_NEAR(mean_of(v), 0.0, 5e-3);
    EXPECT_NEAR(std::sqrt(var_of(v)), 1.0, 5e-3);
    // P(|z| > 2) = 0.0455 and P(z > 1) = 0.1587 for a standard normal.
    double beyond2 = 0, above1 = 0;
    for (double x : v) beyond2 += std::fabs(x) > 2, above1 += x > 1;
    EXPECT_NEAR(beyond2 / double(v.size()), 0.0455, 2e-3);
    EXPECT_NEAR(above1 / double(v.size()), 0.1587, 3e-3);
    for (double x : v) ASSERT_TRUE(std::isfinite(x));
  }
}

TEST(Random, InPlaceUniformAndNormal) {
  manual_seed(3);
  Tensor t = empty({500000}, {.dtype = kFloat64});
  const uint32_t version = t.version();
  uniform_(t, -2.0, 3.0);
  EXPECT_GT(t.version(), version);
  std::vector<double> v = values(t);
  EXPECT_GE(*std::min_element(v.begin(), v.end()), -2.0);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 3.0);
  EXPECT_NEAR(mean_of(v), 0.5, 0.01);
  EXPECT_NEAR(var_of(v), 25.0 / 12, 0.01);
  Tensor n = empty({500000});
  normal_(n, 3.0, 2.0);
  std::vector<double> nv = values(n);
  EXPECT_NEAR(mean_of(nv), 3.0, 0.01);
  EXPECT_NEAR(std::sqrt(var_of(nv)), 2.0, 0.01);
  Tensor c = empty({10});
  normal_(c, 1.5, 0.0);
  expect_values(c, std::vector<double>(10, 1.5));
}

TEST(Random, NonContiguousFillsInLogicalOrder) {
  manual_seed(4);
  Tensor a = empty({4, 5});
  uniform_(a);
  manual_seed(4);
  Tensor b = empty({5, 4});
  Tensor bt = transpose(b, 0, 1);
  uniform_(bt);
  EXPECT_EQ(values(bt), values(a));
  manual_seed(4);
  Tensor wide = zeros({4, 10});
  Tensor every_other = slice(wide, 1, 0, 10, 2);
  normal_(every_other);
  manual_seed(4);
  Tensor dense = randn({4, 5});
  EXPECT_EQ(values(every_other), values(dense));
  expect_values(slice(wide, 1, 1, 10, 2), std::vector<double>(20, 0.0));
}

TEST(Random, ManualSeedReproduces) {
  manual_seed(42);
  std::vector<double> a = values(rand({1000})), an = values(randn({1000})), ai = values(randint(0, 100, {1000}));
  std::vector<double> ap = values(randperm(100)), ab = values(bernoulli(full({1000}, 0.5)));
  manual_seed(42);
  EXPECT_EQ(values(rand({1000})), a);
  EXPECT_EQ(values(randn({1000})), an);
  EXPECT_EQ(values(randint(0, 100, {1000})), ai);
  EXPECT_EQ(values(randperm(100)), ap);
  EXPECT_EQ(values(bernoulli(full({1000}, 0.5))), ab);
  // The stream moves on: the next draw differs.
  EXPECT_NE(values(rand({1000})), a);
  manual_seed(43);
  EXPECT_NE(values(rand({1000})), a);
}

// Element i uses counter offset + i / 4 (float uniform): the first values of
// a long draw are a short draw, and element 0 is word 0 of counter 0.
TEST(Random, CounterScheme) {
  manual_seed(5);
  std::vector<double> longer = values(rand({1000}));
  manual_seed(5);
  std::vector<double> shorter = values(rand({10}));
  EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), longer.begin()));
  const auto words = philox(5, 0);
  EXPECT_EQ(float(shorter[0]), uniform_float(words[0]));
  EXPECT_EQ(float(shorter[3]), uniform_float(words[3]));
  EXPECT_EQ(float(shorter[4]), uniform_float(philox(5, 1)[0]));
  manual_seed(5);
  EXPECT_EQ(values(rand({1}, {.dtype = kFloat64}))[0], uniform_double(words[0], words[1]));
  // A draw of n floats reserves ceil(n / 4) counters.
  manual_seed(5);
  rand({10});
  EXPECT_EQ(default_generator().offset(), 3u);
  // Every element of the next draw (which starts at counter 3) follows the
  // scheme; doubles use two words each.
  std::vector<double> next = values(rand({1000}));
  for (size_t i = 0; i < next.size(); ++i) ASSERT_EQ(float(next[i]), uniform_float(philox(5, 3 + i / 4)[i % 4]));
  std::vector<double> wide = values(rand({1000}, {.dtype = kFloat64}));
  for (size_t i = 0; i < wide.size(); ++i) {
    const auto w = philox(5, 253 + i / 2);
    ASSERT_EQ(wide[i], uniform_double(w[2 * (i % 2)], w[2 * (i % 2) + 1]));
  }
}

// Note [Gamma sampling] (src/backend/common/random_kernels.h): element i
// reads only the substreams of counter offset + i, so it is the one-element
// draw made from that offset, whatever the other elements are.
TEST(Random, StandardGammaCounterScheme) {
  EXPECT_EQ(philox(5, 7), philox(5, 7, 0));
  EXPECT_NE(philox(5, 7), philox(5, 7, 1));
  EXPECT_NE(philox(5, 7, 1), philox(5, 8, 0));
  std::vector<double> alphas;
  for (int i = 0; i < 200; ++i) alphas.push_back(0.01 + 0.37 * i);
  const Tensor concentration = from_vector(alphas, {200}, {.dtype = kFloat64});
  manual_seed(5);
  rand({10});
  const uint64_t offset = default_generator().offset();
  const std::vector<double> all = values(standard_gamma(concentration));
  EXPECT_EQ(default_generator().offset(), offset + 200);  // one counter per element
  for (size_t i = 0; i < alphas.size(); ++i) {
    default_generator().set_state(5, offset + i);
    const Tensor one = from_vector({alphas[i]}, {1}, {.dtype = kFloat64});
    ASSERT_EQ(values(standard_gamma(one))[0], all[i]) << i;
  }
}

TEST(Random, SameValuesOnAnyThreadCount) {
  auto draw = [] {
    manual_seed(6);
    std::vector<std::vector<double>> out;
    out.push_back(values(rand({300000})));
    out.push_back(values(randn({300000}, {.dtype = kFloat64})));
    out.push_back(values(randint(-50, 50, {300000})));
    out.push_back(values(randperm(100000)));
    out.push_back(values(bernoulli(full({300000}, 0.25))));
    out.push_back(values(bernoulli(zeros({300000}), 0.75)));
    out.push_back(values(standard_gamma(full({100000}, 0.7, {.dtype = kFloat64}))));
    Tensor t = empty({300, 1000}, {.dtype = kFloat16});
    Tensor tt = transpose(t, 0, 1);
    out.push_back(values(uniform_(tt, 1.0, 2.0)));
    return out;
  };
  auto one = with_threads(1, draw);
  auto two = with_threads(2, draw);
  ASSERT_EQ(one.size(), two.size());
  for (size_t k = 0; k < one.size(); ++k) EXPECT_EQ(one[k], two[k]) << "draw " << k;
}

TEST(Random, Randint) {
  manual_seed(7);
  Tensor r = randint(-3, 5, {200000});
  EXPECT_EQ(r.dtype(), kInt64);
  std::vector<int64_t> counts(8, 0);
  for (double x : values(r)) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 5);
    counts[size_t(x + 3)]++;
  }
  for (int64_t c : counts) EXPECT_NEAR(double(c) / 200000, 0.125, 4e-3);
  for (DType dt : {kUInt8, kInt8, kInt16, kInt32, kFloat32, kFloat64, kFloat16, kBool}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t high = dt == kBool ? 2 : 100;
    Tensor x = randint(0, high, {10000}, {.dtype = dt});
    EXPECT_EQ(x.dtype(), dt);
    std::set<double> seen;
    for (double v : values(x)) {
      ASSERT_GE(v, 0);
      ASSERT_LT(v, high);
      ASSERT_EQ(v, std::floor(v));
      seen.insert(v);
    }
    EXPECT_EQ(int64_t(seen.size()), high);
  }
  // A range wider than 32 bits draws 64-bit values.
  const int64_t wide = int64_t(1) << 40;
  std::vector<double> w = values(randint(0, wide, {100000}));
  for (double v : w) ASSERT_TRUE(v >= 0 && v < double(wide));
  EXPECT_NEAR(mean_of(w) / double(wide), 0.5, 0.01);
  EXPECT_GT(*std::max_element(w.begin(), w.end()), double(int64_t(1) << 39));
  Tensor e = randint(0, 3, {0, 4});
  EXPECT_EQ(e.sizes(), (Shape{0, 4}));
  EXPECT_THROW(randint(5, 5, {3}), Error);
  EXPECT_THROW(randint(0, 300, {3}, {.dtype = kUInt8}), Error);
  EXPECT_THROW(randint(-1, 2, {3}, {.dtype = kUInt8}), Error);
  EXPECT_THROW(randint(0, 3, {3}, {.dtype = kBool}), Error);
}

TEST(Random, Randperm) {
  manual_seed(8);
  for (int64_t n : {0, 1, 2, 7, 1000, 100000}) {
    SCOPED_TRACE(n);
    Tensor p = randperm(n);
    EXPECT_EQ(p.dtype(), kInt64);
    EXPECT_EQ(p.sizes(), (Shape{n}));
    std::vector<double> v = values(p);
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[size_t(i)], double(i));
    if (n >= 1000) {
      int64_t fixed = 0;
      for (int64_t i = 0; i < n; ++i) fixed += v[size_t(i)] == double(i);
      EXPECT_LT(fixed, 10);  // about one fixed point is expected
    }
  }
  // Position of element 0 is uniform over many permutations.
  std::vector<int64_t> where(4, 0);
  for (int k = 0; k < 4000; ++k) {
    std::vector<double> v = values(randperm(4));
    where[size_t(std::find(v.begin(), v.end(), 0.0) - v.begin())]++;
  }
  for (int64_t c : where) EXPECT_NEAR(double(c) / 4000, 0.25, 0.03);
  EXPECT_THROW(randperm(-1), Error);
}

TEST(Random, BernoulliTensor) {
  manual_seed(9);
  for (DType dt : {kFloat32, kFloat64, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor b = bernoulli(full({200000}, 0.3, {.dtype = dt}));
    EXPECT_EQ(b.dtype(), dt);
    std::vector<double> v = values(b);
    for (double x : v) ASSERT_TRUE(x == 0 || x == 1);
    EXPECT_NEAR(mean_of(v), 0.3, 5e-3);
  }
  // p = 0 and p = 1 are exact; the probabilities may be any layout.
  Tensor p = transpose(from_vector({0, 1, 0, 1, 0, 1}, {3, 2}), 0, 1);
  expect_values(bernoulli(p), {0, 0, 0, 1, 1, 1});
  Tensor ramp = expand(reshape(linspace(0, 1, 11), {11, 1}), {11, 20000});
  Tensor draws = bernoulli(ramp);
  std::vector<double> freq = values(mean(draws, {1}));
  for (size_t k = 0; k < freq.size(); ++k) EXPECT_NEAR(freq[k], double(k) / 10, 0.015);
  EXPECT_FALSE(bernoulli(full({3}, 0.5, {.requires_grad = true})).requires_grad());
  EXPECT_THROW(bernoulli(full({3}, 1.5)), Error);
  EXPECT_THROW(bernoulli(full({3}, -0.1)), Error);
  EXPECT_THROW(bernoulli(full({3}, std::numeric_limits<double>::quiet_NaN())), Error);
  EXPECT_THROW(bernoulli(zeros({3}, {.dtype = kInt64})), TypeError);
  EXPECT_EQ(bernoulli(zeros({0, 3})).sizes(), (Shape{0, 3}));
}

TEST(Random, BernoulliScalar) {
  manual_seed(10);
  for (DType dt : {kBool, kUInt8, kInt64, kFloat32, kFloat64, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor b = bernoulli(zeros({200000}, {.dtype = dt}), 0.7);
    EXPECT_EQ(b.dtype(), dt);
    EXPECT_EQ(b.sizes(), (Shape{200000}));
    std::vector<double> v = values(b);
    for (double x : v) ASSERT_TRUE(x == 0 || x == 1);
    EXPECT_NEAR(mean_of(v), 0.7, 5e-3);
  }
  expect_values(bernoulli(zeros({5}), 0.0), std::vector<double>(5, 0.0));
  expect_values(bernoulli(zeros({5}), 1.0), std::vector<double>(5, 1.0));
  EXPECT_THROW(bernoulli(zeros({3}), 1.5), Error);
  EXPECT_THROW(bernoulli(zeros({3}), -0.5), Error);
}

TEST(Random, LikeFactoriesAndOptions) {
  Tensor t = zeros({3, 4}, {.dtype = kFloat64});
  Tensor r = rand_like(t);
  EXPECT_EQ(r.sizes(), t.sizes());
  EXPECT_EQ(r.dtype(), kFloat64);
  Tensor n = randn_like(zeros({2}, {.dtype = kBFloat16}));
  EXPECT_EQ(n.dtype(), kBFloat16);
  EXPECT_TRUE(rand({2}, {.requires_grad = true}).requires_grad());
  EXPECT_TRUE(randn({2}, {.requires_grad = true}).is_leaf());
  EXPECT_EQ(rand({}).dim(), 0);
  EXPECT_EQ(randn({0, 5}).numel(), 0);
}

TEST(Random, BadArguments) {
  EXPECT_THROW(rand({2}, {.dtype = kInt64}), TypeError);
  EXPECT_THROW(randn({2}, {.dtype = kBool}), TypeError);
  EXPECT_THROW(rand_like(zeros({2}, {.dtype = kInt32})), TypeError);
  EXPECT_THROW(rand({-1}), ValueError);
  Tensor i = zeros({3}, {.dtype = kInt32});
  EXPECT_THROW(uniform_(i), TypeError);
  EXPECT_THROW(normal_(i), TypeError);
  Tensor f = zeros({3});
  EXPECT_THROW(uniform_(f, 2.0, 1.0), Error);
  EXPECT_THROW(uniform_(f, 0.0, std::numeric_limits<double>::infinity()), Error);
  EXPECT_THROW(normal_(f, 0.0, -1.0), Error);
  // Like PyTorch, a leaf that requires grad cannot be filled in place
  // (nn.init does it under no_grad).
  Tensor w = zeros({3}, {.requires_grad = true});
  EXPECT_THROW(uniform_(w), Error);
  {
    NoGradGuard no_grad;
    uniform_(w, 5.0, 6.0);
  }
  for (double x : values(w)) EXPECT_TRUE(x >= 5 && x < 6);
}

TEST(Random, FillCutsGradientHistory) {
  Tensor x = full({4}, 2.0, {.dtype = kFloat64, .requires_grad = true});
  Tensor y = mul(x, 3.0);
  normal_(y);
  Tensor z = add(sum(y), sum(x));
  z.backward();
  expect_values(x.grad(), {1, 1, 1, 1});  // only the direct sum(x) path
}

}  // namespace
}  // namespace mf
