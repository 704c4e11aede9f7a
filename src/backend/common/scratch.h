// Carving a kernel's scratch (Note [Kernel scratch] in meshflow/op_def.h).
//
// A kernel's ScratchFn and the kernel list the same pieces in the same
// order: the ScratchFn adds them to a ScratchLayout to size the buffer, the
// kernel takes them from a Scratch over the buffer the caller appended.
// Each piece starts at a multiple of 64 bytes from the buffer's start, so
// any dtype may follow any other. A helper that works in turns (each of a
// kernel's reductions, Note [Reduction scratch]) takes its pieces after the
// kernel's own inside a Scratch::Turn, so the next one reuses them.
#pragma once

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "meshflow/checked_size.h"
#include "meshflow/tensor.h"

namespace mf {

inline constexpr int64_t kScratchAlignment = 64;

class ScratchLayout {
 public:
  // op: named by the overflow error if the pieces' bytes overflow int64.
  explicit ScratchLayout(std::string_view op) : op_(op) {}
  ScratchLayout& add(const Shape& sizes, DType dtype) { return add_bytes(checked_nbytes(sizes, dtype, op_)); }
  // A piece of n bytes (a helper's whole share, or UInt8 elements).
  ScratchLayout& add_bytes(int64_t n) {
    if (n == 0) return *this;
    const int64_t aligned = checked_add(bytes_, kScratchAlignment - 1, op_, "scratch bytes") / kScratchAlignment *
                            kScratchAlignment;
    bytes_ = checked_add(aligned, n, op_, "scratch bytes");
    return *this;
  }
  int64_t bytes() const { return bytes_; }
  // Where the next piece starts.
  int64_t next() const { return (bytes_ + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment; }

 private:
  std::string_view op_;
  int64_t bytes_ = 0;
};

// What elementwise_kernels::dense takes for t (an undefined or contiguous
// t: nothing).
inline ScratchLayout& add_dense(ScratchLayout& layout, const Tensor& t) {
  if (t.defined() && !t.is_contiguous()) layout.add(t.sizes(), t.dtype());
  return layout;
}

class Scratch {
 public:
  // outputs: the kernel's outputs; the last is the scratch buffer.
  explicit Scratch(const TensorList& outputs) : buffer_(outputs.back()) {
    MF_CHECK(buffer_.dtype() == DType::UInt8 && buffer_.dim() == 1 && buffer_.is_contiguous(), Error,
             "kernel scratch: expected a contiguous 1-d UInt8 buffer after the outputs");
  }
  // A turn: what is taken while it lives is given back when it ends.
  class Turn {
   public:
    explicit Turn(Scratch& s) : scratch_(s), mark_(s.used_) {}
    ~Turn() { scratch_.used_ = mark_; }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    Scratch& scratch_;
    int64_t mark_;
  };
  // Whether pieces laid out from an aligned start over `bytes` (a
  // ScratchLayout's total) fit what is not yet taken.
  bool fits(int64_t bytes) const {
    const int64_t start = (used_ + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
    return bytes == 0 || start + bytes <= buffer_.numel();
  }
  // The next piece: a contiguous tensor of sizes and dtype on the buffer's
  // device. Throws if the buffer is too small (a ScratchFn that disagrees
  // with its kernel).
  Tensor take(const Shape& sizes, DType dtype) {
    const int64_t bytes = checked_nbytes(sizes, dtype, "kernel scratch");
    if (bytes == 0)  // takes nothing (as ScratchLayout::add adds nothing)
      return Tensor(std::make_shared<TensorImpl>(buffer_.storage(), sizes, contiguous_strides(sizes), 0, dtype));
    const int64_t begin = (used_ + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
    const int64_t end = begin + bytes;
    MF_CHECK(end <= buffer_.numel(), Error, "kernel scratch: a piece of ", end - begin, " bytes at ", begin,
             " does not fit the ", buffer_.numel(), " bytes the kernel's ScratchFn asked for");
    used_ = end;
    const int64_t byte_offset = buffer_.storage_offset() + begin;
    MF_CHECK(byte_offset % int64_t(itemsize(dtype)) == 0, Error, "kernel scratch: the buffer starts at byte ",
             buffer_.storage_offset(), " of its storage, not aligned for ", dtype_name(dtype));
    return Tensor(std::make_shared<TensorImpl>(buffer_.storage(), sizes, contiguous_strides(sizes),
                                               byte_offset / int64_t(itemsize(dtype)), dtype));
  }

 private:
  Tensor buffer_;
  int64_t used_ = 0;
};

// Note [Measured kernels]: a kernel whose working memory depends on a
// chain of choices (which library runs, whether a layout needs a copy) is
// written once over a Workspace and run twice: its ScratchFn runs it
// measuring, where take() adds each piece to a layout and returns a tensor
// without data and the kernel skips every read and write of data
// (measuring() is true), and the kernel runs it carving the scratch the
// caller sized from that measurement. Both runs make the same choices from
// the same layouts, so they take the same pieces.
class Workspace {
 public:
  explicit Workspace(ScratchLayout& layout) : layout_(&layout) {}
  explicit Workspace(Scratch& scratch) : scratch_(&scratch) {}
  bool measuring() const { return layout_ != nullptr; }
  // Whether pieces over `bytes` (a ScratchLayout's total) fit what is left
  // (measuring: always).
  bool fits(int64_t bytes) const { return !scratch_ || scratch_->fits(bytes); }
  // While carving, what is taken while a Turn lives is given back when it
  // ends (Scratch::Turn); measuring, a turn changes nothing, so a kernel
  // measures its turns in layouts of their own and takes the most.
  class Turn {
   public:
    explicit Turn(Workspace& ws) {
      if (ws.scratch_) turn_.emplace(*ws.scratch_);
    }

   private:
    std::optional<Scratch::Turn> turn_;
  };
  Tensor take(const Shape& sizes, DType dtype) {
    if (!layout_) return scratch_->take(sizes, dtype);
    layout_->add(sizes, dtype);
    return make_meta(sizes, dtype);
  }
  // Up to `want` pieces of sizes each, as many as the scratch holds (the
  // number measured, unless the thread count changed since): per-thread
  // buffers. At least one.
  std::vector<Tensor> take_slots(int64_t want, const Shape& sizes, DType dtype) {
    std::vector<Tensor> slots;
    const int64_t each = checked_nbytes(sizes, dtype, "kernel scratch");
    for (int64_t i = 0; i < std::max<int64_t>(want, 1); ++i) {
      if (i > 0 && !fits(each)) break;
      slots.push_back(take(sizes, dtype));
    }
    return slots;
  }

 private:
  ScratchLayout* layout_ = nullptr;
  Scratch* scratch_ = nullptr;
};

}  // namespace mf
