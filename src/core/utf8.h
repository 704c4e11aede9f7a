// UTF-8 for the readers and writers of text (checkpoint JSON, text
// datasets). Invalid: overlong forms, surrogates, code points past U+10FFFF.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mf::utf8 {

// Length of the sequence starting at s[i], or 0 when it is not a valid one.
size_t sequence_length(std::string_view s, size_t i);
bool is_valid(std::string_view s);
void append(std::string& out, char32_t cp);
// The code points of s, or nothing when s is not valid UTF-8; on failure
// *bad_offset is the offset of the first bad byte.
std::optional<std::vector<char32_t>> decode(std::string_view s, size_t* bad_offset = nullptr);

}  // namespace mf::utf8
