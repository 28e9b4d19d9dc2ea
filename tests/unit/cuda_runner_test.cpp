// The CUDA runner end to end on the bundled qwen3-tiny-a: bf16 logits against
// the golden float32 ones from transformers, decode (graph replay) against
// prefill, TP=2 on one GPU (Gloo host-staged all-reduce) against TP=1, and
// clean failures (bad input, out of memory) that leave the process serving.
// Batched steps (continuous batching over the paged KV pool) against each
// sequence run alone through SingleSequence, on the tiny model and on random
// weights of real head shapes, with and without CUDA graphs.
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/batch.hpp"
#include "backend/cuda/cuda_runner.hpp"
#include "backend/single_sequence.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "dist/factory.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/sampler.hpp"
#include "support/env_guard.hpp"
#include "support/cosine.hpp"
#include "util/error.hpp"
#include "support/argmax.hpp"
#include "support/batch_driver.hpp"

namespace neuron::backend::cuda {
namespace {

const std::filesystem::path kModel = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";
const std::filesystem::path kGolden = std::filesystem::path(NEURON_TEST_DATA) / "qwen3-tiny-a";

std::unique_ptr<ModelRunner> open_tiny(const io::Checkpoint& ckpt, const model::ModelConfig& cfg, int rank = 0,
                                       int world = 1, std::shared_ptr<dist::Communicator> comm = nullptr,
                                       RunnerOptions options = {}) {
  if (!comm) comm = std::make_shared<dist::LocalCommunicator>();
  return make_cuda_runner(cfg, &ckpt, model::ShardPlan::make(cfg, rank, world), Device{Device::Kind::cuda, 0},
                          std::move(comm), options);
}

using test_support::cosine;

using test_support::argmax;

using test_support::greedy;

using test_support::EnvGuard;

class CudaRunnerTiny : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    cfg_ = model::load_model_configs(kModel).model;
    ckpt_ = std::make_unique<io::Checkpoint>(io::Checkpoint::open_dir(kModel));
  }
  model::ModelConfig cfg_;
  std::unique_ptr<io::Checkpoint> ckpt_;
};

TEST_F(CudaRunnerTiny, LogitsMatchGoldenFloat32) {
  auto runner = open_tiny(*ckpt_, cfg_);
  nlohmann::json golden;
  std::ifstream(kGolden / "golden.json") >> golden;
  io::SafetensorsFile last(kGolden / "golden.safetensors");
  const auto v = static_cast<std::size_t>(cfg_.vocab_size);
  for (const auto& p : golden["prompts"]) {
    const std::string name = p["name"];
    const auto ids = p["ids"].get<std::vector<std::int32_t>>();
    const auto top_ids = p["top5_ids"].get<std::vector<std::vector<std::int32_t>>>();
    const auto top_logits = p["top5_logits"].get<std::vector<std::vector<float>>>();
    const std::size_t recorded = top_ids.size(), n = ids.size();
    ASSERT_LE(recorded, n);
    // Everything before the recorded positions goes in as a first call, so the
    // second call also checks resuming from the cache at an offset.
    const std::size_t first = n - recorded;
    SingleSequence seq(*runner);
    if (first > 0) seq.forward(std::span(ids).first(first), 0, {});
    std::vector<float> logits(recorded * v);
    seq.forward(std::span(ids).subspan(first), static_cast<std::int32_t>(first), logits);
    for (std::size_t i = 0; i < recorded; ++i) {
      std::span<const float> row(logits.data() + i * v, v);
      const float margin = top_logits[i][0] - top_logits[i][1];
      if (margin > 0.05f) { EXPECT_EQ(argmax(row), top_ids[i][0]) << name << " position " << first + i; }
      std::vector<float> ours(5), ref(top_logits[i].begin(), top_logits[i].end());
      for (int k = 0; k < 5; ++k) ours[k] = row[top_ids[i][k]];
      double err = 0, scale = 0;
      for (int k = 0; k < 5; ++k) {
        err = std::max(err, double(std::abs(ours[k] - ref[k])));
        scale = std::max(scale, double(std::abs(ref[k])));
      }
      EXPECT_LE(err, 0.03 * std::max(scale, 1.0)) << name << " position " << first + i << ": top-5 logits off";
    }
    const io::TensorView& g = last.tensors().at(name + ".last_logits");
    const std::vector<float> want = g.to_f32();
    const double cos = cosine(std::span<const float>(logits.data() + (recorded - 1) * v, v), want);
    EXPECT_GE(cos, 0.999) << name << ": cosine of the last position's logits";
    std::printf("[golden] %-6s n=%zu cosine(last)=%.6f\n", name.c_str(), n, cos);
  }
}

