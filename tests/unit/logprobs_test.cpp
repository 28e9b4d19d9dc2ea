// Logprobs of sampled tokens: the raw log-softmax of the model's logits (not
// of the penalised, tempered distribution), the top alternatives in order,
// and OpenAI's JSON shapes for chat and completions, partial UTF-8 included.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/logprobs.hpp"
#include "server/logprobs_json.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"
#include "util/error.hpp"

namespace neuron {
namespace {

using nlohmann::json;

TEST(TokenLogprobs, AreTheLogSoftmaxOfTheRawLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  double norm = 0;
  for (float l : logits) norm += std::exp(static_cast<double>(l));
  norm = std::log(norm);
  const model::TokenLogprobs lp = model::token_logprobs(logits, 2, 3);
  EXPECT_NEAR(lp.logprob, 2.0 - norm, 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 1) << "ties go to the lower id, as the greedy pick does";
  EXPECT_EQ(lp.top[1].token, 3);
  EXPECT_EQ(lp.top[2].token, 2);
  EXPECT_NEAR(lp.top[0].logprob, 3.0 - norm, 1e-6);
  double total = 0;
  for (std::int32_t t = 0; t < 5; ++t) total += std::exp(model::token_logprobs(logits, t, 0).logprob);
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_TRUE(model::token_logprobs(logits, 0, 0).top.empty());
  EXPECT_EQ(model::token_logprobs(logits, 0, 20).top.size(), 5u) << "never more than the vocabulary";
}

TEST(TokenLogprobs, LargeLogitsStayFinite) {
  std::vector<float> logits(1000, -5.0f);
  logits[123] = 1e4f;
  const model::TokenLogprobs lp = model::token_logprobs(logits, 123, 1);
  EXPECT_NEAR(lp.logprob, 0.0f, 1e-6);
  EXPECT_TRUE(std::isfinite(model::token_logprobs(logits, 0, 0).logprob));
}

TEST(TokenLogprobs, RefusesBadArguments) {
  const std::vector<float> logits = {0.0f, 1.0f};
  EXPECT_THROW(model::token_logprobs({}, 0, 0), Error);
  EXPECT_THROW(model::token_logprobs(logits, 2, 0), Error);
  EXPECT_THROW(model::token_logprobs(logits, -1, 0), Error);
  EXPECT_THROW(model::token_logprobs(logits, 0, 21), Error);
  const std::vector<float> nan = {NAN, NAN};
  EXPECT_THROW(model::token_logprobs(nan, 0, 0), Error);
}

TEST(LogprobsJson, TokenTextIsTheTextOrItsEscapedBytes) {
  EXPECT_EQ(server::logprob_token_text("hello"), "hello");
  EXPECT_EQ(server::logprob_token_text("\xc3\xa9"), "\xc3\xa9");
  EXPECT_EQ(server::logprob_token_text("\xe4\xbd"), "bytes:\\xe4\\xbd") << "a character split over tokens, as OpenAI writes it";
  EXPECT_EQ(server::logprob_token_text(" \xf0"), "bytes:\\x20\\xf0");
  EXPECT_EQ(server::code_points("a\xc3\xa9\xe4\xbd\xa0"), 3u);
  EXPECT_EQ(server::code_points("\xe4\xbd"), 1u) << "a started character counts once";
}

TEST(LogprobsJson, OpenAisShapesWithRealTokens) {
  const auto tok = tokenizer::Tokenizer::from_file(std::filesystem::path(NEURON_REPO_ROOT) / "models/qwen3-tiny-a/tokenizer.json");
  // A byte-level token that is only part of a character (Qwen3 has many), and a plain one.
  std::int32_t partial = -1;
  for (std::int32_t id = 0; id < 5000 && partial < 0; ++id)
    if (tok.is_known(id) && !tokenizer::is_valid_utf8(tok.token_bytes(id))) partial = id;
  ASSERT_GE(partial, 0);
  const std::int32_t hello = tok.encode("hello").at(0);
  const std::vector<std::int32_t> ids = {hello, partial};
  const std::vector<model::TokenLogprobs> lps = {{-0.5f, {{hello, -0.5f}, {partial, -1.5f}}}, {-2.0f, {{hello, -0.25f}, {partial, -2.0f}}}};

  const json chat = server::chat_logprobs(tok, ids, lps);
  EXPECT_TRUE(chat["refusal"].is_null());
  ASSERT_EQ(chat["content"].size(), 2u);
  const json& first = chat["content"][0];
  EXPECT_EQ(first["token"], "hello");
  EXPECT_EQ(first["bytes"], json({'h', 'e', 'l', 'l', 'o'}));
  EXPECT_FLOAT_EQ(first["logprob"].get<float>(), -0.5f);
  ASSERT_EQ(first["top_logprobs"].size(), 2u);
  EXPECT_EQ(first["top_logprobs"][1]["token"], server::logprob_token_text(tok.token_bytes(partial)));
  const json& second = chat["content"][1];
  EXPECT_TRUE(second["token"].get<std::string>().starts_with("bytes:\\x")) << second;
  std::string raw;
  for (const json& b : second["bytes"]) raw += static_cast<char>(b.get<int>());
  EXPECT_EQ(raw, tok.token_bytes(partial)) << "bytes carry the token's raw bytes";
  EXPECT_NO_THROW((void)second.dump()) << "valid JSON text whatever the bytes";

  server::CompletionLogprobs completion(tok, 3);
  const json a = completion.take(std::span(ids).first(1), std::span(lps).first(1));
  const json b = completion.take(std::span(ids).subspan(1), std::span(lps).subspan(1));
  EXPECT_EQ(a["tokens"], json({"hello"}));
  EXPECT_EQ(a["text_offset"], json({3})) << "after the echoed prompt's 3 code points";
  EXPECT_EQ(b["text_offset"], json({8})) << "offsets run on across chunks";
  EXPECT_EQ(a["top_logprobs"][0].size(), 2u);
  EXPECT_FLOAT_EQ(a["top_logprobs"][0]["hello"].get<float>(), -0.5f);
  EXPECT_EQ(b["token_logprobs"], json({-2.0}));
}

}  // namespace
}  // namespace neuron
