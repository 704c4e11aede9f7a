// nn::Module and the C++ layers on their own: registration and traversal
// order, state dicts, to(dtype), train/eval, hooks, containers, Linear and
// Conv2d against hand-written loops, default initialisation, attention
// masking and a short training loop.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshflow/nn.h"
#include "meshflow/optim/optimizer.h"
#include "test_util.h"

namespace mf {
namespace {

using namespace mf::testing;
using nn::Module;

std::vector<std::string> keys(const nn::NamedTensors& entries) {
  std::vector<std::string> out;
  for (const auto& [name, t] : entries) out.push_back(name);
  return out;
}

// A block with its own parameter, buffers (one not persistent) and two
// children, inside a model that shares a child and a parameter.
class Block : public Module {
 public:
  Block() : Module("Block") {
    register_parameter("scale", ones({4}));
    register_buffer("running", zeros({4}));
    register_buffer("scratch", zeros({2}), /*persistent=*/false);
    proj = register_module("proj", std::make_shared<nn::Linear>(3, 4));
    register_module("act", std::make_shared<nn::ReLU>());
  }
  Tensor forward(const Tensor& x) override { return mul((*child("act"))((*proj)(x)), parameter("scale")); }
  std::shared_ptr<nn::Linear> proj;
};

class Net : public Module {
 public:
  Net() : Module("Net") {
    register_parameter("w", ones({4, 4}));
    first = register_module("first", std::make_shared<Block>());
    body = register_module("body", std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
                                       std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::Tanh>()}));
    register_module("alias", first->proj);  // shared module
    auto tied = register_module("tied", std::make_shared<nn::Linear>(4, 4, false));
    tied->register_parameter("weight", std::static_pointer_cast<nn::Linear>((*body)[0])->weight());  // shared
  }
  Tensor forward(const Tensor& x) override {
    return (*child("tied"))((*body)(matmul((*first)(x), parameter("w"))));
  }
  std::shared_ptr<Block> first;
  std::shared_ptr<nn::Sequential> body;
};

TEST(ModuleRegistration, TraversalFollowsRegistrationOrderAndListsSharedEntriesOnce) {
  auto net = std::make_shared<Net>();
  EXPECT_EQ(keys(net->named_parameters()),
            (std::vector<std::string>{"w", "first.scale", "first.proj.weight", "first.proj.bias", "body.0.weight",
                                      "body.0.bias"}));
  EXPECT_EQ(keys(net->named_parameters(false)), (std::vector<std::string>{"w"}));
  EXPECT_EQ(keys(net->named_parameters(true, "net")).front(), "net.w");
  EXPECT_EQ(keys(net->named_buffers()), (std::vector<std::string>{"first.running", "first.scratch"}));
  std::vector<std::string> modules;
  for (auto& [name, m] : net->named_modules()) modules.push_back(name + ":" + m->type_name());
  EXPECT_EQ(modules, (std::vector<std::string>{":Net", "first:Block", "first.proj:Linear", "first.act:ReLU",
                                               "body:Sequential", "body.0:Linear", "body.1:Tanh", "tied:Linear"}));
  std::vector<std::string> children;
  for (auto& [name, m] : net->named_children()) children.push_back(name);
  EXPECT_EQ(children, (std::vector<std::string>{"first", "body", "alias", "tied"}));
  // The state dict lists every name, shared or not, without non-persistent buffers.
  EXPECT_EQ(keys(net->state_dict()),
            (std::vector<std::string>{"w", "first.scale", "first.running", "first.proj.weight", "first.proj.bias",
                                      "body.0.weight", "body.0.bias", "alias.weight", "alias.bias", "tied.weight"}));
  EXPECT_EQ(net->submodule("body.0"), (*net->body)[0]);
  EXPECT_EQ(net->submodule(""), net);
  EXPECT_THROW(net->submodule("body.7"), ValueError);
}