TEST_F(CudaRunnerTiny, DecodeStepsMatchPrefillOfTheSameSequence) {
  auto runner = open_tiny(*ckpt_, cfg_);
  const std::vector<std::int32_t> prompt = {785, 3974, 13876, 38835};
  const auto v = static_cast<std::size_t>(cfg_.vocab_size);
  // Decode: the graph is captured on the first step and replayed for the others.
  std::vector<std::vector<float>> step_logits;
  std::vector<float> logits(v);
  SingleSequence one(*runner);
  one.forward(prompt, 0, logits);
  std::vector<std::int32_t> seq = prompt;
  for (int i = 0; i < 40; ++i) {
    seq.push_back(argmax(logits));
    one.forward(std::span(seq).last(1), static_cast<std::int32_t>(seq.size() - 1), logits);
    step_logits.push_back(logits);
  }
  // Prefill of the whole sequence from position 0 gives every row at once.
  std::vector<float> all(seq.size() * v);
  one.forward(seq, 0, all);
  for (std::size_t i = 0; i < step_logits.size(); ++i) {
    std::span<const float> row(all.data() + (prompt.size() + i) * v, v);
    EXPECT_GE(cosine(row, step_logits[i]), 0.999) << "decode step " << i;
  }
}

TEST_F(CudaRunnerTiny, FusedDecodePathMatchesTheLayeredOne) {
  const std::vector<std::int32_t> prompt = {785, 3974, 13876, 38835};
  auto layered = open_tiny(*ckpt_, cfg_);
  ::setenv("NEURON_CUDA_FUSED_DECODE", "1", 1);
  auto fused = open_tiny(*ckpt_, cfg_);
  ::unsetenv("NEURON_CUDA_FUSED_DECODE");
  const auto tokens = greedy(*layered, prompt, 24);
  // Both runners decode the same token sequence; their logits agree to rounding.
  const auto v = static_cast<std::size_t>(cfg_.vocab_size);
  std::vector<float> a(v), b(v);
  SingleSequence sa(*layered), sb(*fused);
  sa.forward(prompt, 0, a);
  sb.forward(prompt, 0, b);
  auto pos = static_cast<std::int32_t>(prompt.size());
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i, ++pos) {
    const std::span<const std::int32_t> one(&tokens[i], 1);
    sa.forward(one, pos, a);
    sb.forward(one, pos, b);
    EXPECT_GE(cosine(a, b), 0.9999) << "decode step " << i;
  }
}

TEST_F(CudaRunnerTiny, TensorParallelTwoRanksOnOneGpuMatchSingleRank) {
  const std::vector<std::int32_t> prompt = {151644, 872, 198, 3838, 374, 279, 6722, 315, 9625, 30, 151645, 198};
  auto single = open_tiny(*ckpt_, cfg_);
  const auto expected = greedy(*single, prompt, 32);
  single.reset();

  const std::string id = dist::new_comm_id(dist::CommKind::gloo);
  std::vector<std::future<std::vector<std::int32_t>>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r] {
      auto comm = dist::make_communicator(id, r, 2);
      EXPECT_EQ(comm->location(), dist::MemoryLocation::host);
      auto runner = open_tiny(*ckpt_, cfg_, r, 2, comm);
      EXPECT_LT(runner->memory().weight_bytes, 2 * cfg_.vocab_size * cfg_.hidden_size + 40000);
      return greedy(*runner, prompt, 32);
    }));
  const auto rank0 = ranks[0].get();
  const auto rank1 = ranks[1].get();
  EXPECT_EQ(rank0, expected);
  EXPECT_EQ(rank1, expected);
}

