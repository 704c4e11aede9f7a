#include "backend/cpu/kernels/convert.h"
#include "backend/cpu/kernels/loops.h"

namespace mf::cpu {

namespace {
template <typename D, typename S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) return acc_type<S>(v) != acc_type<S>(0);
  else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) return D(float(acc_type<S>(v)));
  else return D(acc_type<S>(v));
}
}  // namespace

void copy_cast(Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() && dst.sizes() == src.sizes()) {
    const size_t nbytes = size_t(dst.numel()) * dst.element_size();
    char* d = static_cast<char*>(dst.data_ptr());
    const char* s = static_cast<const char*>(src.data_ptr());
    parallel_for(0, int64_t(nbytes), 1 << 20, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, size_t(e - b)); });
    return;
  }
  if (dst.dtype() == src.dtype()) {
    // A strided copy (contiguous() of a transposed view): the elements' bits
    // as unsigned integers of their size, with no conversion through float.
    auto copy_bits = [&]<typename U>() { elementwise<U, U>(dst, {&src}, [](U v) { return v; }); };
    switch (dst.element_size()) {
      case 1: return copy_bits.template operator()<uint8_t>();
      case 2: return copy_bits.template operator()<uint16_t>();
      case 4: return copy_bits.template operator()<uint32_t>();
      case 8: return copy_bits.template operator()<uint64_t>();
      default: break;
    }
  }
  const bool flat = dst.is_contiguous() && src.is_contiguous() && dst.sizes() == src.sizes();
  dispatch_dtype(dst.dtype(), [&]<typename D>() {
    dispatch_dtype(src.dtype(), [&]<typename S>() {
      constexpr bool kBFloat16Float = (std::is_same_v<D, BFloat16> && std::is_same_v<S, float>) ||
                                      (std::is_same_v<D, float> && std::is_same_v<S, BFloat16>);
      if constexpr (kBFloat16Float) {
        if (flat) {  // Note [Vectorised bfloat16 conversion]
          D* d = static_cast<D*>(dst.data_ptr());
          const S* s = static_cast<const S*>(src.data_ptr());
          parallel_for(0, dst.numel(), kGrainSize, [&](int64_t b, int64_t e) { convert_run(s + b, d + b, e - b); });
          return;
        }
      }
      elementwise<D, S>(dst, {&src}, [](S v) { return convert<D, S>(v); });
    });
  });
}

}  // namespace mf::cpu
