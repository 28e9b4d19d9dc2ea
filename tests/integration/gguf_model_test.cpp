// Quantized and GGUF models end to end on the CPU runner:
// - the fixture written as a bf16 GGUF gives transformers' exact greedy
//   tokens (tests/data/qwen3-tiny-a/golden.json), as the safetensors do;
// - as a Q8_0 GGUF, and quantized to q8_0 at load, the same first 8 tokens
//   (and the two load paths give identical logits: the same blocks);
// - tensor parallelism with quantize-at-load equals one rank, and a split
//   that cuts blocks is refused with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "engine/model_loader.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "model/shard_weights.hpp"
#include "support/gguf_writer.hpp"
#include "support/quant_model.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"

namespace neuron {
namespace {

using namespace std::chrono_literals;

const std::filesystem::path kTiny = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";

struct TinyPrompt {
  std::string name;
  std::vector<std::int32_t> ids, greedy;
};

std::vector<TinyPrompt> golden() {
  std::ifstream in(std::string(NEURON_TEST_DATA) + "/qwen3-tiny-a/golden.json");
  const auto j = nlohmann::json::parse(in);
  std::vector<TinyPrompt> out;
  for (const auto& p : j.at("prompts"))
    out.push_back({p.at("name").get<std::string>(), p.at("ids").get<std::vector<std::int32_t>>(),
                   p.at("greedy").get<std::vector<std::int32_t>>()});
  return out;
}

struct Greedy {
  std::vector<std::int32_t> tokens;
  std::vector<float> last_logits;
};

Greedy greedy(backend::ModelRunner& runner, const std::vector<std::int32_t>& prompt, std::size_t steps) {
  Greedy r;
  backend::SingleSequence seq(runner);
  std::vector<float> logits(static_cast<std::size_t>(runner.config().vocab_size));
  seq.forward(prompt, 0, logits);
  auto pos = static_cast<std::int32_t>(prompt.size());
  while (r.tokens.size() < steps) {
    const auto next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.tokens.push_back(next);
    const std::array<std::int32_t, 1> one{next};
    seq.forward(one, pos++, logits);
  }
  r.last_logits = logits;
  return r;
}

engine::LoadOptions options(const std::filesystem::path& model, int tp = 1) {
  engine::LoadOptions o;
  o.model_dir = model;
  o.model_id = "gguf-test";
  o.tensor_parallel = tp;
  o.max_context = 1024;
  o.step_timeout = 20000ms;
  o.worker_binary = NEURON_BINARY;
  return o;
}

class GgufModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new test_support::TempDir("neuron-gguf-model");
    test_support::gguf_from_checkpoint(kTiny, quant::GgmlType::bf16).write(*tmp_ / "tiny-bf16.gguf");
    test_support::gguf_from_checkpoint(kTiny, quant::GgmlType::q8_0).write(*tmp_ / "tiny-q8_0.gguf");
  }
  static void TearDownTestSuite() { delete tmp_; }
  static inline test_support::TempDir* tmp_ = nullptr;
};

TEST_F(GgufModel, Bf16GgufGivesTheExactGreedyTokens) {
  auto runner = engine::open_runner(options(*tmp_ / "tiny-bf16.gguf"));
  for (const auto& p : golden()) EXPECT_EQ(greedy(*runner, p.ids, p.greedy.size()).tokens, p.greedy) << p.name;
}

// Q8_0 moves this random model's logits by about 1e-2 while its greedy
// margins go down to 1e-3 (golden.json's min_margin), so a token may flip:
// measured, 'chat' and 'fox' keep all 8 first tokens, 'single' the first 2
// and 'long' the first 6 (on both load paths: the GGUF also holds the
// embedding in Q8_0, quantize-at-load keeps it bf16). What must hold: those
// tokens, and the prompt's logits within 0.15 of bf16's (measured: at most
// 0.083, logits' spread about 2).
TEST_F(GgufModel, Q8_0GgufAndQuantizeAtLoadFollowTheGoldens) {
  auto from_gguf = engine::open_runner(options(*tmp_ / "tiny-q8_0.gguf"));
  auto o = options(kTiny);
  o.quantize = quant::GgmlType::q8_0;
  auto at_load = engine::open_runner(o);
  auto bf16 = engine::open_runner(options(kTiny));
  // Q8_0 holds the projections in about half the bytes of bf16 (the embedding stays bf16 at load).
  EXPECT_LT(at_load->memory().weight_bytes, bf16->memory().weight_bytes);
  const std::map<std::string, std::size_t> kept = {{"chat", 8}, {"fox", 8}, {"single", 2}, {"long", 6}};
  for (const auto& p : golden()) {
    const std::size_t k = kept.at(p.name);
    const std::vector<std::int32_t> want(p.greedy.begin(), p.greedy.begin() + static_cast<std::ptrdiff_t>(k));
    const Greedy a = greedy(*from_gguf, p.ids, k);
    EXPECT_EQ(a.tokens, want) << p.name;
    const Greedy b = greedy(*at_load, p.ids, k);
    EXPECT_EQ(b.tokens, want) << p.name;
    const Greedy ref = greedy(*bf16, p.ids, 0), q = greedy(*from_gguf, p.ids, 0);
    float worst = 0;
    for (std::size_t i = 0; i < ref.last_logits.size(); ++i) worst = std::max(worst, std::abs(ref.last_logits[i] - q.last_logits[i]));
    EXPECT_LT(worst, 0.15f) << p.name;
    std::cout << "[ q8_0 ] " << p.name << ": max |logit - bf16 logit| at the prompt's end = " << worst << "\n";
  }
}

