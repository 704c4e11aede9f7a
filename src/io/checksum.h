// CRC-32C (Castagnoli), the checksum of checkpoint tensors: the SSE4.2 crc32
// instruction where the CPU has it (checked at run time), else a table.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mf::io {

// crc32c(data, n) of a whole buffer; crc32c(data2, n2, crc32c(data1, n1)) of
// the concatenation. crc32c("123456789", 9) == 0xE3069283.
uint32_t crc32c(const void* data, size_t nbytes, uint32_t crc = 0);

}  // namespace mf::io
