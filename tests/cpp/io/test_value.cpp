// Value trees: save / load round trips and the file layout of
// Note [Value layout] (src/io/value.cpp).
#include <bit>
#include <cmath>
#include <limits>

#include "io/json.h"
#include "io_test_util.h"

namespace mf {
namespace {
using io::load;
using io::save;
using io::Value;
using testing::ScratchDir;
using testing::tensor_bytes;

// Same kinds, same values (doubles bit for bit), same tensor dtypes, shapes
// and bytes, same keys and lengths, recursively.
void expect_same(const Value& got, const Value& want, const std::string& where = "root") {
  SCOPED_TRACE(where);
  ASSERT_EQ(got.kind(), want.kind()) << io::kind_name(got.kind()) << " vs " << io::kind_name(want.kind());
  switch (want.kind()) {
    case Value::Kind::None: break;
    case Value::Kind::Bool: EXPECT_EQ(got.as_bool(), want.as_bool()); break;
    case Value::Kind::Int: EXPECT_EQ(got.as_int(), want.as_int()); break;
    case Value::Kind::Double:
      if (std::isnan(want.as_double())) EXPECT_TRUE(std::isnan(got.as_double()));
      else EXPECT_EQ(std::bit_cast<uint64_t>(got.as_double()), std::bit_cast<uint64_t>(want.as_double()));
      break;
    case Value::Kind::String: EXPECT_EQ(got.as_string(), want.as_string()); break;
    case Value::Kind::Tensor:
      EXPECT_EQ(got.as_tensor().dtype(), want.as_tensor().dtype());
      EXPECT_EQ(got.as_tensor().sizes(), want.as_tensor().sizes());
      EXPECT_EQ(tensor_bytes(got.as_tensor()), tensor_bytes(want.as_tensor()));
      break;
    case Value::Kind::List:
      ASSERT_EQ(got.as_list().size(), want.as_list().size());
      for (size_t i = 0; i < want.as_list().size(); ++i)
        expect_same(got.at(i), want.at(i), where + "[" + std::to_string(i) + "]");
      break;
    case Value::Kind::Map: {
      std::vector<std::string> got_keys, want_keys;
      for (const auto& [k, v] : got.as_map()) got_keys.push_back(k);
      for (const auto& [k, v] : want.as_map()) want_keys.push_back(k);
      ASSERT_EQ(got_keys, want_keys);
      for (const auto& [k, v] : want.as_map()) expect_same(got.at(k), v, where + "[\"" + k + "\"]");
      break;
    }
  }
}

Value optimizer_state() {
  Value::Map state;
  for (int p = 0; p < 2; ++p) {
    state[std::to_string(p)] = Value::Map{
        {"step", 3 + p},
        {"exp_avg", testing::random_bytes_tensor({4, 3}, kFloat32, uint32_t(10 + p))},
        {"exp_avg_sq", testing::random_bytes_tensor({4, 3}, kFloat32, uint32_t(20 + p))},
    };
  }
  Value::Map group{
      {"lr", 1e-3},
      {"betas", Value::List{0.9, 0.999}},
      {"eps", 1e-8},
      {"weight_decay", 0.0},
      {"amsgrad", false},
      {"params", Value::List{0, 1}},
      {"foreach", nullptr},
  };
  return Value::Map{{"state", std::move(state)}, {"param_groups", Value::List{std::move(group)}}};
}

TEST(ValueIo, OptimizerStateRoundTrip) {
  ScratchDir dir;
  const Value state = optimizer_state();
  save(state, dir.file("opt.safetensors"));
  expect_same(load(dir.file("opt.safetensors")), state);

  // Plain safetensors underneath: the tensors under their paths, the skeleton
  // in the metadata.
  auto [tensors, metadata] = io::load_file(dir.file("opt.safetensors"));
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq", "state.1.exp_avg",
                                             "state.1.exp_avg_sq"}));
  EXPECT_EQ(tensor_bytes(tensors.at("state.1.exp_avg")),
            tensor_bytes(state.at("state").at("1").at("exp_avg").as_tensor()));
  ASSERT_EQ(metadata.size(), 1u);
  EXPECT_EQ(metadata.at("meshflow.value"),
            R"({"param_groups":[{"amsgrad":false,"betas":[0.9,0.999],"eps":1e-08,"foreach":null,"lr":0.001,)"
            R"("params":[0,1],"weight_decay":0.0}],"state":{"0":{"exp_avg":{"$tensor":"state.0.exp_avg"},)"
            R"("exp_avg_sq":{"$tensor":"state.0.exp_avg_sq"},"step":3},"1":{"exp_avg":{"$tensor":"state.1.exp_avg"},)"
            R"("exp_avg_sq":{"$tensor":"state.1.exp_avg_sq"},"step":4}}})");
}

