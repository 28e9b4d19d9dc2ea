// The CPU runner's contract (errors, context, memory, stand-in weights) and
// the generation loop on top of it, on the bundled tiny model.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "dist/communicator.hpp"
#include "engine/generator.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "model/shard.hpp"
#include "model/shard_weights.hpp"
#include "util/error.hpp"

namespace neuron {
namespace {

namespace fs = std::filesystem;

const std::string kModelDir = std::string(NEURON_REPO_ROOT) + "/models/qwen3-tiny-a";
// The "fox" prompt of tests/data/qwen3-tiny-a/golden.json and the start of its greedy continuation.
const std::vector<std::int32_t> kFox{785, 3974, 13876, 38835};
const std::vector<std::int32_t> kFoxGreedy{112472, 42430, 42430, 42430, 42430};

std::string error_kind(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return "no error";
}

class CpuTinyModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cfg_ = model::load_model_configs(kModelDir).model;
    ckpt_ = std::make_unique<io::Checkpoint>(io::Checkpoint::open_dir(kModelDir));
  }
  static void TearDownTestSuite() { ckpt_.reset(); }

  static std::unique_ptr<backend::ModelRunner> open(std::int32_t max_context = 0) {
    backend::RunnerOptions o;
    o.max_context = max_context;
    return backend::make_runner(cfg_, ckpt_.get(), model::ShardPlan::make(cfg_, 0, 1), backend::Device{}, nullptr, o);
  }

  static inline model::ModelConfig cfg_;
  static inline std::unique_ptr<io::Checkpoint> ckpt_;
};

TEST_F(CpuTinyModel, ContextDefaultsToTheBackendLimitAndRejectsMore) {
  EXPECT_EQ(open()->max_context(), 4096);
  EXPECT_EQ(open(100)->max_context(), 100);
  EXPECT_EQ(error_kind([] { open(static_cast<std::int32_t>(cfg_.max_position_embeddings) + 1); }), errc::invalid_argument);
}

TEST_F(CpuTinyModel, ForwardPastTheContextIsRefused) {
  auto r = open(8);
  backend::SingleSequence seq(*r);
  EXPECT_EQ(seq.capacity(), 8);
  std::vector<float> logits(static_cast<std::size_t>(cfg_.vocab_size));
  const std::vector<std::int32_t> nine(9, 5), four(4, 5);
  EXPECT_EQ(error_kind([&] { seq.forward(nine, 0, logits); }), errc::context_length_exceeded);
  seq.forward(four, 0, logits);
  EXPECT_EQ(error_kind([&] { seq.forward(four, 5, logits); }), errc::invalid_argument);  // skips position 4
  seq.forward(four, 4, logits);                                                          // exactly fills 8
  const std::vector<std::int32_t> one{5};
  EXPECT_EQ(error_kind([&] { seq.forward(one, 8, logits); }), errc::context_length_exceeded);
  // The runner itself refuses a batch past max_context, whatever its block table holds.
  backend::Batch batch;
  const std::vector<std::int32_t> blocks{0};
  batch.add(one, 8, blocks, backend::LogitsWanted::last);
  EXPECT_EQ(error_kind([&] { r->step(batch, logits); }), errc::context_length_exceeded);
}

TEST_F(CpuTinyModel, BadRequestsAreRefusedWithoutCrashing) {
  auto r = open(16);
  backend::SingleSequence seq(*r);
  std::vector<float> logits(static_cast<std::size_t>(cfg_.vocab_size));
  const std::vector<std::int32_t> none, ok{1, 2}, too_big{1, static_cast<std::int32_t>(cfg_.vocab_size)}, negative{-1};
  EXPECT_EQ(error_kind([&] { seq.forward(none, 0, logits); }), errc::invalid_argument);
  EXPECT_EQ(error_kind([&] { seq.forward(ok, -1, logits); }), errc::invalid_argument);
  EXPECT_EQ(error_kind([&] { seq.forward(too_big, 0, logits); }), errc::invalid_argument);
  EXPECT_EQ(error_kind([&] { seq.forward(negative, 0, logits); }), errc::invalid_argument);
  std::vector<float> odd(static_cast<std::size_t>(cfg_.vocab_size) + 1);
  EXPECT_EQ(error_kind([&] { seq.forward(ok, 0, odd); }), errc::invalid_argument);
  seq.forward(ok, 0, logits);  // still usable
  EXPECT_EQ(error_kind([&] { r->step(backend::Batch{}, logits); }), errc::invalid_argument);  // no sequence
}

