// The families beyond Qwen3 dense on CUDA (bf16): Llama 3 (no q/k norm,
// llama3 RoPE) against transformers' float32 goldens by logits tolerance and
// top-1 agreement where the margin is clear, and Qwen3-MoE (routed on the
// device for passes of up to 256 tokens, on the host for longer ones and with
// NEURON_CUDA_MOE_DEVICE=0) against the CPU runner in f32
// (itself exact against transformers: family_golden_test.cpp) on a random
// checkpoint of CUDA-sized heads, dense and sparse layers mixed. Expert
// parallelism (whole experts a rank) at two and four ranks sharing the GPU
// against one rank, on that checkpoint and on qwen3_5_moe-a (a shared expert).
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <future>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_runner.hpp"
#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "dist/communicator.hpp"
#include "dist/factory.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "model/shard.hpp"
#include "quant/ggml_type.hpp"
#include "support/cosine.hpp"
#include "support/env_guard.hpp"
#include "support/temp_dir.hpp"
#include "support/argmax.hpp"

namespace neuron::backend::cuda {
namespace {

using test_support::cosine;

using test_support::argmax;

std::unique_ptr<ModelRunner> open_cuda(const model::ModelConfig& cfg, const io::Checkpoint& ckpt,
                                       std::optional<quant::GgmlType> quantize = std::nullopt) {
  return make_cuda_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), Device{Device::Kind::cuda, 0},
                          std::make_shared<dist::LocalCommunicator>(), {.max_context = 1024, .quantize = quantize});
}

TEST(CudaFamily, LlamaLogitsMatchGoldenFloat32) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::filesystem::path dir = std::filesystem::path(NEURON_TEST_DATA) / "families" / "llama-a";
  const auto cfg = model::load_model_configs(dir).model;
  const auto ckpt = io::Checkpoint::open_dir(dir);
  auto runner = open_cuda(cfg, ckpt);
  nlohmann::json golden;
  std::ifstream(dir / "golden.json") >> golden;
  io::SafetensorsFile last(dir / "golden.safetensors");
  const auto v = static_cast<std::size_t>(cfg.vocab_size);
  for (const auto& p : golden["prompts"]) {
    const std::string name = p["name"];
    const auto ids = p["prompt_ids"].get<std::vector<std::int32_t>>();
    const auto& top5 = p["top5"];
    const std::size_t first = top5.front()["pos"].get<std::size_t>(), n = ids.size();
    SingleSequence seq(*runner);
    if (first > 0) seq.forward(std::span(ids).first(first), 0, {});
    std::vector<float> logits((n - first) * v);
    seq.forward(std::span(ids).subspan(first), static_cast<std::int32_t>(first), logits);
    for (const auto& t : top5) {
      const auto pos = t["pos"].get<std::size_t>();
      const auto top_ids = t["ids"].get<std::vector<std::int32_t>>();
      const auto top_logits = t["logits"].get<std::vector<float>>();
      std::span<const float> row(logits.data() + (pos - first) * v, v);
      if (top_logits[0] - top_logits[1] > 0.05f) {
        EXPECT_EQ(argmax(row), top_ids[0]) << name << " position " << pos;
      }
      double err = 0, scale = 0;
      for (std::size_t k = 0; k < 5; ++k) {
        err = std::max(err, double(std::abs(row[static_cast<std::size_t>(top_ids[k])] - top_logits[k])));
        scale = std::max(scale, double(std::abs(top_logits[k])));
      }
      EXPECT_LE(err, 0.03 * std::max(scale, 1.0)) << name << " position " << pos << ": top-5 logits off";
    }
    if (const auto it = last.tensors().find(name + ".last_logits"); it != last.tensors().end()) {
      const double cos = cosine(std::span<const float>(logits.data() + (n - 1 - first) * v, v), it->second.to_f32());
      EXPECT_GE(cos, 0.999) << name;
      std::printf("[llama golden] %-6s n=%zu cosine(last)=%.6f\n", name.c_str(), n, cos);
    }
  }
}

// A Qwen3-MoE shape the CUDA kernels take (head_dim 16), layer 1 dense (mlp_only_layers), the others sparse.
model::ModelConfig small_moe() {
  model::ModelConfig c;
  c.model_type = "qwen3_moe";
  c.vocab_size = 512;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 4096;
  c.rope.theta = 1e6;
  c.moe = {.num_experts = 8, .experts_per_token = 2, .intermediate_size = 32, .norm_topk_prob = true,
           .sparse_step = 1, .mlp_only_layers = {1}};
  return c;
}