TEST_F(CudaRunnerTiny, BadInputIsRejectedAndTheRunnerKeepsWorking) {
  RunnerOptions options;
  options.max_context = 64;
  options.kv_blocks = 8;
  auto runner = open_tiny(*ckpt_, cfg_, 0, 1, nullptr, options);
  EXPECT_EQ(runner->max_context(), 64);
  const auto v = static_cast<std::size_t>(cfg_.vocab_size);
  std::vector<float> logits(v), again(v);
  const std::vector<std::int32_t> ok = {1, 2, 3};
  const std::vector<std::int32_t> table = {5};
  Batch good;
  good.add(ok, 0, table, LogitsWanted::last);
  runner->step(good, logits);
  auto kind_of = [&](const Batch& b, std::span<float> out) {
    try {
      runner->step(b, out);
    } catch (const Error& e) {
      return e.kind();
    }
    return std::string("no error");
  };
  auto one = [](std::vector<std::int32_t> tokens, std::int32_t position, std::vector<std::int32_t> blocks) {
    Batch b;
    b.add(tokens, position, blocks, LogitsWanted::last);
    return b;
  };
  EXPECT_EQ(kind_of(one({1, static_cast<std::int32_t>(cfg_.vocab_size)}, 0, {5}), logits), errc::invalid_argument);
  EXPECT_EQ(kind_of(one({-1}, 0, {5}), logits), errc::invalid_argument);
  EXPECT_EQ(kind_of(one(ok, 62, {0, 1, 2, 3, 4}), logits), errc::context_length_exceeded);
  EXPECT_EQ(kind_of(one(ok, 0, {8}), logits), errc::invalid_argument) << "block id past the pool";
  EXPECT_EQ(kind_of(one(ok, 15, {5}), logits), errc::invalid_argument) << "table too short";
  std::vector<float> wrong(v + 1);
  EXPECT_EQ(kind_of(good, wrong), errc::invalid_argument);
  EXPECT_EQ(kind_of(Batch{}, {}), errc::invalid_argument);
  Batch clash;  // two sequences writing the same block
  clash.add(ok, 0, table, LogitsWanted::last);
  clash.add(ok, 0, table, LogitsWanted::last);
  std::vector<float> two(2 * v);
  EXPECT_EQ(kind_of(clash, two), errc::invalid_argument);
  runner->step(good, again);
  EXPECT_EQ(logits, again);
}

TEST_F(CudaRunnerTiny, KvPoolShapeFollowsTheOptions) {
  const model::ShardPlan plan = model::ShardPlan::make(cfg_, 0, 1);
  const Device dev{Device::Kind::cuda, 0};
  RunnerOptions options;
  options.max_context = 100;
  auto by_default = open_tiny(*ckpt_, cfg_, 0, 1, nullptr, options);
  KvPoolShape pool = by_default->kv_pool();
  EXPECT_EQ(pool.block_size, kDefaultKvBlockSize);
  EXPECT_EQ(pool.num_blocks, 7);  // one sequence of 100 positions
  EXPECT_EQ(pool.bytes_per_block, kv_bytes_per_block(cfg_, plan, dev, kDefaultKvBlockSize));
  // The pool holds one more block than it lends: the graphs' padding scratch.
  EXPECT_EQ(by_default->memory().kv_cache_bytes, 8 * pool.bytes_per_block);
  options.kv_block_size = 32;
  options.kv_blocks = 50;
  auto sized = open_tiny(*ckpt_, cfg_, 0, 1, nullptr, options);
  pool = sized->kv_pool();
  EXPECT_EQ(pool.block_size, 32);
  EXPECT_EQ(pool.num_blocks, 50);
  EXPECT_EQ(sized->memory().kv_cache_bytes, 51 * kv_bytes_per_block(cfg_, plan, dev, 32));
  options.max_context = static_cast<std::int32_t>(cfg_.max_position_embeddings) + 1;
  EXPECT_THROW(open_tiny(*ckpt_, cfg_, 0, 1, nullptr, options), Error);
}

