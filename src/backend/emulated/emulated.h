// Note [Emulated device]: CUDA devices whose memory is host memory, for
// checking the device paths on a machine without a GPU. The shared device
// kernels (backend/common/*_kernels.h) run over loops and reductions shaped
// like the CUDA backend's (each element's offsets from a LoopGeometry, a
// reduction's lanes, chunks and tree), but serially on the host; the ops
// whose CUDA kernels are the CUDA backend's own (cuBLAS's products, the
// optimizer updates' launches) run their CPU kernels, which the host memory
// allows. The C++ tests (tests/cpp/test_backend.cpp) install pieces of it
// per test; mf::emulate_cuda (meshflow/backend.h) replaces the whole CUDA
// backend by it, so the Python
// tests' device parameter runs on it (MESHFLOW_EMULATE_CUDA=1 in
// tests/python/conftest.py, tools/test.sh --emulate-cuda). Speed is not
// its aim: every walk runs on one host thread.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/common/block_program.h"
#include "backend/common/elementwise_kernels.h"
#include "backend/common/reduce_geometry.h"
#include "backend/common/reduce_ops.h"
#include "backend/cpu/kernels/gemm.h"
#include "backend/cpu/kernels/math.h"
#include "meshflow/backend.h"
#include "meshflow/op_def.h"

namespace mf::emulated {

class CountingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    void* p = std::malloc(std::max<size_t>(nbytes, 1));
    sizes_[p] = nbytes;
    stats_.allocated_bytes += int64_t(nbytes);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    stats_.num_allocations++;
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    if (!p) return;
    auto it = sizes_.find(p);
    MF_CHECK(it != sizes_.end() && it->second == nbytes, Error, "emulated device: freeing ", nbytes,
             " bytes that this device did not allocate so");
    sizes_.erase(p);
    stats_.allocated_bytes -= int64_t(nbytes);
    std::free(p);
  }
  AllocatorStats stats() const override { return stats_; }
  void reset_peak_stats() override { stats_.peak_allocated_bytes = stats_.allocated_bytes; }
  void empty_cache() override {}
  bool owns(const void* p) const {
    for (const auto& [base, n] : sizes_)
      if (p >= base && p < static_cast<const char*>(base) + std::max<size_t>(n, 1)) return true;
    return false;
  }

 private:
  std::map<void*, size_t> sizes_;
  AllocatorStats stats_;
};

// CUDA devices whose memory is host memory, each with its own allocator.
// A copy checks that each side's pointer comes from that side's memory.
class EmulatedBackend final : public Backend {
 public:
  explicit EmulatedBackend(int devices = 2) : allocators_(size_t(devices)) {}
  DeviceType type() const override { return DeviceType::CUDA; }
  int device_count() const override { return int(allocators_.size()); }
  Allocator& allocator(int index) override { return allocators_.at(size_t(index)); }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, bool) override {
    MF_CHECK(dst_device.is_cpu() || allocator_of(dst_device).owns(dst), Error, "emulated device: the copy's destination is not in the memory of ", dst_device);
    MF_CHECK(src_device.is_cpu() || allocator_of(src_device).owns(src), Error, "emulated device: the copy's source is not in the memory of ", src_device);
    if (nbytes) std::memcpy(dst, src, nbytes);
    copies++;
  }
  int copies = 0;

 private:
  const CountingAllocator& allocator_of(Device d) const { return allocators_.at(size_t(d.index())); }
  std::vector<CountingAllocator> allocators_;
};

// Loops shaped like the CUDA backend's (backend/cuda/kernels/loops.cuh),
// run serially on the host: a flat range when make_operands gives one, else
// each element's byte offsets from LoopGeometry, as a device thread computes
// them. The shared kernel table instantiated over them runs on the emulated
// device, so its dispatch and the device indexing are checked without a GPU.
struct GeometryLoops {
  using Math = cpu::HostMath;

