// The seam's hidden-state output (backend/batch.hpp: hidden_last,
// hidden_all): a runner returns the final-norm rows instead of logits, for
// any mix of sequences in one step, equal to what each sequence gets alone;
// check_batch holds the hidden buffer to the batch's rows.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <vector>

#include "backend/batch.hpp"
#include "backend/model_runner.hpp"
#include "dist/communicator.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/embedding.hpp"
#include "model/shard.hpp"
#include "util/error.hpp"

namespace neuron {
namespace {

using backend::Batch;
using backend::LogitsWanted;

const std::filesystem::path kTiny = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";

std::unique_ptr<backend::ModelRunner> tiny_runner(model::ModelConfig& cfg) {
  cfg = model::load_model_configs(kTiny).model;
  const auto ckpt = io::Checkpoint::open_dir(kTiny);
  return backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{},
                              std::make_shared<dist::LocalCommunicator>(), {.max_context = 256, .kv_blocks = 32});
}

std::vector<std::int32_t> range(std::int32_t first, std::int32_t n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(HiddenRows, MixedWithLogitsInOneStepEqualEachSequenceAlone) {
  model::ModelConfig cfg;
  auto runner = tiny_runner(cfg);
  const auto hidden = static_cast<std::size_t>(cfg.hidden_size), vocab = static_cast<std::size_t>(cfg.vocab_size);
  const std::vector<std::int32_t> a = {785, 3974, 13876, 38835, 1000, 2000, 3000}, b = {9707, 11, 1879}, c = {40, 1079, 2238, 315, 42};

  // Alone: a's every row, b's last row, c's logits.
  std::vector<float> a_rows(a.size() * hidden), b_row(hidden), c_logits(vocab);
  Batch one;
  one.add(a, 0, range(0, 1), LogitsWanted::hidden_all);
  runner->step(one, {}, {}, a_rows);
  one.clear();
  one.add(b, 0, range(1, 1), LogitsWanted::hidden_last);
  runner->step(one, {}, {}, b_row);
  one.clear();
  one.add(c, 0, range(2, 1), LogitsWanted::last);
  runner->step(one, c_logits);

  // Together, in other blocks.
  Batch mixed;
  mixed.add(c, 0, range(10, 1), LogitsWanted::last);
  mixed.add(a, 0, range(11, 1), LogitsWanted::hidden_all);
  mixed.add(b, 0, range(12, 1), LogitsWanted::hidden_last);
  EXPECT_EQ(mixed.hidden_rows(), static_cast<std::int64_t>(a.size() + 1));
  EXPECT_EQ(mixed.logit_rows(), 1);
  std::vector<float> rows((a.size() + 1) * hidden), logits(vocab);
  runner->step(mixed, logits, {}, rows);
  for (std::size_t i = 0; i < a_rows.size(); ++i) EXPECT_NEAR(rows[i], a_rows[i], 1e-5) << "a row " << i / hidden;
  for (std::size_t i = 0; i < hidden; ++i) EXPECT_NEAR(rows[a_rows.size() + i], b_row[i], 1e-5);
  for (std::size_t i = 0; i < vocab; ++i) ASSERT_NEAR(logits[i], c_logits[i], 1e-4);

  // A hidden_last row is the hidden_all's last row, and a greedy pick beside hidden rows still comes back.
  Batch last;
  last.add(a, 0, range(20, 1), LogitsWanted::hidden_last);
  last.add(c, 0, range(21, 1), LogitsWanted::argmax);
  std::vector<float> a_last(hidden);
  std::int32_t pick = -1;
  runner->step(last, {}, std::span<std::int32_t>(&pick, 1), a_last);
  for (std::size_t i = 0; i < hidden; ++i) EXPECT_NEAR(a_last[i], a_rows[(a.size() - 1) * hidden + i], 1e-5);
  EXPECT_EQ(pick, static_cast<std::int32_t>(std::max_element(c_logits.begin(), c_logits.end()) - c_logits.begin()));
}

TEST(HiddenRows, CheckBatchHoldsTheHiddenBufferToTheBatch) {
  model::ModelConfig cfg;
  auto runner = tiny_runner(cfg);
  Batch b;
  b.add(std::vector<std::int32_t>{1, 2, 3}, 0, range(0, 1), LogitsWanted::hidden_all);
  std::vector<float> short_buffer(2 * static_cast<std::size_t>(cfg.hidden_size));
  try {
    runner->step(b, {}, {}, short_buffer);
    FAIL() << "a hidden buffer of 2 rows passed for 3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden buffer"), std::string::npos) << e.what();
  }
  // A worker (every output empty) computes no head at all.
  EXPECT_NO_THROW(runner->step(b, {}));
}

TEST(Embedding, TruncationRenormalizes) {
  const std::vector<float> v = {3, 4, 12};
  const auto all = model::finish_embedding(v, 0, true);
  EXPECT_NEAR(all[0], 3.0 / 13, 1e-7);
  EXPECT_NEAR(all[2], 12.0 / 13, 1e-7);
  const auto two = model::finish_embedding(v, 2, true);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_NEAR(two[0], 0.6, 1e-7);
  EXPECT_NEAR(two[1], 0.8, 1e-7);
  EXPECT_EQ(model::finish_embedding(v, 2, false), (std::vector<float>{3, 4}));
  EXPECT_EQ(model::finish_embedding(std::vector<float>{0, 0}, 0, true), (std::vector<float>{0, 0}));
}

}  // namespace
}  // namespace neuron
