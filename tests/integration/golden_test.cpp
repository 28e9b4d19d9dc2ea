// The CPU runner against Hugging Face transformers' float32 reference
// (tests/data/qwen3-tiny-a, computed over the bundled model's bf16 weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"
#include "support/argmax.hpp"

namespace neuron {
namespace {

const std::string kModelDir = std::string(NEURON_REPO_ROOT) + "/models/qwen3-tiny-a";
const std::string kGoldenDir = std::string(NEURON_TEST_DATA) + "/qwen3-tiny-a";

struct GoldenPrompt {
  std::string name;
  std::vector<std::int32_t> ids, greedy;
  std::vector<std::vector<std::int32_t>> top5_ids;  // per recorded position, best first
  std::vector<std::vector<float>> top5_logits;
};

std::vector<GoldenPrompt> load_golden() {
  std::ifstream in(kGoldenDir + "/golden.json");
  const auto j = nlohmann::json::parse(in);
  std::vector<GoldenPrompt> out;
  for (const auto& p : j.at("prompts")) {
    GoldenPrompt g;
    g.name = p.at("name").get<std::string>();
    g.ids = p.at("ids").get<std::vector<std::int32_t>>();
    g.greedy = p.at("greedy").get<std::vector<std::int32_t>>();
    g.top5_ids = p.at("top5_ids").get<std::vector<std::vector<std::int32_t>>>();
    g.top5_logits = p.at("top5_logits").get<std::vector<std::vector<float>>>();
    out.push_back(std::move(g));
  }
  return out;
}

using test_support::argmax;

class Golden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    configs_ = std::make_unique<model::ModelConfigs>(model::load_model_configs(kModelDir));
    const auto ckpt = io::Checkpoint::open_dir(kModelDir);
    const auto& cfg = configs_->model;
    runner_ = backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{}, nullptr, {});
    golden_ = load_golden();
  }
  static void TearDownTestSuite() {
    runner_.reset();
    configs_.reset();
  }
  std::int64_t vocab() const { return configs_->model.vocab_size; }

  static inline std::unique_ptr<model::ModelConfigs> configs_;
  static inline std::unique_ptr<backend::ModelRunner> runner_;
  static inline std::vector<GoldenPrompt> golden_;
};

TEST_F(Golden, HasTheFourPrompts) { ASSERT_EQ(golden_.size(), 4u); }

TEST_F(Golden, GreedyTokensMatchExactly) {
  for (const auto& g : golden_) {
    backend::SingleSequence seq(*runner_);
    std::vector<float> logits(static_cast<std::size_t>(vocab()));
    seq.forward(g.ids, 0, logits);
    std::vector<std::int32_t> got;
    auto pos = static_cast<std::int32_t>(g.ids.size());
    while (got.size() < g.greedy.size()) {
      const std::int32_t next = argmax(logits);
      got.push_back(next);
      const std::array<std::int32_t, 1> step{next};
      seq.forward(step, pos++, logits);
    }
    EXPECT_EQ(got, g.greedy) << "prompt " << g.name;
  }
}

TEST_F(Golden, LastPositionLogitsWithinRelativeTolerance) {
  io::SafetensorsFile ref(kGoldenDir + "/golden.safetensors");
  for (const auto& g : golden_) {
    const io::TensorView* t = ref.find(g.name + ".last_logits");
    ASSERT_NE(t, nullptr) << g.name;
    const std::vector<float> expected = t->to_f32();
    ASSERT_EQ(static_cast<std::int64_t>(expected.size()), vocab());
    backend::SingleSequence seq(*runner_);
    std::vector<float> logits(static_cast<std::size_t>(vocab()));
    seq.forward(g.ids, 0, logits);
    // Relative to the logit's magnitude, floored at 1 so that logits near zero
    // are held to the same absolute 1e-4 as logits near one.
    double worst = 0;
    std::size_t worst_at = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const double err = std::abs(double(logits[i]) - expected[i]) / std::max(1.0, std::abs(double(expected[i])));
      if (err > worst) worst = err, worst_at = i;
    }
    EXPECT_LE(worst, 1e-4) << g.name << ": worst at id " << worst_at << " got " << logits[worst_at] << " want "
                           << expected[worst_at];
    std::printf("[ golden ] %-6s max relative logit error %.3g\n", g.name.c_str(), worst);
  }
}

TEST_F(Golden, TopFiveAtEveryRecordedPosition) {
  for (const auto& g : golden_) {
    backend::SingleSequence seq(*runner_);
    const auto n = static_cast<std::int64_t>(g.ids.size());
    const auto recorded = static_cast<std::int64_t>(g.top5_ids.size());
    // Feed what precedes the recorded positions without logits, then take every
    // recorded position's logits in one call (this also exercises resuming).
    const std::int64_t first = n - recorded;
    if (first > 0) seq.forward(std::span(g.ids).first(static_cast<std::size_t>(first)), 0, {});
    std::vector<float> logits(static_cast<std::size_t>(recorded * vocab()));
    seq.forward(std::span(g.ids).subspan(static_cast<std::size_t>(first)), static_cast<std::int32_t>(first), logits);
    for (std::int64_t p = 0; p < recorded; ++p) {
      std::span<const float> row(logits.data() + p * vocab(), static_cast<std::size_t>(vocab()));
      std::vector<std::int32_t> ids(row.size());
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(ids.begin(), ids.begin() + 5, ids.end(), [&](auto a, auto b) { return row[a] > row[b]; });
      ids.resize(5);
      EXPECT_EQ(ids, g.top5_ids[static_cast<std::size_t>(p)]) << g.name << " position " << first + p;
      for (int k = 0; k < 5; ++k)
        EXPECT_NEAR(row[static_cast<std::size_t>(g.top5_ids[p][k])], g.top5_logits[p][k], 1e-4)
            << g.name << " position " << first + p << " rank " << k;
    }
  }
}

// What the "done when" runs: the real binary, greedy, --json.
TEST_F(Golden, GenerateCommandPrintsTheGreedyTokens) {
  const GoldenPrompt& g = golden_.at(0);
  std::string ids;
  for (auto id : g.ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const std::string cmd = std::string(NEURON_BINARY) + " generate --model " + kModelDir + " --prompt-ids " + ids +
                          " --max-tokens 32 --temperature 0 --ignore-eos --json";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out, last;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  ASSERT_EQ(pclose(pipe), 0) << out;
  std::size_t end = out.find_last_not_of('\n');
  ASSERT_NE(end, std::string::npos);
  last = out.substr(out.rfind('\n', end) == std::string::npos ? 0 : out.rfind('\n', end) + 1);
  const auto j = nlohmann::json::parse(last);
  EXPECT_EQ(j.at("prompt_tokens").get<std::vector<std::int32_t>>(), g.ids);
  EXPECT_EQ(j.at("tokens").get<std::vector<std::int32_t>>(), g.greedy);
  EXPECT_EQ(j.at("finish_reason"), "length");
  EXPECT_GT(j.at("timings").at("decode_tok_s").get<double>(), 0.0);
}

}  // namespace
}  // namespace neuron