  template <typename Out, typename... In, typename F>
  static void run(Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, const F& f) {
    constexpr size_t N = sizeof...(In) + 1;
    const int64_t n = out.numel();
    if (n == 0) return;
    StridedOperands<N> ops = make_operands<N>(out, ins);
    const bool flat = is_flat<N>(ops, {int64_t(sizeof(Out)), int64_t(sizeof(In))...});
    const LoopGeometry<N> g = loop_geometry<N>(ops, "geometry loops");
    const std::array<int64_t, N> item_sizes{int64_t(sizeof(Out)), int64_t(sizeof(In))...};
    for (int64_t i = 0; i < n; ++i) {
      int64_t offset[N];
      if (flat) {
        for (size_t k = 0; k < N; ++k) offset[k] = i * item_sizes[k];
      } else {
        g.offsets(i, offset);
      }
      apply_at<Out, In...>(g, offset, f, std::index_sequence_for<In...>{});
    }
  }
  template <typename Out, typename F>
  static void run_indexed(Tensor& out, const F& f) {
    Out* p = static_cast<Out*>(out.data_ptr());
    for (int64_t i = 0; i < out.numel(); ++i) p[i] = Out(f(i));
  }
  // The index kernels' verbs (Note [Device index kernels]): elements in
  // reverse order, so nothing relies on a push visiting them in order.
  template <size_t N, typename F>
  static void for_each(const Device&, const LoopGeometry<N>& g, int64_t n, const F& f) {
    for (int64_t i = n - 1; i >= 0; --i) {
      int64_t offset[N];
      g.offsets(i, offset);
      f(g.data, offset);
    }
  }
  // Note [Block programs]: the blocks one after another; in each phase
  // every thread in turn (in reverse order), so the barrier between phases
  // holds exactly. States and shared memory start as NaN bytes.
  template <typename P>
  static void run_blocks(const Device&, int64_t n_blocks, int threads, int64_t shared_bytes, const P& program) {
    using State = typename P::State;
    static_assert(std::is_trivially_copyable_v<State>, "a block program's State is a plain struct");
    MF_CHECK(threads >= 1 && threads <= kMaxBlockThreads, Error, "block program: ", threads,
             " threads per block; expected 1 to ", kMaxBlockThreads);
    block_programs++;
    std::vector<State> states(static_cast<size_t>(threads));
    std::vector<std::max_align_t> shared(size_t((shared_bytes + int64_t(sizeof(std::max_align_t)) - 1) /
                                                int64_t(sizeof(std::max_align_t))));
    char* shared_data = reinterpret_cast<char*>(shared.data());
    for (int64_t block = 0; block < n_blocks; ++block) {
      std::memset(static_cast<void*>(states.data()), 0xff, states.size() * sizeof(State));
      std::memset(shared_data, 0xff, shared.size() * sizeof(std::max_align_t));
      const int64_t phases = program.phases(block);
      for (int64_t phase = 0; phase < phases; ++phase)
        for (int thread = threads - 1; thread >= 0; --thread)
          program.run(phase, block, thread, states[size_t(thread)], shared_data);
    }
  }
  static inline int64_t block_programs = 0;  // how many run_blocks has run (the tests read it)
  static IndexFault* clear_fault(const Device&) {
    static IndexFault record;
    record = IndexFault();
    return &record;
  }
  static std::optional<int64_t> read_fault(const Device&, IndexFault* fault) {
    return fault->set ? std::optional<int64_t>(fault->value) : std::nullopt;
  }
};

// Reductions planned and indexed as the CUDA backend's
// (backend/cuda/kernels/reduce.cuh, Note [Device reductions]), run serially
// on the host: each group's lanes fold their strided share of a chunk, the
// lanes combine as a tree, chunks fold in order, and the copies of
// broadcast reduced dims are combined last.
struct GeometryReducer {
  using Math = cpu::HostMath;

  template <typename Op, typename T>
  static typename Op::Acc map_element(const Op& op, T x, int64_t o, int64_t r) {
    if constexpr (requires { op.map(x, o, r); }) return op.map(x, o, r);
    else return op.map(x, o);
  }

  static int64_t scratch_bytes(const Tensor& x, const Shape& dims) { return reduce_scratch_bytes(x, dims, true); }

