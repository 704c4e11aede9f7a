// save_file / load_file: round trips and the exact bytes of the format.
#include "io/checksum.h"
#include "io/json.h"
#include "io_test_util.h"

namespace mf {
namespace {
using io::load_file;
using io::save_file;
using testing::all_dtypes;
using testing::random_bytes_tensor;
using testing::read_bytes;
using testing::safetensors_bytes;
using testing::ScratchDir;
using testing::tensor_bytes;
using testing::u64_le;
using testing::write_bytes;

std::string header_of(const std::string& file_bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(file_bytes[size_t(i)])) << (8 * i);
  return file_bytes.substr(8, size_t(n));
}

TEST(SafeTensors, RoundTripEveryDTypeBitExact) {
  ScratchDir dir;
  std::map<std::string, Tensor> tensors;
  uint32_t seed = 1;
  for (DType dt : all_dtypes()) {
    tensors[std::string("t_") + dtype_name(dt)] = random_bytes_tensor({3, 5}, dt, seed++);
    tensors[std::string("odd_") + dtype_name(dt)] = random_bytes_tensor({7}, dt, seed++);
  }
  save_file(tensors, dir.file("all.safetensors"));
  auto [loaded, metadata] = load_file(dir.file("all.safetensors"));
  EXPECT_TRUE(metadata.empty());
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_EQ(loaded.count(name), 1u);
    const Tensor& got = loaded.at(name);
    EXPECT_EQ(got.dtype(), t.dtype());
    EXPECT_EQ(got.sizes(), t.sizes());
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_FALSE(got.requires_grad());
    EXPECT_EQ(tensor_bytes(got), tensor_bytes(t));
  }
}

