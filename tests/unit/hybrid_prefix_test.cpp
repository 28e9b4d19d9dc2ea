// Prefix reuse for the Gated DeltaNet hybrids (tests/data/families/qwen3_5-a
// and qwen3_next-a) through the Batcher on the CPU runner: a conversation's
// second turn resumes from the recurrent-state snapshot the first turn took
// and must give the same greedy tokens and logits (1e-5) as the same prompt
// with no cache, also when a tiny snapshot budget evicts, when the restored
// sequence is preempted, and a cancelled one leaves no snapshot behind; and
// under tensor parallelism (two CPU ranks), where every save and restore is
// a round over the ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/model_runner.hpp"
#include "dist/communicator.hpp"
#include "engine/batcher.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"
#include "tp/tp_runner.hpp"
#include "support/model_paths.hpp"

namespace neuron::engine {
namespace {

constexpr std::int32_t kBlock = 4;

using test_support::family_dir;

// Every generated token, its logprobs (the raw logits' log-softmax: top 5 and the pick), how it ended.
struct Recorder final : SequenceObserver {
  Sequence* seq = nullptr;
  std::vector<std::int32_t> tokens;
  std::vector<model::TokenLogprobs> logprobs;
  std::optional<FinishReason> reason;
  std::size_t cancel_after = 0;  // > 0: end "cancelled" after this many tokens
  std::optional<FinishReason> on_token(std::int32_t token) override {
    tokens.push_back(token);
    if (seq->sampled_logprobs) logprobs.push_back(*seq->sampled_logprobs);
    if (cancel_after > 0 && tokens.size() >= cancel_after) return FinishReason::cancelled;
    return std::nullopt;
  }
  void on_finish(FinishReason r) override { reason = r; }
};

// One sequence and its observer.
struct Tracked {
  Recorder rec;
  Sequence seq;
  Tracked(std::uint64_t id, SequenceParams p) : seq(id, std::move(p), rec) {
    rec.seq = &seq;
    seq.tokens = seq.params().prompt;
  }
};

SequenceParams greedy(std::vector<std::int32_t> prompt, std::int32_t max_tokens) {
  SequenceParams p{.prompt = std::move(prompt), .max_tokens = max_tokens, .ignore_eos = true, .top_logprobs = 5};
  p.sampling.temperature = 0.0f;
  return p;
}

// The last prompt token's logits of every vocabulary id (a prefill-only scored sequence).
SequenceParams scored(std::vector<std::int32_t> prompt, std::int64_t vocab) {
  std::vector<std::int32_t> all(static_cast<std::size_t>(vocab));
  std::iota(all.begin(), all.end(), 0);
  return SequenceParams{.prompt = std::move(prompt), .max_tokens = 1, .output = PrefillOutput::logits,
                        .output_ids = std::move(all)};
}

void drive(Batcher& b) {
  for (int i = 0; i < 20000 && !b.idle(); ++i) b.step();
  ASSERT_TRUE(b.idle());
}

void run_alone(Batcher& b, Tracked& r) {
  b.add(r.seq);
  drive(b);
}

double worst_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) w = std::max(w, std::abs(double(a[i]) - b[i]));
  return w;
}

// Same tokens, and every token's logprobs (pick and top 5) within 1e-5.
void expect_same_generation(const Recorder& got, const Recorder& cold, const std::string& what) {
  EXPECT_EQ(got.tokens, cold.tokens) << what;
  ASSERT_EQ(got.logprobs.size(), cold.logprobs.size()) << what;
  for (std::size_t i = 0; i < got.logprobs.size(); ++i) {
    EXPECT_NEAR(got.logprobs[i].logprob, cold.logprobs[i].logprob, 1e-5) << what << " token " << i;
    ASSERT_EQ(got.logprobs[i].top.size(), cold.logprobs[i].top.size());
    for (std::size_t k = 0; k < got.logprobs[i].top.size(); ++k) {
      EXPECT_EQ(got.logprobs[i].top[k].token, cold.logprobs[i].top[k].token) << what << " token " << i;
      EXPECT_NEAR(got.logprobs[i].top[k].logprob, cold.logprobs[i].top[k].logprob, 1e-5) << what << " token " << i;
    }
  }
}