TEST(ValueIo, EveryKindAndAwkwardValues) {
  ScratchDir dir;
  const Value tree = Value::Map{
      {"none", Value()},
      {"true", true},
      {"int_one", 1},
      {"double_one", 1.0},
      {"int_min", std::numeric_limits<int64_t>::min()},
      {"int_max", std::numeric_limits<int64_t>::max()},
      {"neg_zero", -0.0},
      {"tiny", 5e-324},
      {"huge", 1.7976931348623157e308},
      {"third", 1.0 / 3.0},
      {"nan", std::numeric_limits<double>::quiet_NaN()},
      {"inf", std::numeric_limits<double>::infinity()},
      {"neg_inf", -std::numeric_limits<double>::infinity()},
      {"string", "quote \" backslash \\ newline \n tab \t unicode \xc3\xa9"},
      {"empty_string", ""},
      {"empty_list", Value::List{}},
      {"empty_map", Value::Map{}},
      {"$tensor", "a user key that looks like a tag"},
      {"$float", Value::Map{{"$$x", 1}, {"$", 2}}},
      {"with.dot", Value::List{from_vector({1, 2}, {2}, {.dtype = kInt8})}},
      {"", Value::Map{{"", make_empty({0, 3}, kFloat16)}}},
      {"scalar", from_vector({3}, {}, {.dtype = kFloat64})},
      {"nested", Value::List{Value::List{Value::List{Value::Map{{"deep", testing::random_bytes_tensor({2}, kBFloat16, 3)}}}}}},
  };
  save(tree, dir.file("kinds.safetensors"));
  const Value loaded = load(dir.file("kinds.safetensors"));
  expect_same(loaded, tree);
  EXPECT_EQ(loaded.at("int_one").kind(), Value::Kind::Int);
  EXPECT_EQ(loaded.at("double_one").kind(), Value::Kind::Double);
  EXPECT_TRUE(std::signbit(loaded.at("neg_zero").as_double()));

  std::vector<std::string> names;
  for (const auto& [name, t] : io::load_file(dir.file("kinds.safetensors")).first) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{".", "nested.0.0.0.deep", "scalar", "with.dot.0"}));
}

TEST(ValueIo, RootsThatAreNotMaps) {
  ScratchDir dir;
  for (const Value& root : {Value(testing::random_bytes_tensor({2, 2}, kInt32, 5)), Value(42), Value("text"),
                            Value(), Value(Value::List{1, 2.5, "x", from_vector({1}, {1})})}) {
    SCOPED_TRACE(io::kind_name(root.kind()));
    save(root, dir.file("root.safetensors"));
    expect_same(load(dir.file("root.safetensors")), root);
  }
  // A tensor at the root is stored under the empty name.
  save(Value(from_vector({5}, {1})), dir.file("root.safetensors"));
  EXPECT_EQ(io::load_file(dir.file("root.safetensors")).first.count(""), 1u);
}

TEST(ValueIo, PlainSafetensorsFileLoadsAsAMap) {
  ScratchDir dir;
  const Tensor a = from_vector({1, 2}, {2}), b = from_vector({3}, {1}, {.dtype = kInt64});
  io::save_file({{"layer.weight", a}, {"layer.bias", b}}, dir.file("plain.safetensors"), {{"format", "pt"}});
  expect_same(load(dir.file("plain.safetensors")), Value::Map{{"layer.weight", a}, {"layer.bias", b}});
}

