// The checkpoint header's JSON reader and writer (src/io/json.h).
#include <bit>
#include <random>

#include "core/utf8.h"
#include "io/json.h"
#include "meshflow/error.h"

#include <gtest/gtest.h>

namespace mf {
namespace {
namespace json = io::json;

std::string write(const json::Json& j) {
  std::string out;
  json::append(out, j);
  return out;
}

TEST(Json, ParsesEveryKind) {
  const json::Json j = json::parse(" {\"a\": [null, true, false, -0, 12, -9223372036854775808, 1.5e3, -2E-2,"
                                   " \"s\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20ac\\ud83d\\ude00\"], \"b\": {}}\n",
                                   8);
  const auto& members = *j.as_object();
  ASSERT_EQ(members.size(), 2u);
  EXPECT_EQ(members[0].first, "a");
  const auto& a = *members[0].second.as_array();
  ASSERT_EQ(a.size(), 9u);
  EXPECT_TRUE(a[0].is_null());
  EXPECT_EQ(*a[1].as_bool(), true);
  EXPECT_EQ(*a[2].as_bool(), false);
  EXPECT_EQ(*a[3].as_int(), 0);
  EXPECT_EQ(*a[4].as_int(), 12);
  EXPECT_EQ(*a[5].as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*a[6].as_double(), 1500.0);
  EXPECT_EQ(*a[7].as_double(), -0.02);
  EXPECT_EQ(*a[8].as_string(), "s\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  EXPECT_TRUE(members[1].second.as_object()->empty());
}

TEST(Json, WriterEscapesLikeSerdeJson) {
  json::Json j{json::Json::Object{{"k\"\\", json::Json{std::string("a/\x01\x1f\x7f\n\xc3\xa9")}}}};
  EXPECT_EQ(write(j), "{\"k\\\"\\\\\":\"a/\\u0001\\u001f\x7f\\n\xc3\xa9\"}");
  EXPECT_EQ(write(json::Json{json::Json::Array{json::Json{nullptr}, json::Json{int64_t(-5)}, json::Json{2.0},
                                               json::Json{1e300}, json::Json{-0.0}}}),
            "[null,-5,2.0,1e+300,-0.0]");
  std::string out;
  EXPECT_THROW(json::append_double(out, std::numeric_limits<double>::infinity()), ValueError);
}

TEST(Json, DoublesRoundTripExactly) {
  std::mt19937_64 gen(7);
  for (int i = 0; i < 20000; ++i) {
    const double d = std::bit_cast<double>(gen());
    if (!std::isfinite(d)) continue;
    std::string text;
    json::append_double(text, d);
    const json::Json back = json::parse(text, 1);
    ASSERT_NE(back.as_double(), nullptr) << text;
    ASSERT_EQ(std::bit_cast<uint64_t>(*back.as_double()), std::bit_cast<uint64_t>(d)) << text;
  }
}

TEST(Json, DepthLimit) {
  EXPECT_NO_THROW(json::parse("[[[]]]", 3));
  EXPECT_THROW(json::parse("[[[[]]]]", 3), Error);
  EXPECT_NO_THROW(json::parse("1", 0));
  EXPECT_THROW(json::parse("[]", 0), Error);
}

TEST(Json, ValidUtf8) {
  EXPECT_TRUE(utf8::is_valid("plain \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"));
  EXPECT_TRUE(utf8::is_valid(std::string("\0", 1)));
  for (const char* bad : {"\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80",
                          "\xc3", "\xe2\x82", "\xff"})
    EXPECT_FALSE(utf8::is_valid(bad)) << bad;
}

}  // namespace
}  // namespace mf