TEST(ModuleRegistration, RejectsBadNamesAndKindClashes) {
  Module m;
  m.register_parameter("p", ones({2}));
  EXPECT_TRUE(m.parameter("p").requires_grad());
  EXPECT_THROW(m.register_parameter("a.b", ones({2})), ValueError);
  EXPECT_THROW(m.register_parameter("", ones({2})), ValueError);
  EXPECT_THROW(m.register_buffer("p", ones({2})), ValueError);
  EXPECT_THROW(m.register_module("p", std::make_shared<nn::ReLU>()), ValueError);
  Tensor x = ones({2}).requires_grad_(true);
  EXPECT_THROW(m.register_parameter("q", mul(x, Scalar(2.0))), ValueError);  // not a leaf
  EXPECT_THROW(m.parameter("missing"), ValueError);
  // unregister: a parameter keeps its slot as None, a child goes away.
  m.register_module("c", std::make_shared<nn::ReLU>());
  EXPECT_TRUE(m.unregister("p"));
  EXPECT_TRUE(m.has_parameter("p"));
  EXPECT_TRUE(m.parameters().empty());
  EXPECT_TRUE(m.unregister("c"));
  EXPECT_FALSE(m.has_child("c"));
  EXPECT_FALSE(m.unregister("nothing"));
  EXPECT_THROW(m.forward(ones({1})), TypeError);
}

TEST(ModuleStateDict, RoundTripCopiesValuesAndConvertsDtype) {
  auto a = std::make_shared<Net>();
  auto b = std::make_shared<Net>();
  b->to(DType::Float64);
  nn::LoadResult r = b->load_state_dict(a->state_dict());
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  auto sa = a->state_dict(), sb = b->state_dict();
  ASSERT_EQ(keys(sa), keys(sb));
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sb[i].second.dtype(), DType::Float64) << sb[i].first;
    expect_close(sb[i].second, sa[i].second, 0, 0);
  }
  // Entries share memory with the module but are detached.
  Tensor w = sa[0].second;
  EXPECT_FALSE(w.requires_grad());
  fill_(w, 3.0);
  expect_values(a->parameter("w"), std::vector<double>(16, 3.0));
}

TEST(ModuleStateDict, StrictErrorsNameTheKeys) {
  auto net = std::make_shared<Net>();
  std::map<std::string, Tensor> state;
  for (auto& [k, v] : net->state_dict()) state[k] = v;
  auto missing = state;
  missing.erase("body.0.bias");
  try {
    net->load_state_dict(missing);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Missing key(s) in state_dict: \"body.0.bias\""), std::string::npos)
        << e.what();
  }
  auto unexpected = state;
  unexpected["first.extra"] = zeros({1});
  try {
    net->load_state_dict(unexpected);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Unexpected key(s) in state_dict: \"first.extra\""), std::string::npos)
        << e.what();
  }
  auto mismatch = state;
  mismatch["w"] = zeros({4, 5});
  EXPECT_THROW(net->load_state_dict(mismatch), ShapeError);
  EXPECT_THROW(net->load_state_dict(mismatch, false), ShapeError);
  // Non-strict: the lists come back; unexpected keys grouped by module in
  // named_modules() order, each group in the given order.
  nn::NamedTensors entries;
  for (auto& [k, v] : net->state_dict()) {
    if (k != "first.running" && k != "tied.weight") entries.emplace_back(k, v);
  }
  entries.emplace_back("body.0.extra", zeros({1}));
  entries.emplace_back("zz", zeros({1}));
  entries.emplace_back("aa", zeros({1}));
  nn::LoadResult r = net->load_state_dict(entries, false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"first.running", "tied.weight"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"zz", "aa", "body.0.extra"}));
}

TEST(ModuleTo, ConvertsInPlaceKeepingIdentity) {
  auto bn = std::make_shared<nn::BatchNorm1d>(3);
  auto seq = std::make_shared<nn::Sequential>(
      std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(2, 3), bn});
  TensorList before = seq->parameters();
  sum(seq->forward(random_tensor({4, 2}, 1, -1, 1, DType::Float32))).backward();
  seq->to(DType::Float64);
  TensorList after = seq->parameters();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i].impl(), after[i].impl());
    EXPECT_EQ(before[i].dtype(), DType::Float64);
    EXPECT_EQ(before[i].grad().dtype(), DType::Float64);
  }
  EXPECT_EQ(bn->buffer("running_mean").dtype(), DType::Float64);
  EXPECT_EQ(bn->buffer("num_batches_tracked").dtype(), DType::Int64);
  EXPECT_THROW(seq->to(DType::Int32), TypeError);
}

