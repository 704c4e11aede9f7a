// Where a device walk records the first index it found out of range (Note
// [Device index kernels] in index_kernels.h): a device thread cannot throw,
// so it records the index and the host throws after the walk.
#pragma once

#include <cstdint>

namespace mf {

struct IndexFault {
  int32_t set = 0;
  int32_t unused = 0;
  int64_t value = 0;
};

}  // namespace mf
