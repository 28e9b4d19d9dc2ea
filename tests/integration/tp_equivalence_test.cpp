// Tensor parallelism must not change the model: TP = N gives the same greedy
// tokens and (to float tolerance) the same logits as TP = 1, on the fixture
// model and on generated checkpoints with other head layouts, and each rank
// holds only its share of the weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <thread>

#include "dist/factory.hpp"

#include "backend/single_sequence.hpp"
#include "dist/communicator.hpp"
#include "engine/model_loader.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "model/shard.hpp"
#include "support/batch_driver.hpp"
#include "tp/tp_runner.hpp"
#include "util/error.hpp"

namespace {

using namespace neuron;
using namespace std::chrono_literals;

const std::filesystem::path kTiny = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";

struct Greedy {
  std::vector<std::int32_t> tokens;
  std::vector<float> last_logits;
};

// Prefill `prompt`, then `steps` greedy decode steps of one sequence; the tokens picked and the last logits.
Greedy run_greedy(backend::ModelRunner& runner, const std::vector<std::int32_t>& prompt, int steps) {
  Greedy g;
  backend::SingleSequence seq(runner);
  std::vector<float> logits(static_cast<std::size_t>(runner.config().vocab_size));
  seq.forward(prompt, 0, logits);
  auto offset = static_cast<std::int32_t>(prompt.size());
  for (int s = 0; s < steps; ++s) {
    const auto next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    g.tokens.push_back(next);
    const std::int32_t one[] = {next};
    seq.forward(one, offset++, logits);
  }
  g.last_logits = logits;
  return g;
}

engine::LoadOptions load_options(const std::filesystem::path& dir, int tp) {
  engine::LoadOptions o;
  o.model_dir = dir;
  o.model_id = "equivalence";
  o.tensor_parallel = tp;
  o.max_context = 256;
  o.step_timeout = 20000ms;
  o.worker_binary = NEURON_BINARY;
  return o;
}

void expect_same_as_single(const std::filesystem::path& dir, int tp, std::int64_t vocab) {
  std::vector<std::int32_t> prompt;
  std::mt19937 rng(static_cast<unsigned>(tp * 7 + vocab));
  for (int i = 0; i < 9; ++i) prompt.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab)));
  constexpr int kSteps = 34;

  auto single = engine::open_runner(load_options(dir, 1));
  const Greedy want = run_greedy(*single, prompt, kSteps);
  single.reset();

  auto sharded = engine::open_runner(load_options(dir, tp));
  ASSERT_NE(dynamic_cast<tp::TpRunner*>(sharded.get()), nullptr);
  const Greedy got = run_greedy(*sharded, prompt, kSteps);
  EXPECT_EQ(got.tokens, want.tokens) << "TP=" << tp << " changed the greedy continuation";

  float scale = 0, worst = 0;
  for (std::size_t i = 0; i < want.last_logits.size(); ++i) {
    scale = std::max(scale, std::fabs(want.last_logits[i]));
    worst = std::max(worst, std::fabs(want.last_logits[i] - got.last_logits[i]));
  }
  EXPECT_LE(worst, test_support::kAcrossProcesses * scale) << "TP=" << tp << ": max |logit diff| " << worst << " vs max |logit| " << scale;

  // A rerun from scratch over the same blocks overwrites them on every rank alike.
  EXPECT_EQ(run_greedy(*sharded, prompt, 4).tokens, std::vector<std::int32_t>(want.tokens.begin(), want.tokens.begin() + 4));
}

// The same batched steps (prefills of mixed lengths, a chunked prefill, decodes,
// scattered block tables) on TP = N and on one rank: the same greedy tokens and
// logits. The pool's shape travels in load_dense_shard: ids past the default
// pool of one sequence are used, so a worker that ignored it would refuse them.
// `expert_parallel`: a MoE's experts dealt out whole (model::ShardPlan::expert_parallel).
void expect_batched_same_as_single(const std::filesystem::path& dir, int tp, bool expert_parallel = false) {
  constexpr std::int32_t kBlockSize = 8, kBlocks = 80;
  constexpr int kSteps = 10;
  const auto cfg = model::load_model_configs(dir).model;
  std::vector<test_support::SeqPlan> plans;
  for (std::size_t n : {9u, 1u, 30u})
    plans.push_back({.prompt = test_support::random_prompt(n, cfg.vocab_size, static_cast<std::uint32_t>(n + tp)),
                     .chunks = {},
                     .start_step = 0});
  plans[2].chunks = {8, 15, 7};
  plans[2].start_step = 1;
  const auto order = test_support::block_order(kBlocks, 99);

  const auto ckpt = io::Checkpoint::open_dir(dir);
  auto single = backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{}, nullptr,
                                     {.max_context = 256, .kv_block_size = kBlockSize, .kv_blocks = kBlocks});
  const auto want = test_support::run_batched(*single, plans, kSteps, order);
  single.reset();

  tp::TpRunnerOptions o;
  o.model_id = "batched";
  o.world = tp;
  o.expert_parallel = expert_parallel;
  o.max_context = 256;
  o.kv_block_size = kBlockSize;
  o.kv_blocks = kBlocks;
  o.step_timeout = 20000ms;
  o.worker_binary = NEURON_BINARY;
  auto sharded = tp::TpRunner::load(cfg, io::checkpoint_files(dir), o);
  EXPECT_EQ(sharded->kv_pool().block_size, kBlockSize);
  EXPECT_EQ(sharded->kv_pool().num_blocks, kBlocks);
  const auto got = test_support::run_batched(*sharded, plans, kSteps, order);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "TP=" << tp << " sequence " << i;
    ASSERT_EQ(got[i].logits.size(), want[i].logits.size());
    for (std::size_t k = 0; k < want[i].logits.size(); ++k)
      EXPECT_LE(test_support::relative_error(got[i].logits[k], want[i].logits[k]), test_support::kAcrossProcesses)
          << "TP=" << tp << " sequence " << i << " step " << k;
  }
  EXPECT_FALSE(sharded->failed());
}

