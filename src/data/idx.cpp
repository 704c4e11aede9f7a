// IDX reader: magic (0, 0, type, ndim), ndim big-endian int32 sizes, then
// big-endian elements. gzread reads .gz and plain files alike.
#include "meshflow/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "meshflow/error.h"

namespace mf::data {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

void read_exact(gzFile f, void* dst, size_t n, const std::string& path, const char* what) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    unsigned chunk = unsigned(std::min<size_t>(n, size_t(1) << 30));
    int got = gzread(f, p, chunk);
    MF_CHECK(got > 0, Error, "read_idx: '", path, "' is truncated or corrupt (while reading ", what, ")");
    p += got;
    n -= size_t(got);
  }
}

uint32_t big_endian_u32(const unsigned char* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

}  // namespace

Tensor read_idx(const std::string& path) {
  GzFile file(gzopen(path.c_str(), "rb"));
  MF_CHECK(file != nullptr, Error, "read_idx: cannot open '", path, "': ", std::strerror(errno),
           " (Fashion-MNIST comes with the Debian package dataset-fashion-mnist)");
  unsigned char magic[4];
  read_exact(file.get(), magic, 4, path, "the magic number");
  MF_CHECK(magic[0] == 0 && magic[1] == 0, Error, "read_idx: '", path, "' is not an IDX file (bad magic number)");
  DType dtype;
  switch (magic[2]) {
    case 0x08: dtype = DType::UInt8; break;
    case 0x09: dtype = DType::Int8; break;
    case 0x0B: dtype = DType::Int16; break;
    case 0x0C: dtype = DType::Int32; break;
    case 0x0D: dtype = DType::Float32; break;
    case 0x0E: dtype = DType::Float64; break;
    default: throw Error(detail::concat("read_idx: '", path, "' has unknown element type 0x", std::hex, int(magic[2])));
  }
  const int ndim = magic[3];
  MF_CHECK(ndim >= 1 && ndim <= 8, Error, "read_idx: '", path, "' declares ", ndim, " dimensions");
  Shape sizes(static_cast<size_t>(ndim));
  for (int i = 0; i < ndim; ++i) {
    unsigned char b[4];
    read_exact(file.get(), b, 4, path, "the sizes");
    sizes[size_t(i)] = int64_t(big_endian_u32(b));
  }
  Tensor t = make_empty(sizes, dtype);
  const size_t item = itemsize(dtype);
  read_exact(file.get(), t.data_ptr(), size_t(t.numel()) * item, path, "the data");
  if (item > 1) {  // IDX stores big-endian values
    auto* bytes = static_cast<unsigned char*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) std::reverse(bytes + i * int64_t(item), bytes + (i + 1) * int64_t(item));
  }
  return t;
}

}  // namespace mf::data
