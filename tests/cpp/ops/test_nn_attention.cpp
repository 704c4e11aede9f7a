// scaled_dot_product_attention against a float64 reference loop: masks
// (bool, additive float, causal), scale, batch broadcasting, dropout,
// gradients and bad input.
#include <cmath>

#include "test_util.h"

namespace mf {
namespace {
using testing::expect_close;
using testing::expect_gradcheck;
using testing::expect_values;
using testing::random_tensor;
using testing::values;

// q (B, L, E), k (B, S, E), v (B, S, Ev) contiguous; bias (B, L, S) or
// empty; returns (B, L, Ev).
std::vector<double> reference_attention(const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v, const std::vector<double>& bias, int64_t batch,
                                        int64_t l, int64_t s, int64_t e, int64_t ev, double scale) {
  std::vector<double> out(size_t(batch * l * ev), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < l; ++i) {
      std::vector<double> scores(static_cast<size_t>(s));
      double m = -INFINITY;
      for (int64_t j = 0; j < s; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < e; ++d) dot += q[size_t((b * l + i) * e + d)] * k[size_t((b * s + j) * e + d)];
        scores[size_t(j)] = dot * scale + (bias.empty() ? 0.0 : bias[size_t((b * l + i) * s + j)]);
        m = std::max(m, scores[size_t(j)]);
      }
      double total = 0;
      for (double& x : scores) total += (x = std::exp(x - m));
      for (int64_t j = 0; j < s; ++j)
        for (int64_t d = 0; d < ev; ++d)
          out[size_t((b * l + i) * ev + d)] += scores[size_t(j)] / total * v[size_t((b * s + j) * ev + d)];
    }
  return out;
}

struct AttentionCase {
  int64_t batch = 2, l = 3, s = 5, e = 4, ev = 6;
  Tensor q, k, v;
  explicit AttentionCase(uint32_t seed) {
    q = random_tensor({batch, l, e}, seed, -2, 2);
    k = random_tensor({batch, s, e}, seed + 1, -2, 2);
    v = random_tensor({batch, s, ev}, seed + 2);
  }
  std::vector<double> reference(const std::vector<double>& bias, double scale) const {
    return reference_attention(values(q), values(k), values(v), bias, batch, l, s, e, ev, scale);
  }
};

TEST(Attention, NoMaskAndScale) {
  AttentionCase c(141);
  expect_values(scaled_dot_product_attention(c.q, c.k, c.v), c.reference({}, 0.5), 1e-12);
  expect_values(scaled_dot_product_attention(c.q, c.k, c.v, Tensor(), 0.0, false, 0.3), c.reference({}, 0.3), 1e-12);
  Tensor y = scaled_dot_product_attention(to(c.q, kFloat32), to(c.k, kFloat32), to(c.v, kFloat32));
  EXPECT_EQ(y.dtype(), kFloat32);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 6}));
  expect_values(y, c.reference({}, 0.5), 1e-5, 1e-5);
  for (DType dt : {kFloat16, kBFloat16}) {
    AttentionCase r(141);  // reference on the rounded inputs
    r.q = to(to(c.q, dt), kFloat64), r.k = to(to(c.k, dt), kFloat64), r.v = to(to(c.v, dt), kFloat64);
    Tensor yl = scaled_dot_product_attention(to(c.q, dt), to(c.k, dt), to(c.v, dt), Tensor(), 0.0, true);
    EXPECT_EQ(yl.dtype(), dt);
    std::vector<double> causal;
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j) causal.push_back(j <= i ? 0.0 : -INFINITY);
    expect_values(yl, r.reference(causal, 0.5), 5e-2, 2e-2);
  }
}

TEST(Attention, BoolFloatAndCausalMasks) {
  AttentionCase c(142);
  // A bool (L, S) mask broadcast over the batch: true = attend.
  std::vector<double> keep{1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1};
  Tensor mask = ne(from_vector(keep, {3, 5}), 0.0);
  std::vector<double> bias;
  for (int b = 0; b < 2; ++b)
    for (double kv : keep) bias.push_back(kv != 0 ? 0.0 : -INFINITY);
  expect_values(scaled_dot_product_attention(c.q, c.k, c.v, mask), c.reference(bias, 0.5), 1e-12);
  // An additive float mask (B, 1, S) broadcast over the queries.
  Tensor fmask = random_tensor({2, 1, 5}, 143, -3, 3);
  std::vector<double> fv = values(fmask), fbias;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) fbias.push_back(fv[size_t(b * 5 + j)]);
  expect_values(scaled_dot_product_attention(c.q, c.k, c.v, fmask), c.reference(fbias, 0.5), 1e-12);
  // Causal with L != S: query i sees keys j <= i.
  std::vector<double> causal;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) causal.push_back(j <= i ? 0.0 : -INFINITY);
  expect_values(scaled_dot_product_attention(c.q, c.k, c.v, Tensor(), 0.0, true), c.reference(causal, 0.5), 1e-12);
  // A fully masked row gives nan, as PyTorch's math path does.
  Tensor none = ne(zeros({3, 5}), 0.0);
  EXPECT_TRUE(std::isnan(values(scaled_dot_product_attention(c.q, c.k, c.v, none))[0]));
}