TEST(TpEquivalence, BatchedStepsAtTwoRanks) { expect_batched_same_as_single(kTiny, 2); }

// The other families (tests/data/families): Llama 3 (no q/k norm, llama3 RoPE) and Qwen3-MoE (every expert's
// intermediate dimension split across the ranks, the router replicated).
const std::filesystem::path kFamilies = std::filesystem::path(NEURON_TEST_DATA) / "families";
TEST(TpEquivalence, LlamaAtTwoRanks) { expect_same_as_single(kFamilies / "llama-a", 2, 128256); }
TEST(TpEquivalence, Qwen3MoeAtTwoAndFourRanks) {
  expect_same_as_single(kFamilies / "qwen3_moe-a", 2, 151936);
  expect_same_as_single(kFamilies / "qwen3_moe-a", 4, 151936);
}
TEST(TpEquivalence, Qwen3MoeBatchedStepsAtTwoRanks) { expect_batched_same_as_single(kFamilies / "qwen3_moe-a", 2); }
// Expert parallelism: 8 experts, 4 whole ones a rank (expert_parallel_test.cpp holds it to the goldens).
TEST(TpEquivalence, Qwen3MoeExpertParallelBatchedStepsAtTwoRanks) {
  expect_batched_same_as_single(kFamilies / "qwen3_moe-a", 2, /*expert_parallel=*/true);
}
TEST(TpEquivalence, BatchedStepsAtFourRanks) { expect_batched_same_as_single(kTiny, 4); }

TEST(TpEquivalence, TinyFixtureAtTwoRanks) { expect_same_as_single(kTiny, 2, 151936); }

// num_key_value_heads is 2: at four ranks each KV head is replicated on two ranks.
TEST(TpEquivalence, TinyFixtureAtFourRanksReplicatesKvHeads) { expect_same_as_single(kTiny, 4, 151936); }

model::ModelConfig small_config(std::int64_t heads, std::int64_t kv_heads) {
  model::ModelConfig c;
  c.vocab_size = 384;
  c.hidden_size = 48;
  c.intermediate_size = 120;  // divisible by 2, 3 and 4
  c.num_hidden_layers = 3;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 16;
  c.rope.theta = 10000;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 1024;
  c.tie_word_embeddings = false;
  c.eos_token_ids = {1};
  return c;
}

