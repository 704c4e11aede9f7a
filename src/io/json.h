// A small, strict JSON (RFC 8259) reader and writer for checkpoint headers.
// The reader takes untrusted bytes: it validates UTF-8, rejects duplicate
// object keys, lone surrogates, trailing bytes other than whitespace and
// nesting deeper than a limit, so that no input can crash it or exhaust the
// stack. Numbers without a fraction or exponent are int64 (out of range is
// an error); the others are double.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace mf::io::json {

struct Json {
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;  // document order, unique keys
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, Array, Object> value;

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(value); }
  const bool* as_bool() const { return std::get_if<bool>(&value); }
  const int64_t* as_int() const { return std::get_if<int64_t>(&value); }
  const double* as_double() const { return std::get_if<double>(&value); }
  const std::string* as_string() const { return std::get_if<std::string>(&value); }
  const Array* as_array() const { return std::get_if<Array>(&value); }
  const Object* as_object() const { return std::get_if<Object>(&value); }
};

// For messages: "null", "a bool", "an integer", "a number", "a string",
// "an array", "an object".
const char* type_name(const Json& j);

// Parses one JSON document; surrounding JSON whitespace is allowed. Throws
// mf::Error with the byte position and the problem.
Json parse(std::string_view text, int max_depth);

// Compact JSON text (no spaces), strings escaped as serde_json does: '"', '\\'
// and control characters only. Strings must be valid UTF-8 (checked by the
// callers that take user text); doubles are written shortest-round-trip and
// always with a '.' or an exponent, so they read back as doubles. A
// non-finite double throws ValueError.
void append_string(std::string& out, std::string_view s);
void append_double(std::string& out, double v);
void append(std::string& out, const Json& j);

}  // namespace mf::io::json