// Both runners quantize at load when `quantize` says so (the same blocks: quant::quantize_row).
void moe_matches_the_cpu_runner(std::size_t prompt_len, const model::ModelConfig& shape = small_moe(),
                                std::optional<quant::GgmlType> quantize = std::nullopt) {
  test_support::TempDir tmp("neuron-cuda-moe");
  model::write_random_checkpoint(tmp.path(), shape, {.seed = 7});
  const auto cfg = model::load_model_configs(tmp.path()).model;
  const auto ckpt = io::Checkpoint::open_dir(tmp.path());
  auto cpu = backend::cpu::make_cpu_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), nullptr,
                                           {.max_context = 1024, .quantize = quantize});
  auto gpu = open_cuda(cfg, ckpt, quantize);
  std::mt19937 rng(3);
  std::vector<std::int32_t> prompt(prompt_len);
  for (auto& t : prompt) t = static_cast<std::int32_t>(rng() % 512);
  const auto v = static_cast<std::size_t>(cfg.vocab_size);
  SingleSequence a(*cpu), b(*gpu);
  std::vector<float> want(prompt.size() * v), got(prompt.size() * v);
  a.forward(prompt, 0, want);
  b.forward(prompt, 0, got);
  // bf16 can flip a near-tie between a token's k-th and (k+1)-th expert (random weights make such ties
  // common): that token then differs by one expert's share (cosine ~0.95 seen, in a 300-token prompt). Every
  // position must stay close, nearly all exact.
  int close = 0, total = 0;
  auto compare = [&](std::span<const float> g, std::span<const float> w, const std::string& where) {
    const double cos = cosine(g, w);
    EXPECT_GE(cos, 0.9) << where;
    close += cos >= 0.999;
    ++total;
  };
  for (std::size_t p = 0; p < prompt.size(); ++p)
    compare(std::span<const float>(got.data() + p * v, v), std::span<const float>(want.data() + p * v, v),
            "prefill position " + std::to_string(p));
  // Greedy decode, both fed the CPU's picks.
  std::vector<float> lw(v), lg(v);
  std::copy(want.end() - static_cast<std::ptrdiff_t>(v), want.end(), lw.begin());
  std::copy(got.end() - static_cast<std::ptrdiff_t>(v), got.end(), lg.begin());
  auto pos = static_cast<std::int32_t>(prompt.size());
  int agree = 0;
  for (int s = 0; s < 16; ++s) {
    const std::int32_t next = argmax(lw);
    std::vector<float> sorted(lw);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > 0.05f) {
      EXPECT_EQ(argmax(lg), next) << "decode step " << s;
      ++agree;
    }
    const std::int32_t one[] = {next};
    a.forward(one, pos, lw);
    b.forward(one, pos, lg);
    ++pos;
    compare(lg, lw, "decode step " + std::to_string(s));
  }
  EXPECT_GT(agree, 0);
  EXPECT_GE(close, total * 9 / 10) << close << " of " << total << " rows within cosine 0.999";
  std::printf("[moe vs cpu] prompt %zu: %d of %d rows within cosine 0.999, %d clear greedy picks agreed\n", prompt_len,
              close, total, agree);
}

TEST(CudaFamily, Qwen3MoeMatchesTheCpuRunner) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  moe_matches_the_cpu_runner(40);  // device routing, decode in graphs
}

TEST(CudaFamily, Qwen3MoeLongPromptRoutesOnTheHostThenDecodesOnTheDevice) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  moe_matches_the_cpu_runner(300);
}

// Experts quantized at load to Q8_0 and Q4_K, at widths the grouped tensor-core kernels take (hidden and
// expert intermediate 256): a 600-token prompt runs on the device in two chunks of 512 tokens (16 experts,
// 8 a token: the grouping's 4096 pairs), then decodes on the device in graphs.
TEST(CudaFamily, Qwen3MoeQuantizedExpertsPrefillOnTheDeviceInChunks) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  model::ModelConfig c = small_moe();
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = 64;  // small_moe's 4 query and 2 KV heads
  c.moe.num_experts = 16;
  c.moe.experts_per_token = 8;
  c.moe.intermediate_size = 256;
  for (const quant::GgmlType type : {quant::GgmlType::q8_0, quant::GgmlType::q4_k}) {
    SCOPED_TRACE(quant::ggml_type_name(type));
    moe_matches_the_cpu_runner(600, c, type);
  }
}