class GeneratedModel : public ::testing::Test {
 protected:
  std::filesystem::path make(const model::ModelConfig& cfg, int shards = 1) {
    dir_ = std::filesystem::temp_directory_path() /
           ("neuron-tp-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    model::write_random_checkpoint(dir_, cfg, {.seed = 11, .shards = shards});
    return dir_;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
  inline static int counter_ = 0;
};

TEST_F(GeneratedModel, SixHeadsThreeKvAtThreeRanks) { expect_same_as_single(make(small_config(6, 3)), 3, 384); }

TEST_F(GeneratedModel, TwelveHeadsFourKvAtTwoAndFourRanks) {
  const auto dir = make(small_config(12, 4));
  expect_same_as_single(dir, 2, 384);
  expect_same_as_single(dir, 4, 384);
}

// One KV head (multi-query attention) replicated on every rank.
TEST_F(GeneratedModel, SixHeadsOneKvAtTwoAndThreeRanks) {
  const auto dir = make(small_config(6, 1));
  expect_same_as_single(dir, 2, 384);
  expect_same_as_single(dir, 3, 384);
}

TEST_F(GeneratedModel, EightHeadsEightKvAtFourRanksFromAShardedCheckpoint) {
  const auto dir = make(small_config(8, 8), /*shards=*/3);
  expect_same_as_single(dir, 4, 384);
}

TEST_F(GeneratedModel, ShapeThatCannotBeSplitIsRefusedBeforeSpawning) {
  const auto dir = make(small_config(6, 3));
  // 6 heads do not split 4 or 5 ways; 3 KV heads do not split 2 ways (and 2 ranks cannot share 3).
  for (int tp : {2, 4, 5}) {
    try {
      engine::open_runner(load_options(dir, tp));
      FAIL() << "TP=" << tp << " of 6 heads loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::bad_tensor_parallel) << e.what();
    }
  }
  for (int tp : {0, -1, 17}) {
    try {
      engine::open_runner(load_options(dir, tp));
      FAIL() << "TP=" << tp << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::bad_tensor_parallel) << e.what();
    }
  }
}

// Weights every rank holds whole: embeddings, lm_head, all RMSNorms (the CPU
// runner keeps bf16 matrices and f32 norms).
std::uint64_t replicated_bytes(const model::ModelConfig& c) {
  std::uint64_t b = static_cast<std::uint64_t>(c.vocab_size * c.hidden_size) * 2 * (c.tie_word_embeddings ? 1 : 2);
  b += static_cast<std::uint64_t>(c.hidden_size) * 4;
  b += static_cast<std::uint64_t>(c.num_hidden_layers) * (2 * c.hidden_size + 2 * c.head_dim) * 4;
  return b;
}

TEST_F(GeneratedModel, EachRankHoldsItsShareOfTheShardedWeights) {
  const auto cfg = small_config(8, 8);
  const auto dir = make(cfg);
  const auto checkpoint = io::Checkpoint::open_dir(dir);
  // Every rank's shard built in this process, each with its own member of a real group.
  const auto bytes_of_ranks = [&](int n) {
    std::vector<std::shared_ptr<dist::Communicator>> comms(n);
    if (n == 1) {
      comms[0] = std::make_shared<dist::LocalCommunicator>();
    } else {
      const std::string id = dist::new_comm_id(dist::CommKind::gloo);
      std::vector<std::thread> joiners;
      for (int r = 0; r < n; ++r)
        joiners.emplace_back([&, r] { comms[r] = dist::make_communicator(id, r, n, {.timeout = 10000ms}); });
      for (auto& t : joiners) t.join();
    }
    std::vector<std::uint64_t> bytes;
    for (int r = 0; r < n; ++r) {
      auto runner = backend::make_runner(cfg, &checkpoint, model::ShardPlan::make(cfg, r, n), backend::Device{},
                                         comms[r], {.max_context = 64});
      bytes.push_back(runner->memory().weight_bytes);
    }
    return bytes;
  };
  const std::uint64_t whole = bytes_of_ranks(1)[0];
  const std::uint64_t replicated = replicated_bytes(cfg);
  ASSERT_GT(whole, 2 * replicated);  // the test means something only if sharding matters
  const std::uint64_t sharded = whole - replicated;
  for (int n : {2, 4}) {
    const auto per_rank = bytes_of_ranks(n);
    for (int r = 0; r < n; ++r) {
      const double want = static_cast<double>(replicated) + static_cast<double>(sharded) / n;
      EXPECT_NEAR(static_cast<double>(per_rank[r]), want, 0.01 * want) << "rank " << r << " of " << n;
    }
  }

  // The TP leader's runner reports rank 0's share, not the whole model.
  auto tp2 = engine::open_runner(load_options(dir, 2));
  const double want2 = static_cast<double>(replicated) + static_cast<double>(sharded) / 2;
  EXPECT_NEAR(static_cast<double>(tp2->memory().weight_bytes), want2, 0.01 * want2);
}

TEST_F(GeneratedModel, ContextOverflowIsAConsistentErrorThatKeepsTheGroupUsable) {
  const auto dir = make(small_config(8, 8));
  auto runner = engine::open_runner(load_options(dir, 2));
  std::vector<std::int32_t> too_many(300, 5);  // max_context is 256
  std::vector<std::int32_t> blocks(19);
  std::iota(blocks.begin(), blocks.end(), 0);
  backend::Batch batch;
  batch.add(too_many, 0, blocks, backend::LogitsWanted::last);
  std::vector<float> logits(384);
  try {
    runner->step(batch, logits);
    FAIL() << "a prompt past max_context ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::context_length_exceeded) << e.what();
  }
  // A batch check_batch refuses is refused on every rank before any collective, too.
  const std::int32_t one[] = {3}, outside[] = {100000};
  batch.clear();
  batch.add(one, 0, outside, backend::LogitsWanted::last);
  try {
    runner->step(batch, logits);
    FAIL() << "a block id outside the pool was used";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::invalid_argument) << e.what();
  }
  EXPECT_NO_THROW(backend::SingleSequence(*runner).forward(one, 0, logits));
  EXPECT_FALSE(dynamic_cast<tp::TpRunner&>(*runner).failed());
}

}  // namespace