TEST_F(CudaRunnerTiny, OutOfMemoryAtLoadIsACleanErrorAndMemoryIsReturned) {
  std::size_t free_before = 0, total = 0, free_after = 0;
  NEURON_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  model::ModelConfig huge = model::preset_config("qwen3-32b");
  huge.num_hidden_layers = 4 * 64;  // about 4 x 65 GB of bf16 weights: more than any GPU has
  try {
    make_cuda_runner(huge, nullptr, model::ShardPlan::make(huge, 0, 1), Device{Device::Kind::cuda, 0},
                     std::make_shared<dist::LocalCommunicator>(), {});
    FAIL() << "a " << total / 1e9 << " GB device loaded a model four times its size";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::out_of_memory) << e.what();
  }
  NEURON_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  EXPECT_GT(free_after + (std::size_t{512} << 20), free_before) << "the failed load leaked device memory";
  // The process keeps serving: a model that fits still loads and runs.
  auto runner = open_tiny(*ckpt_, cfg_);
  std::vector<float> logits(static_cast<std::size_t>(cfg_.vocab_size));
  const std::vector<std::int32_t> ok = {1, 2, 3};
  SingleSequence(*runner).forward(ok, 0, logits);
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
}

// ---- batched steps against sequences run alone ------------------------------

// One sequence of a batched run: its prompt, fed in chunks of `chunk`
// tokens from batch step `join` on, then one decode token per step.
struct Script {
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> decode;
  int join = 0;
  int chunk = 0;
  bool all_rows = false;  // asks every row of its last prompt chunk (the last one is compared)
};

// Logits rows of a sequence: after its prompt, then after each decode token.
using Rows = std::vector<std::vector<float>>;

// The sequence alone on `r`, its prompt fed in pieces of `chunk` (0: at once).
Rows solo(ModelRunner& r, const Script& s, int chunk = 0) {
  const auto v = static_cast<std::size_t>(r.config().vocab_size);
  SingleSequence seq(r);
  Rows rows;
  std::vector<float> logits(v);
  const auto n = static_cast<std::int32_t>(s.prompt.size());
  const std::int32_t piece = chunk > 0 ? chunk : n;
  for (std::int32_t at = 0; at < n; at += piece) {
    const std::int32_t k = std::min(piece, n - at);
    seq.forward(std::span(s.prompt).subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(k)), at,
                at + k == n ? std::span<float>(logits) : std::span<float>());
  }
  rows.push_back(logits);
  std::int32_t pos = n;
  for (std::int32_t t : s.decode) {
    seq.forward(std::span<const std::int32_t>(&t, 1), pos++, logits);
    rows.push_back(logits);
  }
  return rows;
}

// All scripts through batched steps on `r`, each sequence with its own
// block table drawn from a shuffled pool; a step holds every joined sequence
// that is not finished (prefill chunks and decodes mixed).
std::vector<Rows> batched(ModelRunner& r, const std::vector<Script>& scripts, std::mt19937& rng) {
  const auto v = static_cast<std::size_t>(r.config().vocab_size);
  const KvPoolShape pool = r.kv_pool();
  std::vector<std::int32_t> ids(static_cast<std::size_t>(pool.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<std::int32_t>> tables;
  std::size_t next = 0;
  for (const Script& s : scripts) {
    const std::size_t len = s.prompt.size() + s.decode.size();
    const std::size_t blocks = (len + pool.block_size - 1) / static_cast<std::size_t>(pool.block_size);
    if (next + blocks > ids.size()) throw Error(errc::invalid_argument, "test pool too small");
    tables.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(next),
                        ids.begin() + static_cast<std::ptrdiff_t>(next + blocks));
    next += blocks;
  }
  std::vector<Rows> out(scripts.size());
  std::vector<std::size_t> fed(scripts.size(), 0);
  Batch batch;
  std::vector<float> logits;
  for (int step = 0;; ++step) {
    batch.clear();
    std::vector<std::size_t> members;
    bool pending = false;
    for (std::size_t i = 0; i < scripts.size(); ++i) {
      const Script& s = scripts[i];
      const std::size_t len = s.prompt.size() + s.decode.size();
      if (fed[i] == len) continue;
      pending = true;
      if (s.join > step) continue;
      const auto position = static_cast<std::int32_t>(fed[i]);
      if (fed[i] < s.prompt.size()) {
        const std::size_t left = s.prompt.size() - fed[i];
        const std::size_t n = s.chunk > 0 ? std::min<std::size_t>(left, static_cast<std::size_t>(s.chunk)) : left;
        const bool last = n == left;
        batch.add(std::span(s.prompt).subspan(fed[i], n), position, tables[i],
                  !last ? LogitsWanted::none : s.all_rows ? LogitsWanted::all : LogitsWanted::last);
        fed[i] += n;
      } else {
        batch.add(std::span(s.decode).subspan(fed[i] - s.prompt.size(), 1), position, tables[i], LogitsWanted::last);
        fed[i] += 1;
      }
      members.push_back(i);
    }
    if (!pending) break;
    logits.assign(static_cast<std::size_t>(batch.logit_rows()) * v, 0.f);
    r.step(batch, logits);
    std::size_t row = 0;
    for (std::size_t k = 0; k < members.size(); ++k) {
      const SequenceStep& q = batch.seqs[k];
      if (q.logits == LogitsWanted::none) continue;
      const std::size_t rows = q.logits == LogitsWanted::all ? static_cast<std::size_t>(q.num_tokens) : 1;
      const float* last = logits.data() + (row + rows - 1) * v;
      out[members[k]].emplace_back(last, last + v);
      row += rows;
    }
    EXPECT_EQ(row, static_cast<std::size_t>(batch.logit_rows()));
  }
  return out;
}

// cosine >= 0.999 row by row, and the same top-1 where the reference's top-1/top-2 margin exceeds 0.05.
void expect_rows_match(const std::vector<Rows>& got, const std::vector<Rows>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size()) << what << " sequence " << i;
    for (std::size_t j = 0; j < got[i].size(); ++j) {
      const double cos = cosine(got[i][j], want[i][j]);
      worst = std::min(worst, cos);
      EXPECT_GE(cos, 0.999) << what << " sequence " << i << " row " << j;
      std::vector<float> sorted = want[i][j];
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      if (sorted[0] - sorted[1] > 0.05f) {
        EXPECT_EQ(argmax(got[i][j]), argmax(want[i][j])) << what << " sequence " << i << " row " << j;
      }
    }
  }
  std::printf("[batched] %s: worst cosine %.6f\n", what.c_str(), worst);
}

