// StateValue: the value tree of optimizer and lr-scheduler state dicts.
//
// Note [State dict values]
// A state dict has PyTorch's shape: nested dicts and lists of numbers,
// strings, booleans, None and tensors, with dict keys that are strings or
// integers (optimizer state is keyed by the parameter's index). StateValue
// is that tree as one C++ value type, so a state dict can be copied,
// compared, saved by the io module and converted to a Python dict one node
// at a time. Copies share tensors (as Python's dict copy does); deep_copy()
// clones them.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "meshflow/tensor.h"

namespace mf::optim {

class StateValue {
 public:
  using Key = std::variant<int64_t, std::string>;
  using List = std::vector<StateValue>;
  using Dict = std::map<Key, StateValue>;
  enum class Kind : uint8_t { None, Bool, Int, Double, String, Tensor, List, Dict };

  StateValue() = default;                                       // None
  StateValue(std::nullptr_t) {}                                 // NOLINT: None
  StateValue(bool v) : v_(v) {}                                 // NOLINT
  StateValue(int v) : v_(int64_t(v)) {}                         // NOLINT
  StateValue(long v) : v_(int64_t(v)) {}                        // NOLINT
  StateValue(long long v) : v_(int64_t(v)) {}                   // NOLINT
  StateValue(unsigned long v) : v_(int64_t(v)) {}               // NOLINT
  StateValue(double v) : v_(v) {}                               // NOLINT
  StateValue(const char* v) : v_(std::string(v)) {}             // NOLINT
  StateValue(std::string v) : v_(std::move(v)) {}               // NOLINT
  StateValue(Tensor v) : v_(std::move(v)) {}                    // NOLINT
  StateValue(List v) : v_(std::move(v)) {}                      // NOLINT
  StateValue(Dict v) : v_(std::move(v)) {}                      // NOLINT

  Kind kind() const { return Kind(v_.index()); }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_double() const { return kind() == Kind::Double; }
  // An int or a double (bool is not a number here).
  bool is_number() const { return is_int() || is_double(); }
  bool is_string() const { return kind() == Kind::String; }
  bool is_tensor() const { return kind() == Kind::Tensor; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_dict() const { return kind() == Kind::Dict; }

  // Typed access; the wrong kind throws TypeError naming both kinds.
  bool to_bool() const;
  int64_t to_int() const;
  double to_double() const;  // an int converts
  const std::string& to_string() const;
  const Tensor& to_tensor() const;
  const List& to_list() const;
  List& to_list();
  const Dict& to_dict() const;
  Dict& to_dict();

  // Dict access. at() throws ValueError naming the missing key.
  bool contains(const Key& key) const;
  const StateValue& at(const Key& key) const;
  StateValue& at(const Key& key);
  // Inserts None under a missing key; None itself becomes an empty dict.
  StateValue& operator[](const Key& key);

  // Same tree with every tensor cloned.
  StateValue deep_copy() const;
  // Python-like text: {'lr': 0.1, 'betas': [0.9, 0.999]}; tensors print
  // as tensor(shape, dtype).
  std::string str() const;

 private:
  std::variant<std::monostate, bool, int64_t, double, std::string, Tensor, List, Dict> v_;
};

const char* kind_name(StateValue::Kind kind);
std::string key_str(const StateValue::Key& key);
std::ostream& operator<<(std::ostream& os, const StateValue& v);

}  // namespace mf::optim
