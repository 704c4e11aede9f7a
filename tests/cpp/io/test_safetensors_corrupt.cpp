// load_file on truncated, corrupted and malformed files: always mf::Error
// naming the file and the problem, never a crash or a wrong tensor.
#include "io_test_util.h"

namespace mf {
namespace {
using io::load_file;
using io::save_file;
using testing::error_of;
using testing::safetensors_bytes;
using testing::ScratchDir;
using testing::u64_le;
using testing::write_bytes;

// A valid file with several dtypes, an empty tensor, a scalar and metadata.
std::string valid_file_bytes(const ScratchDir& dir) {
  std::map<std::string, Tensor> tensors{
      {"weight", testing::random_bytes_tensor({3, 4}, kFloat32, 1)},
      {"bias", testing::random_bytes_tensor({4}, kBFloat16, 2)},
      {"steps", testing::random_bytes_tensor({}, kInt64, 3)},
      {"mask", testing::random_bytes_tensor({5}, kBool, 4)},
      {"empty", make_empty({0, 2}, kFloat64)},
      {"bytes", testing::random_bytes_tensor({6}, kUInt8, 5)},
  };
  save_file(tensors, dir.file("valid.safetensors"), {{"format", "pt"}});
  return testing::read_bytes(dir.file("valid.safetensors"));
}

// Loads bytes written to a file; returns the error message, or "" if the
// load succeeded. Any exception that is not an mf::Error fails the test.
std::string load_error(const ScratchDir& dir, const std::string& bytes) {
  const std::string path = dir.file("case.safetensors");
  write_bytes(path, bytes);
  try {
    auto [tensors, metadata] = load_file(path);
    for (const auto& [name, t] : tensors) {  // a successful load is self-consistent
      EXPECT_TRUE(t.is_contiguous());
      EXPECT_EQ(t.storage()->nbytes(), size_t(t.numel()) * t.element_size());
    }
    return "";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
    return msg.empty() ? "(empty message)" : msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-meshflow exception: " << e.what();
    return e.what();
  }
}

void expect_rejected(const ScratchDir& dir, const std::string& bytes, const std::string& expected_text) {
  const std::string msg = load_error(dir, bytes);
  EXPECT_FALSE(msg.empty()) << "accepted a corrupt file; expected an error about: " << expected_text;
  EXPECT_NE(msg.find(expected_text), std::string::npos) << msg;
}

TEST(SafeTensorsCorrupt, EveryTruncationIsRejected) {
  ScratchDir dir;
  const std::string bytes = valid_file_bytes(dir);
  ASSERT_EQ(load_error(dir, bytes), "");
  for (size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE(n);
    EXPECT_NE(load_error(dir, bytes.substr(0, n)), "");
  }
}

TEST(SafeTensorsCorrupt, TrailingBytesAreRejected) {
  ScratchDir dir;
  const std::string bytes = valid_file_bytes(dir);
  expect_rejected(dir, bytes + "x", "trailing");
  expect_rejected(dir, bytes + std::string(8, '\0'), "trailing");
}

TEST(SafeTensorsCorrupt, HeaderLength) {
  ScratchDir dir;
  const std::string bytes = valid_file_bytes(dir);
  expect_rejected(dir, "", "fewer than the 8");
  expect_rejected(dir, "\x08\x00\x00", "fewer than the 8");
  expect_rejected(dir, u64_le(0) + "{}", "does not start with '{'");
  expect_rejected(dir, u64_le(1000) + "{}      ", "exceeds the 8 bytes that follow");
  expect_rejected(dir, u64_le(100'000'001) + "{}", "exceeds the limit");
  expect_rejected(dir, u64_le(~uint64_t(0)) + "{}", "exceeds the limit");
  expect_rejected(dir, u64_le(uint64_t(1) << 63) + "{}", "exceeds the limit");
  // Every change of any length byte breaks the file.
  for (size_t i = 0; i < 8; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string b = bytes;
      b[i] = char(b[i] ^ (1 << bit));
      SCOPED_TRACE(::testing::Message() << "byte " << i << " bit " << bit);
      EXPECT_NE(load_error(dir, b), "");
    }
  }
}

TEST(SafeTensorsCorrupt, StructuralHeaderBytes) {
  ScratchDir dir;
  const std::string bytes = valid_file_bytes(dir);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(bytes[size_t(i)])) << (8 * i);
  // Replacing any brace, bracket, colon, comma or quote of the header with a
  // letter leaves invalid JSON.
  int replaced = 0;
  for (size_t i = 8; i < 8 + n; ++i) {
    if (std::string_view("{}[]:,\"").find(bytes[i]) == std::string_view::npos) continue;
    std::string b = bytes;
    b[i] = 'x';
    SCOPED_TRACE(::testing::Message() << "byte " << i << " '" << bytes[i] << "'");
    EXPECT_NE(load_error(dir, b), "");
    ++replaced;
  }
  EXPECT_GT(replaced, 100);
  // Digits of offsets and shapes changed: sizes and offsets no longer agree.
  const size_t offsets = bytes.find("\"data_offsets\":[", 8) + 16;
  std::string b = bytes;
  b[offsets] = '9';
  expect_rejected(dir, b, "data_offsets");
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":" + dtype + ",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

TEST(SafeTensorsCorrupt, BadJson) {
  ScratchDir dir;
  const std::string ok = entry("a", "\"F32\"", "[2]", "[0,8]");
  const std::string data(8, '\x01');
  const std::vector<std::pair<std::string, std::string>> cases{
      {"{" + ok, "expected '}'"},
      {"{" + ok + ",}", "expected a string key"},
      {"{" + ok + "}}", "unexpected bytes after"},
      {"{" + ok + "} x", "unexpected bytes after"},
      {"{'a':{}}", "expected a string key"},
      {"{/*c*/" + ok + "}", "expected a string key"},
      {" {" + ok + "}", "does not start with '{'"},
      {"[]", "does not start with '{'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", "expected ']'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[+2],\"data_offsets\":[0,8]}}", "unexpected character"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.],\"data_offsets\":[0,8]}}", "no digit after '.'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2e],\"data_offsets\":[0,8]}}", "no digit in the exponent"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[NaN],\"data_offsets\":[0,8]}}", "unexpected character"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999]}}", "out of the int64"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e999]}}", "out of the double range"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":tru}", "invalid literal"},
      {"{\"a\":{\"dtype\":\"F32", "unterminated string"},
      {"{\"a\\x\":{}}", "invalid escape"},
      {"{\"a\\u12\":{}}", "invalid hex digit"},
      {"{\"a\\ud800\":{}}", "lone high surrogate"},
      {"{\"a\\udc00\":{}}", "lone low surrogate"},
      {"{\"a\\ud800\\u0041\":{}}", "not followed by a low"},
      {"{\"a\xff\":{}}", "invalid UTF-8"},
      {"{\"a\xc0\x80\":{}}", "invalid UTF-8"},
      {"{\"a\xed\xa0\x80\":{}}", "invalid UTF-8"},
      {"{\"a\xf4\x90\x80\x80\":{}}", "invalid UTF-8"},
      {"{\"a\xe2\x82\":{}}", "invalid UTF-8"},
      {"{\"a\nb\":{}}", "unescaped control character"},
      {"{" + ok + "," + ok + "}", "duplicate key \"a\""},
      {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "duplicate key \"dtype\""},
      {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}," + ok + "}", "duplicate key \"k\""},
      {"{\"__metadata__\":{\"k\":[[[[]]]]}," + ok + "}", "nesting deeper than"},
      {"{" + std::string(100000, '[') + "}", "expected a string key"},
      {"{\"a\":" + std::string(100000, '[') + "}", "nesting deeper than"},
  };
  for (const auto& [header, expected] : cases) {
    SCOPED_TRACE(header.substr(0, 200));
    expect_rejected(dir, safetensors_bytes(header, data), expected);
  }
}