TEST(CudaFamily, Qwen3MoeRoutedOnTheHostMatchesTheCpuRunner) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  test_support::EnvGuard host("NEURON_CUDA_MOE_DEVICE", "0");
  moe_matches_the_cpu_runner(40);
}

// Expert parallelism (ShardPlan::expert_parallel) on CUDA ranks sharing cuda:0, Gloo between them: each rank
// holds E / N whole experts and runs only the pairs routed to them, on the device path (passes of up to 64
// tokens: short prompts, and every decode step, which ranks of N > 1 run without graphs) and on the host path
// (longer prompts, or NEURON_CUDA_MOE_DEVICE=0); the all-reduce sums the ranks. Against one rank on the same
// GPU (its decode steps in CUDA graphs), all fed the same tokens: the same logits up to the f32 order of the
// partial sums, which bf16 rounding downstream may turn into a near-tied expert picked differently (so, as
// moe_matches_the_cpu_runner: every row close, nearly all within 0.999, and the clear greedy picks equal).
constexpr int kDecodeSteps = 8;

struct Trace {
  // [prompt] its prefill's logits (every position of a prompt up to 64 tokens, else the last: [rows, vocab]),
  // then kDecodeSteps decode steps' [vocab] each
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<std::int32_t>> picks;  // [prompt][kDecodeSteps] the tokens the decode steps were fed
};

// Each prompt, then its decode steps fed `fed`'s picks (null: this runner's own greedy picks).
Trace trace(ModelRunner& runner, const std::vector<std::vector<std::int32_t>>& prompts, std::size_t vocab,
            const Trace* fed) {
  Trace out;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<std::int32_t>& prompt = prompts[p];
    SingleSequence seq(runner);
    std::vector<float> rows((prompt.size() <= 64 ? prompt.size() : 1) * vocab);
    seq.forward(prompt, 0, rows);
    std::vector<float> last(rows.end() - static_cast<std::ptrdiff_t>(vocab), rows.end());
    std::vector<std::int32_t> picks;
    auto pos = static_cast<std::int32_t>(prompt.size());
    for (int s = 0; s < kDecodeSteps; ++s) {
      picks.push_back(fed ? fed->picks[p][static_cast<std::size_t>(s)] : argmax(last));
      seq.forward(std::span(&picks.back(), 1), pos++, last);
      rows.insert(rows.end(), last.begin(), last.end());
    }
    out.logits.push_back(std::move(rows));
    out.picks.push_back(std::move(picks));
  }
  return out;
}

void expert_parallel_matches_one_rank(const model::ModelConfig& cfg, const io::Checkpoint& ckpt,
                                      const std::vector<std::vector<std::int32_t>>& prompts, int ranks) {
  const auto v = static_cast<std::size_t>(cfg.vocab_size);
  Trace want;
  std::uint64_t whole_bytes = 0;
  {
    auto single = open_cuda(cfg, ckpt);
    whole_bytes = single->memory().weight_bytes;
    want = trace(*single, prompts, v, nullptr);
  }
  // What a rank does not hold of the experts (bf16): the other ranks' E - E / N of every sparse layer.
  std::int64_t sparse_layers = 0;
  for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l) sparse_layers += cfg.moe.sparse_layer(l);
  const auto others = static_cast<std::uint64_t>(sparse_layers * (cfg.moe.num_experts - cfg.moe.num_experts / ranks) *
                                                 3 * cfg.moe.intermediate_size * cfg.hidden_size * 2);
  const std::string id = dist::new_comm_id(dist::CommKind::gloo);
  std::vector<std::future<Trace>> futures;
  for (int r = 0; r < ranks; ++r)
    futures.push_back(std::async(std::launch::async, [&, r] {
      const auto plan = model::ShardPlan::make(cfg, r, ranks, /*expert_parallel=*/true);
      EXPECT_EQ(plan.experts, cfg.moe.num_experts / ranks);
      // Through make_runner, which once refused expert-parallel plans on CUDA devices.
      auto runner = backend::make_runner(cfg, &ckpt, plan, Device{Device::Kind::cuda, 0},
                                         dist::make_communicator(id, r, ranks), {.max_context = 1024});
      EXPECT_LE(runner->memory().weight_bytes + others, whole_bytes) << "rank " << r << " holds only its experts";
      return trace(*runner, prompts, v, &want);
    }));
  int close = 0, total = 0, clear = 0;
  std::string far;  // "rank/prompt/row:cosine" of each row under 0.999, for the failure message
  for (int r = 0; r < ranks; ++r) {
    const Trace got = futures[static_cast<std::size_t>(r)].get();
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      const std::vector<float>& g = got.logits[p];
      const std::vector<float>& w = want.logits[p];
      ASSERT_EQ(g.size(), w.size());
      for (std::size_t row = 0; row < w.size() / v; ++row) {
        const std::span<const float> gr(g.data() + row * v, v), wr(w.data() + row * v, v);
        const std::string where = "rank " + std::to_string(r) + " of " + std::to_string(ranks) + ", prompt of " +
                                  std::to_string(prompts[p].size()) + ", row " + std::to_string(row);
        const double cos = cosine(gr, wr);
        EXPECT_GE(cos, 0.9) << where;
        close += cos >= 0.999;
        ++total;
        if (cos < 0.999) far += " " + std::to_string(r) + "/" + std::to_string(p) + "/" + std::to_string(row) + ":" +
                                std::to_string(cos);
        std::vector<float> top(wr.begin(), wr.end());
        std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
        if (top[0] - top[1] > 0.05f) {
          EXPECT_EQ(argmax(gr), argmax(wr)) << where;
          ++clear;
        }
      }
    }
  }
  EXPECT_GT(clear, 0);
  EXPECT_GE(close, total * 9 / 10) << close << " of " << total << " rows within cosine 0.999; the others:" << far;
  std::printf("[moe expert parallel] %d ranks: %d of %d rows within cosine 0.999, %d clear greedy picks\n", ranks,
              close, total, clear);
}

