// MF_HOST_DEVICE marks a function that both the host compiler and nvcc
// compile, for the host and for the device (the 16-bit float types, the
// shared elementwise functors of src/backend/common/). Without nvcc it is
// empty.
#pragma once

#if defined(__CUDACC__)
#define MF_HOST_DEVICE __host__ __device__
#define MF_FORCE_INLINE __forceinline__
#else
#define MF_HOST_DEVICE
#define MF_FORCE_INLINE [[gnu::always_inline]] inline
#endif
