// CUDA reduction loops for the shared reduction kernel table
// (backend/common/reduce_kernels.h), planned as Note [Device reductions]
// (backend/common/reduce_geometry.h) describes.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/common/reduce_geometry.h"
#include "backend/common/reduce_ops.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf::cuda {

// The copy of the elementwise table (backend/cuda/kernels/elementwise.cu).
void copy_cast(Tensor& dst, const Tensor& src);

template <typename Op, typename T>
MF_FORCE_INLINE __device__ typename Op::Acc map_element(const Op& op, T x, int64_t o, int64_t r) {
  if constexpr (requires { op.map(x, o, r); }) return op.map(x, o, r);
  else return op.map(x, o);
}

// Outputs of the first blockIdx.x-th groups (grid stride) over chunk
// blockIdx.y of the reduced range; sink(o, chunk, acc) takes each result.
template <typename T, typename Op, typename Sink>
__global__ void reduce_kernel(const T* x, ReduceIndexer ix, int64_t n_out, int64_t n_red, int64_t chunk_len,
                              int group, Op op, Sink sink) {
  using Acc = typename Op::Acc;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Acc* partial = reinterpret_cast<Acc*>(shared_bytes);
  const int lane = int(threadIdx.x) % group, groups = int(blockDim.x) / group;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_len;
  const int64_t r1 = r0 + chunk_len < n_red ? r0 + chunk_len : n_red;
  for (int64_t first = int64_t(blockIdx.x) * groups; first < n_out; first += int64_t(gridDim.x) * groups) {
    const int64_t o = first + int(threadIdx.x) / group;
    Acc acc = op.identity();
    if (o < n_out) {
      const T* p = x + ix.input_base(o);
      for (int64_t r = r0 + lane; r < r1; r += group) acc = op.combine(acc, map_element(op, p[ix.reduced_offset(r)], o, r));
    }
    if (group > 1) {
      partial[threadIdx.x] = acc;
      __syncthreads();
      for (int s = group / 2; s > 0; s /= 2) {
        if (lane < s) partial[threadIdx.x] = op.combine(partial[threadIdx.x], partial[threadIdx.x + s]);
        __syncthreads();
      }
      acc = partial[threadIdx.x];
      __syncthreads();
    }
    if (lane == 0 && o < n_out) sink(o, int64_t(blockIdx.y), acc);
  }
}

// The partials of chunk c in partial[c * n_out + o], folded in chunk order.
template <typename Op, typename Sink>
__global__ void combine_chunks_kernel(const typename Op::Acc* partial, int64_t n_out, int64_t chunks, Op op, Sink sink) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n_out; o += int64_t(blockDim.x) * gridDim.x) {
    typename Op::Acc acc = op.identity();
    for (int64_t c = 0; c < chunks; ++c) acc = op.combine(acc, partial[c * n_out + o]);
    sink(o, 0, acc);
  }
}

// The final result: the store, after Note [Broadcast reduced dims]'s copies.
template <typename Op, typename Store>
struct FinalSink {
  Op op;
  Store store;
  int64_t copies;
  MF_FORCE_INLINE __device__ void operator()(int64_t o, int64_t, typename Op::Acc acc) const {
    store(o, copies == 1 ? acc : combine_copies(op, acc, copies));
  }
};
template <typename Acc>
struct PartialSink {
  Acc* partial;
  int64_t n_out;
  MF_FORCE_INLINE __device__ void operator()(int64_t o, int64_t chunk, Acc acc) const { partial[chunk * n_out + o] = acc; }
};

struct Reducer {
  using Math = DeviceMath;

  static int64_t scratch_bytes(const Tensor& x, const Shape& dims) { return reduce_scratch_bytes(x, dims, true); }

  template <typename T, typename Op, typename Store>
  static void reduce(const Tensor& x, const Shape& dims, const Op& op, const Store& store, Scratch& taken) {
    using Acc = typename Op::Acc;
    static_assert(sizeof(Acc) <= size_t(kMaxReduceAccBytes));
    // Note [Reduction scratch]: the stream runs the kernel's next reduction
    // after these, so it may reuse the bytes.
    const Scratch::Turn turn(taken);
    Tensor copy;
    const ReduceGeometry g = reduce_geometry(x, dims, taken, copy, copy_cast);
    if (g.num_outputs == 0) return;
    const Tensor& input = copy.defined() ? copy : x;
    const ReducePlan plan = plan_reduce(g);
    const int device = x.device().index();
    DeviceGuard guard(device);
    cudaStream_t stream = current_stream(device);
    const T* data = static_cast<const T*>(input.data_ptr());
    const dim3 grid(unsigned(plan.blocks), unsigned(plan.chunks));
    const size_t shared = plan.group > 1 ? kReduceBlockThreads * sizeof(Acc) : 0;
    const FinalSink<Op, Store> final_sink{op, store, g.copies};
    if (plan.chunks == 1) {
      reduce_kernel<<<grid, kReduceBlockThreads, shared, stream>>>(data, ReduceIndexer(g), g.num_outputs,
                                                                   g.num_reduced, plan.chunk_len, plan.group, op,
                                                                   final_sink);
      check_cuda(cudaGetLastError(), "reduction kernel launch");
      return;
    }
    Tensor partials = taken.take({plan.chunks * g.num_outputs * kMaxReduceAccBytes}, DType::UInt8);
    Acc* partial = static_cast<Acc*>(partials.data_ptr());
    reduce_kernel<<<grid, kReduceBlockThreads, shared, stream>>>(data, ReduceIndexer(g), g.num_outputs, g.num_reduced,
                                                                 plan.chunk_len, plan.group, op,
                                                                 PartialSink<Acc>{partial, g.num_outputs});
    check_cuda(cudaGetLastError(), "reduction kernel launch");
    combine_chunks_kernel<<<grid_for(g.num_outputs), kBlock, 0, stream>>>(partial, g.num_outputs, plan.chunks, op,
                                                                         final_sink);
    check_cuda(cudaGetLastError(), "reduction kernel launch");
  }

  // The position along one dim: r of ArgExtremum's map (a size-1 or
  // broadcast dim gives r = 0, the first position).
  template <typename T, bool kMax>
  static void reduce_arg(const Tensor& x, int64_t dim, T* values, int64_t* indices, Scratch& taken) {
    reduce<T>(x, {dim}, reduce_ops::ArgExtremum<DeviceMath, T, kMax>{}, reduce_ops::StoreArg<T>{values, indices},
              taken);
  }

  static void copy_cast(Tensor& dst, const Tensor& src) { cuda::copy_cast(dst, src); }
};

}  // namespace mf::cuda