std::vector<std::int32_t> random_prompt(std::size_t n, std::int32_t vocab) {
  std::mt19937 rng(static_cast<unsigned>(n));
  std::vector<std::int32_t> prompt(n);
  for (auto& t : prompt) t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab));
  return prompt;
}

// 40 tokens (the device path), 300 (the host path), each then decoding on the device; 4 and 2 whole experts
// a rank of 8.
TEST(CudaFamily, Qwen3MoeExpertParallelAtTwoAndFourRanksMatchesOneRank) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  test_support::TempDir tmp("neuron-cuda-moe-ep");
  model::write_random_checkpoint(tmp.path(), small_moe(), {.seed = 7});
  const auto cfg = model::load_model_configs(tmp.path()).model;
  const auto ckpt = io::Checkpoint::open_dir(tmp.path());
  const std::vector<std::vector<std::int32_t>> prompts = {random_prompt(40, 512), random_prompt(300, 512)};
  for (const int ranks : {2, 4}) {
    SCOPED_TRACE("expert parallel over " + std::to_string(ranks) + " ranks");
    expert_parallel_matches_one_rank(cfg, ckpt, prompts, ranks);
  }
}

TEST(CudaFamily, Qwen3MoeExpertParallelRoutedOnTheHostMatchesOneRank) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  test_support::EnvGuard host("NEURON_CUDA_MOE_DEVICE", "0");
  test_support::TempDir tmp("neuron-cuda-moe-ep");
  model::write_random_checkpoint(tmp.path(), small_moe(), {.seed = 7});
  const auto cfg = model::load_model_configs(tmp.path()).model;
  const auto ckpt = io::Checkpoint::open_dir(tmp.path());
  expert_parallel_matches_one_rank(cfg, ckpt, {random_prompt(40, 512)}, 2);
}

// A shared expert beside the routed ones (a hybrid: Gated DeltaNet layers too): not dealt out, it splits over
// the ranks as without expert parallelism, and its gated share joins the same all-reduce. The goldens' prompts
// (1 to 841 tokens: the device and the host path).
TEST(CudaFamily, Qwen3_5MoeExpertParallelWithItsSharedExpertMatchesOneRank) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::filesystem::path dir = std::filesystem::path(NEURON_TEST_DATA) / "families" / "qwen3_5_moe-a";
  const auto cfg = model::load_model_configs(dir).model;
  ASSERT_GT(cfg.moe.shared_expert_intermediate_size, 0);
  const auto ckpt = io::Checkpoint::open_dir(dir);
  nlohmann::json golden;
  std::ifstream(dir / "golden.json") >> golden;
  std::vector<std::vector<std::int32_t>> prompts;
  for (const auto& p : golden["prompts"]) prompts.push_back(p["prompt_ids"].get<std::vector<std::int32_t>>());
  ASSERT_TRUE(std::any_of(prompts.begin(), prompts.end(), [](const auto& p) { return p.size() > 64; }));
  expert_parallel_matches_one_rank(cfg, ckpt, prompts, 2);
}

}  // namespace
}  // namespace neuron::backend::cuda
#else
TEST(CudaFamily, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
