// Added-token flags on a tiny tokenizer, where each expectation is readable
// by hand (the random-string reference test covers them against Hugging
// Face; these pin down the rules it revealed).
#include <gtest/gtest.h>

#include <algorithm>

#include "tokenizer_test_util.hpp"

namespace neuron::tokenizer {
namespace {

using nlohmann::json;
using Ids = std::vector<std::int32_t>;

Tokenizer with_token(json token) {
  json j = testing::tiny_tokenizer_json();
  j["added_tokens"].push_back(std::move(token));
  return Tokenizer::from_json(j.dump());
}

TEST(TokenizerAddedTokens, SingleWordNeedsNonWordNeighbours) {
  const Tokenizer tok = with_token({{"id", 260}, {"content", "[W]"}, {"single_word", true}});
  EXPECT_EQ(tok.encode("![W]!"), (Ids{'!', 260, '!'}));
  EXPECT_EQ(tok.encode("[W]"), (Ids{260}));
  EXPECT_NE(tok.encode("a[W]"), (Ids{'a', 260}));
  EXPECT_NE(tok.encode("[W]_"), (Ids{260, '_'}));  // '_' is a word character (\w)
  // \w is Unicode's: Alphabetic (so circled letters, category So, count),
  // marks and decimal digits of any script; other numbers (①, ²) do not.
  auto matched = [&](const std::string& text) {
    const Ids ids = tok.encode(text);
    return std::find(ids.begin(), ids.end(), 260) != ids.end();
  };
  EXPECT_FALSE(matched("\u24b6[W]"));  // Ⓐ
  EXPECT_FALSE(matched("\u0301[W]"));  // combining acute
  EXPECT_FALSE(matched("\u0660[W]"));  // Arabic-Indic zero (Nd)
  EXPECT_TRUE(matched("\u2460[W]"));   // ① (No)
  EXPECT_TRUE(matched("\u00b2[W]"));   // ² (No)
}

TEST(TokenizerAddedTokens, LstripAndRstripSwallowWhitespace) {
  const Tokenizer l = with_token({{"id", 260}, {"content", "<m>"}, {"lstrip", true}, {"special", true}});
  EXPECT_EQ(l.encode("a \t <m>b"), (Ids{'a', 260, 'b'}));
  EXPECT_EQ(l.decode(l.encode("a \t <m>b"), /*skip_special_tokens=*/true), "ab");
  const Tokenizer r = with_token({{"id", 260}, {"content", "<m>"}, {"rstrip", true}});
  EXPECT_EQ(r.encode("a<m>  \n b"), (Ids{'a', 260, 'b'}));
}

TEST(TokenizerAddedTokens, ContentAlreadyInTheVocabKeepsItsVocabId) {
  // As in Hugging Face, whatever "id" says: "hell" is vocab id 258.
  const Tokenizer tok = with_token({{"id", 260}, {"content", "hell"}, {"special", true}});
  EXPECT_EQ(tok.token_to_id("hell"), 258);
  EXPECT_EQ(tok.encode("hello"), (Ids{258, 'o'}));
  EXPECT_EQ(tok.decode(Ids{258, 'o'}, /*skip_special_tokens=*/true), "o");
  EXPECT_THROW((void)tok.decode(Ids{260}), Error);
  EXPECT_EQ(tok.vocab_size(), 260u);
}

TEST(TokenizerAddedTokens, NormalizedTokensMatchAfterNfc) {
  const Tokenizer tok = with_token({{"id", 260}, {"content", "\u00e9!"}, {"normalized", true}});
  EXPECT_EQ(tok.encode("e\u0301!"), (Ids{260}));  // NFC turns e + U+0301 into é first
  const Tokenizer raw = with_token({{"id", 260}, {"content", "\u00e9!"}, {"normalized", false}});
  EXPECT_NE(raw.encode("e\u0301!"), (Ids{260}));
}

}  // namespace
}  // namespace neuron::tokenizer
