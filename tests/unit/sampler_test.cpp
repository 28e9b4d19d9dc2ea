#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "model/sampler.hpp"
#include "util/error.hpp"

namespace neuron::model {
namespace {

SamplingParams seeded(float temperature, std::uint64_t seed = 7) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

// Draws `n` tokens from fresh copies of `logits` and counts them.
std::map<std::int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::map<std::int32_t, int> counts;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    ++counts[s.sample(l, {})];
  }
  return counts;
}

std::string error_kind_of(const SamplingParams& p) {
  try {
    p.validate();
  } catch (const Error& e) {
    return std::string(e.kind()) + ":" + e.what();
  }
  return "";
}

TEST(Sampler, GreedyPicksTheFirstMaximum) {
  Sampler s(seeded(0.0f));
  std::vector<float> logits{0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(logits, {}), 1);
}

TEST(Sampler, GreedyPickRule) {
  const float nan = std::nanf(""), inf = INFINITY;
  EXPECT_EQ(greedy_pick(std::vector<float>{nan, 1.0f, 3.0f, 3.0f}), 2) << "NaN never wins; first maximum";
  EXPECT_EQ(greedy_pick(std::vector<float>{-inf, -inf, -inf}), 0);
  EXPECT_EQ(greedy_pick(std::vector<float>{nan, nan}), 0);
  EXPECT_EQ(greedy_pick(std::vector<float>{-inf, 2.0f, inf, inf}), 2);
}

TEST(Sampler, PlainGreedyMeansNothingButTheArgmax) {
  EXPECT_TRUE(Sampler(seeded(0.0f)).plain_greedy());
  EXPECT_FALSE(Sampler(seeded(0.7f)).plain_greedy());
  SamplingParams p = seeded(0.0f);
  p.repetition_penalty = 1.1f;
  EXPECT_FALSE(Sampler(p).plain_greedy());
  p = seeded(0.0f);
  p.presence_penalty = 0.5f;
  EXPECT_FALSE(Sampler(p).plain_greedy());
  p = seeded(0.0f);
  p.frequency_penalty = -0.5f;
  EXPECT_FALSE(Sampler(p).plain_greedy());
  p = seeded(0.0f);
  p.top_k = 5;  // ignored by a greedy pick
  EXPECT_TRUE(Sampler(p).plain_greedy());
}

TEST(Sampler, GreedyIgnoresTheSeed) {
  std::vector<float> logits{0.5f, 0.4f, 3.0f, 0.2f};
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    Sampler s(seeded(0.0f, seed));
    std::vector<float> l = logits;
    EXPECT_EQ(s.sample(l, {}), 2);
  }
}

TEST(Sampler, SameSeedGivesTheSameSequence) {
  std::vector<float> logits(50);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  auto draw = [&](std::uint64_t seed) {
    Sampler s(seeded(1.0f, seed));
    std::vector<std::int32_t> out;
    for (int i = 0; i < 40; ++i) {
      std::vector<float> l = logits;
      out.push_back(s.sample(l, {}));
    }
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  // p = softmax([0, ln 2, ln 3]) = [1/6, 2/6, 3/6].
  std::vector<float> logits{0.0f, std::log(2.0f), std::log(3.0f)};
  Sampler s(seeded(1.0f));
  const int n = 30000;
  auto counts = histogram(s, logits, n);
  EXPECT_NEAR(counts[0] / double(n), 1.0 / 6, 0.015);
  EXPECT_NEAR(counts[1] / double(n), 2.0 / 6, 0.015);
  EXPECT_NEAR(counts[2] / double(n), 3.0 / 6, 0.015);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  std::vector<float> logits{0.0f, 1.0f};
  Sampler cold(seeded(0.25f)), hot(seeded(4.0f));
  const int n = 20000;
  // p(1) = sigmoid(1 / T): 0.982 at T = 0.25, 0.562 at T = 4.
  EXPECT_NEAR(histogram(cold, logits, n)[1] / double(n), 0.982, 0.01);
  EXPECT_NEAR(histogram(hot, logits, n)[1] / double(n), 0.562, 0.015);
}

TEST(Sampler, TopKKeepsOnlyTheKBest) {
  std::vector<float> logits{1.0f, 5.0f, 2.0f, 4.9f, 3.0f, 4.8f};
  SamplingParams p = seeded(100.0f);  // nearly uniform, so every kept token shows up
  p.top_k = 3;
  Sampler s(p);
  auto counts = histogram(s, logits, 3000);
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[3], 0);
  EXPECT_GT(counts[5], 0);
}

TEST(Sampler, TopKOfOneIsGreedy) {
  std::vector<float> logits{1.0f, 0.0f, 7.0f, 6.9f};
  SamplingParams p = seeded(5.0f);
  p.top_k = 1;
  Sampler s(p);
  EXPECT_EQ(histogram(s, logits, 200), (std::map<std::int32_t, int>{{2, 200}}));
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  // p = [0.5, 0.3, 0.2] (ids 2, 0, 1): top_p 0.75 keeps ids 2 and 0, renormalised to 5/8, 3/8.
  std::vector<float> logits{std::log(0.3f), std::log(0.2f), std::log(0.5f)};
  SamplingParams p = seeded(1.0f);
  p.top_p = 0.75f;
  Sampler s(p);
  const int n = 20000;
  auto counts = histogram(s, logits, n);
  EXPECT_EQ(counts.count(1), 0u);
  EXPECT_NEAR(counts[2] / double(n), 5.0 / 8, 0.015);
  EXPECT_NEAR(counts[0] / double(n), 3.0 / 8, 0.015);
}