TEST(SafeTensorsCorrupt, BadEntries) {
  ScratchDir dir;
  const std::string data(8, '\x01');
  const std::vector<std::pair<std::string, std::string>> cases{
      {entry("a", "\"F33\"", "[2]", "[0,8]"), "dtype \"F33\" is not one meshflow reads"},
      {entry("a", "\"f32\"", "[2]", "[0,8]"), "dtype \"f32\""},
      {entry("a", "\"U32\"", "[2]", "[0,8]"), "dtype \"U32\""},
      {entry("a", "\"F8_E4M3\"", "[8]", "[0,8]"), "dtype \"F8_E4M3\""},
      {entry("a", "32", "[2]", "[0,8]"), "dtype must be a string"},
      {entry("a", "\"F32\"", "[-2]", "[0,8]"), "shape holds -2, which is negative"},
      {entry("a", "\"F32\"", "[2.0]", "[0,8]"), "shape must hold integers"},
      {entry("a", "\"F32\"", "2", "[0,8]"), "shape must be an array"},
      {entry("a", "\"F32\"", "[\"2\"]", "[0,8]"), "shape must hold integers"},
      {entry("a", "\"U8\"", "[4294967296,4294967296]", "[0,8]"), "too many elements"},
      {entry("a", "\"F64\"", "[4611686018427387904]", "[0,8]"), "too many bytes"},
      {entry("a", "\"U8\"", "[0,4294967296,4294967296]", "[0,0]"), "too many elements"},
      {entry("a", "\"F32\"", "[2]", "[0]"), "data_offsets must be an array [begin, end]"},
      {entry("a", "\"F32\"", "[2]", "[0,4,8]"), "data_offsets must be an array [begin, end]"},
      {entry("a", "\"F32\"", "[2]", "{}"), "data_offsets must be an array"},
      {entry("a", "\"F32\"", "[2]", "[-8,0]"), "negative"},
      {entry("a", "\"F32\"", "[2]", "[\"0\",8]"), "data_offsets must hold integers"},
      {entry("a", "\"F32\"", "[2]", "[8,0]"), "end before they begin"},
      {entry("a", "\"F32\"", "[2]", "[0,16]"), "reach past the data section"},
      {entry("a", "\"F32\"", "[2]", "[0,9223372036854775807]"), "reach past the data section"},
      {entry("a", "\"F32\"", "[3]", "[0,8]"), "span 8 bytes but a F32 tensor of shape (3,) needs 12"},
      {entry("a", "\"F32\"", "[1]", "[4,8]"), "leave a gap"},
      {entry("a", "\"F32\"", "[1]", "[0,4]"), "trailing garbage"},
      {entry("a", "\"F32\"", "[2]", "[0,8]") + "," + entry("b", "\"F32\"", "[1]", "[4,8]"), "overlap tensor \"a\""},
      {entry("a", "\"F32\"", "[1]", "[0,4]") + "," + entry("b", "\"F32\"", "[2]", "[0,8]"), "overlap tensor \"a\""},
      {entry("a", "\"U8\"", "[8]", "[0,8]") + "," + entry("b", "\"U8\"", "[8]", "[0,8]"), "overlap tensor \"a\""},
      {"\"a\":{\"dtype\":\"F32\",\"shape\":[2]}", "missing field \"data_offsets\""},
      {"\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}", "missing field \"dtype\""},
      {"\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}", "unknown field \"x\""},
      {"\"a\":[]", "expected an object, got an array"},
      {"\"__metadata__\":[]", "\"__metadata__\" must be an object"},
      {"\"__metadata__\":{\"k\":1}", "\"__metadata__\" entry \"k\" must be a string"},
      {"\"__metadata__\":{\"k\":null}", "must be a string, got null"},
  };
  for (const auto& [members, expected] : cases) {
    SCOPED_TRACE(members);
    expect_rejected(dir, safetensors_bytes("{" + members + "}", data), expected);
  }
  // BOOL bytes other than 0 and 1 are rejected; 0 and 1 load.
  expect_rejected(dir, safetensors_bytes("{" + entry("m", "\"BOOL\"", "[3]", "[0,3]") + "}", std::string("\x01\x00\x02", 3)),
                  "BOOL element 2 is byte 2");
  EXPECT_EQ(load_error(dir, safetensors_bytes("{" + entry("m", "\"BOOL\"", "[3]", "[0,3]") + "}",
                                              std::string("\x01\x00\x01", 3))),
            "");
}