TEST_F(CpuTinyModel, PoolOptionsShapeThePoolAndBadOnesAreRefused) {
  backend::RunnerOptions o;
  o.max_context = 100;
  o.kv_block_size = 8;
  o.kv_blocks = 40;
  const auto plan = model::ShardPlan::make(cfg_, 0, 1);
  const auto r = backend::make_runner(cfg_, ckpt_.get(), plan, backend::Device{}, nullptr, o);
  const backend::KvPoolShape pool = r->kv_pool();
  EXPECT_EQ(pool.block_size, 8);
  EXPECT_EQ(pool.num_blocks, 40);
  EXPECT_EQ(pool.bytes_per_block, backend::kv_bytes_per_block(cfg_, plan, backend::Device{}, 8));
  EXPECT_EQ(r->memory().kv_cache_bytes, pool.bytes_per_block * 40);
  EXPECT_EQ(backend::SingleSequence(*r).capacity(), 100);  // min(max_context, 40 * 8)
  o.kv_blocks = 5;
  EXPECT_EQ(backend::SingleSequence(*backend::make_runner(cfg_, ckpt_.get(), plan, backend::Device{}, nullptr, o)).capacity(),
            40);
  for (auto [size, blocks] : {std::pair{-1, 0}, std::pair{0, -1}}) {
    o.kv_block_size = size;
    o.kv_blocks = blocks;
    EXPECT_EQ(error_kind([&] { backend::make_runner(cfg_, ckpt_.get(), plan, backend::Device{}, nullptr, o); }),
              errc::invalid_argument);
  }
}

TEST_F(CpuTinyModel, MemoryCountsBf16WeightsAndTheKvPool) {
  const auto r = open(100);
  const auto m = r->memory();
  const std::int64_t h = cfg_.hidden_size, hd = cfg_.head_dim, f = cfg_.intermediate_size, L = cfg_.num_hidden_layers;
  const std::int64_t q = cfg_.num_attention_heads * hd, kv = cfg_.num_key_value_heads * hd;
  const std::int64_t per_layer = 2 * ((q + 2 * kv) * h + h * q + 3 * f * h) + 4 * (2 * h + 2 * hd);
  EXPECT_EQ(m.weight_bytes, static_cast<std::uint64_t>(2 * cfg_.vocab_size * h + 4 * h + L * per_layer));
  // By default, blocks of kDefaultKvBlockSize for one sequence of max_context: 7 blocks of 16 hold 100 positions.
  ASSERT_EQ(backend::kDefaultKvBlockSize, 16);
  EXPECT_EQ(r->kv_pool().num_blocks, 7);
  EXPECT_EQ(m.kv_cache_bytes, static_cast<std::uint64_t>(2 * L * kv * 7 * 16 * 4));
  EXPECT_EQ(m.device, "cpu");
}

TEST_F(CpuTinyModel, ShardPlanMustMatchTheCommunicator) {
  const auto plan = model::ShardPlan::make(cfg_, 1, 2);
  EXPECT_EQ(error_kind([&] {
              backend::make_runner(cfg_, ckpt_.get(), plan, backend::Device{},
                                   std::make_shared<dist::LocalCommunicator>(), {});
            }),
            errc::bad_tensor_parallel);
  EXPECT_EQ(error_kind([&] { backend::make_runner(cfg_, ckpt_.get(), plan, backend::Device{}, nullptr, {}); }),
            errc::bad_tensor_parallel);
}

