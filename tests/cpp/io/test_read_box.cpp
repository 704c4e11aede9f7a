// SafetensorsReader::read_box: the bytes of one box of a tensor, into a
// destination of any strides (Note [Reading shards by range]).
#include "io_test_util.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf {
namespace {
using io::SafetensorsReader;
using io::save_file;
using testing::read_bytes;
using testing::ScratchDir;
using testing::tensor_bytes;
using testing::write_bytes;

// t[offsets : offsets + sizes] as a contiguous copy.
Tensor slice(const Tensor& t, const Shape& offsets, const Shape& sizes) {
  Tensor v = t;
  for (size_t d = 0; d < sizes.size(); ++d) v = narrow(v, int64_t(d), offsets[d], sizes[d]);
  return contiguous(v);
}

TEST(ReadBox, EveryBoxOfA3dTensorAnyBufferAnyDestinationLayout) {
  ScratchDir dir;
  const Tensor t = reshape(arange(0, 3 * 4 * 5, 1, DType::Int64), {3, 4, 5});
  save_file({{"t", t}, {"other", from_vector({1, 2}, {2})}}, dir.file("t.safetensors"));
  SafetensorsReader reader(dir.file("t.safetensors"));
  ASSERT_EQ(reader.tensors().size(), 2u);
  EXPECT_EQ(reader.tensors()[1].first, "t");
  EXPECT_EQ(reader.tensors()[1].second.second, (Shape{3, 4, 5}));
  int checked = 0;
  for (int64_t o0 = 0; o0 < 3; ++o0)
    for (int64_t n0 = 1; o0 + n0 <= 3; ++n0)
      for (int64_t o1 : {0, 1, 3})
        for (int64_t n1 = 1; o1 + n1 <= 4; n1 += 2)
          for (int64_t o2 : {0, 2})
            for (int64_t n2 : {1, 3}) {
              const Shape off{o0, o1, o2}, sz{n0, n1, n2};
              const Tensor want = slice(t, off, sz);
              for (size_t buffer : {size_t(8), size_t(24), size_t(1 << 20)}) {
                Tensor dst = zeros(sz, {.dtype = DType::Int64});
                EXPECT_EQ(reader.read_box("t", off, sz, dst, buffer), uint64_t(want.numel()) * 8);
                EXPECT_EQ(tensor_bytes(dst), tensor_bytes(want)) << shape_str(off) << shape_str(sz) << buffer;
                // a transposed destination
                Tensor strided = permute(zeros({n2, n1, n0}, {.dtype = DType::Int64}), {2, 1, 0});
                reader.read_box("t", off, sz, strided, buffer);
                EXPECT_EQ(tensor_bytes(contiguous(strided)), tensor_bytes(want));
                ++checked;
              }
            }
  EXPECT_GT(checked, 100);
  // The whole tensor and a 0-d one.
  Tensor all = zeros({3, 4, 5}, {.dtype = DType::Int64});
  reader.read_box("t", {0, 0, 0}, {3, 4, 5}, all, 16);
  EXPECT_EQ(tensor_bytes(all), tensor_bytes(t));
}

TEST(ReadBox, ZeroDimAndEmptyBoxes) {
  ScratchDir dir;
  save_file({{"s", from_vector({7}, {})}, {"e", zeros({0, 3})}}, dir.file("s.safetensors"));
  SafetensorsReader reader(dir.file("s.safetensors"));
  Tensor s = zeros({});
  EXPECT_EQ(reader.read_box("s", {}, {}, s, 4), 4u);
  EXPECT_EQ(s.item().to_double(), 7.0);
  Tensor e = zeros({0, 3});
  EXPECT_EQ(reader.read_box("e", {0, 0}, {0, 3}, e, 4), 0u);
}

TEST(ReadBox, BadBoxesAndDestinationsAreClearErrors) {
  ScratchDir dir;
  save_file({{"w", zeros({4, 6})}}, dir.file("w.safetensors"));
  SafetensorsReader reader(dir.file("w.safetensors"));
  Tensor dst = zeros({2, 3});
  auto error = [&](auto&& fn) { return testing::error_of(fn); };
  EXPECT_NE(error([&] { reader.read_box("nope", {0, 0}, {2, 3}, dst, 64); }).find("holds no tensor \"nope\""),
            std::string::npos);
  EXPECT_NE(error([&] { reader.read_box("w", {3, 0}, {2, 3}, dst, 64); }).find("leaves it in dim 0"),
            std::string::npos);
  EXPECT_NE(error([&] { reader.read_box("w", {0, -1}, {2, 3}, dst, 64); }).find("leaves it in dim 1"),
            std::string::npos);
  EXPECT_NE(error([&] { reader.read_box("w", {0}, {2}, dst, 64); }).find("has 2 dims"), std::string::npos);
  EXPECT_NE(error([&] { reader.read_box("w", {0, 0}, {3, 2}, dst, 64); }).find("the destination has shape"),
            std::string::npos);
  Tensor wrong_dtype = zeros({2, 3}, {.dtype = DType::Float64});
  EXPECT_NE(error([&] { reader.read_box("w", {0, 0}, {2, 3}, wrong_dtype, 64); }).find("is float32"),
            std::string::npos);
  // Huge offsets do not overflow into range.
  EXPECT_NE(error([&] { reader.read_box("w", {INT64_MAX, 0}, {2, 3}, dst, 64); }).find("leaves it"),
            std::string::npos);
}

TEST(ReadBox, AWholeTensorIsCheckedAgainstItsChecksumAPartIsNot) {
  ScratchDir dir;
  save_file({{"w", from_vector({1, 2, 3, 4, 5, 6}, {2, 3})}}, dir.file("c.safetensors"));
  std::string bytes = read_bytes(dir.file("c.safetensors"));
  bytes[bytes.size() - 1] ^= 0x40;  // the last element (row 1)
  write_bytes(dir.file("c.safetensors"), bytes);
  SafetensorsReader reader(dir.file("c.safetensors"));
  Tensor whole = zeros({2, 3});
  const std::string msg = testing::error_of([&] { reader.read_box("w", {0, 0}, {2, 3}, whole, 8); });
  EXPECT_NE(msg.find("tensor \"w\" fails its checksum"), std::string::npos) << msg;
  Tensor row = zeros({1, 3});
  reader.read_box("w", {0, 0}, {1, 3}, row, 8);  // an untouched part reads
  EXPECT_EQ(select(row, 1, 2).item().to_double(), 3.0);
  SafetensorsReader unchecked(dir.file("c.safetensors"), /*verify=*/false);
  unchecked.read_box("w", {0, 0}, {2, 3}, whole, 8);
}

TEST(ReadBox, TheHeaderIsCheckedOnOpenAndBoolBytesOnRead) {
  ScratchDir dir;
  write_bytes(dir.file("bad.safetensors"), std::string("\x02\x00\x00\x00\x00\x00\x00\x00[]", 10));
  EXPECT_NE(testing::error_of([&] { SafetensorsReader r(dir.file("bad.safetensors")); }).find("not a valid safetensors"),
            std::string::npos);
  save_file({{"b", to(from_vector({1, 0, 1, 1}, {4}), DType::Bool)}}, dir.file("b.safetensors"));
  std::string bytes = read_bytes(dir.file("b.safetensors"));
  bytes[bytes.size() - 2] = 7;
  write_bytes(dir.file("b.safetensors"), bytes);
  SafetensorsReader reader(dir.file("b.safetensors"), /*verify=*/false);
  Tensor dst = zeros({2}, {.dtype = DType::Bool});
  reader.read_box("b", {0}, {2}, dst, 1);
  const std::string msg = testing::error_of([&] { reader.read_box("b", {2}, {2}, dst, 1); });
  EXPECT_NE(msg.find("BOOL element 2 is byte 7"), std::string::npos) << msg;
}

}  // namespace
}  // namespace mf