class HybridPrefix : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    configs_ = model::load_model_configs(family_dir(GetParam()));
    std::ifstream in(family_dir(GetParam()) / "golden.json");
    const auto golden = nlohmann::json::parse(in);  // kept: a range-for over a temporary's member would dangle
    for (const auto& p : golden.at("prompts"))
      prompts_.push_back(p.at("prompt_ids").get<std::vector<std::int32_t>>());
    ASSERT_EQ(prompts_.size(), 4u);  // chat (15), fox (4), single (1), long (841)
  }
  std::unique_ptr<backend::ModelRunner> runner(std::int32_t kv_blocks, std::optional<std::int32_t> snapshots,
                                               std::int32_t slots = 4) const {
    const auto ckpt = io::Checkpoint::open_dir(family_dir(GetParam()));
    const auto& cfg = configs_.model;
    return backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{},
                                std::make_shared<dist::LocalCommunicator>(),
                                {.max_context = 1024, .kv_block_size = kBlock, .kv_blocks = kv_blocks,
                                 .state_slots = slots, .state_snapshots = snapshots});
  }
  std::int64_t vocab() const { return configs_.model.vocab_size; }
  // The cold reference: a fresh runner, no prefix caching.
  Recorder cold(const SequenceParams& p) const {
    auto r = runner(256, 0);
    Batcher b(*r, {.scheduler = {.max_num_seqs = 4, .max_batch_tokens = 64}});
    EXPECT_FALSE(b.prefix_caching());
    Tracked one(1, p);
    run_alone(b, one);
    EXPECT_EQ(one.seq.cached_prompt_tokens, 0);
    return one.rec;
  }
  std::vector<float> cold_logits(const std::vector<std::int32_t>& prompt) const {
    auto r = runner(256, 0);
    Batcher b(*r, {.scheduler = {.max_num_seqs = 4, .max_batch_tokens = 64}});
    Tracked one(1, scored(prompt, vocab()));
    run_alone(b, one);
    return one.seq.output;
  }
  // A second turn: the first turn's prompt and answer, then `more`.
  static std::vector<std::int32_t> next_turn(const std::vector<std::int32_t>& prompt, const Recorder& answer,
                                             const std::vector<std::int32_t>& more) {
    std::vector<std::int32_t> p(prompt);
    p.insert(p.end(), answer.tokens.begin(), answer.tokens.end());
    p.insert(p.end(), more.begin(), more.end());
    return p;
  }

  model::ModelConfigs configs_;
  std::vector<std::vector<std::int32_t>> prompts_;
};

TEST_P(HybridPrefix, SecondTurnResumesFromTheFirstTurnsSnapshotAndEqualsTheColdRun) {
  const auto& chat = prompts_[0];
  auto r = runner(256, std::nullopt);
  EXPECT_EQ(r->kv_pool().state_snapshots, 4 * backend::kDefaultSnapshotsPerSlot);
  Batcher b(*r, {.scheduler = {.max_num_seqs = 4, .max_batch_tokens = 64}});
  ASSERT_TRUE(b.prefix_caching());
  Tracked turn1(1, greedy(chat, 12));
  run_alone(b, turn1);
  expect_same_generation(turn1.rec, cold(greedy(chat, 12)), "turn 1");
  // Turn 1 computed 15 + 11 positions: snapshots at 12 (its prompt's last full block) and 24 (decode).
  EXPECT_EQ(b.scheduler().snapshots().used(), 2);

  // Turn 2 (15 + 12 + 4 = 31 tokens) as a scored prompt: its last-token logits equal the cold ones.
  const auto prompt2 = next_turn(chat, turn1.rec, prompts_[1]);
  ASSERT_EQ(prompt2.size(), 31u);
  Tracked score(2, scored(prompt2, vocab()));
  run_alone(b, score);
  EXPECT_EQ(score.seq.cached_prompt_tokens, 24) << "resumed at turn 1's last snapshot";
  EXPECT_LE(worst_diff(score.seq.output, cold_logits(prompt2)), 1e-5);

  // Turn 2 generated: resumes at 28 (the scored prompt's last full block), same tokens and logprobs as cold.
  Tracked turn2(3, greedy(prompt2, 12));
  run_alone(b, turn2);
  EXPECT_EQ(turn2.seq.cached_prompt_tokens, 28);
  expect_same_generation(turn2.rec, cold(greedy(prompt2, 12)), "turn 2");
  EXPECT_EQ(b.blocks().used, 0);
}

TEST_P(HybridPrefix, ATinySnapshotBudgetEvictsAndStaysExact) {
  const auto &chat = prompts_[0], &fox = prompts_[1];
  auto r = runner(256, 1);
  Batcher b(*r, {.scheduler = {.max_num_seqs = 4, .max_batch_tokens = 64}});
  Tracked a1(1, greedy(chat, 10)), b1(2, greedy(fox, 10));
  run_alone(b, a1);
  run_alone(b, b1);  // takes the one snapshot from a's conversation
  EXPECT_EQ(b.scheduler().snapshots().used(), 1);
  const std::vector<std::int32_t> more{11, 12, 13};
  Tracked a2(3, greedy(next_turn(chat, a1.rec, more), 8));
  run_alone(b, a2);
  EXPECT_EQ(a2.seq.cached_prompt_tokens, 0) << "its KV blocks are cached but its snapshot is gone";
  expect_same_generation(a2.rec, cold(a2.seq.params()), "a, turn 2");
  // a2 replaced that with its own (28, then 32 while decoding): its next turn resumes at 32.
  Tracked a3(4, greedy(next_turn(a2.seq.params().prompt, a2.rec, more), 8));
  run_alone(b, a3);
  EXPECT_EQ(a3.seq.cached_prompt_tokens, 32);
  expect_same_generation(a3.rec, cold(a3.seq.params()), "a, turn 3");
  EXPECT_EQ(b.scheduler().snapshots().used(), 1);
}

