// Helpers shared by the lr scheduler files: Python's integer division and
// modulo, and typed reading of scheduler state dicts.
#pragma once

#include <string>
#include <vector>

#include "meshflow/optim/state.h"

namespace mf::optim::detail {

// Python's a // b and a % b (rounding toward negative infinity), b > 0.
inline int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
inline int64_t python_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

inline StateValue to_list(const std::vector<double>& values) {
  StateValue::List list;
  for (double v : values) list.emplace_back(v);
  return list;
}

// Reads the entries of a scheduler state dict that are present, checking
// their kinds (TypeError naming the scheduler and the key).
class StateReader {
 public:
  StateReader(const std::string& scheduler, const StateValue& state_dict);
  const StateValue* find(const std::string& key) const;
  void read_int(const std::string& key, int64_t& out) const;
  void read_double(const std::string& key, double& out) const;
  void read_bool(const std::string& key, bool& out) const;
  void read_string(const std::string& key, std::string& out) const;
  void read_doubles(const std::string& key, std::vector<double>& out) const;
  void read_ints(const std::string& key, std::vector<int64_t>& out) const;

 private:
  [[noreturn]] void fail(const std::string& key, const char* expected, const StateValue& got) const;
  const std::string& scheduler_;
  const StateValue& dict_;
};

}  // namespace mf::optim::detail
