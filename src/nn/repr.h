// Python's text for numbers in layers' extra_repr.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <vector>

namespace mf::nn {

// Python's repr of a float: the shortest text that reads back exactly,
// with ".0" on integral values ("1e-05", "0.1", "1.0").
inline std::string py_float(double v) {
  char buf[64];
  auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  std::string s(buf, end);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

inline std::string py_bool(bool v) { return v ? "True" : "False"; }

// Python's repr of a tuple of values, each written by `str`: "(1, 2)", "(1,)".
template <typename T, typename Str>
std::string py_tuple(const std::vector<T>& values, const Str& str) {
  std::string out = "(";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + str(values[i]);
  return out + (values.size() == 1 ? ",)" : ")");
}
inline std::string py_tuple(const std::vector<int64_t>& values) {
  return py_tuple(values, [](int64_t v) { return std::to_string(v); });
}

}  // namespace mf::nn