TEST_F(CpuTinyModel, CudaDeviceWithoutCudaIsRefused) {
  if (backend::cuda_available()) GTEST_SKIP() << "this build has CUDA";
  const auto plan = model::ShardPlan::make(cfg_, 0, 1);
  EXPECT_NE(error_kind([&] { backend::make_runner(cfg_, ckpt_.get(), plan, backend::Device::parse("cuda:0"), nullptr, {}); }),
            "no error");
}

TEST(CpuRunnerCheckpoint, WrongShapesAndMissingTensorsAreClearErrors) {
  model::ModelConfig cfg = model::preset_config("qwen3-0.6b");
  cfg.vocab_size = 64;
  cfg.hidden_size = 16;
  cfg.intermediate_size = 24;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 2;
  cfg.num_key_value_heads = 1;
  cfg.head_dim = 8;
  const fs::path dir = fs::temp_directory_path() / ("neuron-cpu-bad-" + std::to_string(::getpid()));
  model::write_random_checkpoint(dir, cfg);
  const auto ckpt = io::Checkpoint::open_dir(dir);
  const auto open = [&](const model::ModelConfig& c) {
    backend::make_runner(c, &ckpt, model::ShardPlan::make(c, 0, 1), backend::Device{}, nullptr, {});
  };
  EXPECT_EQ(error_kind([&] { open(cfg); }), "no error");
  auto wider = cfg;
  wider.intermediate_size = 32;
  try {
    open(wider);
    ADD_FAILURE() << "a checkpoint with the wrong shapes loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::bad_model);
    EXPECT_NE(std::string(e.what()).find("mlp.gate_proj.weight"), std::string::npos) << e.what();
  }
  auto deeper = cfg;
  deeper.num_hidden_layers = 3;
  EXPECT_EQ(error_kind([&] { open(deeper); }), errc::not_found);
  auto untied = cfg;
  untied.tie_word_embeddings = false;  // lm_head.weight is absent from a tied checkpoint
  EXPECT_EQ(error_kind([&] { open(untied); }), errc::not_found);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(CpuRunnerDummy, StandInWeightsAreDeterministicAndShardConsistent) {
  model::ModelConfig cfg = model::preset_config("qwen3-0.6b");
  cfg.vocab_size = 100;
  cfg.hidden_size = 32;
  cfg.intermediate_size = 48;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.head_dim = 8;
  const auto plan = model::ShardPlan::make(cfg, 0, 1);
  auto a = backend::make_runner(cfg, nullptr, plan, backend::Device{}, nullptr, {});
  auto b = backend::make_runner(cfg, nullptr, plan, backend::Device{}, nullptr, {});
  const std::vector<std::int32_t> ids{3, 1, 4, 1, 5};
  std::vector<float> la(100), lb(100);
  backend::SingleSequence(*a).forward(ids, 0, la);
  backend::SingleSequence(*b).forward(ids, 0, lb);
  EXPECT_EQ(la, lb);

  // Rank 1 of 2 holds exactly the corresponding part of the full tensors.
  const auto full = model::shard_specs(cfg, plan);
  const auto half = model::shard_specs(cfg, model::ShardPlan::make(cfg, 1, 2));
  for (auto [whole, part] : {std::pair{&full.layers[1].mlp->down_proj, &half.layers[1].mlp->down_proj},
                             std::pair{&full.layers[1].attention->q_proj, &half.layers[1].attention->q_proj}}) {
    std::vector<std::uint16_t> w(static_cast<std::size_t>(whole->numel())), p(static_cast<std::size_t>(part->numel()));
    model::fill_dummy(*whole, w);
    model::fill_dummy(*part, p);
    for (std::int64_t r = 0; r < part->rows(); ++r)
      for (std::int64_t c = 0; c < part->cols(); ++c)
        ASSERT_EQ(p[r * part->cols() + c], w[(part->row_begin + r) * whole->cols() + part->col_begin + c]) << part->name;
  }
}

TEST_F(CpuTinyModel, GenerateStopsAtAStopIdWithoutEmittingIt) {
  auto r = open(64);
  engine::GenerateRequest req;
  req.prompt = kFox;
  req.max_tokens = 10;
  req.sampling.temperature = 0;
  req.stop_ids = {kFoxGreedy[1]};
  const auto res = engine::generate(*r, req);
  EXPECT_EQ(res.tokens, std::vector<std::int32_t>{kFoxGreedy[0]});
  EXPECT_EQ(res.finish_reason, "stop");
}

TEST_F(CpuTinyModel, GenerateIgnoresStopIdsWhenAsked) {
  auto r = open(64);
  engine::GenerateRequest req;
  req.prompt = kFox;
  req.max_tokens = 5;
  req.sampling.temperature = 0;
  req.stop_ids = {kFoxGreedy[1]};
  req.ignore_eos = true;
  const auto res = engine::generate(*r, req);
  EXPECT_EQ(res.tokens, kFoxGreedy);
  EXPECT_EQ(res.finish_reason, "length");
  EXPECT_GT(res.timings.prefill_ms, 0);
  EXPECT_GT(res.timings.decode_tok_s, 0);
  EXPECT_GT(res.timings.prefill_tok_s, 0);
}

TEST_F(CpuTinyModel, GenerateIsCancelledByTheCallback) {
  auto r = open(64);
  engine::GenerateRequest req;
  req.prompt = kFox;
  req.max_tokens = 10;
  req.sampling.temperature = 0;
  std::vector<std::int32_t> seen;
  const auto res = engine::generate(*r, req, [&](std::int32_t t) {
    seen.push_back(t);
    return seen.size() < 3;
  });
  EXPECT_EQ(res.finish_reason, "cancelled");
  EXPECT_EQ(res.tokens, std::vector<std::int32_t>(kFoxGreedy.begin(), kFoxGreedy.begin() + 3));
  EXPECT_EQ(seen, res.tokens);
}

TEST_F(CpuTinyModel, GenerateEndsWithLengthAtTheContext) {
  auto r = open(6);  // 4 prompt positions + 2 more: the third token can be sampled but not fed
  engine::GenerateRequest req;
  req.prompt = kFox;
  req.max_tokens = 100;
  req.sampling.temperature = 0;
  const auto res = engine::generate(*r, req);
  EXPECT_EQ(res.finish_reason, "length");
  EXPECT_EQ(res.tokens, std::vector<std::int32_t>(kFoxGreedy.begin(), kFoxGreedy.begin() + 3));
}

TEST_F(CpuTinyModel, GenerateRejectsBadRequests) {
  auto r = open(6);
  engine::GenerateRequest req;
  req.max_tokens = 4;
  EXPECT_EQ(error_kind([&] { engine::generate(*r, req); }), errc::invalid_argument);  // empty prompt
  req.prompt = std::vector<std::int32_t>(7, 1);
  EXPECT_EQ(error_kind([&] { engine::generate(*r, req); }), errc::context_length_exceeded);
  req.prompt = kFox;
  req.max_tokens = 0;
  EXPECT_EQ(error_kind([&] { engine::generate(*r, req); }), errc::invalid_argument);
  req.max_tokens = 2;
  req.sampling.top_p = 0;
  EXPECT_EQ(error_kind([&] { engine::generate(*r, req); }), errc::invalid_argument);
}

TEST_F(CpuTinyModel, SeededSamplingIsReproducible) {
  auto r = open(64);
  engine::GenerateRequest req;
  req.prompt = kFox;
  req.max_tokens = 12;
  req.sampling.temperature = 1.0f;
  req.sampling.seed = 1234;
  const auto a = engine::generate(*r, req);
  const auto b = engine::generate(*r, req);
  EXPECT_EQ(a.tokens, b.tokens);
  req.sampling.seed = 4321;
  EXPECT_NE(engine::generate(*r, req).tokens, a.tokens);
}

}  // namespace
}  // namespace neuron
