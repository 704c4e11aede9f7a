// Value trees and their storage as safetensors files.
//
// Note [Value layout]: save(value) writes an ordinary safetensors file.
// Each tensor in the tree is stored under its path, the map keys and list
// indices from the root joined by '.': value["state"]["0"]["exp_avg"] is
// stored as "state.0.exp_avg" (a tensor at the root as ""). The rest of the
// tree, its skeleton, is JSON text in the metadata entry "meshflow.value":
//   none -> null, bool -> true / false, string -> "...", list -> [...],
//   int -> an integer literal (12), double -> a literal with a '.' or an
//     exponent (12.0, 1e-08), so the two kinds never mix,
//   NaN / inf / -inf (no JSON literal) -> {"$float": "nan" | "inf" | "-inf"},
//   tensor -> {"$tensor": "<its name in the file>"},
//   map -> {...}, a key that starts with '$' written with one more '$'.
// So an object key starting with a single '$' is always a tag, and a tag
// object has exactly that one member. Loading checks that each tensor of the
// file is named by exactly one tag, so file and skeleton cannot disagree.
// Other safetensors tools read the tensors under their path names and ignore
// the metadata; a file without "meshflow.value" loads as a map of its tensors.
#include <cmath>
#include <limits>
#include <set>

#include "core/utf8.h"
#include "io/json.h"
#include "meshflow/io.h"

namespace mf::io {
namespace {

constexpr const char* kSkeletonKey = "meshflow.value";
constexpr const char* kTensorTag = "$tensor";
constexpr const char* kFloatTag = "$float";

std::string quoted(const std::string& s) {
  std::string out;
  json::append_string(out, s);
  return out;
}

json::Json tag(const char* name, std::string text) {
  return json::Json{json::Json::Object{{name, json::Json{std::move(text)}}}};
}

class Flattener {
 public:
  std::map<std::string, Tensor> tensors;

  // depth: the number of lists and maps around v.
  json::Json skeleton(const Value& v, const std::string& path, int depth) {
    switch (v.kind()) {
      case Value::Kind::None: return json::Json{nullptr};
      case Value::Kind::Bool: return json::Json{v.as_bool()};
      case Value::Kind::Int: return json::Json{v.as_int()};
      case Value::Kind::Double: {
        const double d = v.as_double();
        if (std::isnan(d)) return tag(kFloatTag, "nan");
        if (std::isinf(d)) return tag(kFloatTag, d > 0 ? "inf" : "-inf");
        return json::Json{d};
      }
      case Value::Kind::String:
        MF_CHECK(utf8::is_valid(v.as_string()), ValueError, "save: the string at ", shown(path),
                 " is not valid UTF-8");
        return json::Json{v.as_string()};
      case Value::Kind::Tensor: {
        MF_CHECK(tensors.emplace(path, v.as_tensor()).second, ValueError, "save: two tensors are stored as ",
                 quoted(path), " (map keys containing '.' can make paths equal); rename one of the keys");
        return tag(kTensorTag, path);
      }
      case Value::Kind::List: {
        check_depth(depth + 1, path);
        json::Json::Array items;
        const auto& list = v.as_list();
        for (size_t i = 0; i < list.size(); ++i)
          items.push_back(skeleton(list[i], child(path, std::to_string(i), depth), depth + 1));
        return json::Json{std::move(items)};
      }
      case Value::Kind::Map: {
        check_depth(depth + 1, path);
        json::Json::Object members;
        for (const auto& [key, item] : v.as_map()) {
          MF_CHECK(utf8::is_valid(key), ValueError, "save: map key ", quoted(key), " at ", shown(path),
                   " is not valid UTF-8");
          members.emplace_back(key.starts_with('$') ? "$" + key : key,
                               skeleton(item, child(path, key, depth), depth + 1));
        }
        return json::Json{std::move(members)};
      }
    }
    throw ValueError("save: unknown Value kind");
  }

 private:
  static std::string child(const std::string& path, const std::string& key, int depth) {
    return depth == 0 ? key : path + "." + key;
  }
  static std::string shown(const std::string& path) { return path.empty() ? "the root" : quoted(path); }
  static void check_depth(int depth, const std::string& path) {
    MF_CHECK(depth <= kMaxValueDepth, ValueError, "save: the tree is nested deeper than ", kMaxValueDepth,
             " lists and maps (at ", shown(path), ")");
  }
};

class Unflattener {
 public:
  Unflattener(const std::string& path, std::map<std::string, Tensor>& tensors) : path_(path), tensors_(tensors) {}

  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw Error(detail::concat("load: '", path_, "': the \"", kSkeletonKey, "\" metadata is malformed: ", parts...));
  }