// Random byte edits of a valid file: whatever the damage, load_file either
// throws mf::Error or returns self-consistent tensors.
TEST(SafeTensorsCorrupt, RandomCorruptionNeverCrashes) {
  ScratchDir dir;
  const std::string bytes = valid_file_bytes(dir);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(bytes[size_t(i)])) << (8 * i);
  std::mt19937 gen(2024);
  int rejected = 0;
  const int iterations = 4000;
  for (int iter = 0; iter < iterations; ++iter) {
    std::string b = bytes;
    const int edits = 1 + int(gen() % 4);
    for (int e = 0; e < edits && !b.empty(); ++e) {
      // Most edits hit the header, where the parser is.
      const size_t span = gen() % 4 == 0 ? b.size() : std::min<size_t>(b.size(), size_t(8 + n));
      const size_t pos = gen() % span;
      switch (gen() % 6) {
        case 0: b[pos] = char(gen()); break;
        case 1: b[pos] = char(b[pos] ^ (1 << (gen() % 8))); break;
        case 2: b.erase(pos, 1 + gen() % 3); break;
        case 3: b.insert(pos, 1, "{}[]\",:0123456789-.e\\ "[gen() % 22]); break;
        case 4: b.resize(pos); break;
        case 5: b[pos] = "{}[]\",:0123456789-.e\\ "[gen() % 22]; break;
      }
    }
    SCOPED_TRACE(iter);
    if (!load_error(dir, b).empty()) ++rejected;
  }
  // Nearly every edit breaks the file; a few (a letter of a name or of the
  // metadata, a data byte) leave a valid one.
  EXPECT_GT(rejected, iterations * 8 / 10);
}

}  // namespace
}  // namespace mf