TEST(SafeTensors, ZeroDimAndZeroSizeTensors) {
  ScratchDir dir;
  std::map<std::string, Tensor> tensors{
      {"scalar_f64", from_vector({-2.5}, {}, {.dtype = kFloat64})},
      {"scalar_bool", from_vector({1}, {}, {.dtype = kBool})},
      {"empty", make_empty({0}, kFloat32)},
      {"empty_3d", make_empty({2, 0, 3}, kInt64)},
      {"empty_bool", make_empty({0, 4}, kBool)},
      {"after", from_vector({1, 2, 3}, {3}, {.dtype = kInt16})},
  };
  save_file(tensors, dir.file("edge.safetensors"));
  auto [loaded, metadata] = load_file(dir.file("edge.safetensors"));
  ASSERT_EQ(loaded.size(), tensors.size());
  EXPECT_EQ(loaded.at("scalar_f64").dim(), 0);
  EXPECT_EQ(loaded.at("scalar_f64").item<double>(), -2.5);
  EXPECT_EQ(loaded.at("scalar_bool").dim(), 0);
  EXPECT_TRUE(loaded.at("scalar_bool").item<bool>());
  EXPECT_EQ(loaded.at("empty").sizes(), (Shape{0}));
  EXPECT_EQ(loaded.at("empty_3d").sizes(), (Shape{2, 0, 3}));
  EXPECT_EQ(loaded.at("empty_3d").dtype(), kInt64);
  EXPECT_EQ(loaded.at("empty_bool").sizes(), (Shape{0, 4}));
  testing::expect_values(loaded.at("after"), {1, 2, 3});
  // A 0-d tensor is stored with shape [] and an empty tensor with begin == end.
  const std::string header = header_of(read_bytes(dir.file("edge.safetensors")));
  EXPECT_NE(header.find(R"("scalar_f64":{"dtype":"F64","shape":[],"data_offsets":[)"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("empty_3d":{"dtype":"I64","shape":[2,0,3],"data_offsets":[0,0]})"), std::string::npos)
      << header;
}

TEST(SafeTensors, NonContiguousTensorsAreStoredInRowMajorOrder) {
  ScratchDir dir;
  Tensor base = testing::random_tensor({4, 6}, 7, -10, 10, kFloat32);
  std::map<std::string, Tensor> tensors{
      {"transposed", transpose(base, 0, 1)},
      {"strided", slice(slice(base, 1, 1, 6, 2), 0, 1, 4)},
      {"expanded", expand(from_vector({1, 2, 3}, {3, 1}, {.dtype = kInt32}), {3, 4})},
      {"selected", select(base, 0, 2)},
      {"requires_grad", testing::random_tensor({2, 2}, 8).requires_grad_()},
  };
  ASSERT_FALSE(tensors["transposed"].is_contiguous());
  ASSERT_FALSE(tensors["strided"].is_contiguous());
  ASSERT_NE(tensors["selected"].storage_offset(), 0);
  save_file(tensors, dir.file("views.safetensors"));
  auto [loaded, metadata] = load_file(dir.file("views.safetensors"));
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    const Tensor& got = loaded.at(name);
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_EQ(got.sizes(), t.sizes());
    EXPECT_EQ(got.dtype(), t.dtype());
    EXPECT_EQ(testing::values(got), testing::values(t));
  }
  testing::expect_values(loaded.at("expanded"), {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
}

TEST(SafeTensors, MetadataRoundTrip) {
  ScratchDir dir;
  const std::map<std::string, std::string> metadata{
      {"format", "pt"},
      {"quotes \" and \\ backslash", "tab\tnewline\ncontrol\x01 nul-free"},
      {"unicode", "\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80"},
      {"", "empty key"},
  };
  save_file({{"w", from_vector({1, 2}, {2})}}, dir.file("m.safetensors"), metadata);
  EXPECT_EQ(load_file(dir.file("m.safetensors")).second, metadata);
}

TEST(SafeTensors, LoadedTensorsOwnTheirMemory) {
  ScratchDir dir;
  save_file({{"a", from_vector({1, 2, 3}, {3})}, {"b", from_vector({4, 5}, {2})}}, dir.file("x.safetensors"));
  auto [loaded, metadata] = load_file(dir.file("x.safetensors"));
  std::filesystem::remove(dir.file("x.safetensors"));
  EXPECT_FALSE(loaded.at("a").shares_storage(loaded.at("b")));
  testing::expect_values(loaded.at("a"), {1, 2, 3});
  testing::expect_values(loaded.at("b"), {4, 5});
}

// The reference implementation's own serialization examples, byte for byte:
// compact JSON, fields in the order dtype, shape, data_offsets, the header
// padded with spaces to a multiple of 8.
// The reference writer's bytes plus meshflow's checksum entry in the
// metadata (Note [Checkpoint checksums]): still a plain safetensors file.
TEST(SafeTensors, WritesTheReferenceBytes) {
  ScratchDir dir;
  const std::string data = testing::le_bytes<float>({0, 1, 2, 3, 4, 5});
  ASSERT_EQ(io::crc32c(data.data(), data.size()), 0x78743a5du);
  save_file({{"attn.0", from_vector({0, 1, 2, 3, 4, 5}, {1, 2, 3})}}, dir.file("a.safetensors"));
  EXPECT_EQ(read_bytes(dir.file("a.safetensors")),
            u64_le(160) +
                R"({"__metadata__":{"meshflow.crc32c":"{\"__metadata__\":\"00000000\",\"attn.0\":\"78743a5d\"}"},)"
                R"("attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + "   " + data);

  save_file({{"attn0", from_vector({0, 1, 2, 3, 4, 5}, {1, 1, 2, 3})}}, dir.file("b.safetensors"));
  EXPECT_EQ(read_bytes(dir.file("b.safetensors")),
            u64_le(160) +
                R"({"__metadata__":{"meshflow.crc32c":"{\"__metadata__\":\"00000000\",\"attn0\":\"78743a5d\"}"},)"
                R"("attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + "   " + data);

  save_file({}, dir.file("empty.safetensors"));
  EXPECT_EQ(read_bytes(dir.file("empty.safetensors")),
            u64_le(72) + R"({"__metadata__":{"meshflow.crc32c":"{\"__metadata__\":\"00000000\"}"}})" + "  ");

  // The metadata's checksum covers each key and value with a NUL after it.
  save_file({}, dir.file("meta.safetensors"), {{"framework", "pt"}});
  EXPECT_EQ(read_bytes(dir.file("meta.safetensors")),
            u64_le(88) + R"({"__metadata__":{"framework":"pt","meshflow.crc32c":"{\"__metadata__\":\"11ce344d\"}"}})" +
                " ");
  EXPECT_EQ(load_file(dir.file("meta.safetensors")).second, (std::map<std::string, std::string>{{"framework", "pt"}}));
}