TEST(ModuleTrainEval, RecursesAndZeroGradAndRequiresGrad) {
  auto net = std::make_shared<Net>();
  net->eval();
  for (auto& m : net->modules()) EXPECT_FALSE(m->is_training()) << m->type_name();
  net->train();
  for (auto& m : net->modules()) EXPECT_TRUE(m->is_training()) << m->type_name();
  sum(net->forward(random_tensor({2, 3}, 2, -1, 1, DType::Float32))).backward();
  for (auto& p : net->parameters()) EXPECT_TRUE(p.grad().defined());
  net->zero_grad(false);
  for (auto& p : net->parameters()) expect_values(p.grad(), std::vector<double>(size_t(p.numel()), 0.0));
  net->zero_grad();
  for (auto& p : net->parameters()) EXPECT_FALSE(p.grad().defined());
  net->requires_grad_(false);
  for (auto& p : net->parameters()) EXPECT_FALSE(p.requires_grad());
  std::vector<std::string> order;
  net->apply([&](Module& m) { order.push_back(m.type_name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Linear", "ReLU", "Block", "Linear", "Tanh", "Sequential", "Linear",
                                             "Linear", "Net"}));
}

TEST(ModuleHooks, PreHookAndHookReplaceInputAndOutputUntilRemoved) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  Tensor x = random_tensor({4, 3}, 3, -1, 1, DType::Float32);
  Tensor base = (*lin)(x);
  int calls = 0;
  int pre = nn::register_forward_pre_hook(*lin, [&](Module&, const Tensor& in) {
    ++calls;
    return mul(in, Scalar(2.0));
  });
  int post = nn::register_forward_hook(*lin, [&](Module& m, const Tensor&, const Tensor& out) {
    EXPECT_EQ(&m, lin.get());
    ++calls;
    return add(out, Scalar(1.0));
  });
  expect_close((*lin)(x), add(lin->forward(mul(x, Scalar(2.0))), Scalar(1.0)), 1e-6);
  EXPECT_EQ(calls, 2);
  lin->remove_hook(pre);
  expect_close((*lin)(x), add(base, Scalar(1.0)), 1e-6);
  lin->remove_hook(post);
  expect_close((*lin)(x), base, 0, 0);
  // A hook returning an undefined tensor keeps the output; forward() skips hooks.
  nn::register_forward_hook(*lin, [&](Module&, const Tensor&, const Tensor&) {
    ++calls;
    return Tensor();
  });
  expect_close((*lin)(x), base, 0, 0);
  lin->forward(x);
  EXPECT_EQ(calls, 4);
}

TEST(ModuleRepr, NestedModulesPrintLikePyTorch) {
  auto net = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(3, 8, Shape{3, 3}, nn::Conv2dOptions{.padding = {1, 1}}),
      std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(8, 10, false)});
  EXPECT_EQ(net->repr(),
            "Sequential(\n"
            "  (0): Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
            "  (1): BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
            "  (2): ReLU()\n"
            "  (3): Flatten(start_dim=1, end_dim=-1)\n"
            "  (4): Linear(in_features=8, out_features=10, bias=False)\n"
            ")");
  EXPECT_EQ(nn::MultiheadAttention(4, 2).repr(),
            "MultiheadAttention(\n  (out_proj): NonDynamicallyQuantizableLinear(in_features=4, out_features=4, "
            "bias=True)\n)");
}

