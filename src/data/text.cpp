// TextDataset: a text file (or a folder of them) as token ids.
#include "meshflow/data/text.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "core/utf8.h"
#include "meshflow/error.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/shape.h"

namespace mf::data {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  MF_CHECK(in.good(), Error, "TextDataset: cannot open '", path.string(), "': ", std::strerror(errno));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool is_text(const std::string& contents) {
  return contents.find('\0') == std::string::npos && utf8::decode(contents).has_value();
}

// A file's contents, or the concatenation of a folder's text files.
std::string read_text(const std::string& path) {
  MF_CHECK(fs::exists(path), Error, "TextDataset: '", path, "' does not exist");
  if (!fs::is_directory(path)) return read_file(path);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(path)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  std::string text;
  for (const auto& file : files) {
    std::string contents = read_file(file);
    if (is_text(contents)) text += contents;
  }
  return text;
}

}  // namespace

TextDataset::TextDataset(const std::string& path, int64_t block_size, const std::string& mode)
    : block_size_(block_size), mode_(mode) {
  MF_CHECK(mode == "char" || mode == "byte", ValueError, "TextDataset: mode must be 'char' or 'byte', got '", mode,
           "'");
  MF_CHECK(block_size >= 1, ValueError, "TextDataset: block_size must be >= 1, got ", block_size);
  const std::string text = read_text(path);
  std::vector<int64_t> ids;
  if (mode == "byte") {
    ids.assign(text.size(), 0);
    for (size_t i = 0; i < text.size(); ++i) ids[i] = int64_t(static_cast<unsigned char>(text[i]));
  } else {
    size_t bad = 0;
    auto code_points = utf8::decode(text, &bad);
    MF_CHECK(code_points.has_value(), ValueError, "TextDataset: '", path, "' is not valid UTF-8 (byte ", bad,
             "); use mode='byte' for arbitrary bytes");
    vocab_ = *code_points;
    std::sort(vocab_.begin(), vocab_.end());
    vocab_.erase(std::unique(vocab_.begin(), vocab_.end()), vocab_.end());
    ids.reserve(code_points->size());
    for (char32_t cp : *code_points)
      ids.push_back(int64_t(std::lower_bound(vocab_.begin(), vocab_.end(), cp) - vocab_.begin()));
  }
  const int64_t n = int64_t(ids.size());
  MF_CHECK(n > block_size, ValueError, "TextDataset: '", path, "' has ", n, " tokens; block_size ", block_size,
           " needs at least ", block_size + 1);
  tokens_ = from_data(ids, {n});
}

int64_t TextDataset::vocab_size() const { return mode_ == "byte" ? 256 : int64_t(vocab_.size()); }

TensorList TextDataset::get(int64_t index) const {
  check_index("TextDataset", index, size());
  return {clone(narrow(tokens_, 0, index, block_size_)), clone(narrow(tokens_, 0, index + 1, block_size_))};
}

TensorList TextDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (int64_t index : indices) check_index("TextDataset", index, size());
  const int64_t batch = int64_t(indices.size());
  Tensor x = make_empty({batch, block_size_}, DType::Int64);  // (B, T)
  Tensor y = make_empty({batch, block_size_}, DType::Int64);  // (B, T)
  const int64_t* tokens = tokens_.data<int64_t>();
  int64_t* px = x.data<int64_t>();
  int64_t* py = y.data<int64_t>();
  const size_t row_bytes = size_t(block_size_) * sizeof(int64_t);
  for (int64_t b = 0; b < batch; ++b) {
    std::memcpy(px + b * block_size_, tokens + indices[size_t(b)], row_bytes);
    std::memcpy(py + b * block_size_, tokens + indices[size_t(b)] + 1, row_bytes);
  }
  return {x, y};
}

Tensor TextDataset::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  if (mode_ == "byte") {
    for (char c : text) ids.push_back(int64_t(static_cast<unsigned char>(c)));
  } else {
    size_t bad = 0;
    auto code_points = utf8::decode(text, &bad);
    MF_CHECK(code_points.has_value(), ValueError, "TextDataset.encode: the text is not valid UTF-8 (byte ", bad, ")");
    for (char32_t cp : *code_points) {
      auto it = std::lower_bound(vocab_.begin(), vocab_.end(), cp);
      if (it == vocab_.end() || *it != cp) {
        std::string ch;
        utf8::append(ch, cp);
        throw ValueError(detail::concat("TextDataset.encode: character '", ch, "' (U+", std::hex, std::uppercase,
                                        uint32_t(cp), ") is not in the vocabulary"));
      }
      ids.push_back(int64_t(it - vocab_.begin()));
    }
  }
  return from_data(ids, {int64_t(ids.size())});
}

std::string TextDataset::decode(const Tensor& ids) const {
  MF_CHECK(is_integral(ids.dtype()), TypeError,
           "TextDataset.decode: expected integer token ids, got ", dtype_name(ids.dtype()));
  Tensor flat = contiguous(to(ids, DType::Int64));
  const int64_t* p = flat.data<int64_t>();
  const int64_t vocab = vocab_size();
  std::string text;
  for (int64_t i = 0; i < flat.numel(); ++i) {
    MF_CHECK(p[i] >= 0 && p[i] < vocab, IndexError, "TextDataset.decode: token id ", p[i],
             " is out of range for a vocabulary of ", vocab);
    if (mode_ == "byte")
      text += char(static_cast<unsigned char>(p[i]));
    else
      utf8::append(text, vocab_[size_t(p[i])]);
  }
  return text;
}

}  // namespace mf::data
