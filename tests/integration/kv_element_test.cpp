// What a bf16 KV cache costs a quantized model, and the default that follows
// (issue 30): a random q4_k model's logits over 300 positions, teacher-forced
// on the f32 run's greedy tokens, at the int8 level (int8 x, bf16 cache)
// against f32 (bench/CPU.md has the numbers). Under auto a quantized model
// takes the int8 level (activations.hpp: quantized_weights), so its cache is
// bf16; the same model unquantized keeps an f32 one.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <random>
#include <vector>

#include "backend/cpu/activations.hpp"
#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "engine/model_loader.hpp"
#include "model/random_checkpoint.hpp"
#include "support/quant_model.hpp"
#include "support/temp_dir.hpp"

namespace neuron {
namespace {

using backend::cpu::Activations;
using namespace std::chrono_literals;

engine::LoadOptions options(const std::filesystem::path& model) {
  engine::LoadOptions o;
  o.model_dir = model;
  o.model_id = "kv-test";
  o.max_context = 1024;
  o.step_timeout = 20000ms;
  o.worker_binary = NEURON_BINARY;
  return o;
}

// The logits of every position of `tokens` after `prompt`, one decode step at a time.
std::vector<std::vector<float>> forced(backend::ModelRunner& runner, const std::vector<std::int32_t>& prompt,
                                      const std::vector<std::int32_t>& tokens) {
  backend::SingleSequence seq(runner);
  std::vector<float> logits(static_cast<std::size_t>(runner.config().vocab_size));
  seq.forward(prompt, 0, logits);
  std::vector<std::vector<float>> out{logits};
  auto pos = static_cast<std::int32_t>(prompt.size());
  for (std::int32_t t : tokens) {
    const std::array<std::int32_t, 1> one{t};
    seq.forward(one, pos++, logits);
    out.push_back(logits);
  }
  return out;
}

TEST(KvElement, Bf16CacheFollowsTheF32One) {
  test_support::TempDir tmp("neuron-kv-cost");
  model::write_random_checkpoint(tmp.path(), test_support::quant_test_config(), {.seed = 9});
  auto o = options(tmp.path());
  o.quantize = quant::GgmlType::q4_k;
  std::vector<std::int32_t> prompt;
  std::mt19937 rng(6);
  for (int i = 0; i < 8; ++i) prompt.push_back(static_cast<std::int32_t>(rng() % 384));
  const auto before = backend::cpu::cpu_activations();
  backend::cpu::set_cpu_activations(Activations::f32);
  const auto f32_cache = engine::open_runner(o);  // the exact level: f32 x, f32 cache
  backend::cpu::set_cpu_activations(Activations::int8);
  const auto bf16_cache = engine::open_runner(o);
  backend::cpu::set_cpu_activations(before);
  ASSERT_EQ(bf16_cache->kv_pool().bytes_per_block * 2, f32_cache->kv_pool().bytes_per_block);
  // The f32 run's greedy tokens over 300 positions, then both runs forced on them.
  std::vector<std::int32_t> tokens;
  {
    backend::SingleSequence seq(*f32_cache);
    std::vector<float> logits(384);
    seq.forward(prompt, 0, logits);
    auto pos = static_cast<std::int32_t>(prompt.size());
    while (tokens.size() < 300) {
      tokens.push_back(static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      const std::array<std::int32_t, 1> one{tokens.back()};
      seq.forward(one, pos++, logits);
    }
  }
  const auto run = [&](backend::ModelRunner& runner, Activations level) {
    backend::cpu::set_cpu_activations(level);
    auto logits = forced(runner, prompt, tokens);
    backend::cpu::set_cpu_activations(before);
    return logits;
  };
  // Top-1 agreement and the worst |logit difference| / the position's logit range.
  const auto compare = [](const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                          const char* what) {
    int agree = 0;
    double worst = 0;
    for (std::size_t p = 0; p < want.size(); ++p) {
      const auto [lo, hi] = std::minmax_element(want[p].begin(), want[p].end());
      double diff = 0;
      for (std::size_t i = 0; i < want[p].size(); ++i) diff = std::max(diff, double(std::abs(got[p][i] - want[p][i])));
      worst = std::max(worst, diff / (*hi - *lo));
      agree += std::max_element(got[p].begin(), got[p].end()) - got[p].begin() ==
               std::max_element(want[p].begin(), want[p].end()) - want[p].begin();
    }
    std::cout << what << ": top-1 agreement " << agree << " / " << want.size() << ", worst logit error / range "
              << worst << "\n";
    EXPECT_GE(agree, static_cast<int>(want.size()) * 9 / 10) << what;
    EXPECT_LT(worst, 0.05) << what;
  };
  const auto want = run(*f32_cache, Activations::f32);
  const auto got = run(*bf16_cache, Activations::int8);
  compare(got, want, "int8 level (bf16 cache) against f32");
  backend::cpu::set_cpu_activations(Activations::automatic);
  const auto automatic = engine::open_runner(o);
  auto unquantized = o;
  unquantized.quantize.reset();
  const auto float_weights = engine::open_runner(unquantized);
  backend::cpu::set_cpu_activations(before);
  EXPECT_EQ(automatic->kv_pool().bytes_per_block, bf16_cache->kv_pool().bytes_per_block)
      << "auto: a quantized model's cache is bf16";
  EXPECT_EQ(float_weights->kv_pool().bytes_per_block, f32_cache->kv_pool().bytes_per_block)
      << "auto: a bf16 model's cache stays f32";
  const auto with_auto = run(*automatic, Activations::automatic);
  compare(with_auto, want, "auto (a quantized model: the int8 level) against f32");
}

}  // namespace
}  // namespace neuron