TEST(NnSequential, AppliesChildrenInOrder) {
  auto l1 = std::make_shared<nn::Linear>(3, 5);
  auto l2 = std::make_shared<nn::Linear>(5, 2);
  nn::Sequential seq({l1, std::make_shared<nn::ReLU>(), l2});
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_EQ(seq[-1], l2);
  EXPECT_THROW(seq[3], IndexError);
  Tensor x = random_tensor({4, 3}, 4, -1, 1, DType::Float32);
  expect_close(seq(x), l2->forward(relu(l1->forward(x))), 0, 0);
  EXPECT_EQ(keys(seq.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  nn::ModuleList list({l1, l2});
  list.push_back(std::make_shared<nn::Tanh>());
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(list[1], l2);
}

TEST(NnLinear, MatchesReferenceLoop) {
  nn::Linear lin(5, 3);
  lin.to(DType::Float64);
  Tensor x = random_tensor({2, 4, 5}, 5);
  Tensor y = lin(x);
  ASSERT_EQ(y.sizes(), (Shape{2, 4, 3}));
  std::vector<double> xv = values(x), wv = values(lin.weight()), bv = values(lin.bias()), expected;
  for (int r = 0; r < 8; ++r) {
    for (int o = 0; o < 3; ++o) {
      double acc = bv[o];
      for (int i = 0; i < 5; ++i) acc += xv[r * 5 + i] * wv[o * 5 + i];
      expected.push_back(acc);
    }
  }
  expect_values(y, expected, 1e-12);
  Tensor xg = random_tensor({3, 5}, 6).requires_grad_(true);
  expect_gradcheck([&](const TensorList& in) { return lin(in[0]); }, {xg});
  EXPECT_THROW(lin(random_tensor({3, 4}, 7)), ShapeError);
}

TEST(NnConv2d, MatchesReferenceLoopWithStridePaddingDilationGroups) {
  const int64_t n = 2, cin = 4, cout = 6, h = 7, w = 8, kh = 3, kw = 2, groups = 2;
  const int64_t sh = 2, sw = 1, ph = 1, pw = 2, dh = 1, dw = 2;
  nn::Conv2d conv(cin, cout, {kh, kw},
                  nn::Conv2dOptions{.stride = {sh, sw}, .padding = {ph, pw}, .dilation = {dh, dw}, .groups = groups});
  conv.to(DType::Float64);
  Tensor x = random_tensor({n, cin, h, w}, 8);
  Tensor y = conv(x);
  const int64_t oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1, ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  ASSERT_EQ(y.sizes(), (Shape{n, cout, oh, ow}));
  std::vector<double> xv = values(x), wv = values(conv.weight()), bv = values(conv.bias()), expected;
  const int64_t cin_g = cin / groups, cout_g = cout / groups;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < cout; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = bv[size_t(o)];
          int64_t g = o / cout_g;
          for (int64_t c = 0; c < cin_g; ++c)
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t e = 0; e < kw; ++e) {
                int64_t yi = i * sh - ph + a * dh, xj = j * sw - pw + e * dw;
                if (yi < 0 || yi >= h || xj < 0 || xj >= w) continue;
                acc += xv[size_t(((b * cin + g * cin_g + c) * h + yi) * w + xj)] *
                       wv[size_t(((o * cin_g + c) * kh + a) * kw + e)];
              }
          expected.push_back(acc);
        }
  expect_values(y, expected, 1e-12);
  EXPECT_THROW(conv(random_tensor({1, 3, 7, 8}, 9)), ShapeError);
  EXPECT_THROW(nn::Conv2d(4, 6, {3, 3}, nn::Conv2dOptions{.groups = 4}), ValueError);
}

TEST(NnConv2d, SamePaddingKeepsTheSizeWithTheExtraPaddingBottomRight) {
  nn::Conv2d conv(1, 1, {2, 3}, nn::Conv2dOptions{.bias = false, .padding_str = "same"});
  EXPECT_EQ(conv.options.padding, (Shape{0, 1}));
  EXPECT_EQ(conv.repr(), "Conv2d(1, 1, kernel_size=(2, 3), stride=(1, 1), padding=same, bias=False)");
  conv.to(DType::Float64);
  Tensor x = random_tensor({1, 1, 4, 5}, 14);
  Tensor y = conv(x);
  ASSERT_EQ(y.sizes(), (Shape{1, 1, 4, 5}));
  // Output (i, j) sees rows i, i + 1 and columns j - 1 .. j + 1 (zero outside).
  std::vector<double> xv = values(x), wv = values(conv.weight()), expected;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) {
      double acc = 0;
      for (int a = 0; a < 2; ++a)
        for (int e = 0; e < 3; ++e) {
          int r = i + a, c = j + e - 1;
          if (r < 4 && c >= 0 && c < 5) acc += xv[size_t(r * 5 + c)] * wv[size_t(a * 3 + e)];
        }
      expected.push_back(acc);
    }
  expect_values(y, expected, 1e-12);
  EXPECT_THROW(nn::Conv2d(1, 1, {3, 3}, nn::Conv2dOptions{.stride = {2, 2}, .padding_str = "same"}), ValueError);
  EXPECT_THROW(nn::Conv2d(1, 1, {3, 3}, nn::Conv2dOptions{.padding_str = "full"}), ValueError);
}

// max |v| <= bound, and the values spread over most of the range.
void expect_uniform(const Tensor& t, double bound) {
  std::vector<double> v = values(t);
  double lo = 0, hi = 0, mean = 0;
  for (double x : v) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    mean += x / double(v.size());
  }
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.9 * bound);
  EXPECT_GT(hi, 0.9 * bound);
  EXPECT_LT(std::fabs(mean), 0.1 * bound);
}

