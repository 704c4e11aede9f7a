// The safetensors format (https://github.com/huggingface/safetensors, README
// "Format"), written and read with the same rules as the reference Rust
// implementation: header length N as u64 little-endian, N <= 100 MB, N bytes
// of JSON starting with '{' and padded with spaces to a multiple of 8, then the
// data section, which the tensors' [begin, end) offsets must cover exactly,
// in order, without gaps or overlaps.
#include <algorithm>
#include <bit>
#include <optional>
#include <tuple>

#include "io/checksum.h"
#include "io/file.h"
#include "core/utf8.h"
#include "io/json.h"
#include "meshflow/io.h"
#include "meshflow/autograd.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/shape.h"

namespace mf::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swapping");

constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kCorruptHint = " (the file is corrupt; load it with verify=False to read it anyway)";
// Note [Checkpoint checksums]: save_file adds the metadata entry
// "meshflow.crc32c", a JSON object mapping every tensor's name to the CRC-32C
// of its bytes (8 lowercase hex digits) and "__metadata__" to the CRC-32C of
// the other metadata entries (each key and value followed by a NUL, in key
// order). The file stays a plain safetensors file. load_file(verify=true)
// recomputes them: a changed byte, a renamed tensor or an edited metadata
// value is an error naming what differs. Files without the entry (written by
// other tools) load unchecked.
constexpr const char* kChecksumKey = "meshflow.crc32c";
// Root object, tensor entry, shape array: nothing valid nests deeper.
constexpr int kMaxHeaderDepth = 3;

struct DTypeInfo {
  DType dtype;
  const char* name;
};
// In the reference writer's data order: by decreasing alignment (so every
// tensor is aligned, the data section starting at a multiple of 8), ties in
// the order of its Dtype enum, reversed.
constexpr DTypeInfo kDTypes[] = {
    {DType::Int64, "I64"},    {DType::Float64, "F64"}, {DType::Float32, "F32"}, {DType::Int32, "I32"},
    {DType::BFloat16, "BF16"}, {DType::Float16, "F16"}, {DType::Int16, "I16"},   {DType::Int8, "I8"},
    {DType::UInt8, "U8"},     {DType::Bool, "BOOL"},
};

size_t layout_rank(DType dtype) {
  for (size_t i = 0; i < std::size(kDTypes); ++i)
    if (kDTypes[i].dtype == dtype) return i;
  throw TypeError(detail::concat("safetensors: no name for dtype ", dtype_name(dtype)));
}

const char* safetensors_name(DType dtype) { return kDTypes[layout_rank(dtype)].name; }

std::optional<DType> dtype_from_safetensors_name(const std::string& name) {
  for (const auto& info : kDTypes)
    if (name == info.name) return info.dtype;
  return std::nullopt;
}

// A name as a JSON string literal: quoted, control characters escaped.
std::string quoted(const std::string& s) {
  std::string out;
  json::append_string(out, s);
  return out;
}

uint64_t nbytes_of(const Tensor& t) { return uint64_t(t.numel()) * itemsize(t.dtype()); }

std::string hex32(uint32_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) out[size_t(i)] = kDigits[v & 0xF];
  return out;
}

uint32_t metadata_crc(const std::map<std::string, std::string>& metadata) {
  uint32_t crc = 0;
  for (const auto& [key, value] : metadata) {
    if (key == kChecksumKey) continue;
    crc = crc32c(key.data(), key.size() + 1, crc);  // with the terminating NUL
    crc = crc32c(value.data(), value.size() + 1, crc);
  }
  return crc;
}

struct Entry {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t begin = 0, end = 0, nbytes = 0;
};

