// Random strings against Hugging Face `tokenizers` itself, beyond the 27
// hand-picked golden cases: tests/data/tokenizer-hf-random.json was produced
// by bench/tokenizer/hf_reference.js. Besides the Qwen tokenizer it holds
// variants (a patch over Qwen's tokenizer.json) that exercise what Qwen does
// not: GPT-2's ByteLevel pre-tokenizer with add_prefix_space, every Split
// behaviour and invert, NFKC in a Sequence, added tokens with lstrip, rstrip,
// single_word and normalized, and merges in the "a b" string form.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer_test_util.hpp"

namespace neuron::tokenizer {
namespace {

using nlohmann::json;

const json& reference() {
  static const json j =
      json::parse(testing::read_file(std::filesystem::path(NEURON_TEST_DATA) / "tokenizer-hf-random.json"));
  return j;
}

Tokenizer patched_tokenizer(const json& patch) {
  if (patch.empty()) return testing::qwen();
  json t = json::parse(testing::read_file(testing::kQwenTokenizerJson));
  for (const char* key : {"normalizer", "pre_tokenizer"})
    if (patch.contains(key)) t[key] = patch[key];
  if (patch.contains("added_tokens_extra"))
    for (const auto& e : patch["added_tokens_extra"]) t["added_tokens"].push_back(e);
  if (patch.value("string_merges", false))
    for (auto& m : t["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  return Tokenizer::from_json(t.dump());
}

void check_variant(const std::string& name) {
  for (const auto& v : reference()["variants"]) {
    if (v["name"] != name) continue;
    const Tokenizer tok = patched_tokenizer(v["patch"]);
    int mismatches = 0;
    for (const auto& c : v["cases"]) {
      const auto text = c["text"].get<std::string>();
      const auto ids = c["ids"].get<std::vector<std::int32_t>>();
      const auto got = tok.encode(text);
      EXPECT_EQ(got, ids) << name << " text: " << json(text).dump();
      EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << name << " text: " << json(text).dump();
      EXPECT_EQ(tok.decode(ids, true), c["decoded_skip"].get<std::string>()) << name << " text: " << json(text).dump();
      if (got != ids && ++mismatches > 5) FAIL() << "stopping after 5 mismatches in " << name;
    }
    EXPECT_GE(v["cases"].size(), 100u);
    return;
  }
  FAIL() << "variant " << name << " missing from tokenizer-hf-random.json";
}

TEST(TokenizerHfReference, Qwen3RandomStrings) { check_variant("qwen3"); }
TEST(TokenizerHfReference, Gpt2StylePrefixSpaceAddedTokenFlagsStringMerges) { check_variant("gpt2_style_prefix_space"); }
TEST(TokenizerHfReference, SplitBehavioursAndInvert) { check_variant("split_behaviours"); }
TEST(TokenizerHfReference, NfkcSequenceAndContiguous) { check_variant("nfkc_contiguous"); }

}  // namespace
}  // namespace neuron::tokenizer
