// Logprobs of sampled tokens: the raw log-softmax of the model's logits (not
// of the penalised, tempered distribution), the top alternatives in order,
// and OpenAI's JSON shapes for chat and completions, partial UTF-8 included.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/logprobs.hpp"
#include "server/logprobs_json.hpp"
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

}  // namespace
}  // namespace neuron
