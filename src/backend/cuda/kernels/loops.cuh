// CUDA elementwise loops for the shared kernel table
// (backend/common/elementwise_kernels.h), and the device math of the shared
// functors (Note [Shared elementwise math]).
//
// Loops::run launches one grid-stride kernel on the current stream of the
// output's device. Operands that are all contiguous with the output's shape
// index one flat range; anything else (broadcast, strided, transposed)
// walks the coalesced iteration space of make_operands (LoopGeometry, up to
// kMaxLoopDims dims) from each element's linear index. Loops::run_blocks
// runs a block program (Note [Block programs]) as one kernel whose thread
// blocks keep their tiles in dynamic shared memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "backend/common/block_program.h"
#include "backend/common/index_fault.h"
#include "backend/common/strided_operands.h"
#include "backend/cuda/cuda_runtime.h"
#include "meshflow/host_device.h"

namespace mf::cuda {

// The device library's math (host and device, so the functors' host
// instantiations compile too).
struct DeviceMath {
#define MF_DEVICE_MATH(name)                                                  \
  MF_FORCE_INLINE MF_HOST_DEVICE static float name(float x) { return ::name##f(x); } \
  MF_FORCE_INLINE MF_HOST_DEVICE static double name(double x) { return ::name(x); }
  MF_DEVICE_MATH(exp)
  MF_DEVICE_MATH(expm1)
  MF_DEVICE_MATH(log)
  MF_DEVICE_MATH(log1p)
  MF_DEVICE_MATH(sqrt)
  MF_DEVICE_MATH(tanh)
  MF_DEVICE_MATH(erf)
  MF_DEVICE_MATH(sin)
  MF_DEVICE_MATH(cos)
  MF_DEVICE_MATH(floor)
  MF_DEVICE_MATH(ceil)
  MF_DEVICE_MATH(nearbyint)
  MF_DEVICE_MATH(trunc)
  MF_DEVICE_MATH(fabs)
  MF_DEVICE_MATH(tan)
  MF_DEVICE_MATH(asin)
  MF_DEVICE_MATH(acos)
  MF_DEVICE_MATH(atan)
  MF_DEVICE_MATH(sinh)
  MF_DEVICE_MATH(cosh)
  MF_DEVICE_MATH(asinh)
  MF_DEVICE_MATH(acosh)
  MF_DEVICE_MATH(atanh)
  MF_DEVICE_MATH(log2)
  MF_DEVICE_MATH(log10)
  MF_DEVICE_MATH(exp2)
  MF_DEVICE_MATH(erfc)
  MF_DEVICE_MATH(erfinv)
#undef MF_DEVICE_MATH
  MF_FORCE_INLINE MF_HOST_DEVICE static float pow(float a, float b) { return ::powf(a, b); }
  MF_FORCE_INLINE MF_HOST_DEVICE static double pow(double a, double b) { return ::pow(a, b); }
  MF_FORCE_INLINE MF_HOST_DEVICE static float atan2(float a, float b) { return ::atan2f(a, b); }
  MF_FORCE_INLINE MF_HOST_DEVICE static double atan2(double a, double b) { return ::atan2(a, b); }
  MF_FORCE_INLINE MF_HOST_DEVICE static float fmod(float a, float b) { return ::fmodf(a, b); }
  MF_FORCE_INLINE MF_HOST_DEVICE static double fmod(double a, double b) { return ::fmod(a, b); }
  MF_FORCE_INLINE MF_HOST_DEVICE static float copysign(float a, float b) { return ::copysignf(a, b); }
  MF_FORCE_INLINE MF_HOST_DEVICE static double copysign(double a, double b) { return ::copysign(a, b); }
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE static bool isnan(A a) { return a != a; }
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE static bool isinf(A a) { return fabs(a) == A(INFINITY); }
  template <typename A>
  MF_FORCE_INLINE MF_HOST_DEVICE static A select(bool c, A a, A b) { return c ? a : b; }
  // An element of storage type T in the compute type A (Note [Shared
  // reduction ops]); float16 and bfloat16 through float.
  template <typename A, typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE static A to_acc(T x) {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return A(float(x));
    else return A(x);
  }
  // Note [Integer division] in backend/common/elementwise_functors.h.
  template <typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE static T zero_divisor(const char*) { return T(-1); }

  // Atomics of the index kernels (Note [Device index kernels]); the host
  // forms only let the functors' host instantiations compile.
  template <typename T>
  MF_FORCE_INLINE MF_HOST_DEVICE static void atomic_add(T* p, T v) {
#ifdef __CUDA_ARCH__
    if constexpr (std::is_same_v<T, int64_t>)
      atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
    else
      atomicAdd(p, v);
#else
    *p = T(*p + v);
#endif
  }
  // *p = f(*p) by compare-and-swap: on the element's own word for 4 and 8
  // bytes, on the aligned 32-bit word around it for 1 and 2 (the caching
  // allocator's blocks are whole words, so that word is in the block).
  template <typename T, typename F>
  MF_FORCE_INLINE MF_HOST_DEVICE static void atomic_update(T* p, const F& f) {
#ifdef __CUDA_ARCH__
    if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
      using U = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
      U* word = reinterpret_cast<U*>(p);
      U old = *word, assumed;
      do {
        assumed = old;
        T value;
        memcpy(&value, &assumed, sizeof(T));
        const T next = f(value);
        U bits;
        memcpy(&bits, &next, sizeof(T));
        old = atomicCAS(word, assumed, bits);
      } while (old != assumed);
    } else {
      const uintptr_t address = reinterpret_cast<uintptr_t>(p);
      unsigned int* word = reinterpret_cast<unsigned int*>(address & ~uintptr_t(3));
      const unsigned int shift = unsigned(address & 3) * 8u;
      const unsigned int mask = ((1u << (8 * sizeof(T))) - 1u) << shift;
      unsigned int old = *word, assumed;
      do {
        assumed = old;
        const unsigned int current = (assumed & mask) >> shift;
        T value;
        memcpy(&value, &current, sizeof(T));
        const T next = f(value);
        unsigned int bits = 0;
        memcpy(&bits, &next, sizeof(T));
        old = atomicCAS(word, assumed, (assumed & ~mask) | (bits << shift));
      } while (old != assumed);
    }
#else
    *p = f(*p);
#endif
  }
  MF_FORCE_INLINE MF_HOST_DEVICE static void record_fault(IndexFault* fault, int64_t value) {
#ifdef __CUDA_ARCH__
    if (atomicCAS(&fault->set, 0, 1) == 0) fault->value = value;
#else
    if (!fault->set) fault->set = 1, fault->value = value;
#endif
  }
};

inline constexpr int kBlock = 256;

template <typename Out, typename F, typename... In>
__global__ void flat_kernel(int64_t n, Out* out, F f, const In*... in) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    out[i] = Out(f(in[i]...));
}