  template <typename T, typename Op, typename Store>
  static void reduce(const Tensor& x, const Shape& dims, const Op& op, const Store& store, Scratch& taken) {
    using Acc = typename Op::Acc;
    static_assert(sizeof(Acc) <= size_t(kMaxReduceAccBytes));
    const Scratch::Turn turn(taken);
    Tensor copy;
    const ReduceGeometry g = reduce_geometry(x, dims, taken, copy, copy_cast);
    if (g.num_outputs == 0) return;
    const T* data = static_cast<const T*>((copy.defined() ? copy : x).data_ptr());
    const ReducePlan plan = plan_reduce(g);
    plans.push_back(plan);
    // The device's buffer of the chunks' partials, in its place in scratch:
    // each chunk's result is kept there before the chunks are folded.
    Acc* partials = nullptr;
    if (plan.chunks > 1)
      partials = static_cast<Acc*>(
          taken.take({plan.chunks * g.num_outputs * kMaxReduceAccBytes}, DType::UInt8).data_ptr());
    const ReduceIndexer ix(g);
    std::unique_ptr<Acc[]> lanes(new Acc[size_t(plan.group)]);
    for (int64_t o = 0; o < g.num_outputs; ++o) {
      Acc total = op.identity();
      for (int64_t c = 0; c < plan.chunks; ++c) {
        const int64_t r0 = c * plan.chunk_len, r1 = std::min(g.num_reduced, r0 + plan.chunk_len);
        for (int lane = 0; lane < plan.group; ++lane) {
          lanes[size_t(lane)] = op.identity();
          for (int64_t r = r0 + lane; r < r1; r += plan.group)
            lanes[size_t(lane)] = op.combine(lanes[size_t(lane)], map_element(op, data[ix.input_base(o) + ix.reduced_offset(r)], o, r));
        }
        for (int s = plan.group / 2; s > 0; s /= 2)
          for (int lane = 0; lane < s; ++lane) lanes[size_t(lane)] = op.combine(lanes[size_t(lane)], lanes[size_t(lane + s)]);
        if (plan.chunks == 1) total = lanes[0];
        else partials[c * g.num_outputs + o] = lanes[0];
      }
      for (int64_t c = 0; c < plan.chunks && plan.chunks > 1; ++c) total = op.combine(total, partials[c * g.num_outputs + o]);
      store(o, g.copies == 1 ? total : combine_copies(op, total, g.copies));
    }
  }
  template <typename T, bool kMax>
  static void reduce_arg(const Tensor& x, int64_t dim, T* values, int64_t* indices, Scratch& taken) {
    reduce<T>(x, {dim}, reduce_ops::ArgExtremum<Math, T, kMax>{}, reduce_ops::StoreArg<T>{values, indices}, taken);
  }
  static void copy_cast(Tensor& dst, const Tensor& src) { elementwise_kernels::copy_cast<GeometryLoops>(dst, src); }

  static inline std::vector<ReducePlan> plans;
};

// Note [Attention by batched GEMMs] on this device: the CPU's matmul
// kernel on the host memory, the operands cast to the output's dtype first
// where it is wider.
struct HostBatchedGemm {
  static Tensor operand(const Tensor& t, bool transposed, DType dtype, Scratch& taken) {
    Tensor x = t;
    if (t.dtype() != dtype) {
      x = taken.take(t.sizes(), dtype);
      elementwise_kernels::copy_cast<GeometryLoops>(x, t);
    }
    return transposed_if(x, transposed);
  }
  // The CPU's product, its own scratch (Note [GEMM scratch]) after the
  // operands' casts.
  static void bmm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out, Scratch& taken) {
    const Tensor a2 = operand(a, ta, out.dtype(), taken), b2 = operand(b, tb, out.dtype(), taken);
    Workspace ws(taken);
    cpu::matmul(a2, b2, out, 1, 0, ws);
  }
  // The most the product of operands of shapes a and b takes, over the
  // transpositions that fit (bmm_scratch is not told which one runs).
  static int64_t bmm_scratch(const Shape& a, const Shape& b, DType in, DType out) {
    int64_t most = 0;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        if ((ta ? a[1] : a[2]) != (tb ? b[2] : b[1])) continue;
        const Tensor a2 = transposed_if(make_meta(a, out), ta), b2 = transposed_if(make_meta(b, out), tb);
        Tensor product = make_meta({a[0], a2.size(1), b2.size(2)}, out);
        ScratchLayout pieces("attention");
        Workspace ws(pieces);
        cpu::matmul(a2, b2, product, 1, 0, ws);
        most = std::max(most, pieces.bytes());
      }
    ScratchLayout layout("attention");
    if (in != out) layout.add(a, out).add(b, out);
    return layout.add_bytes(most).bytes();
  }
  static Tensor transposed_if(const Tensor& x, bool transposed) {
    if (!transposed) return x;
    Shape sizes = x.sizes(), strides = x.strides();
    std::swap(sizes[1], sizes[2]);
    std::swap(strides[1], strides[2]);
    return Tensor(std::make_shared<TensorImpl>(x.storage(), sizes, strides, x.storage_offset(), x.dtype()));
  }
};

}  // namespace mf::emulated