class HeaderReader {
 public:
  explicit HeaderReader(const std::string& path) : path_(path) {}

  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw Error(detail::concat("load_file: '", path_, "' is not a valid safetensors file: ", parts...));
  }

  uint64_t non_negative(const json::Json& j, const std::string& tensor, const char* field) const {
    const int64_t* v = j.as_int();
    if (!v) fail("tensor ", quoted(tensor), ": ", field, " must hold integers, got ", json::type_name(j));
    if (*v < 0) fail("tensor ", quoted(tensor), ": ", field, " holds ", *v, ", which is negative");
    return uint64_t(*v);
  }

  Entry read_entry(const std::string& name, const json::Json& j) const {
    const auto* fields = j.as_object();
    if (!fields) fail("tensor ", quoted(name), ": expected an object, got ", json::type_name(j));
    const json::Json *dtype_j = nullptr, *shape_j = nullptr, *offsets_j = nullptr;
    for (const auto& [key, value] : *fields) {
      if (key == "dtype") dtype_j = &value;
      else if (key == "shape") shape_j = &value;
      else if (key == "data_offsets") offsets_j = &value;
      else fail("tensor ", quoted(name), ": unknown field ", quoted(key));
    }
    if (!dtype_j || !shape_j || !offsets_j)
      fail("tensor ", quoted(name), ": missing field \"", !dtype_j ? "dtype" : !shape_j ? "shape" : "data_offsets",
           "\"");

    Entry e;
    e.name = name;
    const std::string* dtype_name_j = dtype_j->as_string();
    if (!dtype_name_j) fail("tensor ", quoted(name), ": dtype must be a string, got ", json::type_name(*dtype_j));
    const std::optional<DType> dtype = dtype_from_safetensors_name(*dtype_name_j);
    if (!dtype)
      fail("tensor ", quoted(name), ": dtype ", quoted(*dtype_name_j),
           " is not one meshflow reads (I64, F64, F32, I32, BF16, F16, I16, I8, U8, BOOL)");
    e.dtype = *dtype;

    const auto* dims = shape_j->as_array();
    if (!dims) fail("tensor ", quoted(name), ": shape must be an array, got ", json::type_name(*shape_j));
    // Sizes are int64 in meshflow; bounding the product of the non-zero ones
    // keeps the element count and the strides of an empty tensor in range.
    int64_t nonzero_product = 1;
    for (const auto& d : *dims) {
      const uint64_t size = non_negative(d, name, "shape");
      if (size != 0 && __builtin_mul_overflow(nonzero_product, int64_t(size), &nonzero_product))
        fail("tensor ", quoted(name), ": shape ", shape_text(*dims), " has too many elements");
      e.shape.push_back(int64_t(size));
    }
    const int64_t numel = shape_numel(e.shape);
    if (__builtin_mul_overflow(uint64_t(numel), uint64_t(itemsize(e.dtype)), &e.nbytes))
      fail("tensor ", quoted(name), ": shape ", shape_text(*dims), " has too many bytes");

    const auto* offsets = offsets_j->as_array();
    if (!offsets || offsets->size() != 2)
      fail("tensor ", quoted(name), ": data_offsets must be an array [begin, end]");
    e.begin = non_negative((*offsets)[0], name, "data_offsets");
    e.end = non_negative((*offsets)[1], name, "data_offsets");
    return e;
  }

  std::string shape_text(const json::Json::Array& dims) const {
    std::string out;
    json::append(out, json::Json{dims});
    return out;
  }

  // Checks that the entries, sorted by offsets, tile [0, data_size) exactly.
  void check_layout(std::vector<Entry>& entries, uint64_t data_size) const {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    uint64_t expected_begin = 0;
    const std::string* previous = nullptr;
    for (const Entry& e : entries) {
      const std::string where = detail::concat("tensor ", quoted(e.name), ": data_offsets [", e.begin, ", ", e.end, "]");
      if (e.end < e.begin) fail(where, " end before they begin");
      if (e.end > data_size)
        fail(where, " reach past the data section, which holds ", data_size, " bytes (truncated file?)");
      if (e.begin < expected_begin) fail(where, " overlap tensor ", quoted(*previous));
      if (e.begin > expected_begin)
        fail(where, " leave a gap after byte ", expected_begin, " of the data section");
      if (e.end - e.begin != e.nbytes)
        fail(where, " span ", e.end - e.begin, " bytes but a ", safetensors_name(e.dtype), " tensor of shape ",
             shape_str(e.shape), " needs ", e.nbytes);
      expected_begin = e.end;
      previous = &e.name;
    }
    if (expected_begin != data_size)
      fail("the tensors cover ", expected_begin, " bytes of the data section but it holds ", data_size,
           " bytes (trailing garbage?)");
  }

 private:
  const std::string& path_;
};

}  // namespace