TEST_F(GgufModel, QuantizeAtLoadRefusesWhatItCannotDo) {
  auto o = options(kTiny);
  o.quantize = quant::GgmlType::q4_k;  // rows of 32: not whole 256-element blocks
  try {
    (void)engine::open_runner(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::unsupported_arch);
    EXPECT_NE(std::string(e.what()).find("not whole blocks of 256"), std::string::npos) << e.what();
  }
  o.quantize = quant::GgmlType::q5_k;
  EXPECT_THROW((void)engine::open_runner(o), Error);
  o.quantize = quant::GgmlType::fp8_e4m3;  // a CUDA format
  try {
    (void)engine::open_runner(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::unsupported_arch);
    EXPECT_NE(std::string(e.what()).find("runs on CUDA"), std::string::npos) << e.what();
  }
  // TP=2 gives each rank 48 of down_proj's 96 columns: not whole Q8_0 blocks.
  o = options(kTiny, 2);
  o.quantize = quant::GgmlType::q8_0;
  try {
    (void)engine::open_runner(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block boundaries"), std::string::npos) << e.what();
  }
}

// Load plans count a quantized model's weights as the runner will hold them
// (an upper bound), so the memory checks and a GPU's KV budget are not made
// on bf16 sizes: quantize-at-load saves on the projections, a GGUF holds at
// most its file.
TEST_F(GgufModel, LoadPlansCountQuantizedWeightsAsTheyWillBeHeld) {
  const model::ModelConfig cfg = model::load_model_configs(kTiny).model;
  const auto bf16 = engine::plan_load(options(kTiny), cfg);
  auto o = options(kTiny);
  o.quantize = quant::GgmlType::q8_0;
  const auto q8 = engine::plan_load(o, cfg);
  const std::uint64_t kv = bf16.rank_bytes[0] - static_cast<std::uint64_t>(model::weight_elements(cfg, model::ShardPlan::make(cfg, 0, 1))) * 2;
  const auto projections = static_cast<std::uint64_t>(model::projection_elements(cfg, model::ShardPlan::make(cfg, 0, 1)));
  EXPECT_EQ(bf16.rank_bytes[0] - q8.rank_bytes[0], 2 * projections - (projections * 272 + 255) / 256)
      << "q8_0: 34 bytes per 32 projection weights instead of 64";
  // What the runner then holds: the same to within its f32 copies of the norms (the plan counts them as bf16).
  const auto near = [](double held, double planned) { return std::abs(held - planned) <= 0.01 * planned; };
  const std::uint64_t held = engine::open_runner(o)->memory().weight_bytes;
  EXPECT_PRED2(near, held, q8.rank_bytes[0] - kv);
  const auto from_file = engine::plan_load(options(*tmp_ / "tiny-q8_0.gguf"), cfg);
  EXPECT_LE(from_file.rank_bytes[0] - kv, std::filesystem::file_size(*tmp_ / "tiny-q8_0.gguf"));
  // A GGUF's bound is its file (tensors and the tokenizer's metadata): above what the runner holds.
  EXPECT_GE(from_file.rank_bytes[0] - kv, engine::open_runner(options(*tmp_ / "tiny-q8_0.gguf"))->memory().weight_bytes);
}

// A model whose shards split into whole blocks: q4_k and q8_0 at TP=2 equal TP=1.
TEST(QuantizedTp, TwoRanksEqualOneWithTheSameQuantization) {
  test_support::TempDir tmp("neuron-quant-tp");
  const model::ModelConfig c = test_support::quant_test_config();
  model::write_random_checkpoint(tmp.path(), c, {.seed = 5});
  std::vector<std::int32_t> prompt;
  std::mt19937 rng(3);
  for (int i = 0; i < 7; ++i) prompt.push_back(static_cast<std::int32_t>(rng() % 384));
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_k}) {
    auto one = options(tmp.path());
    one.quantize = type;
    const Greedy want = greedy(*engine::open_runner(one), prompt, 12);
    auto two = options(tmp.path(), 2);
    two.quantize = type;
    const Greedy got = greedy(*engine::open_runner(two), prompt, 12);
    EXPECT_EQ(got.tokens, want.tokens) << quant::ggml_type_name(type);
    for (std::size_t i = 0; i < want.last_logits.size(); ++i)
      ASSERT_NEAR(got.last_logits[i], want.last_logits[i], 1e-3f * std::max(1.0f, std::abs(want.last_logits[i])))
          << quant::ggml_type_name(type) << " logit " << i;
  }
}

