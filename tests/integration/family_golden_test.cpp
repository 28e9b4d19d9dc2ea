// Every family beyond Qwen3 dense against Hugging Face transformers' float32
// reference (tests/data/families/<name>: tiny random checkpoints saved by
// transformers 5.17 from their own classes, with greedy tokens, top-5 logits
// per position and last-position logits; ../shared/fixtures/families/README.md):
// the CPU runner in f32 must give every greedy token and the logits to 1e-4,
// from the checkpoint and from the bf16 GGUF llama.cpp's converter would
// write for it (support/gguf_writer.hpp; bf16 holds the bf16 weights exactly).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "io/gguf.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/gguf_config.hpp"
#include "model/shard.hpp"
#include "support/gguf_writer.hpp"
#include "support/temp_dir.hpp"

namespace neuron {
namespace {

std::string family_dir(const std::string& name) { return std::string(NEURON_TEST_DATA) + "/families/" + name; }

struct Prompt {
  std::string name;
  std::vector<std::int32_t> ids, greedy;
  struct Top5 {
    std::int64_t pos;
    std::vector<std::int32_t> ids;
    std::vector<float> logits;
  };
  std::vector<Top5> top5;
};

std::vector<Prompt> load_prompts(const std::string& dir) {
  std::ifstream in(dir + "/golden.json");
  const auto j = nlohmann::json::parse(in);
  std::vector<Prompt> out;
  for (const auto& p : j.at("prompts")) {
    Prompt g;
    g.name = p.at("name").get<std::string>();
    g.ids = p.at("prompt_ids").get<std::vector<std::int32_t>>();
    g.greedy = p.at("greedy_ids").get<std::vector<std::int32_t>>();
    for (const auto& t : p.at("top5"))
      g.top5.push_back({t.at("pos").get<std::int64_t>(), t.at("ids").get<std::vector<std::int32_t>>(),
                        t.at("logits").get<std::vector<float>>()});
    out.push_back(std::move(g));
  }
  return out;
}

std::int32_t argmax(std::span<const float> v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// (family fixture, "safetensors" or "gguf")
class FamilyGolden : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    dir_ = family_dir(std::get<0>(GetParam()));
    io::Checkpoint ckpt;
    if (std::get<1>(GetParam()) == "gguf") {
      test_support::TempDir tmp("neuron-family-gguf");
      const auto path = tmp / "model.gguf";
      test_support::gguf_from_checkpoint(dir_, quant::GgmlType::bf16).write(path);
      configs_ = model::configs_from_gguf(io::GgufFile(path));
      ckpt = io::Checkpoint::open_files({path});  // mapped: the file may go once the runner holds its weights
    } else {
      configs_ = model::load_model_configs(dir_);
      ckpt = io::Checkpoint::open_dir(dir_);
    }
    const auto& cfg = configs_.model;
    runner_ = backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{}, nullptr,
                                   {.max_context = 1024});
    prompts_ = load_prompts(dir_);
  }
  std::size_t vocab() const { return static_cast<std::size_t>(configs_.model.vocab_size); }

  std::string dir_;
  model::ModelConfigs configs_;
  std::unique_ptr<backend::ModelRunner> runner_;
  std::vector<Prompt> prompts_;
};

TEST_P(FamilyGolden, GreedyTokensMatchExactly) {
  ASSERT_EQ(prompts_.size(), 4u);
  for (const auto& g : prompts_) {
    backend::SingleSequence seq(*runner_);
    std::vector<float> logits(vocab());
    seq.forward(g.ids, 0, logits);
    std::vector<std::int32_t> got;
    auto pos = static_cast<std::int32_t>(g.ids.size());
    while (got.size() < g.greedy.size()) {
      got.push_back(argmax(logits));
      const std::array<std::int32_t, 1> step{got.back()};
      seq.forward(step, pos++, logits);
    }
    EXPECT_EQ(got, g.greedy) << std::get<0>(GetParam()) << " prompt " << g.name;
  }
}

TEST_P(FamilyGolden, TopFiveAtEveryRecordedPosition) {
  for (const auto& g : prompts_) {
    backend::SingleSequence seq(*runner_);
    const auto n = static_cast<std::int64_t>(g.ids.size());
    ASSERT_FALSE(g.top5.empty());
    // What precedes the first recorded position without logits, then every position from there in one call.
    const std::int64_t first = g.top5.front().pos;
    if (first > 0) seq.forward(std::span(g.ids).first(static_cast<std::size_t>(first)), 0, {});
    std::vector<float> logits(static_cast<std::size_t>(n - first) * vocab());
    seq.forward(std::span(g.ids).subspan(static_cast<std::size_t>(first)), static_cast<std::int32_t>(first), logits);
    for (const auto& t : g.top5) {
      ASSERT_TRUE(t.pos >= first && t.pos < n);
      std::span<const float> row(logits.data() + static_cast<std::size_t>(t.pos - first) * vocab(), vocab());
      std::vector<std::int32_t> ids(row.size());
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(ids.begin(), ids.begin() + 5, ids.end(), [&](auto a, auto b) { return row[a] > row[b]; });
      ids.resize(5);
      EXPECT_EQ(ids, t.ids) << std::get<0>(GetParam()) << " " << g.name << " position " << t.pos;
      for (std::size_t k = 0; k < 5; ++k)
        EXPECT_NEAR(row[static_cast<std::size_t>(t.ids[k])], t.logits[k], 1e-4)
            << std::get<0>(GetParam()) << " " << g.name << " position " << t.pos << " rank " << k;
    }
  }
}

TEST_P(FamilyGolden, LastPositionLogitsWithinRelativeTolerance) {
  io::SafetensorsFile ref(dir_ + "/golden.safetensors");
  int checked = 0;
  for (const auto& g : prompts_) {
    const io::TensorView* t = ref.find(g.name + ".last_logits");
    if (!t) continue;  // recorded for chat and fox
    const std::vector<float> expected = t->to_f32();
    ASSERT_EQ(expected.size(), vocab());
    backend::SingleSequence seq(*runner_);
    std::vector<float> logits(vocab());
    seq.forward(g.ids, 0, logits);
    double worst = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
      worst = std::max(worst, std::abs(double(logits[i]) - expected[i]) / std::max(1.0, std::abs(double(expected[i]))));
    EXPECT_LE(worst, 1e-4) << std::get<0>(GetParam()) << " " << g.name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGolden,
                         ::testing::Combine(::testing::Values("llama-a", "qwen3_moe-a"),
                                            ::testing::Values("safetensors", "gguf")),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace neuron