template <typename Out, typename F, typename... In>
__global__ void strided_kernel(int64_t n, LoopGeometry<sizeof...(In) + 1> g, F f) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    int64_t offset[sizeof...(In) + 1];
    g.offsets(i, offset);
    apply_at<Out, In...>(g, offset, f, std::index_sequence_for<In...>{});
  }
}

template <typename Out, typename F>
__global__ void indexed_kernel(int64_t n, Out* out, F f) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    out[i] = Out(f(i));
}

template <size_t N, typename F>
__global__ void offsets_kernel(int64_t n, LoopGeometry<N> g, F f) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    int64_t offset[N];
    g.offsets(i, offset);
    f(g.data, offset);
  }
}

// Note [Block programs]: each block's phases with a barrier after each;
// the grid strides over the blocks beyond its size.
template <typename P>
__global__ void block_program_kernel(int64_t n_blocks, P program) {
  extern __shared__ __align__(16) char block_shared[];
  for (int64_t block = blockIdx.x; block < n_blocks; block += gridDim.x) {
    typename P::State state;
    const int64_t phases = program.phases(block);
    for (int64_t phase = 0; phase < phases; ++phase) {
      program.run(phase, block, int(threadIdx.x), state, block_shared);
      __syncthreads();
    }
  }
}

inline unsigned grid_for(int64_t n) {
  constexpr int64_t kMaxGrid = int64_t(1) << 20;  // the rest by grid stride
  return unsigned(std::min((n + kBlock - 1) / kBlock, kMaxGrid));
}

