// Next-token prediction on a text: example i is (tokens[i : i + block],
// tokens[i + 1 : i + block + 1]), as in character-level language models.
#pragma once

#include <string>
#include <vector>

#include "meshflow/data/dataset.h"

namespace mf::data {

class TextDataset : public Dataset {
 public:
  // path: a file, or a directory whose regular text files are read in name
  // order and concatenated (files named *.dat or *.u8, and files holding a
  // NUL byte or invalid UTF-8, are skipped: /usr/share/games/fortunes reads
  // as its text). mode "char": tokens are the distinct Unicode code points
  // of the text, numbered in code point order; "byte": the bytes 0..255.
  TextDataset(const std::string& path, int64_t block_size, const std::string& mode = "char");

  // Number of examples: n_tokens - block_size.
  int64_t size() const override { return tokens_.size(0) - block_size_; }
  // {x, y}: int64 (block_size) each, y is x shifted by one token.
  TensorList get(int64_t index) const override;
  // {x, y}: int64 (batch, block_size) each.
  TensorList get_batch(const std::vector<int64_t>& indices) const override;

  int64_t vocab_size() const;
  int64_t block_size() const { return block_size_; }
  const std::string& mode() const { return mode_; }
  // The whole text as token ids, int64 (n_tokens).
  const Tensor& tokens() const { return tokens_; }
  // Token ids of a UTF-8 string (int64, 1-d); ValueError for a character
  // outside the vocabulary.
  Tensor encode(const std::string& text) const;
  // The text of token ids (any integer dtype, any shape, read in order).
  std::string decode(const Tensor& ids) const;

 private:
  int64_t block_size_;
  std::string mode_;
  std::vector<char32_t> vocab_;  // char mode: id -> code point, sorted
  Tensor tokens_;
};

}  // namespace mf::data
