// Several hundred random invalid calls across the op families: each must
// throw an mf::Error (never abort, crash or return).
#include <random>

#include "test_util.h"

namespace mf {
namespace {

struct Fuzzer {
  std::mt19937 gen;
  explicit Fuzzer(uint32_t seed) : gen(seed) {}
  int64_t between(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
  Shape shape(int64_t min_dim = 1, int64_t max_dim = 4) {
    Shape s(size_t(between(min_dim, max_dim)));
    for (auto& d : s) d = between(1, 5);
    return s;
  }
  Tensor randn_like_shape(const Shape& s) { return testing::random_tensor(s, uint32_t(gen()), -1, 1, kFloat32); }
};

using Case = std::function<void(Fuzzer&)>;

std::vector<std::pair<std::string, Case>> cases() {
  return {
      {"add shape clash", [](Fuzzer& f) {
         Shape s = f.shape(1, 3);
         for (auto& d : s) d = std::max<int64_t>(d, 2);
         Shape o = s;
         o.back() += 1;
         add(f.randn_like_shape(s), f.randn_like_shape(o));
       }},
      {"mul shape clash", [](Fuzzer& f) {
         Shape s = f.shape(2, 3);
         for (auto& d : s) d = std::max<int64_t>(d, 2);
         Shape o = s;
         o[0] += 1;
         mul(f.randn_like_shape(s), f.randn_like_shape(o));
       }},
      {"sum dim out of range", [](Fuzzer& f) {
         Shape s = f.shape();
         int64_t d = f.between(0, 1) ? int64_t(s.size()) + f.between(0, 3) : -int64_t(s.size()) - 1 - f.between(0, 3);
         sum(f.randn_like_shape(s), {d});
       }},
      {"negative size", [](Fuzzer& f) {
         Shape s = f.shape();
         s[size_t(f.between(0, int64_t(s.size()) - 1))] = -f.between(1, 5);
         zeros(s);
       }},
      {"view wrong numel", [](Fuzzer& f) {
         Shape s = f.shape();
         Shape o = s;
         o.push_back(f.between(2, 4));
         view(f.randn_like_shape(s), o);
       }},
      {"reshape two -1", [](Fuzzer& f) { reshape(f.randn_like_shape(f.shape()), {-1, -1}); }},
      {"permute wrong rank", [](Fuzzer& f) {
         Shape s = f.shape(2, 4);
         permute(f.randn_like_shape(s), Shape(s.size() - 1, 0));
       }},
      {"select index out of range", [](Fuzzer& f) {
         Shape s = f.shape();
         int64_t d = f.between(0, int64_t(s.size()) - 1);
         select(f.randn_like_shape(s), d, s[size_t(d)] + f.between(0, 3));
       }},
      {"expand incompatible", [](Fuzzer& f) {
         Shape s = f.shape(1, 3);
         for (auto& d : s) d = std::max<int64_t>(d, 2);
         Shape o = s;
         o.back() += 1;
         expand(f.randn_like_shape(s), o);
       }},
      {"matmul inner mismatch", [](Fuzzer& f) {
         int64_t n = f.between(1, 4), k = f.between(1, 4), m = f.between(1, 4);
         matmul(f.randn_like_shape({n, k}), f.randn_like_shape({k + f.between(1, 3), m}));
       }},
      {"cat mismatched", [](Fuzzer& f) {
         Shape s = f.shape(2, 3);
         Shape o = s;
         o.back() += 1;
         cat({f.randn_like_shape(s), f.randn_like_shape(o)}, 0);
       }},
      {"index_select out of range", [](Fuzzer& f) {
         Shape s = f.shape();
         Tensor idx = from_data<int64_t>({s[0] + f.between(0, 3)}, {1});
         index_select(f.randn_like_shape(s), 0, idx);
       }},
      {"gather wrong dtype index", [](Fuzzer& f) {
         Shape s = f.shape();
         gather(f.randn_like_shape(s), 0, f.randn_like_shape(s));
       }},
      {"conv2d channel mismatch", [](Fuzzer& f) {
         int64_t c = f.between(1, 3);
         conv2d(f.randn_like_shape({1, c, 5, 5}), f.randn_like_shape({2, c + f.between(1, 2), 3, 3}));
       }},
      {"cross_entropy target out of range", [](Fuzzer& f) {
         int64_t n = f.between(1, 4), c = f.between(2, 5);
         cross_entropy(f.randn_like_shape({n, c}), full({n}, c + f.between(0, 3), {.dtype = kInt64}));
       }},
      {"softmax dim out of range", [](Fuzzer& f) {
         Shape s = f.shape();
         softmax(f.randn_like_shape(s), int64_t(s.size()) + f.between(0, 2));
       }},
      {"layer_norm shape mismatch", [](Fuzzer& f) {
         Shape s = f.shape(2, 3);
         layer_norm(f.randn_like_shape(s), {s.back() + f.between(1, 3)});
       }},
      {"embedding index out of range", [](Fuzzer& f) {
         int64_t v = f.between(2, 6);
         embedding(full({3}, v + f.between(0, 2), {.dtype = kInt64}), f.randn_like_shape({v, 4}));
       }},
      {"float index", [](Fuzzer& f) { index_select(f.randn_like_shape({4, 3}), 0, f.randn_like_shape({2})); }},
      {"dropout bad p", [](Fuzzer& f) {
         dropout(f.randn_like_shape(f.shape()), f.between(0, 1) ? 1.0 + double(f.between(1, 5)) : -0.5);
       }},
      {"sub of bools", [](Fuzzer& f) {
         Shape s = f.shape();
         sub(zeros(s, {.dtype = kBool}), zeros(s, {.dtype = kBool}));
       }},
      {"requires_grad on int", [](Fuzzer& f) { zeros(f.shape(), {.dtype = kInt32}).requires_grad_(); }},
      {"item of many", [](Fuzzer& f) {
         Shape s = f.shape();
         s[0] = f.between(2, 5);
         f.randn_like_shape(s).item();
       }},
      {"narrow past end", [](Fuzzer& f) {
         Shape s = f.shape();
         narrow(f.randn_like_shape(s), 0, 0, s[0] + f.between(1, 3));
       }},
      {"topk k too large", [](Fuzzer& f) {
         Shape s = f.shape();
         topk(f.randn_like_shape(s), s.back() + f.between(1, 3));
       }},
      {"max_pool2d kernel too large", [](Fuzzer& f) {
         max_pool2d(f.randn_like_shape({1, 1, 3, 3}), {.kernel_size = {5 + f.between(0, 2), 5}});
       }},
  };
}

TEST(BadInput, RandomInvalidCallsThrow) {
  Fuzzer fuzz(20261129);
  auto table = cases();
  int calls = 0;
  for (int i = 0; i < 600; ++i) {
    auto& [name, make_call] = table[size_t(fuzz.between(0, int64_t(table.size()) - 1))];
    bool threw = false;
    try {
      make_call(fuzz);
    } catch (const Error&) {
      threw = true;
    }
    EXPECT_TRUE(threw) << "no mf::Error for: " << name << " (call " << i << ")";
    calls++;
  }
  EXPECT_EQ(calls, 600);
}

}  // namespace
}  // namespace mf