void save_file(const std::map<std::string, Tensor>& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<const std::string*, const Tensor*>> order;
  for (const auto& [name, t] : tensors) {
    MF_CHECK(utf8::is_valid(name), ValueError, "save_file: tensor name ", quoted(name), " is not valid UTF-8");
    MF_CHECK(name != kMetadataKey, ValueError, "save_file: \"", kMetadataKey,
             "\" is reserved for metadata and cannot name a tensor");
    MF_CHECK(t.defined(), ValueError, "save_file: tensor ", quoted(name), " is undefined");
    MF_CHECK(t.device().is_cpu(), ValueError, "save_file: tensor ", quoted(name), " is on ", t.device(),
             "; move it to the CPU first");
    MF_CHECK(t.storage()->has_data(), ValueError, "save_file: tensor ", quoted(name), " has no data (a traced tensor)");
    order.emplace_back(&name, &t);
  }
  for (const auto& [key, value] : metadata)
    MF_CHECK(utf8::is_valid(key) && utf8::is_valid(value), ValueError, "save_file: metadata entry ",
             quoted(key), " is not valid UTF-8");
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return layout_rank(a.second->dtype()) < layout_rank(b.second->dtype());
  });

  std::map<std::string, std::string> full_metadata = metadata;
  full_metadata.erase(kChecksumKey);
  {
    std::string sums = "{";
    json::append_string(sums, kMetadataKey);
    sums += ":\"" + hex32(metadata_crc(full_metadata)) + "\"";
    for (const auto& [name, t] : order) {
      const Tensor c = contiguous(t->detach());
      sums += ',';
      json::append_string(sums, *name);
      sums += ":\"" + hex32(c.numel() > 0 ? crc32c(c.data_ptr(), nbytes_of(c)) : 0) + "\"";
    }
    sums += '}';
    full_metadata.emplace(kChecksumKey, std::move(sums));
  }

  std::string header = "{";
  {
    json::append_string(header, kMetadataKey);
    header += ":{";
    bool first = true;
    for (const auto& [key, value] : full_metadata) {
      if (!first) header += ',';
      first = false;
      json::append_string(header, key);
      header += ':';
      json::append_string(header, value);
    }
    header += '}';
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    if (header.size() > 1) header += ',';
    json::append_string(header, *name);
    header += ":{\"dtype\":\"";
    header += safetensors_name(t->dtype());
    header += "\",\"shape\":[";
    for (int64_t d = 0; d < t->dim(); ++d) {
      if (d) header += ',';
      header += std::to_string(t->size(d));
    }
    const uint64_t end = offset + nbytes_of(*t);
    header += detail::concat("],\"data_offsets\":[", offset, ",", end, "]}");
    offset = end;
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  MF_CHECK(header.size() <= kMaxHeaderBytes, ValueError, "save_file: the header would take ", header.size(),
           " bytes, more than safetensors' limit of ", kMaxHeaderBytes);

  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
  AtomicFileWriter file(path, "save_file");
  file.write(length, sizeof(length));
  file.write(header.data(), header.size());
  for (const auto& [name, t] : order) {
    // One contiguous copy at a time, so saving needs little extra memory.
    const Tensor c = contiguous(t->detach());
    if (c.numel() > 0) file.write(c.data_ptr(), nbytes_of(c));
  }
  file.commit();
}