struct Loops {
  using Math = DeviceMath;

  template <typename Out, typename... In, typename F>
  static void run(Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, const F& f) {
    constexpr size_t N = sizeof...(In) + 1;
    const int64_t n = out.numel();
    if (n == 0) return;
    StridedOperands<N> ops = make_operands<N>(out, ins);
    const int device = out.device().index();
    DeviceGuard guard(device);
    cudaStream_t stream = current_stream(device);
    if (is_flat<N>(ops, {int64_t(sizeof(Out)), int64_t(sizeof(In))...})) {
      [&]<size_t... I>(std::index_sequence<I...>) {
        flat_kernel<Out, F, In...><<<grid_for(n), kBlock, 0, stream>>>(
            n, reinterpret_cast<Out*>(ops.data[0]), f, reinterpret_cast<const In*>(ops.data[I + 1])...);
      }(std::index_sequence_for<In...>{});
    } else {
      strided_kernel<Out, F, In...><<<grid_for(n), kBlock, 0, stream>>>(n, loop_geometry<N>(ops, "cuda elementwise"), f);
    }
    check_cuda(cudaGetLastError(), "elementwise kernel launch");
  }

  template <typename Out, typename F>
  static void run_indexed(Tensor& out, const F& f) {
    const int64_t n = out.numel();
    if (n == 0) return;
    const int device = out.device().index();
    DeviceGuard guard(device);
    indexed_kernel<Out, F><<<grid_for(n), kBlock, 0, current_stream(device)>>>(n, static_cast<Out*>(out.data_ptr()), f);
    check_cuda(cudaGetLastError(), "indexed kernel launch");
  }

  // Verbs of the index kernels (Note [Device index kernels]).
  template <size_t N, typename F>
  static void for_each(const Device& device, const LoopGeometry<N>& g, int64_t n, const F& f) {
    if (n == 0) return;
    DeviceGuard guard(device.index());
    offsets_kernel<N, F><<<grid_for(n), kBlock, 0, current_stream(device.index())>>>(n, g, f);
    check_cuda(cudaGetLastError(), "index kernel launch");
  }
  // Note [Block programs].
  template <typename P>
  static void run_blocks(const Device& device, int64_t n_blocks, int threads, int64_t shared_bytes, const P& program) {
    if (n_blocks == 0) return;
    MF_CHECK(threads >= 1 && threads <= kMaxBlockThreads, Error, "block program: ", threads,
             " threads per block; expected 1 to ", kMaxBlockThreads);
    constexpr int64_t kMaxGrid = int64_t(1) << 20;  // the rest by grid stride
    constexpr int64_t kDefaultShared = 48 * 1024;   // more must be asked for per kernel
    DeviceGuard guard(device.index());
    if (shared_bytes > kDefaultShared)
      check_cuda(cudaFuncSetAttribute(reinterpret_cast<const void*>(&block_program_kernel<P>),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)),
                 "block program shared memory");
    block_program_kernel<P><<<unsigned(std::min(n_blocks, kMaxGrid)), unsigned(threads), size_t(shared_bytes),
                              current_stream(device.index())>>>(n_blocks, program);
    check_cuda(cudaGetLastError(), "block program launch");
  }
  static IndexFault* clear_fault(const Device& device);
  static std::optional<int64_t> read_fault(const Device& device, IndexFault* fault);
};

}  // namespace mf::cuda
