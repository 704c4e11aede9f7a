// The vectorised bfloat16 <-> float32 conversions of kernels/cpu/convert.h
// give the bits of BFloat16's scalar conversion (Note [Vectorised bfloat16
// conversion]): every bfloat16 pattern, and floats around every rounding
// boundary, NaN, infinities and subnormals.
#include <bit>
#include <limits>
#include <vector>

#include "backend/cpu/kernels/convert.h"
#include "test_util.h"

namespace mf {
namespace {

TEST(CpuConvert, EveryBFloat16PatternWidensExactly) {
  std::vector<BFloat16> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = BFloat16::from_bits(uint16_t(b));
  std::vector<float> wide(all.size());
  cpu::convert_run(all.data(), wide.data(), int64_t(all.size()));
  for (uint32_t b = 0; b < 65536; ++b)
    ASSERT_EQ(std::bit_cast<uint32_t>(wide[b]), std::bit_cast<uint32_t>(float(all[b]))) << "bits " << b;
}

TEST(CpuConvert, NarrowingRoundsAsTheScalarConversion) {
  std::vector<float> values{0.0f, -0.0f, 1.0f, -1.5f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN(),
                            std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::min(), 3.0e38f};
  // Each bfloat16 pattern's neighbourhood: just below, at and just above the
  // halfway points, where round-to-nearest-even decides.
  for (uint32_t b = 0; b < 65536; b += 7)
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      values.push_back(std::bit_cast<float>((b << 16) | low));
  std::vector<BFloat16> narrow(values.size());
  cpu::convert_run(values.data(), narrow.data(), int64_t(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t expected = BFloat16(values[i]).bits;
    ASSERT_EQ(narrow[i].bits, expected) << "float bits " << std::bit_cast<uint32_t>(values[i]);
    BFloat16 one;
    cpu::store_acc(&one, 0, values[i]);
    ASSERT_EQ(one.bits, expected);
  }
}

}  // namespace
}  // namespace mf
