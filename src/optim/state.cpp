// StateValue: the value tree of state dicts (Note [State dict values]).
#include "meshflow/optim/state.h"

#include <sstream>

#include "meshflow/ops/shape.h"

namespace mf::optim {

const char* kind_name(StateValue::Kind kind) {
  switch (kind) {
    case StateValue::Kind::None: return "None";
    case StateValue::Kind::Bool: return "bool";
    case StateValue::Kind::Int: return "int";
    case StateValue::Kind::Double: return "float";
    case StateValue::Kind::String: return "str";
    case StateValue::Kind::Tensor: return "Tensor";
    case StateValue::Kind::List: return "list";
    case StateValue::Kind::Dict: return "dict";
  }
  return "unknown";
}

std::string key_str(const StateValue::Key& key) {
  if (const auto* i = std::get_if<int64_t>(&key)) return std::to_string(*i);
  return "'" + std::get<std::string>(key) + "'";
}

namespace {
[[noreturn]] void throw_kind(StateValue::Kind expected, StateValue::Kind got) {
  throw TypeError(detail::concat("state value: expected ", kind_name(expected), ", got ", kind_name(got)));
}
}  // namespace

bool StateValue::to_bool() const {
  if (!is_bool()) throw_kind(Kind::Bool, kind());
  return std::get<bool>(v_);
}

int64_t StateValue::to_int() const {
  if (!is_int()) throw_kind(Kind::Int, kind());
  return std::get<int64_t>(v_);
}

double StateValue::to_double() const {
  if (is_int()) return double(std::get<int64_t>(v_));
  if (!is_double()) throw_kind(Kind::Double, kind());
  return std::get<double>(v_);
}

const std::string& StateValue::to_string() const {
  if (!is_string()) throw_kind(Kind::String, kind());
  return std::get<std::string>(v_);
}

const Tensor& StateValue::to_tensor() const {
  if (!is_tensor()) throw_kind(Kind::Tensor, kind());
  return std::get<Tensor>(v_);
}

const StateValue::List& StateValue::to_list() const {
  if (!is_list()) throw_kind(Kind::List, kind());
  return std::get<List>(v_);
}

StateValue::List& StateValue::to_list() {
  if (!is_list()) throw_kind(Kind::List, kind());
  return std::get<List>(v_);
}

const StateValue::Dict& StateValue::to_dict() const {
  if (!is_dict()) throw_kind(Kind::Dict, kind());
  return std::get<Dict>(v_);
}

StateValue::Dict& StateValue::to_dict() {
  if (!is_dict()) throw_kind(Kind::Dict, kind());
  return std::get<Dict>(v_);
}

bool StateValue::contains(const Key& key) const { return is_dict() && std::get<Dict>(v_).contains(key); }

const StateValue& StateValue::at(const Key& key) const {
  const Dict& d = to_dict();
  auto it = d.find(key);
  MF_CHECK(it != d.end(), ValueError, "state dict: missing key ", key_str(key));
  return it->second;
}

StateValue& StateValue::at(const Key& key) {
  Dict& d = to_dict();
  auto it = d.find(key);
  MF_CHECK(it != d.end(), ValueError, "state dict: missing key ", key_str(key));
  return it->second;
}

StateValue& StateValue::operator[](const Key& key) {
  if (is_none()) v_ = Dict{};
  return to_dict()[key];
}

StateValue StateValue::deep_copy() const {
  switch (kind()) {
    case Kind::Tensor: {
      const Tensor& t = to_tensor();
      return t.defined() ? StateValue(clone(t.detach())) : StateValue(t);
    }
    case Kind::List: {
      List out;
      out.reserve(to_list().size());
      for (const StateValue& v : to_list()) out.push_back(v.deep_copy());
      return out;
    }
    case Kind::Dict: {
      Dict out;
      for (const auto& [k, v] : to_dict()) out.emplace(k, v.deep_copy());
      return out;
    }
    default: return *this;
  }
}

std::string StateValue::str() const {
  std::ostringstream os;
  switch (kind()) {
    case Kind::None: os << "None"; break;
    case Kind::Bool: os << (to_bool() ? "True" : "False"); break;
    case Kind::Int: os << to_int(); break;
    case Kind::Double: os << to_double(); break;
    case Kind::String: os << "'" << to_string() << "'"; break;
    case Kind::Tensor: {
      const Tensor& t = to_tensor();
      if (t.defined()) os << "tensor(shape=" << shape_str(t.sizes()) << ", dtype=" << dtype_name(t.dtype()) << ")";
      else os << "tensor(undefined)";
      break;
    }
    case Kind::List: {
      os << "[";
      const char* sep = "";
      for (const StateValue& v : to_list()) os << sep << v.str(), sep = ", ";
      os << "]";
      break;
    }
    case Kind::Dict: {
      os << "{";
      const char* sep = "";
      for (const auto& [k, v] : to_dict()) os << sep << key_str(k) << ": " << v.str(), sep = ", ";
      os << "}";
      break;
    }
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const StateValue& v) { return os << v.str(); }

}  // namespace mf::optim