std::vector<Script> make_scripts(int count, std::int64_t vocab, std::mt19937& rng) {
  const int lengths[] = {1, 2, 5, 16, 17, 33, 64, 65, 70, 130};
  const int chunks[] = {0, 16, 24, 7};
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<Script> out;
  for (int i = 0; i < count; ++i) {
    Script s;
    s.prompt.resize(static_cast<std::size_t>(lengths[(i * 7 + 3) % 10]));
    for (auto& t : s.prompt) t = token(rng);
    s.decode.resize(static_cast<std::size_t>(5 + i % 6));
    for (auto& t : s.decode) t = token(rng);
    s.join = i % 4;
    s.chunk = chunks[(i / 2) % 4];
    s.all_rows = i % 4 == 1;
    out.push_back(std::move(s));
  }
  return out;
}

std::size_t blocks_for(const std::vector<Script>& scripts, int block_size) {
  std::size_t n = 0;
  for (const Script& s : scripts) n += (s.prompt.size() + s.decode.size() + block_size - 1) / block_size;
  return n;
}

// N = 1, 3, 8, 32 sequences batched, with and without graphs, against each alone.
void batched_against_solo(const std::function<std::unique_ptr<ModelRunner>(RunnerOptions)>& make,
                          std::int64_t vocab, const std::string& name) {
  std::mt19937 rng(77);
  const std::vector<Script> all = make_scripts(32, vocab, rng);
  RunnerOptions solo_options;
  solo_options.max_context = 256;
  auto alone = make(solo_options);
  std::vector<Rows> reference;
  for (const Script& s : all) reference.push_back(solo(*alone, s));
  alone.reset();
  for (const bool graphs : {true, false}) {
    EnvGuard env("NEURON_CUDA_GRAPHS", graphs ? "1" : "0");
    RunnerOptions options;
    options.max_context = 256;
    options.kv_blocks = static_cast<std::int32_t>(blocks_for(all, kDefaultKvBlockSize)) + 9;
    auto runner = make(options);
    for (const int n : {1, 3, 8, 32}) {
      const std::vector<Script> some(all.begin(), all.begin() + n);
      const std::vector<Rows> want(reference.begin(), reference.begin() + n);
      expect_rows_match(batched(*runner, some, rng), want,
                        name + " N=" + std::to_string(n) + (graphs ? " graphs" : " eager"));
    }
  }
}

