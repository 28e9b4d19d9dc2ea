// Prefilling a prompt at once, in chunks, or token by token must give the
// same logits: the batched path (tiled sgemm, blocked attention) and the
// decode path (GEMV) compute the same function. Run on generated checkpoints
// of shapes the bundled model lacks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "model/shard.hpp"

namespace neuron {
namespace {

namespace fs = std::filesystem;

struct Case {
  const char* name;
  std::int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim;
  bool tied;
  int shards;
  DType dtype;
};

// head_dim differs from hidden / heads in every case.
const Case kCases[] = {
    {"untied_sharded_gqa", 300, 48, 80, 3, 6, 2, 20, false, 3, DType::bf16},
    {"tied_mha_f32", 257, 40, 72, 4, 4, 4, 12, true, 1, DType::f32},
};

model::ModelConfig config_of(const Case& c) {
  model::ModelConfig cfg = model::preset_config("qwen3-0.6b");
  cfg.vocab_size = c.vocab;
  cfg.hidden_size = c.hidden;
  cfg.intermediate_size = c.intermediate;
  cfg.num_hidden_layers = c.layers;
  cfg.num_attention_heads = c.heads;
  cfg.num_key_value_heads = c.kv_heads;
  cfg.head_dim = c.head_dim;
  cfg.tie_word_embeddings = c.tied;
  cfg.eos_token_ids = {1};
  cfg.bos_token_id = 0;
  return cfg;
}

class PrefillConsistency : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    dir_ = fs::temp_directory_path() / ("neuron-prefill-" + std::string(c.name) + "-" + std::to_string(::getpid()));
    model::RandomCheckpointOptions opts;
    opts.seed = 11;
    opts.shards = c.shards;
    opts.dtype = c.dtype;
    model::write_random_checkpoint(dir_, config_of(c), opts);
    // Through the same parsing a user's model goes through.
    cfg_ = model::load_model_configs(dir_).model;
    const auto ckpt = io::Checkpoint::open_dir(dir_);
    if (c.shards > 1) {
      ASSERT_GT(ckpt.files().size(), 1u);
    }
    runner_ = backend::make_runner(cfg_, &ckpt, model::ShardPlan::make(cfg_, 0, 1), backend::Device{}, nullptr, {});
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::vector<std::int32_t> prompt(std::size_t n) const {
    std::mt19937 rng(static_cast<std::uint32_t>(n));
    std::vector<std::int32_t> ids(n);
    for (auto& id : ids) id = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(cfg_.vocab_size));
    return ids;
  }

  // Logits of every position, feeding `ids` in chunks of `chunk` tokens.
  std::vector<float> run_chunked(const std::vector<std::int32_t>& ids, std::size_t chunk) {
    const auto vocab = static_cast<std::size_t>(cfg_.vocab_size);
    std::vector<float> all(ids.size() * vocab);
    backend::SingleSequence seq(*runner_);
    for (std::size_t at = 0; at < ids.size(); at += chunk) {
      const std::size_t n = std::min(chunk, ids.size() - at);
      seq.forward(std::span(ids).subspan(at, n), static_cast<std::int32_t>(at),
                  std::span(all).subspan(at * vocab, n * vocab));
    }
    return all;
  }

  static void expect_close(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
    EXPECT_LE(worst, 1e-4) << what;
  }

  fs::path dir_;
  model::ModelConfig cfg_;
  std::unique_ptr<backend::ModelRunner> runner_;
};

TEST_P(PrefillConsistency, WholePromptEqualsTokenByToken) {
  // Around the attention's 64-query block and the one-token (GEMV) path.
  for (std::size_t n : {1u, 2u, 7u, 63u, 64u, 65u, 130u}) {
    const auto ids = prompt(n);
    const auto whole = run_chunked(ids, n);
    const auto stepped = run_chunked(ids, 1);
    expect_close(whole, stepped, "prompt length " + std::to_string(n));
  }
}

TEST_P(PrefillConsistency, ChunkedPrefillEqualsWholePrompt) {
  const auto ids = prompt(150);
  const auto whole = run_chunked(ids, ids.size());
  for (std::size_t chunk : {17u, 64u, 100u}) expect_close(run_chunked(ids, chunk), whole, "chunk " + std::to_string(chunk));
}

TEST_P(PrefillConsistency, LastPositionLogitsEqualTheLastRow) {
  const auto ids = prompt(33);
  const auto vocab = static_cast<std::size_t>(cfg_.vocab_size);
  const auto all = run_chunked(ids, ids.size());
  std::vector<float> last(vocab);
  backend::SingleSequence(*runner_).forward(ids, 0, last);
  expect_close(last, std::vector<float>(all.end() - static_cast<std::ptrdiff_t>(vocab), all.end()), "last row");
}

TEST_P(PrefillConsistency, ResumingFromAPrefixReusesTheCache) {
  // A caller may rewind to any position it has fed and continue from there.
  const auto a = prompt(40), b = prompt(41);
  const auto vocab = static_cast<std::size_t>(cfg_.vocab_size);
  std::vector<std::int32_t> mixed(a.begin(), a.begin() + 20);
  mixed.insert(mixed.end(), b.begin() + 20, b.begin() + 40);
  const auto expected = run_chunked(mixed, mixed.size());
  backend::SingleSequence seq(*runner_);
  std::vector<float> scratch(vocab), tail(20 * vocab);
  seq.forward(a, 0, scratch);
  seq.forward(std::span(mixed).subspan(20), 20, tail);
  expect_close(tail, std::vector<float>(expected.begin() + 20 * static_cast<std::ptrdiff_t>(vocab), expected.end()),
               "resumed at 20");
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillConsistency, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace neuron