namespace {

// The checksums Note [Checkpoint checksums] describes, read from a file's
// metadata with the metadata's own sum checked: tensor name -> 8 hex digits.
// Empty (and nothing checked) for a file without them.
std::map<std::string, std::string> read_checksums(const HeaderReader& reader,
                                                  const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> sums;
  const auto it = metadata.find(kChecksumKey);
  if (it == metadata.end()) return sums;
  json::Json root;
  try {
    root = json::parse(it->second, 1);
  } catch (const Error& e) {
    reader.fail("the \"", kChecksumKey, "\" metadata is not valid JSON: ", e.what());
  }
  const auto* members = root.as_object();
  if (!members) reader.fail("the \"", kChecksumKey, "\" metadata is ", json::type_name(root), ", not an object");
  bool has_metadata_sum = false;
  for (const auto& [name, value] : *members) {
    const std::string* stored = value.as_string();
    if (!stored) reader.fail("the checksum of ", quoted(name), " is ", json::type_name(value), ", not a string");
    if (name != kMetadataKey) {
      sums.emplace(name, *stored);
      continue;
    }
    has_metadata_sum = true;
    const std::string computed = hex32(metadata_crc(metadata));
    if (computed != *stored)
      reader.fail("the metadata fails its checksum (stored crc32c ", *stored, ", computed ", computed, ")",
                  kCorruptHint);
  }
  if (!has_metadata_sum) reader.fail("the checksums lack the metadata's", kCorruptHint);
  return sums;
}

// Every tensor has a sum and every sum names a tensor.
void check_checksum_names(const HeaderReader& reader, const std::vector<Entry>& entries,
                          const std::map<std::string, std::string>& sums) {
  for (const auto& [name, sum] : sums)
    if (std::none_of(entries.begin(), entries.end(), [&](const Entry& e) { return e.name == name; }))
      reader.fail("the checksums name tensor ", quoted(name), ", which the file does not hold (renamed?)",
                  kCorruptHint);
  for (const Entry& e : entries)
    if (!sums.contains(e.name)) reader.fail("tensor ", quoted(e.name), " has no checksum (renamed?)", kCorruptHint);
}

void check_checksum(const HeaderReader& reader, const std::string& name, const std::string& stored,
                    uint32_t crc) {
  const std::string computed = hex32(crc);
  if (computed != stored)
    reader.fail("tensor ", quoted(name), " fails its checksum (stored crc32c ", stored, ", computed ", computed,
                ")", kCorruptHint);
}

// Any byte but 0 and 1 would be an invalid C++ bool.
void check_bools(const HeaderReader& reader, const std::string& name, const void* data, uint64_t nbytes,
                 uint64_t first_index) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (uint64_t i = 0; i < nbytes; ++i)
    if (bytes[i] > 1)
      reader.fail("tensor ", quoted(name), ": BOOL element ", first_index + i, " is byte ", int(bytes[i]),
                  ", not 0 or 1");
}

struct Header {
  std::vector<Entry> entries;                  // by data offset, tiling the data section
  std::map<std::string, std::string> metadata;  // with the checksums
  uint64_t data_start = 0;
};

// Reads and checks a file's header, the layout of its data section included.
Header read_header(const FileReader& file, const HeaderReader& reader) {
  const uint64_t file_size = file.size();
  if (file_size < 8) reader.fail("it holds ", file_size, " bytes, fewer than the 8 of the header length");
  unsigned char length_bytes[8];
  file.read_at(0, length_bytes, 8, "the header length");
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= uint64_t(length_bytes[i]) << (8 * i);
  if (header_size > kMaxHeaderBytes)
    reader.fail("the header length ", header_size, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  if (header_size > file_size - 8)
    reader.fail("the header length ", header_size, " exceeds the ", file_size - 8,
                " bytes that follow it (truncated file?)");
  std::string text(size_t(header_size), '\0');
  file.read_at(8, text.data(), text.size(), "the header");
  if (text.empty() || text[0] != '{') reader.fail("the header does not start with '{'");

  json::Json root;
  try {
    root = json::parse(text, kMaxHeaderDepth);
  } catch (const Error& e) {
    reader.fail("the header is not valid JSON: ", e.what());
  }
  const auto* members = root.as_object();
  if (!members) reader.fail("the header is ", json::type_name(root), ", not an object");

  Header header;
  for (const auto& [key, value] : *members) {
    if (key != kMetadataKey) {
      header.entries.push_back(reader.read_entry(key, value));
      continue;
    }
    const auto* items = value.as_object();
    if (!items) reader.fail("\"__metadata__\" must be an object, got ", json::type_name(value));
    for (const auto& [k, v] : *items) {
      const std::string* s = v.as_string();
      if (!s) reader.fail("\"__metadata__\" entry ", quoted(k), " must be a string, got ", json::type_name(v));
      header.metadata.emplace(k, *s);
    }
  }
  header.data_start = 8 + header_size;
  reader.check_layout(header.entries, file_size - header.data_start);
  return header;
}

}  // namespace