TEST(ValueIo, SaveRejectsCollisionsDepthAndBadText) {
  ScratchDir dir;
  const Tensor t = from_vector({1}, {1});
  const std::string path = dir.file("bad.safetensors");
  std::string msg = testing::error_of([&] { save(Value::Map{{"a.b", t}, {"a", Value::Map{{"b", t}}}}, path); });
  EXPECT_NE(msg.find("\"a.b\""), std::string::npos) << msg;
  EXPECT_THROW(save(Value::Map{{"a.0", t}, {"a", Value::List{t}}}, path), ValueError);
  EXPECT_THROW(save(Value::Map{{"__metadata__", t}}, path), ValueError);
  EXPECT_THROW(save(Value::Map{{"bad\xff", 1}}, path), ValueError);
  EXPECT_THROW(save(Value::List{"bad\xc0\xaf"}, path), ValueError);
  EXPECT_THROW(save(Value::List{Tensor()}, path), ValueError);

  auto nested = [&](int depth) {
    Value v = t;
    for (int i = 0; i < depth; ++i) v = Value::List{std::move(v)};
    return v;
  };
  EXPECT_THROW(save(nested(io::kMaxValueDepth + 1), path), ValueError);
  EXPECT_TRUE(dir.entries().empty());
  save(nested(io::kMaxValueDepth), path);
  expect_same(load(path), nested(io::kMaxValueDepth));
}

TEST(ValueIo, MalformedSkeletonsAreRejected) {
  ScratchDir dir;
  const std::string path = dir.file("s.safetensors");
  auto write = [&](const std::string& skeleton, std::map<std::string, Tensor> tensors = {}) {
    io::save_file(tensors, path, {{"meshflow.value", skeleton}});
  };
  const Tensor t = from_vector({1}, {1});
  const std::vector<std::tuple<std::string, std::map<std::string, Tensor>, std::string>> cases{
      {"{", {}, "not valid JSON"},
      {"[1,]", {}, "not valid JSON"},
      {R"({"a":{"$tensor":"x"}})", {}, "names tensor \"x\", which the file does not hold"},
      {R"([{"$tensor":"x"},{"$tensor":"x"}])", {{"x", t}}, "names tensor \"x\" twice"},
      {R"({"a":1})", {{"x", t}}, "tensor \"x\" of the file is not part of the tree"},
      {R"({"$tensor":"x","b":1})", {{"x", t}}, "other members"},
      {R"({"$tensor":3})", {}, "holds an integer, not a string"},
      {R"({"$float":"NaN"})", {}, "unknown float \"NaN\""},
      {R"({"$other":"x"})", {}, "unknown tag \"$other\""},
      {std::string(io::kMaxValueDepth + 2, '[') + std::string(io::kMaxValueDepth + 2, ']'), {}, "nesting deeper"},
  };
  for (const auto& [skeleton, tensors, expected] : cases) {
    SCOPED_TRACE(skeleton.substr(0, 80));
    write(skeleton, tensors);
    const std::string msg = testing::error_of([&] { load(path); });
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
}

TEST(ValueIo, Accessors) {
  const Value v = Value::Map{{"n", 3}, {"l", Value::List{1.5}}};
  EXPECT_EQ(v.at("n").as_int(), 3);
  EXPECT_EQ(v.at("l").at(0).as_double(), 1.5);
  EXPECT_THROW(v.at("n").as_double(), TypeError);
  EXPECT_THROW(v.at("l").as_map(), TypeError);
  EXPECT_THROW(v.at("missing"), IndexError);
  EXPECT_THROW(v.at("l").at(1), IndexError);
  EXPECT_THROW(Value(std::numeric_limits<uint64_t>::max()), ValueError);
  EXPECT_EQ(Value(uint64_t(7)).as_int(), 7);
  EXPECT_EQ(Value(int8_t(-3)).as_int(), -3);
  EXPECT_EQ(Value(2.5f).kind(), Value::Kind::Double);
  EXPECT_EQ(Value("s").kind(), Value::Kind::String);
  EXPECT_EQ(Value(true).kind(), Value::Kind::Bool);
  Value m = Value::Map{};
  m.as_map()["k"] = Value::List{};
  m.as_map()["k"].as_list().push_back(1);
  EXPECT_EQ(m.at("k").at(0).as_int(), 1);
}

}  // namespace
}  // namespace mf