TEST_F(CudaRunnerTiny, BatchedStepsMatchEachSequenceAlone) {
  batched_against_solo([&](RunnerOptions o) { return open_tiny(*ckpt_, cfg_, 0, 1, nullptr, o); }, cfg_.vocab_size,
                       "tiny");
}

TEST(CudaRunnerRandom, BatchedStepsMatchEachSequenceAloneOnRealHeadShapes) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // Random weights with Qwen3-0.6B's heads (hd 128, GQA 2) and Qwen3-32B's (GQA 8), a few layers each.
  for (const auto& [preset, layers] : {std::pair<std::string, int>{"qwen3-0.6b", 4}, {"qwen3-32b", 2}}) {
    model::ModelConfig cfg = model::preset_config(preset);
    cfg.num_hidden_layers = layers;
    batched_against_solo(
        [&](RunnerOptions o) {
          return make_cuda_runner(cfg, nullptr, model::ShardPlan::make(cfg, 0, 1), Device{Device::Kind::cuda, 0},
                                  std::make_shared<dist::LocalCommunicator>(), o);
        },
        cfg.vocab_size, preset);
  }
}

TEST_F(CudaRunnerTiny, StepLongerThanAPassMixedWithDecodes) {
  // A 5000-token prompt in one step with three short sequences: the runner
  // cuts the step into passes of at most 4096 rows.
  std::mt19937 rng(5);
  std::vector<Script> scripts = make_scripts(4, cfg_.vocab_size, rng);
  scripts[0].prompt.resize(5000);
  for (std::size_t i = 0; i < 5000; ++i) scripts[0].prompt[i] = static_cast<std::int32_t>((i * 7919 + 11) % 151000);
  for (Script& s : scripts) s.join = 0;
  scripts[0].chunk = 0;
  RunnerOptions options;
  options.max_context = 5200;
  auto alone = open_tiny(*ckpt_, cfg_, 0, 1, nullptr, options);
  std::vector<Rows> reference;
  for (const Script& s : scripts) reference.push_back(solo(*alone, s, 1000));  // other pass boundaries
  options.kv_blocks = static_cast<std::int32_t>(blocks_for(scripts, kDefaultKvBlockSize)) + 3;
  auto runner = open_tiny(*ckpt_, cfg_, 0, 1, nullptr, options);
  expect_rows_match(batched(*runner, scripts, rng), reference, "tiny 5000-token prompt");
}

TEST_F(CudaRunnerTiny, SharedPrefixBlocksAreReadNotWritten) {
  // B shares A's first two (full) blocks and feeds only its own tail while A decodes.
  const auto v = static_cast<std::size_t>(cfg_.vocab_size);
  std::vector<std::int32_t> a(40), b(40);
  for (int i = 0; i < 40; ++i) a[i] = b[i] = 1000 + 37 * i;
  for (int i = 32; i < 40; ++i) b[i] = 5000 + 11 * i;
  RunnerOptions options;
  options.max_context = 64;
  auto alone = open_tiny(*ckpt_, cfg_, 0, 1, nullptr, options);
  std::vector<float> want_a(v), want_b(v);
  SingleSequence sa(*alone);
  sa.forward(a, 0, {});
  const std::int32_t next = 4242;
  sa.forward(std::span<const std::int32_t>(&next, 1), 40, want_a);
  SingleSequence(*alone).forward(b, 0, want_b);

  options.kv_blocks = 12;
  auto runner = open_tiny(*ckpt_, cfg_, 0, 1, nullptr, options);
  const std::vector<std::int32_t> table_a = {7, 2, 9}, table_b = {7, 2, 4};
  Batch first;
  first.add(a, 0, table_a, LogitsWanted::none);
  runner->step(first, {});
  Batch second;
  second.add(std::span<const std::int32_t>(&next, 1), 40, table_a, LogitsWanted::last);
  second.add(std::span(b).subspan(32), 32, table_b, LogitsWanted::last);
  std::vector<float> got(2 * v);
  runner->step(second, got);
  EXPECT_GE(cosine(std::span<const float>(got.data(), v), want_a), 0.999);
  EXPECT_GE(cosine(std::span<const float>(got.data() + v, v), want_b), 0.999);
  EXPECT_EQ(argmax(std::span<const float>(got.data(), v)), argmax(want_a));
}