std::pair<std::map<std::string, Tensor>, std::map<std::string, std::string>> load_file(const std::string& path,
                                                                                       bool verify) {
  FileReader file(path, "load_file");
  HeaderReader reader(path);
  Header header = read_header(file, reader);
  std::map<std::string, std::string> sums;
  if (verify) {
    sums = read_checksums(reader, header.metadata);
    if (header.metadata.contains(kChecksumKey)) check_checksum_names(reader, header.entries, sums);
  }
  std::map<std::string, Tensor> tensors;
  for (const Entry& e : header.entries) {
    Tensor t = make_empty(e.shape, e.dtype);
    if (e.nbytes > 0)
      file.read_at(header.data_start + e.begin, t.data_ptr(), size_t(e.nbytes), "tensor " + quoted(e.name));
    if (e.dtype == DType::Bool) check_bools(reader, e.name, t.data_ptr(), e.nbytes, 0);
    if (const auto sum = sums.find(e.name); sum != sums.end())
      check_checksum(reader, e.name, sum->second, e.nbytes > 0 ? crc32c(t.data_ptr(), size_t(e.nbytes)) : 0);
    tensors.emplace(e.name, std::move(t));
  }
  header.metadata.erase(kChecksumKey);
  return {std::move(tensors), std::move(header.metadata)};
}

// Note [Reading shards by range]: a distributed checkpoint load reads, from
// each shard file, only the box of each tensor that the rank's own layout
// needs. The box's bytes in the file are runs: with j the outermost dim from
// which every inner dim spans the whole tensor, each index of the dims
// before j gives one contiguous run of sizes[j] * (inner elements) elements.
// Runs are read, in chunks of whole units of dim j that fit the buffer, with
// pread into one buffer and copied from there into the destination (any
// strides). Memory: the destination plus one buffer of buffer_bytes, or of
// one unit of dim j where that is larger. A box that is the whole tensor is
// read in file order, so its checksum is checked as it streams by.
struct SafetensorsReader::Impl {
  Impl(const std::string& p, bool v) : path(p), file(p, "read_box"), reader(path), verify(v) {
    header = read_header(file, reader);
    if (verify) {
      sums = read_checksums(reader, header.metadata);
      if (header.metadata.contains(kChecksumKey)) check_checksum_names(reader, header.entries, sums);
    }
    for (const Entry& e : header.entries) by_name.emplace(e.name, &e);
  }
  std::string path;
  FileReader file;
  HeaderReader reader;
  bool verify;
  Header header;
  std::map<std::string, std::string> sums;
  std::map<std::string, const Entry*> by_name;
};

SafetensorsReader::SafetensorsReader(const std::string& path, bool verify)
    : impl_(std::make_unique<Impl>(path, verify)) {}
SafetensorsReader::~SafetensorsReader() = default;

std::vector<std::pair<std::string, std::pair<DType, Shape>>> SafetensorsReader::tensors() const {
  std::vector<std::pair<std::string, std::pair<DType, Shape>>> out;
  for (const auto& [name, e] : impl_->by_name) out.push_back({name, {e->dtype, e->shape}});
  return out;
}

std::map<std::string, std::string> SafetensorsReader::metadata() const {
  auto out = impl_->header.metadata;
  out.erase(kChecksumKey);
  return out;
}