TEST(SafeTensors, Crc32cKnownValues) {
  EXPECT_EQ(io::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(io::crc32c("", 0), 0u);
  // Incremental: the checksum of a concatenation from its parts, at any split.
  const std::string text = "the quick brown fox jumps over the lazy dog, twice over";
  const uint32_t whole = io::crc32c(text.data(), text.size());
  for (size_t k = 0; k <= text.size(); ++k)
    EXPECT_EQ(io::crc32c(text.data() + k, text.size() - k, io::crc32c(text.data(), k)), whole) << k;
}

TEST(SafeTensors, ChecksumsCatchChangedBytesUnlessVerifyIsOff) {
  ScratchDir dir;
  save_file({{"w", from_vector({1, 2, 3, 4}, {4})}}, dir.file("c.safetensors"));
  std::string bytes = read_bytes(dir.file("c.safetensors"));
  bytes[bytes.size() - 3] ^= 0x01;
  write_bytes(dir.file("c.safetensors"), bytes);
  const std::string msg = testing::error_of([&] { load_file(dir.file("c.safetensors")); });
  EXPECT_NE(msg.find("tensor \"w\" fails its checksum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("verify=False"), std::string::npos) << msg;
  EXPECT_EQ(load_file(dir.file("c.safetensors"), /*verify=*/false).first.at("w").numel(), 4);
}

// Tensors are laid out by decreasing alignment, then by name, so each one
// starts at a multiple of its element size in the file.
TEST(SafeTensors, HeaderLayoutAndAlignment) {
  ScratchDir dir;
  std::map<std::string, Tensor> tensors;
  uint32_t seed = 10;
  for (DType dt : all_dtypes()) {
    tensors[std::string("b_") + dtype_name(dt)] = random_bytes_tensor({3}, dt, seed++);
    tensors[std::string("a_") + dtype_name(dt)] = random_bytes_tensor({1, 1}, dt, seed++);
  }
  save_file(tensors, dir.file("layout.safetensors"), {{"k", "v"}});
  const std::string bytes = read_bytes(dir.file("layout.safetensors"));
  const std::string header = header_of(bytes);
  EXPECT_EQ(header.size() % 8, 0u);
  const size_t json_end = header.find_last_not_of(' ') + 1;
  EXPECT_EQ(header[0], '{');
  EXPECT_EQ(header[json_end - 1], '}');

  const io::json::Json root = io::json::parse(header, 8);
  const auto& members = *root.as_object();
  ASSERT_EQ(members.size(), tensors.size() + 1);
  EXPECT_EQ(members[0].first, "__metadata__");
  const std::vector<std::string> dtype_order{"I64", "F64", "F32", "I32", "BF16", "F16", "I16", "I8", "U8", "BOOL"};
  uint64_t expected_begin = 0;
  const uint64_t data_start = 8 + header.size();
  for (size_t i = 1; i < members.size(); ++i) {
    const auto& [name, entry] = members[i];
    SCOPED_TRACE(name);
    const auto& fields = *entry.as_object();
    ASSERT_EQ(fields.size(), 3u);
    EXPECT_EQ(fields[0].first, "dtype");
    EXPECT_EQ(fields[1].first, "shape");
    EXPECT_EQ(fields[2].first, "data_offsets");
    const std::string& dtype = *fields[0].second.as_string();
    EXPECT_EQ(dtype, dtype_order[(i - 1) / 2]);
    EXPECT_EQ(name[0], i % 2 == 1 ? 'a' : 'b');
    const Tensor& t = tensors.at(name);
    std::vector<int64_t> shape;
    for (const auto& d : *fields[1].second.as_array()) shape.push_back(*d.as_int());
    EXPECT_EQ(shape, t.sizes());
    const auto& offsets = *fields[2].second.as_array();
    const uint64_t begin = uint64_t(*offsets[0].as_int()), end = uint64_t(*offsets[1].as_int());
    EXPECT_EQ(begin, expected_begin);
    EXPECT_EQ(end - begin, uint64_t(t.numel()) * t.element_size());
    EXPECT_EQ((data_start + begin) % t.element_size(), 0u);
    EXPECT_EQ(bytes.substr(size_t(data_start + begin), size_t(end - begin)), tensor_bytes(t));
    expected_begin = end;
  }
  EXPECT_EQ(data_start + expected_begin, bytes.size());
}

// A file assembled by hand from the format description: tensors listed out of
// offset order, metadata last, no padding, JSON whitespace and escapes.
TEST(SafeTensors, ReadsAHandWrittenFile) {
  ScratchDir dir;
  const std::string header = "{\n  \"b\\u00e9\": {\"dtype\": \"I16\", \"shape\": [2], \"data_offsets\": [16, 20]},\n"
                             "  \"a\" : {\"shape\":[2, 1], \"data_offsets\":[0,16], \"dtype\":\"F64\"},\r\n"
                             "  \"flag\": {\"dtype\": \"BOOL\", \"shape\": [], \"data_offsets\": [20, 21]},\n"
                             "  \"none\": {\"dtype\": \"BF16\", \"shape\": [0, 3], \"data_offsets\": [21, 21]},\n"
                             "  \"__metadata__\": {\"note\": \"hand \\\"made\\\" \\/ \\ud83d\\ude00\"}\t}";
  const std::string data = testing::le_bytes<double>({1.5, -2.25}) + testing::le_bytes<int16_t>({-7, 300}) + "\x01";
  write_bytes(dir.file("hand.safetensors"), safetensors_bytes(header, data));
  auto [loaded, metadata] = load_file(dir.file("hand.safetensors"));
  ASSERT_EQ(loaded.size(), 4u);
  EXPECT_EQ(loaded.at("a").dtype(), kFloat64);
  EXPECT_EQ(loaded.at("a").sizes(), (Shape{2, 1}));
  testing::expect_values(loaded.at("a"), {1.5, -2.25});
  EXPECT_EQ(loaded.at("b\xc3\xa9").dtype(), kInt16);
  testing::expect_values(loaded.at("b\xc3\xa9"), {-7, 300});
  EXPECT_EQ(loaded.at("flag").dim(), 0);
  EXPECT_TRUE(loaded.at("flag").item<bool>());
  EXPECT_EQ(loaded.at("none").sizes(), (Shape{0, 3}));
  EXPECT_EQ(loaded.at("none").dtype(), kBFloat16);
  EXPECT_EQ(metadata.at("note"), "hand \"made\" / \xf0\x9f\x98\x80");

  // Padded with spaces as writers do; an empty header object is a valid file.
  write_bytes(dir.file("padded.safetensors"), safetensors_bytes(R"({"x":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})" "   ", "abc"));
  testing::expect_values(load_file(dir.file("padded.safetensors")).first.at("x"), {97, 98, 99});
  write_bytes(dir.file("empty.safetensors"), safetensors_bytes("{}", ""));
  EXPECT_TRUE(load_file(dir.file("empty.safetensors")).first.empty());
}

TEST(SafeTensors, SaveRejectsWhatTheFormatCannotHold) {
  ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");
  EXPECT_THROW(save_file({{"undefined", Tensor()}}, path), ValueError);
  EXPECT_THROW(save_file({{"__metadata__", from_vector({1}, {1})}}, path), ValueError);
  EXPECT_THROW(save_file({{"bad\xff utf8", from_vector({1}, {1})}}, path), ValueError);
  EXPECT_THROW(save_file({{"overlong \xc0\x80", from_vector({1}, {1})}}, path), ValueError);
  EXPECT_THROW(save_file({{"w", from_vector({1}, {1})}}, path, {{"k", "\xed\xa0\x80"}}), ValueError);
  EXPECT_THROW(save_file({{"meta", make_meta({2}, kFloat32)}}, path), ValueError);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SafeTensors, LoadReportsMissingAndNonRegularFiles) {
  ScratchDir dir;
  std::string msg = testing::error_of([&] { load_file(dir.file("missing.safetensors")); });
  EXPECT_NE(msg.find("missing.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
  msg = testing::error_of([&] { load_file(dir.path()); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

}  // namespace
}  // namespace mf