// A reduced activation level's greedy run against the exact one: the same
// tokens, logits within 5% of the largest, and not all equal (the rounding
// happened: `unrounded` says what did not run otherwise).
void expect_close_but_rounded(const Greedy& got, const Greedy& want, const char* unrounded) {
  EXPECT_EQ(got.tokens, want.tokens);
  float biggest = 0.0f, differs = 0.0f;
  for (float v : want.last_logits) biggest = std::max(biggest, std::abs(v));
  for (std::size_t i = 0; i < want.last_logits.size(); ++i) {
    EXPECT_NEAR(got.last_logits[i], want.last_logits[i], 0.05f * biggest) << "logit " << i;
    differs = std::max(differs, std::abs(got.last_logits[i] - want.last_logits[i]));
  }
  EXPECT_GT(differs, 0.0f) << unrounded;
}

// Int8 activations (NEURON_CPU_ACTIVATIONS=int8, backend/cpu/gemm_quant_few.hpp)
// through a whole runner: a q4_k model's greedy tokens and logits stay close to
// the f32 ones, and differ from them (the int8 kernels ran), where the CPU has
// the kernels.
TEST(QuantizedInt8, GreedyTokensFollowTheF32Ones) {
  if (!backend::cpu::gemm_quant_few_int8(backend::cpu::selected_isa(), quant::GgmlType::q4_k))
    GTEST_SKIP() << "no AVX2 here";
  test_support::TempDir tmp("neuron-quant-int8");
  model::write_random_checkpoint(tmp.path(), test_support::quant_test_config(), {.seed = 5});
  std::vector<std::int32_t> prompt;
  std::mt19937 rng(4);
  for (int i = 0; i < 7; ++i) prompt.push_back(static_cast<std::int32_t>(rng() % 384));
  auto o = options(tmp.path());
  o.quantize = quant::GgmlType::q4_k;
  const auto before = backend::cpu::cpu_activations();
  backend::cpu::set_cpu_activations(backend::cpu::Activations::f32);
  const Greedy want = greedy(*engine::open_runner(o), prompt, 6);
  backend::cpu::set_cpu_activations(backend::cpu::Activations::int8);
  const Greedy got = greedy(*engine::open_runner(o), prompt, 6);
  backend::cpu::set_cpu_activations(before);
  expect_close_but_rounded(got, want, "the int8 kernels did not run");
}

// Bf16 activations (NEURON_CPU_ACTIVATIONS=bf16, backend/cpu/activations.hpp)
// through a whole runner: its KV cache holds bf16 (twice the positions in the
// same budget), and on AVX-512 BF16 CPUs a bf16 model's prefill (a prompt
// past the few-token kernels) rounds x to bf16; the greedy tokens and logits
// stay close to the exact ones, and differ from them (the rounding happened).
TEST(ReducedActivations, Bf16PrefillAndKvCacheFollowTheExactOnes) {
  test_support::TempDir tmp("neuron-bf16-activations");
  model::write_random_checkpoint(tmp.path(), test_support::quant_test_config(), {.seed = 6});
  std::vector<std::int32_t> prompt;
  std::mt19937 rng(5);
  for (int i = 0; i < 70; ++i) prompt.push_back(static_cast<std::int32_t>(rng() % 384));
  const auto before = backend::cpu::cpu_activations();
  backend::cpu::set_cpu_activations(backend::cpu::Activations::f32);
  const auto exact = engine::open_runner(options(tmp.path()));
  backend::cpu::set_cpu_activations(backend::cpu::Activations::bf16);
  const auto reduced = engine::open_runner(options(tmp.path()));
  // The same KV budget holds twice the positions.
  EXPECT_EQ(reduced->kv_pool().bytes_per_block * 2, exact->kv_pool().bytes_per_block);
  EXPECT_EQ(reduced->kv_pool().num_blocks, 2 * exact->kv_pool().num_blocks);
  EXPECT_EQ(reduced->memory().kv_cache_bytes, exact->memory().kv_cache_bytes);
  const Greedy got = greedy(*reduced, prompt, 6);
  backend::cpu::set_cpu_activations(backend::cpu::Activations::f32);
  const Greedy want = greedy(*exact, prompt, 6);
  backend::cpu::set_cpu_activations(before);
  expect_close_but_rounded(got, want, "nothing was rounded");
}

}  // namespace
}  // namespace neuron
