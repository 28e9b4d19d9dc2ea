// StreamDecoder: what a server-sent-events client sees token by token must
// add up to the full decode and never contain a split UTF-8 character.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/utf8.hpp"
#include "tokenizer_test_util.hpp"

namespace neuron::tokenizer {
namespace {

using testing::qwen;

std::vector<std::vector<std::int32_t>> golden_ids() {
  const auto j = nlohmann::json::parse(testing::read_file(std::filesystem::path(NEURON_TEST_DATA) / "tokenizer-golden.json"));
  std::vector<std::vector<std::int32_t>> out;
  for (const auto& c : j.at("cases")) out.push_back(c.at("ids").get<std::vector<std::int32_t>>());
  return out;
}

// Streams `ids`, checking every chunk is complete UTF-8; returns the concatenation.
std::string stream(const std::vector<std::int32_t>& ids, bool skip_special) {
  StreamDecoder d(qwen(), skip_special);
  std::string all;
  for (std::int32_t id : ids) {
    const std::string chunk = d.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk)) << "partial UTF-8 emitted after id " << id;
    all += chunk;
  }
  const std::string rest = d.finish();
  EXPECT_TRUE(is_valid_utf8(rest));
  return all + rest;
}

TEST(TokenizerStream, GoldenCasesConcatenateToFullDecode) {
  for (const auto& ids : golden_ids()) {
    EXPECT_EQ(stream(ids, false), qwen().decode(ids));
    EXPECT_EQ(stream(ids, true), qwen().decode(ids, true));
  }
}

TEST(TokenizerStream, HoldsBackASplitCharacterUntilItCompletes) {
  // From the golden emoji case: 61804 is " " + the first three bytes of 👨
  // (F0 9F 91), 101 its last byte (A8); 378 is E2 80 and 235 is 8D (U+200D ZWJ).
  StreamDecoder d(qwen(), false);
  EXPECT_EQ(d.push(37523), "emoji");
  EXPECT_EQ(d.push(61804), " ");
  EXPECT_EQ(d.push(101), "\xF0\x9F\x91\xA8");
  EXPECT_EQ(d.push(378), "");
  EXPECT_EQ(d.push(235), "\xE2\x80\x8D");
  EXPECT_EQ(d.finish(), "");
}

TEST(TokenizerStream, SkipSpecialTokens) {
  const auto ids = qwen().encode("<|im_start|>assistant\nhello<|im_end|>");
  EXPECT_EQ(stream(ids, true), "assistant\nhello");
  EXPECT_EQ(stream(ids, false), "<|im_start|>assistant\nhello<|im_end|>");
}

TEST(TokenizerStream, UnfinishedCharacterAtTheEndBecomesReplacementLikeDecode) {
  // "你" is E4 BD A0; its first byte alone is the byte-level token for 0xE4.
  const auto e4 = qwen().token_to_id("ä");  // byte 0xE4 in the byte-level alphabet
  ASSERT_TRUE(e4.has_value());
  const std::vector<std::int32_t> ids{9707, *e4};
  StreamDecoder d(qwen(), false);
  EXPECT_EQ(d.push(9707), "Hello");
  EXPECT_EQ(d.push(*e4), "");
  EXPECT_EQ(d.finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(qwen().decode(ids), "Hello\xEF\xBF\xBD");
  // An ill-formed run is emitted as U+FFFD as soon as it is known to be ill-formed.
  StreamDecoder d2(qwen(), false);
  EXPECT_EQ(d2.push(*e4), "");
  EXPECT_EQ(d2.push(9707), "\xEF\xBF\xBDHello");
  EXPECT_EQ(d2.finish(), "");
}

TEST(TokenizerStream, UnknownIdThrowsAndLeavesStateIntact) {
  StreamDecoder d(qwen(), false);
  const auto e4 = qwen().token_to_id("ä");
  ASSERT_TRUE(e4.has_value());
  EXPECT_EQ(d.push(*e4), "");
  EXPECT_THROW(d.push(999999), Error);
  // E4 BD A0 = 你: the pending byte survived the failed push.
  EXPECT_EQ(d.push(*qwen().token_to_id("½")), "");
  EXPECT_EQ(d.push(*qwen().token_to_id("ł")), "你");
  EXPECT_EQ(d.finish(), "");
}

}  // namespace
}  // namespace neuron::tokenizer
