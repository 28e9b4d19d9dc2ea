// A tokenizer.json neuron cannot run is refused at load with Error{bad_model}
// naming the offending field, never a crash or a silently wrong tokenizer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer_test_util.hpp"

namespace neuron::tokenizer {
namespace {

using nlohmann::json;

json tiny() { return testing::tiny_tokenizer_json(); }

void expect_bad_text(const std::string& text, const std::string& needle) {
  try {
    (void)Tokenizer::from_json(text);
    ADD_FAILURE() << "accepted: " << text.substr(0, 200);
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::bad_model) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message '" << e.what() << "' lacks '" << needle << "'";
  }
}

void expect_bad_model(const json& j, const std::string& needle) { expect_bad_text(j.dump(), needle); }

TEST(TokenizerMalformed, TinyTokenizerWorks) {
  const Tokenizer tok = Tokenizer::from_json(tiny().dump());
  EXPECT_EQ(tok.encode("hello<|end|>"), (std::vector<std::int32_t>{258, 'o', 259}));
  EXPECT_EQ(tok.decode(tok.encode("hello<|end|>"), true), "hello");
  EXPECT_EQ(tok.vocab_size(), 260u);
}

TEST(TokenizerMalformed, NotJson) {
  expect_bad_text("", "not valid JSON");
  expect_bad_text("{\"model\": ", "not valid JSON");
  expect_bad_text("[1, 2]", "top level");
  expect_bad_text("{\"model\": \"\xFF\"}", "not valid JSON");
}

TEST(TokenizerMalformed, ModelAndVocab) {
  auto j = tiny();
  j.erase("model");
  expect_bad_model(j, "\"model\" is missing");
  j = tiny();
  j["model"]["type"] = "WordPiece";
  expect_bad_model(j, "WordPiece");
  j = tiny();
  j["model"].erase("vocab");
  expect_bad_model(j, "model.vocab");
  j = tiny();
  j["model"]["vocab"]["he"] = "256";
  expect_bad_model(j, "model.vocab[\"he\"]");
  j = tiny();
  j["model"]["vocab"]["he"] = -3;
  expect_bad_model(j, "model.vocab[\"he\"]");
  j = tiny();
  j["model"]["vocab"]["he"] = 4'000'000'000LL;
  expect_bad_model(j, "model.vocab[\"he\"]");
  j = tiny();
  j["model"]["vocab"]["he"] = 257;  // same id as "ll"
  expect_bad_model(j, "id 257");
  j = tiny();
  j["model"]["continuing_subword_prefix"] = "##";
  expect_bad_model(j, "continuing_subword_prefix");
}

TEST(TokenizerMalformed, Merges) {
  auto j = tiny();
  j["model"]["merges"][1] = "ll";
  expect_bad_model(j, "model.merges[1]");
  j["model"]["merges"][1] = "l l l";
  expect_bad_model(j, "model.merges[1]");
  j["model"]["merges"][1] = json::array({"l", "l", "l"});
  expect_bad_model(j, "model.merges[1]");
  j["model"]["merges"][1] = 7;
  expect_bad_model(j, "model.merges[1]");
  j["model"]["merges"][1] = json::array({"l", "zz"});
  expect_bad_model(j, "'zz' which is not in model.vocab");
  j = tiny();
  j["model"]["vocab"].erase("hell");
  expect_bad_model(j, "produces 'hell'");
  j = tiny();
  j["model"]["merges"] = "h e";
  expect_bad_model(j, "model.merges must be an array");
}

TEST(TokenizerMalformed, PipelineParts) {
  auto j = tiny();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_bad_model(j, "invalid regex");
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Sideways"}}})}};
  expect_bad_model(j, "Sideways");
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_bad_model(j, "Metaspace");
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
  expect_bad_model(j, "no ByteLevel");
  j = tiny();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_bad_model(j, "Lowercase");
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}, {{"kind", "NFD"}}})}};
  expect_bad_model(j, "normalizer.normalizers[1]");
  j = tiny();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_bad_model(j, "decoder");
}

TEST(TokenizerMalformed, AddedTokens) {
  auto j = tiny();
  j["added_tokens"][0].erase("content");
  expect_bad_model(j, "added_tokens[0].content");
  j = tiny();
  j["added_tokens"][0]["id"] = "259";
  expect_bad_model(j, "added_tokens[0].id");
  j = tiny();
  j["added_tokens"][0]["special"] = "yes";
  expect_bad_model(j, "added_tokens[0].special");
  j = tiny();
  j["added_tokens"] = {{"content", "x"}};
  expect_bad_model(j, "added_tokens");
}

TEST(TokenizerMalformed, FileErrorsNameThePath) {
  try {
    (void)Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::not_found);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/tokenizer.json"), std::string::npos);
  }
  // The model's config.json is JSON but not a tokenizer.
  const auto config = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a" / "config.json";
  try {
    (void)Tokenizer::from_file(config);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::bad_model);
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace neuron::tokenizer
