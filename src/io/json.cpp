#include "io/json.h"

#include <charconv>
#include <cmath>
#include <unordered_set>

#include "core/utf8.h"
#include "meshflow/error.h"

namespace mf::io::json {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  Parser(std::string_view text, int max_depth) : text_(text), max_depth_(max_depth) {}

  Json parse_document() {
    skip_whitespace();
    Json j = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail("unexpected bytes after the JSON value");
    return j;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(detail::concat(what, " at byte ", pos_));
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_whitespace() {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  void expect(char c) {
    if (at_end() || text_[pos_] != c) fail(detail::concat("expected '", c, "'"));
    ++pos_;
  }

  void expect_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  Json parse_value(int depth) {
    if (at_end()) fail("unexpected end of the JSON text");
    switch (text_[pos_]) {
      case '{': return parse_object(depth + 1);
      case '[': return parse_array(depth + 1);
      case '"': return Json{parse_string()};
      case 't': expect_word("true"); return Json{true};
      case 'f': expect_word("false"); return Json{false};
      case 'n': expect_word("null"); return Json{nullptr};
      default:
        if (text_[pos_] == '-' || is_digit(text_[pos_])) return parse_number();
        fail("unexpected character");
    }
  }

  void check_depth(int depth) const {
    if (depth > max_depth_) fail(detail::concat("nesting deeper than ", max_depth_, " levels"));
  }

  Json parse_object(int depth) {
    check_depth(depth);
    expect('{');
    Json::Object members;
    std::unordered_set<std::string> keys;
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return Json{std::move(members)};
    }
    while (true) {
      skip_whitespace();
      if (peek() != '"') fail("expected a string key");
      const size_t key_pos = pos_;
      std::string key = parse_string();
      if (!keys.insert(key).second) {
        pos_ = key_pos;
        fail(detail::concat("duplicate key \"", key, "\""));
      }
      skip_whitespace();
      expect(':');
      skip_whitespace();
      Json v = parse_value(depth);
      members.emplace_back(std::move(key), std::move(v));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return Json{std::move(members)};
    }
  }

  Json parse_array(int depth) {
    check_depth(depth);
    expect('[');
    Json::Array items;
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return Json{std::move(items)};
    }
    while (true) {
      skip_whitespace();
      items.push_back(parse_value(depth));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return Json{std::move(items)};
    }
  }

  uint32_t parse_hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else fail("invalid hex digit in a \\u escape");
    }
    return v;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("unescaped control character in a string");
      if (c == '\\') {
        ++pos_;
        if (at_end()) fail("unterminated string");
        const char e = text_[pos_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp = parse_hex4();
            if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in a \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (text_.substr(pos_, 2) != "\\u") fail("lone high surrogate in a \\u escape");
              pos_ += 2;
              const uint32_t low = parse_hex4();
              if (low < 0xDC00 || low > 0xDFFF) fail("high surrogate not followed by a low one");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            utf8::append(out, cp);
            break;
          }
          default: --pos_; fail("invalid escape in a string");
        }
        continue;
      }
      const size_t n = utf8::sequence_length(text_, pos_);
      if (n == 0) fail("invalid UTF-8");
      out.append(text_.substr(pos_, n));
      pos_ += n;
    }
  }

  Json parse_number() {
    const size_t start = pos_;
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (is_digit(peek())) {
      while (is_digit(peek())) ++pos_;
    } else {
      fail("invalid number");
    }
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!is_digit(peek())) fail("invalid number: no digit after '.'");
      while (is_digit(peek())) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!is_digit(peek())) fail("invalid number: no digit in the exponent");
      while (is_digit(peek())) ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(first, last, v);
      if (ec != std::errc() || end != last) {
        pos_ = start;
        fail("integer out of the int64 range");
      }
      return Json{v};
    }
    double v = 0;
    const auto [end, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || end != last || !std::isfinite(v)) {
      pos_ = start;
      fail("number out of the double range");
    }
    return Json{v};
  }

  std::string_view text_;
  int max_depth_;
  size_t pos_ = 0;
};

}  // namespace

const char* type_name(const Json& j) {
  static constexpr const char* kNames[] = {"null", "a bool", "an integer", "a number", "a string", "an array", "an object"};
  return kNames[j.value.index()];
}

Json parse(std::string_view text, int max_depth) { return Parser(text, max_depth).parse_document(); }


void append_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xF];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void append_double(std::string& out, double v) {
  MF_CHECK(std::isfinite(v), ValueError, "JSON has no representation for ", v);
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string_view text(buf, size_t(end - buf));
  out += text;
  if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
}

void append(std::string& out, const Json& j) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::nullptr_t>) {
          out += "null";
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          out += std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          append_double(out, v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          append_string(out, v);
        } else if constexpr (std::is_same_v<T, Json::Array>) {
          out += '[';
          for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ',';
            append(out, v[i]);
          }
          out += ']';
        } else {
          out += '{';
          for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ',';
            append_string(out, v[i].first);
            out += ':';
            append(out, v[i].second);
          }
          out += '}';
        }
      },
      j.value);
}

}  // namespace mf::io::json
