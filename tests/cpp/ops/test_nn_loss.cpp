// cross_entropy, nll_loss, mse_loss and binary_cross_entropy_with_logits
// against float64 reference loops written from PyTorch's definitions, with
// gradchecks for every mode.
#include <cmath>

#include "test_util.h"

namespace mf {
namespace {
using testing::expect_close;
using testing::expect_gradcheck;
using testing::expect_values;
using testing::random_tensor;
using testing::values;

struct ClassCase {
  std::vector<double> x;       // logits, (N, C, S) row-major
  std::vector<int64_t> target;  // (N, S)
  int64_t n, c, s;
};

// PyTorch's cross_entropy with class-index targets (or nll_loss when
// `is_nll`: x holds log-probabilities and smoothing is 0).
std::vector<double> reference_class_loss(const ClassCase& k, const std::vector<double>& weight, int64_t ignore,
                                         const std::string& reduction, double eps, bool is_nll) {
  auto w = [&](int64_t c) { return weight.empty() ? 1.0 : weight[size_t(c)]; };
  std::vector<double> losses;
  double total = 0, total_weight = 0;
  for (int64_t ni = 0; ni < k.n; ++ni)
    for (int64_t si = 0; si < k.s; ++si) {
      auto at = [&](int64_t c) { return k.x[size_t((ni * k.c + c) * k.s + si)]; };
      const int64_t t = k.target[size_t(ni * k.s + si)];
      double loss = 0;
      if (t != ignore) {
        std::vector<double> logp(size_t(k.c));
        if (is_nll) {
          for (int64_t c = 0; c < k.c; ++c) logp[size_t(c)] = at(c);
        } else {
          double m = -INFINITY, sum = 0;
          for (int64_t c = 0; c < k.c; ++c) m = std::max(m, at(c));
          for (int64_t c = 0; c < k.c; ++c) sum += std::exp(at(c) - m);
          for (int64_t c = 0; c < k.c; ++c) logp[size_t(c)] = at(c) - m - std::log(sum);
        }
        double smooth = 0;
        for (int64_t c = 0; c < k.c; ++c) smooth -= w(c) * logp[size_t(c)];
        loss = (1 - eps) * -w(t) * logp[size_t(t)] + eps / double(k.c) * smooth;
        total_weight += w(t);
      }
      losses.push_back(loss);
      total += loss;
    }
  if (reduction == "none") return losses;
  if (reduction == "sum") return {total};
  return {total / total_weight};
}

ClassCase random_case(int64_t n, int64_t c, int64_t s, uint32_t seed, int64_t ignore = -100) {
  ClassCase k{values(random_tensor({n, c, s}, seed, -3, 3)), {}, n, c, s};
  for (int64_t i = 0; i < n * s; ++i) k.target.push_back((i * 7 + seed) % c);
  if (ignore >= 0 && n * s > 1) k.target[1] = ignore;
  return k;
}

Tensor logits_of(const ClassCase& k, bool spatial) {
  Tensor x = from_vector(k.x, {k.n, k.c, k.s}, {.dtype = kFloat64});
  return spatial ? x : reshape(x, {k.n, k.c * k.s});
}
Tensor target_of(const ClassCase& k, bool spatial) {
  return from_data<int64_t>(k.target, spatial ? Shape{k.n, k.s} : Shape{k.n});
}

TEST(CrossEntropy, HandValues) {
  Tensor x = from_vector({1, 2, 3}, {1, 3});
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  expect_values(cross_entropy(x, from_data<int64_t>({2}, {1})), {lse - 3});
  expect_values(cross_entropy(x, from_data<int64_t>({0}, {1}), Tensor(), -100, "mean", 0.1), {lse - 1.1});
  // Unbatched: logits (C), target ().
  Tensor loss = cross_entropy(from_vector({1, 2, 3}, {3}), from_data<int64_t>({2}, {}), Tensor(), -100, "none");
  EXPECT_EQ(loss.dim(), 0);
  expect_values(loss, {lse - 3});
  // Weighted mean divides by the weights of the non-ignored targets.
  Tensor x3 = from_vector({1, 2, 3, 1, 2, 3, 1, 2, 3}, {3, 3});
  Tensor w = from_vector({1, 2, 3}, {3});
  expect_values(cross_entropy(x3, from_data<int64_t>({0, 1, -1}, {3}), w, -1),
                {(1 * (lse - 1) + 2 * (lse - 2)) / 3});
  // Every target ignored: 0 / 0.
  EXPECT_TRUE(std::isnan(cross_entropy(x3, from_data<int64_t>({-100, -100, -100}, {3})).item<double>()));
}

TEST(CrossEntropy, ReferenceAllModes) {
  const Tensor weight = random_tensor({5}, 91, 0.5, 2);
  for (bool spatial : {false, true})
    for (const char* reduction : {"mean", "sum", "none"})
      for (bool weighted : {false, true})
        for (int64_t ignore : {int64_t(-100), int64_t(2)})
          for (double eps : {0.0, 0.25}) {
            SCOPED_TRACE(std::string(reduction) + (spatial ? " spatial" : "") + (weighted ? " weighted" : "") +
                         " ignore " + std::to_string(ignore) + " eps " + std::to_string(eps));
            ClassCase k = spatial ? random_case(3, 5, 4, 92, ignore) : random_case(6, 5, 1, 93, ignore);
            Tensor w = weighted ? weight : Tensor();
            auto want = reference_class_loss(k, weighted ? values(weight) : std::vector<double>{}, ignore, reduction,
                                             eps, false);
            for (DType dt : {kFloat64, kFloat32}) {
              Tensor loss = cross_entropy(to(logits_of(k, spatial), dt), target_of(k, spatial),
                                          weighted ? to(w, dt) : w, ignore, reduction, eps);
              EXPECT_EQ(loss.dtype(), dt);
              if (std::string(reduction) == "none")
                EXPECT_EQ(loss.sizes(), spatial ? (Shape{3, 4}) : (Shape{6}));
              expect_values(loss, want, 1e-5, 1e-5);
            }
          }
}

TEST(CrossEntropy, HigherDimsNonContiguousAndHalf) {
  // (N, C, H, W) logits from a permuted tensor.
  Tensor base = random_tensor({2, 3, 4, 5}, 94, -2, 2);  // (N, H, W, C)
  Tensor x = permute(base, {0, 3, 1, 2});                // (N, C, H, W) strided
  std::vector<int64_t> t;
  for (int i = 0; i < 24; ++i) t.push_back(i % 5);
  Tensor target = from_data<int64_t>(t, {2, 3, 4});
  ClassCase k{values(reshape(contiguous(x), {2, 5, 12})), t, 2, 5, 12};
  expect_values(cross_entropy(x, target, Tensor(), -100, "none"), reference_class_loss(k, {}, -100, "none", 0, false),
                1e-10);
  expect_values(cross_entropy(x, to(target, kInt32)), reference_class_loss(k, {}, -100, "mean", 0, false), 1e-10);
  for (DType dt : {kFloat16, kBFloat16}) {
    Tensor xl = to(x, dt);
    ClassCase kl{values(reshape(contiguous(xl), {2, 5, 12})), t, 2, 5, 12};
    Tensor loss = cross_entropy(xl, target, Tensor(), -100, "sum", 0.1);
    EXPECT_EQ(loss.dtype(), dt);
    expect_values(loss, reference_class_loss(kl, {}, -100, "sum", 0.1, false), 0.2, 1e-2);
  }
}

TEST(CrossEntropy, ProbabilityTargets) {
  Tensor x = random_tensor({4, 3, 2}, 95, -2, 2);
  Tensor p = softmax(random_tensor({4, 3, 2}, 96), 1);
  Tensor w = random_tensor({3}, 97, 0.5, 2);
  std::vector<double> xv = values(x), pv = values(p), wv = values(w);
  for (const char* reduction : {"mean", "sum", "none"})
    for (double eps : {0.0, 0.3})
      for (bool weighted : {false, true}) {
        std::vector<double> per_sample;
        double total = 0;
        for (int n = 0; n < 4; ++n)
          for (int s = 0; s < 2; ++s) {
            auto at = [&](const std::vector<double>& v, int c) { return v[size_t((n * 3 + c) * 2 + s)]; };
            double m = -INFINITY, sum = 0, loss = 0;
            for (int c = 0; c < 3; ++c) m = std::max(m, at(xv, c));
            for (int c = 0; c < 3; ++c) sum += std::exp(at(xv, c) - m);
            for (int c = 0; c < 3; ++c) {
              const double target = at(pv, c) * (1 - eps) + eps / 3;
              loss -= (weighted ? wv[size_t(c)] : 1.0) * target * (at(xv, c) - m - std::log(sum));
            }
            per_sample.push_back(loss);
            total += loss;
          }
        std::vector<double> want = std::string(reduction) == "none" ? per_sample
                                   : std::string(reduction) == "sum" ? std::vector<double>{total}
                                                                     : std::vector<double>{total / 8};
        expect_values(cross_entropy(x, p, weighted ? w : Tensor(), -100, reduction, eps), want, 1e-10);
      }
  EXPECT_THROW(cross_entropy(x, slice(p, 0, 0, 2)), ShapeError);
  EXPECT_THROW(cross_entropy(x, p, Tensor(), 1), ValueError);
}

TEST(CrossEntropy, BadInput) {
  Tensor x = zeros({2, 5});
  try {
    cross_entropy(x, from_data<int64_t>({1, 7}, {2}));
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_STREQ(e.what(), "cross_entropy: target 7 is out of bounds for 5 classes");
  }
  EXPECT_THROW(cross_entropy(x, from_data<int64_t>({1, -1}, {2})), IndexError);
  EXPECT_THROW(cross_entropy(x, from_data<int64_t>({1, 2}, {2}), Tensor(), -100, "avg"), ValueError);
  EXPECT_THROW(cross_entropy(x, from_data<int64_t>({1, 2, 3}, {3})), ShapeError);
  EXPECT_THROW(cross_entropy(x, from_data<int64_t>({1, 2}, {2}), zeros({4})), ShapeError);
  EXPECT_THROW(cross_entropy(x, from_data<int64_t>({1, 2}, {2}), Tensor(), -100, "mean", 1.5), ValueError);
  EXPECT_THROW(cross_entropy(zeros({2, 5}, {.dtype = kInt64}), from_data<int64_t>({1, 2}, {2})), TypeError);
  EXPECT_THROW(cross_entropy(x, ones({2}, {.dtype = kBool})), TypeError);
  EXPECT_THROW(cross_entropy(scalar_tensor(1.0), from_data<int64_t>({0}, {})), ShapeError);
  // The class weights get no gradient (as in PyTorch): asking is an error.
  Tensor w = ones({5}).requires_grad_();
  Tensor loss = cross_entropy(x, from_data<int64_t>({1, 2}, {2}), w);
  EXPECT_THROW(loss.backward(), Error);
}

TEST(CrossEntropy, Gradients) {
  const Tensor weight = random_tensor({4}, 98, 0.5, 2);
  for (bool spatial : {false, true})
    for (const char* reduction : {"mean", "sum", "none"})
      for (bool weighted : {false, true})
        for (double eps : {0.0, 0.2}) {
          SCOPED_TRACE(std::string(reduction) + (spatial ? " spatial" : "") + (weighted ? " weighted" : "") +
                       " eps " + std::to_string(eps));
          ClassCase k = spatial ? random_case(2, 4, 3, 99, 1) : random_case(5, 4, 1, 100, 1);
          Tensor x = logits_of(k, spatial).requires_grad_();
          Tensor t = target_of(k, spatial);
          Tensor w = weighted ? weight : Tensor();
          expect_gradcheck([&](const TensorList& a) { return cross_entropy(a[0], t, w, 1, reduction, eps); }, {x});
        }
  // Probability targets: gradients for logits, targets and weights.
  auto x = random_tensor({3, 4}, 101).requires_grad_();
  auto p = random_tensor({3, 4}, 102, 0, 1).requires_grad_();
  auto w = random_tensor({4}, 103, 0.5, 2).requires_grad_();
  expect_gradcheck([](const TensorList& a) { return cross_entropy(a[0], a[1], a[2], -100, "mean", 0.1); }, {x, p, w});
  // Non-contiguous logits.
  auto xt = random_tensor({4, 3}, 104).requires_grad_();
  Tensor t3 = from_data<int64_t>({3, 0, 2}, {3});
  expect_gradcheck([&](const TensorList& a) { return cross_entropy(transpose(a[0], 0, 1), t3); }, {xt});
}

TEST(CrossEntropy, DoubleBackward) {
  for (const char* reduction : {"mean", "sum", "none"})
    for (double eps : {0.0, 0.3}) {
      SCOPED_TRACE(std::string(reduction) + " eps " + std::to_string(eps));
      ClassCase k = random_case(2, 4, 3, 107, 1);
      Tensor x = logits_of(k, true).requires_grad_();
      Tensor t = target_of(k, true);
      Tensor w = random_tensor({4}, 108, 0.5, 2);
      // The composite backward (create_graph) agrees with the fused one.
      Tensor v = random_tensor(std::string(reduction) == "none" ? Shape{2, 3} : Shape{}, 109);
      expect_close(autograd::grad({cross_entropy(x, t, w, 1, reduction, eps)}, {x}, {v}, {}, true)[0],
                   autograd::grad({cross_entropy(x, t, w, 1, reduction, eps)}, {x}, {v})[0], 1e-12, 1e-10);
      expect_gradcheck(
          [&](const TensorList& a) {
            EnableGradGuard enable;  // the numeric pass runs under no_grad
            Tensor loss = cross_entropy(a[0], t, w, 1, reduction, eps);
            Tensor g = autograd::grad({sum(mul(loss, loss))}, {a[0]}, {}, {}, /*create_graph=*/true)[0];
            return mul(g, g);
          },
          {x});
    }
}

TEST(CrossEntropy, FloatBackwardMatchesDouble) {
  ClassCase k = random_case(64, 100, 1, 105, 3);
  Tensor t = target_of(k, false);
  Tensor w = random_tensor({100}, 106, 0.5, 2);
  auto grad = [&](DType dt) {
    Tensor x = to(logits_of(k, false), dt).detach().requires_grad_();
    cross_entropy(x, t, to(w, dt), 3, "mean", 0.1).backward();
    return x.grad();
  };
  expect_close(grad(kFloat32), grad(kFloat64), 1e-7, 1e-4);
}

// --- nll_loss -----------------------------------------------------------------------

TEST(NllLoss, HandAndReference) {
  Tensor lp = from_vector({-1, -2, -3, -0.5, -1, -2}, {2, 3});
  expect_values(nll_loss(lp, from_data<int64_t>({0, 2}, {2})), {1.5});
  expect_values(nll_loss(lp, from_data<int64_t>({0, 2}, {2}), Tensor(), -100, "none"), {1, 2});
  expect_values(nll_loss(lp, from_data<int64_t>({0, 2}, {2}), from_vector({3, 1, 1}, {3}), 0, "sum"), {2});
  const Tensor weight = random_tensor({5}, 111, 0.5, 2);
  for (bool spatial : {false, true})
    for (const char* reduction : {"mean", "sum", "none"})
      for (bool weighted : {false, true}) {
        ClassCase k = spatial ? random_case(3, 5, 4, 112, 4) : random_case(6, 5, 1, 113, 4);
        auto want = reference_class_loss(k, weighted ? values(weight) : std::vector<double>{}, 4, reduction, 0, true);
        expect_values(nll_loss(logits_of(k, spatial), target_of(k, spatial), weighted ? weight : Tensor(), 4, reduction),
                      want, 1e-12);
      }
  try {
    nll_loss(lp, from_data<int64_t>({0, 3}, {2}));
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_STREQ(e.what(), "nll_loss: target 3 is out of bounds for 3 classes");
  }
  EXPECT_THROW(nll_loss(lp, from_data<int64_t>({0, 1}, {2}), Tensor(), -100, "mean "), ValueError);
  EXPECT_THROW(nll_loss(lp, from_data<int64_t>({0}, {1})), ShapeError);
}

TEST(NllLoss, GradientsAndDoubleBackward) {
  const Tensor weight = random_tensor({4}, 114, 0.5, 2);
  for (const char* reduction : {"mean", "sum", "none"})
    for (bool weighted : {false, true}) {
      ClassCase k = random_case(2, 4, 3, 115, 2);
      Tensor x = logits_of(k, true).requires_grad_();
      Tensor t = target_of(k, true);
      Tensor w = weighted ? weight : Tensor();
      expect_gradcheck([&](const TensorList& a) { return nll_loss(a[0], t, w, 2, reduction); }, {x});
      // nll_loss(log_softmax(x)) == cross_entropy(x), values and gradients.
      expect_close(nll_loss(log_softmax(x, 1), t, w, 2, reduction), cross_entropy(x, t, w, 2, reduction), 1e-12);
      // Double backward through nll_loss_backward.
      expect_gradcheck(
          [&](const TensorList& a) {
            EnableGradGuard enable;
            Tensor loss = sum(nll_loss(mul(a[0], a[0]), t, w, 2, reduction));
            return autograd::grad({loss}, {a[0]}, {}, {}, true)[0];
          },
          {x});
    }
}

// --- mse_loss -----------------------------------------------------------------------

TEST(MseLoss, ReferenceAndBroadcast) {
  Tensor a = random_tensor({3, 4}, 121), b = random_tensor({3, 4}, 122);
  std::vector<double> av = values(a), bv = values(b), sq;
  double total = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    sq.push_back((av[i] - bv[i]) * (av[i] - bv[i]));
    total += sq.back();
  }
  expect_values(mse_loss(a, b, "none"), sq, 1e-12);
  expect_values(mse_loss(a, b, "sum"), {total}, 1e-12);
  expect_values(mse_loss(a, b), {total / 12}, 1e-12);
  expect_values(mse_loss(to(a, kFloat32), to(b, kFloat32)), {total / 12}, 1e-6);
  expect_values(mse_loss(to(a, kBFloat16), to(b, kBFloat16)), {total / 12}, 2e-2, 2e-2);
  // Broadcast target, transposed input.
  Tensor row = random_tensor({4}, 123);
  std::vector<double> rv = values(row), want;
  for (size_t i = 0; i < av.size(); ++i) want.push_back(std::pow(av[i] - rv[i % 4], 2));
  expect_values(mse_loss(a, row, "none"), want, 1e-12);
  Tensor at = transpose(contiguous(transpose(a, 0, 1)), 0, 1);
  double wsum = 0;
  for (double v : want) wsum += v;
  expect_values(mse_loss(at, row, "mean"), {wsum / 12}, 1e-12);
  EXPECT_TRUE(std::isnan(mse_loss(zeros({0}), zeros({0})).item<double>()));
  EXPECT_THROW(mse_loss(a, b, "avg"), ValueError);
  EXPECT_THROW(mse_loss(a, zeros({5})), ShapeError);
  EXPECT_THROW(mse_loss(zeros({2}, {.dtype = kInt64}), zeros({2}, {.dtype = kInt64})), TypeError);
}

TEST(MseLoss, Gradients) {
  auto a = random_tensor({3, 4}, 124).requires_grad_();
  auto b = random_tensor({4}, 125).requires_grad_();
  for (const char* reduction : {"mean", "sum", "none"})
    expect_gradcheck([&](const TensorList& t) { return mse_loss(t[0], t[1], reduction); }, {a, b});
}

// --- binary_cross_entropy_with_logits -----------------------------------------------

TEST(BceWithLogits, Reference) {
  Tensor x = random_tensor({4, 3}, 131, -30, 30);  // large magnitudes: must stay finite
  Tensor t = random_tensor({4, 3}, 132, 0, 1);
  Tensor w = random_tensor({4, 1}, 133, 0.5, 2);
  Tensor pw = random_tensor({3}, 134, 0.5, 3);
  std::vector<double> xv = values(x), tv = values(t), wv = values(w), pv = values(pw);
  for (bool weighted : {false, true})
    for (bool positive : {false, true}) {
      std::vector<double> want;
      double total = 0;
      for (size_t i = 0; i < xv.size(); ++i) {
        const double lw = positive ? 1 + (pv[i % 3] - 1) * tv[i] : 1.0;
        // PyTorch: (1 - t) x + lw * (log1p(exp(-|x|)) + max(-x, 0))
        double loss = (1 - tv[i]) * xv[i] + lw * (std::log1p(std::exp(-std::fabs(xv[i]))) + std::max(-xv[i], 0.0));
        if (weighted) loss *= wv[i / 3];
        want.push_back(loss);
        total += loss;
      }
      Tensor wt = weighted ? w : Tensor(), pt = positive ? pw : Tensor();
      expect_values(binary_cross_entropy_with_logits(x, t, wt, pt, "none"), want, 1e-12);
      expect_values(binary_cross_entropy_with_logits(x, t, wt, pt, "sum"), {total}, 1e-10);
      expect_values(binary_cross_entropy_with_logits(x, t, wt, pt), {total / 12}, 1e-10);
      expect_values(binary_cross_entropy_with_logits(to(x, kFloat32), to(t, kFloat32), wt, pt), {total / 12}, 1e-5,
                    1e-5);
      expect_values(binary_cross_entropy_with_logits(to(x, kFloat16), to(t, kFloat16), wt, pt), {total / 12}, 0.1,
                    1e-2);
    }
  expect_values(binary_cross_entropy_with_logits(from_vector({0}, {1}), from_vector({1}, {1})), {std::log(2.0)});
}

TEST(BceWithLogits, GradientsAndBadInput) {
  auto x = random_tensor({3, 4}, 135, -3, 3).requires_grad_();
  auto t = random_tensor({3, 4}, 136, 0, 1).requires_grad_();
  auto w = random_tensor({3, 1}, 137, 0.5, 2).requires_grad_();
  auto pw = random_tensor({4}, 138, 0.5, 3).requires_grad_();
  for (const char* reduction : {"mean", "sum", "none"}) {
    expect_gradcheck(
        [&](const TensorList& a) { return binary_cross_entropy_with_logits(a[0], a[1], a[2], a[3], reduction); },
        {x, t, w, pw});
    expect_gradcheck([&](const TensorList& a) { return binary_cross_entropy_with_logits(a[0], a[1], Tensor(), Tensor(), reduction); },
                     {x, t});
  }
  // Double backward (the backward is written with ops).
  expect_gradcheck(
      [&](const TensorList& a) {
        EnableGradGuard enable;
        Tensor loss = binary_cross_entropy_with_logits(a[0], a[1], w.detach(), a[2]);
        TensorList g = autograd::grad({loss}, {a[0], a[1], a[2]}, {}, {}, /*create_graph=*/true);
        return add(add(sum(mul(g[0], g[0])), sum(g[1])), sum(g[2]));
      },
      {x, t, pw});
  auto xt = random_tensor({4, 3}, 139).requires_grad_();
  expect_gradcheck([&](const TensorList& a) { return binary_cross_entropy_with_logits(transpose(a[0], 0, 1), t.detach()); },
                   {xt});
  EXPECT_THROW(binary_cross_entropy_with_logits(zeros({3}), zeros({4})), ValueError);
  EXPECT_THROW(binary_cross_entropy_with_logits(zeros({3, 4}), zeros({3, 4}), zeros({2})), ShapeError);
  EXPECT_THROW(binary_cross_entropy_with_logits(zeros({3, 4}), zeros({3, 4}), Tensor(), zeros({3})), ShapeError);
  EXPECT_THROW(binary_cross_entropy_with_logits(zeros({3}), zeros({3}), Tensor(), Tensor(), "x"), ValueError);
  EXPECT_THROW(binary_cross_entropy_with_logits(zeros({3}, {.dtype = kInt32}), zeros({3})), TypeError);
}

}  // namespace
}  // namespace mf
