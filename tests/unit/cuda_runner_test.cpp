// The CUDA runner end to end on the bundled qwen3-tiny-a: bf16 logits against
// the golden float32 ones from transformers, decode (graph replay) against
// prefill, TP=2 on one GPU (Gloo host-staged all-reduce) against TP=1, and
// clean failures (bad input, out of memory) that leave the process serving.
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>
#include <cstdlib>
#include <vector>

#include "backend/cuda/cuda_runner.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "dist/factory.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda {
namespace {

const std::filesystem::path kModel = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";
const std::filesystem::path kGolden = std::filesystem::path(NEURON_TEST_DATA) / "qwen3-tiny-a";

std::unique_ptr<ModelRunner> open_tiny(const io::Checkpoint& ckpt, const model::Qwen3Config& cfg, int rank = 0,
                                       int world = 1, std::shared_ptr<dist::Communicator> comm = nullptr,
                                       RunnerOptions options = {}) {
  if (!comm) comm = std::make_shared<dist::LocalCommunicator>();
  return make_cuda_runner(cfg, &ckpt, model::ShardPlan::make(cfg, rank, world), Device{Device::Kind::cuda, 0},
                          std::move(comm), options);
}

double cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

std::int32_t argmax(std::span<const float> v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy tokens: prefill the prompt, then one decode step per new token.
std::vector<std::int32_t> greedy(ModelRunner& r, const std::vector<std::int32_t>& prompt, int steps) {
  const auto v = static_cast<std::size_t>(r.config().vocab_size);
  std::vector<float> logits(v);
  r.clear_kv_cache();
  r.forward(prompt, 0, logits);
  std::vector<std::int32_t> out;
  auto pos = static_cast<std::int32_t>(prompt.size());
  for (int i = 0; i < steps; ++i) {
    out.push_back(argmax(logits));
    if (i + 1 < steps) r.forward(std::span<const std::int32_t>(&out.back(), 1), pos++, logits);
  }
  return out;
}

class CudaRunnerTiny : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    cfg_ = model::load_model_configs(kModel).model;
    ckpt_ = std::make_unique<io::Checkpoint>(io::Checkpoint::open_dir(kModel));
  }
  model::Qwen3Config cfg_;
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
    runner->clear_kv_cache();
    if (first > 0) runner->forward(std::span(ids).first(first), 0, {});
    std::vector<float> logits(recorded * v);
    runner->forward(std::span(ids).subspan(first), static_cast<std::int32_t>(first), logits);
    for (std::size_t i = 0; i < recorded; ++i) {
      std::span<const float> row(logits.data() + i * v, v);
      const float margin = top_logits[i][0] - top_logits[i][1];
      if (margin > 0.05f) EXPECT_EQ(argmax(row), top_ids[i][0]) << name << " position " << first + i;
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
  runner->forward(prompt, 0, logits);
  std::vector<std::int32_t> seq = prompt;
  for (int i = 0; i < 40; ++i) {
    seq.push_back(argmax(logits));
    runner->forward(std::span(seq).last(1), static_cast<std::int32_t>(seq.size() - 1), logits);
    step_logits.push_back(logits);
  }
  // Prefill of the whole sequence from a cleared cache gives every row at once.
  runner->clear_kv_cache();
  std::vector<float> all(seq.size() * v);
  runner->forward(seq, 0, all);
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
  layered->clear_kv_cache();
  layered->forward(prompt, 0, a);
  fused->forward(prompt, 0, b);
  auto pos = static_cast<std::int32_t>(prompt.size());
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i, ++pos) {
    const std::span<const std::int32_t> one(&tokens[i], 1);
    layered->forward(one, pos, a);
    fused->forward(one, pos, b);
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
  auto runner = open_tiny(*ckpt_, cfg_, 0, 1, nullptr, options);
  EXPECT_EQ(runner->max_context(), 64);
  const auto v = static_cast<std::size_t>(cfg_.vocab_size);
  std::vector<float> logits(v), again(v);
  const std::vector<std::int32_t> ok = {1, 2, 3};
  runner->forward(ok, 0, logits);
  auto kind_of = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind();
    }
    return std::string("no error");
  };
  const std::vector<std::int32_t> bad = {1, static_cast<std::int32_t>(cfg_.vocab_size)};
  EXPECT_EQ(kind_of([&] { runner->forward(bad, 0, logits); }), errc::invalid_argument);
  const std::vector<std::int32_t> negative = {-1};
  EXPECT_EQ(kind_of([&] { runner->forward(negative, 0, logits); }), errc::invalid_argument);
  EXPECT_EQ(kind_of([&] { runner->forward(ok, 62, logits); }), errc::context_length_exceeded);
  std::vector<float> wrong(v + 1);
  EXPECT_EQ(kind_of([&] { runner->forward(ok, 0, wrong); }), errc::invalid_argument);
  EXPECT_EQ(kind_of([&] { runner->forward({}, 0, logits); }), errc::invalid_argument);
  runner->forward(ok, 0, again);
  EXPECT_EQ(logits, again);
}

TEST_F(CudaRunnerTiny, OutOfMemoryAtLoadIsACleanErrorAndMemoryIsReturned) {
  std::size_t free_before = 0, total = 0, free_after = 0;
  NEURON_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  model::Qwen3Config huge = model::preset_config("qwen3-32b");
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
  runner->forward(ok, 0, logits);
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
}

TEST(CudaRunnerRandom, RandomWeightsAreDeterministicAndFinite) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const model::Qwen3Config cfg = model::preset_config("qwen3-0.6b");
  auto make = [&] {
    RunnerOptions o;
    o.max_context = 512;
    return make_cuda_runner(cfg, nullptr, model::ShardPlan::make(cfg, 0, 1), Device{Device::Kind::cuda, 0},
                            std::make_shared<dist::LocalCommunicator>(), o);
  };
  std::vector<std::int32_t> prompt(300);
  std::iota(prompt.begin(), prompt.end(), 1000);
  std::vector<float> a(static_cast<std::size_t>(cfg.vocab_size)), b(a.size());
  make()->forward(prompt, 0, a);
  make()->forward(prompt, 0, b);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float x) { return std::isfinite(x); }));
  EXPECT_GT(*std::max_element(a.begin(), a.end()), *std::min_element(a.begin(), a.end()));
}

}  // namespace
}  // namespace neuron::backend::cuda

#else
TEST(CudaRunnerTiny, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