TEST(Sampler, TopPNucleusLargerThanTheFirstSortedHead) {
  // 1000 equal logits: top_p 0.5 keeps exactly 500 (ties by id), far more than
  // the sampler's first partially sorted head.
  std::vector<float> logits(1000, 0.25f);
  SamplingParams p = seeded(1.0f);
  p.top_p = 0.5f;
  Sampler s(p);
  auto counts = histogram(s, logits, 4000);
  EXPECT_LT(counts.rbegin()->first, 500);
  EXPECT_GT(counts.size(), 450u);
}

TEST(Sampler, TopPSmallerThanTheTopTokenKeepsOnlyIt) {
  std::vector<float> logits{std::log(0.3f), std::log(0.2f), std::log(0.5f)};
  SamplingParams p = seeded(1.0f);
  p.top_p = 0.1f;
  Sampler s(p);
  EXPECT_EQ(histogram(s, logits, 500), (std::map<std::int32_t, int>{{2, 500}}));
}

TEST(Sampler, MinPDropsTokensBelowTheFraction) {
  // p = [0.5, 0.3, 0.15, 0.05]: min_p 0.25 drops everything under 0.125.
  std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p = seeded(1.0f);
  p.min_p = 0.25f;
  Sampler s(p);
  auto counts = histogram(s, logits, 5000);
  EXPECT_EQ(counts.count(3), 0u);
  EXPECT_GT(counts[2], 0);
  EXPECT_GT(counts[0], counts[1]);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p = seeded(0.0f);
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> logits{3.0f, 2.0f, -1.0f, -1.5f};
  std::vector<std::int32_t> history{0, 2, 0};
  EXPECT_EQ(s.sample(logits, history), 1);  // 3 / 2 = 1.5 < 2
  EXPECT_FLOAT_EQ(logits[0], 1.5f);         // once per distinct token, however often seen
  EXPECT_FLOAT_EQ(logits[1], 2.0f);
  EXPECT_FLOAT_EQ(logits[2], -2.0f);
  EXPECT_FLOAT_EQ(logits[3], -1.5f);
}

TEST(Sampler, RepetitionPenaltyCountsThePrompt) {
  SamplingParams p = seeded(0.0f);
  p.repetition_penalty = 1.5f;
  Sampler s(p);
  std::vector<float> logits{3.0f, 2.5f};
  std::vector<std::int32_t> history{0};
  EXPECT_EQ(s.sample(logits, history, /*prompt_len=*/1), 1);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesSubtractOverGeneratedTokens) {
  SamplingParams p = seeded(0.0f);
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  std::vector<float> logits{1.0f, 1.0f, 1.0f, 1.0f};
  // Token 3 is only in the prompt: untouched. Token 1 generated three times, token 2 once.
  std::vector<std::int32_t> history{3, 1, 2, 1, 1};
  EXPECT_EQ(s.sample(logits, history, /*prompt_len=*/1), 0);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f - 0.5f - 0.75f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[3], 1.0f);
}

TEST(Sampler, NegativePresencePenaltyFavoursRepeats) {
  SamplingParams p = seeded(0.0f);
  p.presence_penalty = -1.0f;
  Sampler s(p);
  std::vector<float> logits{2.0f, 1.5f};
  std::vector<std::int32_t> history{1};
  EXPECT_EQ(s.sample(logits, history), 1);
}

TEST(Sampler, ValidateNamesTheBadField) {
  auto with = [](auto set) {
    SamplingParams p;
    set(p);
    return error_kind_of(p);
  };
  EXPECT_EQ(error_kind_of(SamplingParams{}), "");
  EXPECT_NE(with([](SamplingParams& p) { p.temperature = -0.1f; }).find("invalid_argument:temperature"), std::string::npos);
  EXPECT_NE(with([](SamplingParams& p) { p.temperature = NAN; }).find("temperature"), std::string::npos);
  EXPECT_NE(with([](SamplingParams& p) { p.top_p = 0.0f; }).find("top_p"), std::string::npos);
  EXPECT_NE(with([](SamplingParams& p) { p.top_p = 1.5f; }).find("top_p"), std::string::npos);
  EXPECT_NE(with([](SamplingParams& p) { p.top_k = -1; }).find("top_k"), std::string::npos);
  EXPECT_NE(with([](SamplingParams& p) { p.min_p = 2.0f; }).find("min_p"), std::string::npos);
  EXPECT_NE(with([](SamplingParams& p) { p.repetition_penalty = 0.0f; }).find("repetition_penalty"), std::string::npos);
  EXPECT_NE(with([](SamplingParams& p) { p.presence_penalty = 3.0f; }).find("presence_penalty"), std::string::npos);
  EXPECT_NE(with([](SamplingParams& p) { p.frequency_penalty = -2.5f; }).find("frequency_penalty"), std::string::npos);
}

TEST(Sampler, ConstructorRejectsInvalidParams) {
  SamplingParams p;
  p.top_k = -3;
  EXPECT_THROW(Sampler{p}, Error);
}

TEST(Sampler, RejectsHistoryOutsideTheVocabulary) {
  Sampler s(seeded(0.0f));
  std::vector<float> logits{1.0f, 2.0f};
  std::vector<std::int32_t> history{5};
  EXPECT_THROW(s.sample(logits, history), Error);
  std::vector<float> none;
  EXPECT_THROW(s.sample(none, {}), Error);
}

}  // namespace
}  // namespace neuron::model