TEST(NnInit, DefaultInitialisationBounds) {
  manual_seed(0);
  nn::Linear lin(100, 200);
  EXPECT_EQ(lin.weight().dtype(), DType::Float32);
  expect_uniform(lin.weight(), 1 / std::sqrt(100.0));
  expect_uniform(lin.bias(), 1 / std::sqrt(100.0));
  nn::Conv2d conv(8, 16, {3, 3});
  expect_uniform(conv.weight(), 1 / std::sqrt(72.0));
  nn::MultiheadAttention mha(16, 4);
  expect_uniform(mha.parameter("in_proj_weight"), std::sqrt(6.0 / (16 + 48)));
  expect_values(mha.parameter("in_proj_bias"), std::vector<double>(48, 0.0), 0, 0);
  nn::LayerNorm ln(Shape{5});
  expect_values(ln.parameter("weight"), std::vector<double>(5, 1.0), 0, 0);
  expect_values(ln.parameter("bias"), std::vector<double>(5, 0.0), 0, 0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_THROW(nn::init::calculate_gain("swish"), ValueError);
  EXPECT_THROW(nn::init::xavier_uniform_(empty({5})), ValueError);
}

TEST(NnMultiheadAttention, ShapesAndMaskingEffect) {
  nn::MultiheadAttention mha(8, 2, 0.0, true, /*batch_first=*/true);
  mha.to(DType::Float64);
  Tensor q = random_tensor({3, 4, 8}, 10), kv = random_tensor({3, 5, 8}, 11);
  auto [out, weights] = mha.forward(q, kv, kv);
  EXPECT_EQ(out.sizes(), (Shape{3, 4, 8}));
  EXPECT_EQ(weights.sizes(), (Shape{3, 4, 5}));
  auto [out2, all_heads] = mha.forward(q, kv, kv, Tensor(), true, Tensor(), false);
  EXPECT_EQ(all_heads.sizes(), (Shape{3, 2, 4, 5}));
  expect_close(out2, out, 1e-12);
  // Masking the last key: its weight is 0 and its value no longer matters.
  Tensor kpm = from_vector(std::vector<double>{0, 0, 0, 0, 1}, {1, 5}, {.dtype = DType::Float64});
  kpm = expand(ne(kpm, Scalar(0.0)), {3, 5});
  auto [masked, masked_weights] = mha.forward(q, kv, kv, kpm);
  for (double v : values(select(masked_weights, 2, 4))) EXPECT_EQ(v, 0.0);
  Tensor kv2 = clone(kv);
  {
    NoGradGuard no_grad;
    Tensor last = select(kv2, 1, 4);
    fill_(last, 5.0);
  }
  expect_close(mha.forward(q, kv2, kv2, kpm).first, masked, 1e-12);
  EXPECT_GT(std::fabs(values(mha.forward(q, kv2, kv2).first)[0] - values(out)[0]), 1e-6);
  EXPECT_THROW(mha.forward(q, kv, kv, Tensor(), true, zeros({4, 4}, {.dtype = DType::Float64})), ShapeError);
  EXPECT_THROW(nn::MultiheadAttention(10, 3), ValueError);
  Tensor qg = random_tensor({2, 3, 8}, 12).requires_grad_(true);
  expect_gradcheck([&](const TensorList& in) { return mha.forward(in[0], in[0], in[0]).first; }, {qg});
}

TEST(NnTraining, SgdReducesTheLossOfASmallModel) {
  manual_seed(1);
  auto model = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Linear>(4, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 3)});
  nn::CrossEntropyLoss loss_fn;
  optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 0.2, .momentum = 0.9});
  Tensor x = random_tensor({32, 4}, 13, -1, 1, DType::Float32);
  // Targets from a fixed rule so that the model can fit them.
  std::vector<double> xv = values(x);
  std::vector<double> labels;
  for (int i = 0; i < 32; ++i) labels.push_back(xv[size_t(i * 4)] > 0 ? (xv[size_t(i * 4 + 1)] > 0 ? 2 : 1) : 0);
  Tensor target = from_vector(labels, {32}, {.dtype = DType::Int64});
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss = loss_fn.forward((*model)(x), target);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, 0.5 * first);
}

}  // namespace
}  // namespace mf
