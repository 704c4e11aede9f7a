// Python's text for numbers in layers' extra_repr.
#pragma once

#include <charconv>
#include <string>

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

}  // namespace mf::nn