// A restored sequence preempted for KV room (and recomputed later) still gives the cold tokens.
TEST_P(HybridPrefix, APreemptedRestoredSequenceStaysExact) {
  const auto &chat = prompts_[0], &fox = prompts_[1];
  // 44 blocks (176 positions): the long generation holds 4 + 150 positions (39 blocks) at its end; the restored
  // turn 2 (up to 41 positions, 11 blocks), admitted when it holds 31, cannot run to its end beside it.
  auto r = runner(44, std::nullopt);
  Batcher b(*r, {.scheduler = {.max_num_seqs = 4, .max_batch_tokens = 64}});
  Tracked turn1(1, greedy(chat, 12));
  run_alone(b, turn1);
  Tracked longgen(2, greedy(fox, 151));
  b.add(longgen.seq);
  for (int i = 0; i < 121; ++i) b.step();  // its prompt and 120 decodes: 124 positions
  ASSERT_EQ(longgen.seq.computed, 124);
  const auto prompt2 = next_turn(chat, turn1.rec, {21, 22, 23});
  Tracked turn2(3, greedy(prompt2, 12));
  b.add(turn2.seq);
  drive(b);
  EXPECT_EQ(turn2.seq.cached_prompt_tokens, 24) << "admitted with turn 1's snapshot";
  EXPECT_GT(turn2.seq.preemptions, 0) << "the restored sequence was never preempted: the test misses its point";
  expect_same_generation(turn2.rec, cold(greedy(prompt2, 12)), "preempted turn 2");
  expect_same_generation(longgen.rec, cold(greedy(fox, 151)), "the long generation");
  EXPECT_EQ(b.blocks().used, 0);
}

// Cancelled mid-decode, a restored sequence holds nothing afterwards: once another prompt needs every KV
// block, the only snapshot left is that prompt's own.
TEST_P(HybridPrefix, ACancelledSequenceLeavesNoSnapshotBehind) {
  const auto& chat = prompts_[0];
  auto r = runner(64, std::nullopt);
  Batcher b(*r, {.scheduler = {.max_num_seqs = 4, .max_batch_tokens = 64}});
  Tracked turn1(1, greedy(chat, 12));
  run_alone(b, turn1);
  Tracked turn2(2, greedy(next_turn(chat, turn1.rec, {31, 32, 33}), 30));
  turn2.rec.cancel_after = 7;
  run_alone(b, turn2);
  EXPECT_EQ(turn2.rec.reason, FinishReason::cancelled);
  EXPECT_EQ(turn2.seq.cached_prompt_tokens, 24);
  EXPECT_EQ(b.blocks().used, 0);
  EXPECT_LE(b.scheduler().snapshots().used(), 4);
  std::vector<std::int32_t> filler(64 * kBlock - 2);  // every block of the pool
  std::iota(filler.begin(), filler.end(), 5000);
  Tracked fill(3, greedy(filler, 1));
  run_alone(b, fill);
  EXPECT_EQ(b.scheduler().snapshots().used(), 1) << "only the filler's (at 252): the others went with their blocks";
  EXPECT_EQ(b.blocks().used, 0);
}

// Over two ranks (each the state of its own heads): the second turn resumes from the first turn's snapshot and
// gives the single rank's cold tokens and logprobs.
TEST_P(HybridPrefix, SecondTurnUnderTensorParallelResumesAndEqualsTheColdRun) {
  const auto& chat = prompts_[0];
  tp::TpRunnerOptions o;
  o.model_id = "prefix";
  o.world = 2;
  o.max_context = 1024;
  o.kv_block_size = kBlock;
  o.kv_blocks = 256;
  o.state_slots = 4;
  o.step_timeout = std::chrono::milliseconds(20000);
  o.worker_binary = NEURON_BINARY;
  auto r = tp::TpRunner::load(configs_.model, io::checkpoint_files(family_dir(GetParam())), o);
  EXPECT_EQ(r->kv_pool().state_snapshots, 4 * backend::kDefaultSnapshotsPerSlot);
  Batcher b(*r, {.scheduler = {.max_num_seqs = 4, .max_batch_tokens = 64}});
  ASSERT_TRUE(b.prefix_caching());
  Tracked turn1(1, greedy(chat, 12));
  run_alone(b, turn1);
  expect_same_generation(turn1.rec, cold(greedy(chat, 12)), "turn 1");
  const auto prompt2 = next_turn(chat, turn1.rec, prompts_[1]);
  Tracked turn2(2, greedy(prompt2, 12));
  run_alone(b, turn2);
  EXPECT_EQ(turn2.seq.cached_prompt_tokens, 24) << "resumed at turn 1's last snapshot";
  expect_same_generation(turn2.rec, cold(greedy(prompt2, 12)), "turn 2");
  EXPECT_EQ(b.blocks().used, 0);
  EXPECT_FALSE(r->failed());
}

INSTANTIATE_TEST_SUITE_P(Hybrids, HybridPrefix, ::testing::Values("qwen3_5-a", "qwen3_next-a"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace neuron::engine
