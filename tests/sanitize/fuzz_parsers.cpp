// Mutation fuzzing of the checkpoint header parsers under ASan + UBSan:
// valid headers with random byte flips, insertions, deletions, truncations
// and splices must parse or throw mf::Error, never read out of bounds.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/utf8.h"
#include "io/json.h"
#include "meshflow/error.h"

namespace mf {
namespace {

const std::vector<std::string>& seeds() {
  static const std::vector<std::string> s = {
      R"({"__metadata__":{"meshflow.crc32c":"{\"__metadata__\":\"00000000\",\"w\":\"78743a5d\"}"},)"
      R"("w":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})",
      R"({"a":[null,true,false,-0,12,-9223372036854775808,1.5e3,-2E-2,"\u00e9\ud83d\ude00\n"],"b":{}})",
      R"([[[[[[[[[[1]]]]]]]]]])",
      "{\"k\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}",
  };
  return s;
}

std::string mutate(std::string s, std::mt19937& rng) {
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0: if (!s.empty() && pos < s.size()) s[pos] = char(s[pos] ^ (1u << (rng() % 8))); break;
      case 1: s.insert(pos, 1, char(rng() % 256)); break;
      case 2: if (pos < s.size()) s.erase(pos, 1 + rng() % 8); break;
      case 3: s.resize(pos); break;
      case 4: s.insert(pos, seeds()[rng() % seeds().size()].substr(0, rng() % 40)); break;
      default: s.insert(pos, std::string(1 + rng() % 300, "[{\"9e\\"[rng() % 6])); break;
    }
  }
  return s;
}

TEST(SanitizedParsers, MutatedHeadersParseOrThrow) {
  std::mt19937 rng(20261202);
  int parsed = 0, refused = 0;
  for (int i = 0; i < 60000; ++i) {
    const std::string text = mutate(seeds()[size_t(i) % seeds().size()], rng);
    try {
      const io::json::Json j = io::json::parse(text, 8);
      std::string out;
      io::json::append(out, j);  // what parsed writes back and parses again
      io::json::parse(out, 8);
      ++parsed;
    } catch (const Error&) {
      ++refused;
    }
    (void)utf8::is_valid(text);
    (void)utf8::decode(text);
  }
  EXPECT_GT(parsed, 100);
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace mf