  Value build(const json::Json& j) {
    if (j.is_null()) return Value();
    if (const bool* b = j.as_bool()) return Value(*b);
    if (const int64_t* i = j.as_int()) return Value(*i);
    if (const double* d = j.as_double()) return Value(*d);
    if (const std::string* s = j.as_string()) return Value(*s);
    if (const auto* items = j.as_array()) {
      Value::List list;
      list.reserve(items->size());
      for (const auto& item : *items) list.push_back(build(item));
      return Value(std::move(list));
    }
    const auto& members = *j.as_object();
    for (const auto& [key, item] : members)
      if (key.starts_with('$') && !key.starts_with("$$")) return build_tag(members);
    Value::Map map;
    for (const auto& [key, item] : members) map.emplace(key.starts_with('$') ? key.substr(1) : key, build(item));
    return Value(std::move(map));
  }

  void check_all_used() const {
    for (const auto& [name, t] : tensors_)
      if (!used_.count(name)) fail("tensor ", quoted(name), " of the file is not part of the tree");
  }

 private:
  Value build_tag(const json::Json::Object& members) {
    if (members.size() != 1) fail("an object holds a '$' tag and ", members.size() - 1, " other members");
    const auto& [key, item] = members.front();
    const std::string* text = item.as_string();
    if (!text) fail("tag ", quoted(key), " holds ", json::type_name(item), ", not a string");
    if (key == kTensorTag) {
      const auto it = tensors_.find(*text);
      if (it == tensors_.end()) fail("it names tensor ", quoted(*text), ", which the file does not hold");
      if (!used_.insert(*text).second) fail("it names tensor ", quoted(*text), " twice");
      return Value(it->second);
    }
    if (key == kFloatTag) {
      if (*text == "nan") return Value(std::numeric_limits<double>::quiet_NaN());
      if (*text == "inf") return Value(std::numeric_limits<double>::infinity());
      if (*text == "-inf") return Value(-std::numeric_limits<double>::infinity());
      fail("unknown float ", quoted(*text));
    }
    fail("unknown tag ", quoted(key));
  }

  const std::string& path_;
  std::map<std::string, Tensor>& tensors_;
  std::set<std::string> used_;
};

}  // namespace

const char* kind_name(Value::Kind kind) {
  static constexpr const char* kNames[] = {"none", "bool", "int", "double", "string", "tensor", "list", "map"};
  return kNames[size_t(kind)];
}

namespace {
template <Value::Kind K, typename Data>
auto& get_kind(Data& data, Value::Kind have) {
  MF_CHECK(K == have, TypeError, "Value: expected a ", kind_name(K), ", holds a ", kind_name(have));
  return std::get<size_t(K)>(data);
}
}  // namespace

bool Value::as_bool() const { return get_kind<Kind::Bool>(data_, kind()); }
int64_t Value::as_int() const { return get_kind<Kind::Int>(data_, kind()); }
double Value::as_double() const { return get_kind<Kind::Double>(data_, kind()); }
const std::string& Value::as_string() const { return get_kind<Kind::String>(data_, kind()); }
const Tensor& Value::as_tensor() const { return get_kind<Kind::Tensor>(data_, kind()); }
const Value::List& Value::as_list() const { return get_kind<Kind::List>(data_, kind()); }
Value::List& Value::as_list() { return get_kind<Kind::List>(data_, kind()); }
const Value::Map& Value::as_map() const { return get_kind<Kind::Map>(data_, kind()); }
Value::Map& Value::as_map() { return get_kind<Kind::Map>(data_, kind()); }

const Value& Value::at(const std::string& key) const {
  const Map& map = as_map();
  const auto it = map.find(key);
  MF_CHECK(it != map.end(), IndexError, "Value: no key ", quoted(key), " in the map");
  return it->second;
}

const Value& Value::at(size_t index) const {
  const List& list = as_list();
  MF_CHECK(index < list.size(), IndexError, "Value: index ", index, " out of range for a list of ", list.size());
  return list[index];
}

void save(const Value& value, const std::string& path) {
  Flattener flattener;
  const json::Json skeleton = flattener.skeleton(value, "", 0);
  std::string text;
  json::append(text, skeleton);
  save_file(flattener.tensors, path, {{kSkeletonKey, text}});
}

Value load(const std::string& path, bool verify) {
  auto [tensors, metadata] = load_file(path, verify);
  const auto it = metadata.find(kSkeletonKey);
  if (it == metadata.end()) {
    Value::Map map;
    for (auto& [name, t] : tensors) map.emplace(name, Value(std::move(t)));
    return Value(std::move(map));
  }
  Unflattener unflattener(path, tensors);
  json::Json skeleton;
  try {
    skeleton = json::parse(it->second, kMaxValueDepth + 1);
  } catch (const Error& e) {
    unflattener.fail("not valid JSON: ", e.what());
  }
  Value value = unflattener.build(skeleton);
  unflattener.check_all_used();
  return value;
}

}  // namespace mf::io