uint64_t SafetensorsReader::read_box(const std::string& name, const Shape& offsets, const Shape& sizes, Tensor& dst,
                                     size_t buffer_bytes) const {
  const auto found = impl_->by_name.find(name);
  MF_CHECK(found != impl_->by_name.end(), IndexError, "read_box: '", impl_->path, "' holds no tensor ", quoted(name));
  const Entry& e = *found->second;
  const size_t n = e.shape.size();
  MF_CHECK(offsets.size() == n && sizes.size() == n, ValueError, "read_box: tensor ", quoted(name), " has ", n,
           " dims, got offsets ", shape_str(offsets), " and sizes ", shape_str(sizes));
  for (size_t d = 0; d < n; ++d)
    MF_CHECK(offsets[d] >= 0 && sizes[d] >= 0 && sizes[d] <= e.shape[d] && offsets[d] <= e.shape[d] - sizes[d],
             IndexError, "read_box: tensor ", quoted(name), " of shape ", shape_str(e.shape), ": the box at ",
             shape_str(offsets), " of sizes ", shape_str(sizes), " leaves it in dim ", d);
  MF_CHECK(dst.defined() && dst.device().is_cpu() && dst.storage()->has_data(), ValueError,
           "read_box: the destination must be a CPU tensor with data");
  MF_CHECK(dst.dtype() == e.dtype, TypeError, "read_box: tensor ", quoted(name), " is ", e.dtype,
           ", the destination ", dst.dtype());
  MF_CHECK(dst.sizes() == sizes, ShapeError, "read_box: the destination has shape ", shape_str(dst.sizes()),
           ", the box ", shape_str(sizes));
  const int64_t total = shape_numel(sizes);
  if (total == 0) return 0;
  NoGradGuard no_grad;
  const size_t es = itemsize(e.dtype);
  const bool whole = sizes == e.shape;  // then j == 0 and the chunks stream in file order
  size_t j = n == 0 ? 0 : n - 1;
  while (j > 0 && sizes[j] == e.shape[j]) --j;
  // Elements per unit of dim j (in the file and in the box: the inner dims are whole).
  int64_t unit = 1;
  for (size_t d = j + 1; d < n; ++d) unit *= sizes[d];
  const int64_t units = n == 0 ? 1 : sizes[j];
  const int64_t chunk_units = std::clamp<int64_t>(int64_t(buffer_bytes / (size_t(unit) * es)), 1, units);
  Tensor buffer = make_empty({chunk_units * unit}, e.dtype);
  // Element strides of the tensor in the file.
  std::vector<int64_t> stride(n, 1);
  for (size_t d = n; d-- > 1;) stride[d - 1] = stride[d] * e.shape[d];

  uint32_t crc = 0;
  uint64_t read = 0;
  std::vector<int64_t> outer(j, 0);  // index in the box of dims before j
  for (;;) {
    int64_t base = 0;  // element offset of this run in the tensor
    Tensor row = dst;
    for (size_t d = 0; d < j; ++d) {
      base += (offsets[d] + outer[d]) * stride[d];
      row = narrow(row, int64_t(d), outer[d], 1);
    }
    if (n > 0) base += offsets[j] * stride[j];
    for (int64_t a = 0; a < units; a += chunk_units) {
      const int64_t k = std::min(chunk_units, units - a);
      const uint64_t nbytes = uint64_t(k * unit) * es;
      const uint64_t at = impl_->header.data_start + e.begin + uint64_t(base + a * unit) * es;
      impl_->file.read_at(at, buffer.data_ptr(), size_t(nbytes), "tensor " + quoted(name));
      if (e.dtype == DType::Bool) check_bools(impl_->reader, name, buffer.data_ptr(), nbytes, base + a * unit);
      if (whole) crc = crc32c(buffer.data_ptr(), size_t(nbytes), crc);
      Tensor target = n == 0 ? row : narrow(row, int64_t(j), a, k);
      copy_(target, view(narrow(buffer, 0, 0, k * unit), target.sizes()));
      read += nbytes;
    }
    size_t d = j;  // the next index of the dims before j, row-major
    while (d > 0 && ++outer[d - 1] == sizes[d - 1]) outer[--d] = 0;
    if (d == 0) break;  // every index done (or j == 0: one run)
  }
  if (whole && impl_->verify)
    if (const auto sum = impl_->sums.find(name); sum != impl_->sums.end())
      check_checksum(impl_->reader, name, sum->second, crc);
  return read;
}

}  // namespace mf::io