TEST(Attention, HeadsBroadcastAndStrides) {
  // q (B, H, L, E) with k, v shared across the batch: (1, H, S, E).
  Tensor q = random_tensor({2, 3, 4, 5}, 144), k = random_tensor({1, 3, 6, 5}, 145), v = random_tensor({1, 3, 6, 2}, 146);
  Tensor y = scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 4, 2}));
  std::vector<double> qv = values(q), kv = values(k), vv = values(v), yv = values(y);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h) {
      std::vector<double> qs(qv.begin() + (b * 3 + h) * 20, qv.begin() + (b * 3 + h + 1) * 20);
      std::vector<double> ks(kv.begin() + h * 30, kv.begin() + (h + 1) * 30);
      std::vector<double> vs(vv.begin() + h * 12, vv.begin() + (h + 1) * 12);
      std::vector<double> want = reference_attention(qs, ks, vs, {}, 1, 4, 6, 5, 2, 1 / std::sqrt(5.0));
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(yv[size_t((b * 3 + h) * 8) + i], want[i], 1e-12);
    }
  // Transposed (non-contiguous) inputs give the same result as contiguous ones.
  Tensor qt = transpose(random_tensor({2, 5, 4}, 147), 1, 2);
  Tensor kt = transpose(random_tensor({2, 5, 6}, 148), 1, 2);
  Tensor vt = random_tensor({2, 6, 3}, 149);
  expect_close(scaled_dot_product_attention(qt, kt, vt),
               scaled_dot_product_attention(contiguous(qt), contiguous(kt), vt), 1e-12);
}

TEST(Attention, Dropout) {
  AttentionCase c(150);
  // dropout_p = 1 drops every weight.
  expect_values(scaled_dot_product_attention(c.q, c.k, c.v, Tensor(), 1.0), std::vector<double>(36, 0.0));
  // The same seed gives the same result; it equals dropout applied to the
  // attention weights by hand.
  manual_seed(21);
  Tensor a = scaled_dot_product_attention(c.q, c.k, c.v, Tensor(), 0.4);
  manual_seed(21);
  Tensor weights = dropout(softmax(div(matmul(c.q, transpose(c.k, 1, 2)), 2.0), -1), 0.4);
  expect_close(a, matmul(weights, c.v), 1e-12);
  EXPECT_NE(values(a), c.reference({}, 0.5));
}

TEST(Attention, Gradients) {
  auto q = random_tensor({2, 3, 4}, 151).requires_grad_();
  auto k = random_tensor({2, 5, 4}, 152).requires_grad_();
  auto v = random_tensor({2, 5, 3}, 153).requires_grad_();
  auto fmask = random_tensor({3, 5}, 154).requires_grad_();
  Tensor mask = ne(from_vector({1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0}, {3, 5}), 0.0);
  expect_gradcheck([](const TensorList& t) { return scaled_dot_product_attention(t[0], t[1], t[2]); }, {q, k, v});
  expect_gradcheck([&](const TensorList& t) { return scaled_dot_product_attention(t[0], t[1], t[2], mask); }, {q, k, v});
  expect_gradcheck([](const TensorList& t) { return scaled_dot_product_attention(t[0], t[1], t[2], t[3]); },
                   {q, k, v, fmask});
  expect_gradcheck(
      [](const TensorList& t) { return scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), 0.0, true, 0.7); },
      {q, k, v});
}

TEST(Attention, BadInput) {
  Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 6});
  EXPECT_THROW(scaled_dot_product_attention(q, zeros({2, 5, 3}), v), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, zeros({2, 4, 6})), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(zeros({4}), k, v), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, to(k, kFloat64), v), TypeError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, zeros({3, 5}), 0.0, true), ValueError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, Tensor(), 1.5), ValueError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, zeros({3, 5}, {.dtype = kInt64})), TypeError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, zeros({4, 5})), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, zeros({3, 2, 3, 5})), ShapeError);
}

}  // namespace
}  // namespace mf