// Greedy picks made on the device equal model::greedy_pick of the same rows, on the graph path (decode-only
// steps) and the eager one (a step with a prefill), with the logits rows asked beside them unchanged.
TEST_F(CudaRunnerTiny, DevicePicksAreTheGreedyPicksOfTheRows) {
  const auto v = static_cast<std::size_t>(cfg_.vocab_size);
  RunnerOptions options;
  options.max_context = 64;
  options.kv_blocks = 16;
  auto runner = open_tiny(*ckpt_, cfg_, 0, 1, nullptr, options);
  ASSERT_TRUE(runner->picks_on_device());
  std::vector<std::vector<std::int32_t>> prompts(3);
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < 10 + 7 * s; ++i) prompts[s].push_back(100 + 31 * i + 977 * s);
  const std::vector<std::vector<std::int32_t>> tables = {{0, 1}, {2, 3}, {4, 5}};
  Batch prefill;
  for (int s = 0; s < 3; ++s) prefill.add(prompts[s], 0, tables[s], LogitsWanted::none);
  runner->step(prefill, {});
  const std::vector<std::int32_t> next = {7, 8, 9};
  // Decode-only (graph) and, for the eager path, the same decodes beside a prefill of a fourth sequence.
  const std::vector<std::int32_t> extra(12, 55), extra_table = {6};
  for (const bool eager : {false, true}) {
    auto make = [&](std::initializer_list<LogitsWanted> wants) {
      Batch b;
      int s = 0;
      for (const LogitsWanted w : wants) {
        b.add(std::span<const std::int32_t>(&next[s], 1), static_cast<std::int32_t>(prompts[s].size()), tables[s], w);
        ++s;
      }
      if (eager) b.add(extra, 0, extra_table, LogitsWanted::none);
      return b;
    };
    std::vector<float> rows(3 * v);
    runner->step(make({LogitsWanted::last, LogitsWanted::last, LogitsWanted::last}), rows);
    std::vector<std::int32_t> want(3);
    for (int s = 0; s < 3; ++s) want[s] = model::greedy_pick(std::span<const float>(rows.data() + s * v, v));

    std::vector<std::int32_t> picks(3, -1);
    runner->step(make({LogitsWanted::argmax, LogitsWanted::argmax, LogitsWanted::argmax}), {}, picks);
    EXPECT_EQ(picks, want) << (eager ? "eager" : "graph");

    std::vector<float> middle(v);
    std::vector<std::int32_t> two(2, -1);
    runner->step(make({LogitsWanted::argmax, LogitsWanted::last, LogitsWanted::argmax}), middle, two);
    EXPECT_EQ(two, (std::vector<std::int32_t>{want[0], want[2]})) << (eager ? "eager" : "graph");
    EXPECT_GE(cosine(middle, std::span<const float>(rows.data() + v, v)), 0.99999) << (eager ? "eager" : "graph");
    EXPECT_EQ(argmax(middle), want[1]);
  }
}

TEST(CudaRunnerRandom, RandomWeightsAreDeterministicAndFinite) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const model::ModelConfig cfg = model::preset_config("qwen3-0.6b");
  auto make = [&] {
    RunnerOptions o;
    o.max_context = 512;
    return make_cuda_runner(cfg, nullptr, model::ShardPlan::make(cfg, 0, 1), Device{Device::Kind::cuda, 0},
                            std::make_shared<dist::LocalCommunicator>(), o);
  };
  std::vector<std::int32_t> prompt(300);
  std::iota(prompt.begin(), prompt.end(), 1000);
  std::vector<float> a(static_cast<std::size_t>(cfg.vocab_size)), b(a.size());
  auto ra = make(), rb = make();
  SingleSequence(*ra).forward(prompt, 0, a);
  SingleSequence(*rb).forward(prompt, 0, b);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float x) { return std::isfinite(x); }));
  EXPECT_GT(*std::max_element(a.begin(), a.end()), *std::min_element(a.begin(), a.end()));
}

}  // namespace
}  // namespace neuron::backend::cuda

#else
TEST(CudaRunnerTiny, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
