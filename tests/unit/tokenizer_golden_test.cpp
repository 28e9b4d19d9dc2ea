// The bundled Qwen3 tokenizer against Hugging Face: tests/data/tokenizer-golden.json
// holds 27 strings with the ids transformers produced and the text it decodes
// them to. A single differing id changes what the model sees.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer_test_util.hpp"

namespace neuron::tokenizer {
namespace {

using testing::qwen;

struct GoldenCase {
  std::string text;
  std::vector<std::int32_t> ids;
  std::string decoded;
};

std::vector<GoldenCase> golden_cases() {
  const auto j = nlohmann::json::parse(testing::read_file(std::filesystem::path(NEURON_TEST_DATA) / "tokenizer-golden.json"));
  std::vector<GoldenCase> out;
  for (const auto& c : j.at("cases"))
    out.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<std::int32_t>>(),
                   c.at("decoded").get<std::string>()});
  return out;
}

TEST(TokenizerGolden, AllCasesEncodeToRecordedIds) {
  const auto cases = golden_cases();
  ASSERT_EQ(cases.size(), 27u);
  for (const auto& c : cases) EXPECT_EQ(qwen().encode(c.text), c.ids) << "text: " << c.text;
}

TEST(TokenizerGolden, AllCasesDecodeToRecordedText) {
  for (const auto& c : golden_cases()) EXPECT_EQ(qwen().decode(c.ids), c.decoded) << "text: " << c.text;
}

TEST(TokenizerGolden, VocabularyShape) {
  const auto& tok = qwen();
  EXPECT_EQ(tok.vocab_size(), 151669u);  // 151643 BPE tokens + 26 added
  EXPECT_EQ(tok.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok.token_to_id("Ġworld"), 1879);
  EXPECT_EQ(tok.token_to_id("no such token"), std::nullopt);
  EXPECT_EQ(tok.id_to_token(1879), "Ġworld");
  EXPECT_EQ(tok.id_to_token(151645), "<|im_end|>");
  EXPECT_TRUE(tok.is_special(151645));
  EXPECT_FALSE(tok.is_special(151657));  // <tool_call> is an added token but not special
  EXPECT_FALSE(tok.is_special(1879));
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_FALSE(tok.is_special(1 << 30));
}

TEST(TokenizerGolden, UnknownIdsAreRejectedByName) {
  const std::vector<std::int32_t> ids{9707, 151669};
  try {
    (void)qwen().decode(ids);
    FAIL() << "decode accepted id 151669";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("151669"), std::string::npos) << e.what();
  }
  const std::vector<std::int32_t> negative{-5};
  EXPECT_THROW((void)qwen().decode(negative), Error);
  EXPECT_THROW((void)qwen().id_to_token(-1), Error);
}

TEST(TokenizerGolden, SkipSpecialTokensDropsOnlySpecialOnes) {
  const auto ids = qwen().encode("<|im_start|>user\nhi<|im_end|><tool_call>");
  EXPECT_EQ(qwen().decode(ids, /*skip_special_tokens=*/true), "user\nhi<tool_call>");
  EXPECT_EQ(qwen().decode(ids, false), "<|im_start|>user\nhi<|im_end|><tool_call>");
}

TEST(TokenizerGolden, EmptyTextHasNoTokens) {
  EXPECT_TRUE(qwen().encode("").empty());
  EXPECT_EQ(qwen().decode(std::span<const std::int32_t>{}), "");
}

}  // namespace
}  // namespace neuron::tokenizer
