// GGUF files of the families beyond Qwen3 dense, in llama.cpp's storage
// (io/gguf_names.hpp): stacked quantized experts read as the experts they
// hold, and files whose layout cannot be undone refused with the tensor or
// key named. (The exact greedy tokens of bf16 GGUF llama and qwen3moe files
// are Families/FamilyGolden's *_gguf cases.)
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "engine/model_assets.hpp"
#include "engine/model_loader.hpp"
#include "engine/registry.hpp"
#include "io/gguf.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/gguf_config.hpp"
#include "model/random_checkpoint.hpp"
#include "model/rope.hpp"
#include "model/shard.hpp"
#include "support/gguf_writer.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"
#include "support/model_paths.hpp"

namespace neuron {
namespace {

using test_support::family_dir;

// [prompt.size(), vocab] logits of every prompt position.
std::vector<float> prompt_logits(const model::ModelConfig& cfg, const io::Checkpoint& ckpt,
                                 const std::vector<std::int32_t>& prompt, std::optional<quant::GgmlType> quantize) {
  auto runner = backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{}, nullptr,
                                     {.max_context = 256, .quantize = quantize});
  backend::SingleSequence seq(*runner);
  std::vector<float> logits(prompt.size() * static_cast<std::size_t>(cfg.vocab_size));
  seq.forward(prompt, 0, logits);
  return logits;
}

// Experts whose rows are whole Q8_0 blocks, stored stacked in one Q8_0 tensor
// per layer and projection: the same logits as the same experts quantized to
// Q8_0 at load from the safetensors (both hold the same blocks; the embedding
// and LM head stay bf16, the router f32 holds bf16 values exactly).
TEST(GgufFamily, StackedQuantizedExpertsAreTheExpertsQuantizedAtLoad) {
  test_support::TempDir tmp("neuron-gguf-moe");
  const auto cfg = model::ModelConfig::parse(R"({"model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 32, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
      "norm_topk_prob": true, "rope_theta": 1000000, "max_position_embeddings": 4096, "tie_word_embeddings": false})");
  model::write_random_checkpoint(tmp.path(), cfg, {.seed = 7});
  const auto gguf = tmp / "moe-q8_0.gguf";
  test_support::gguf_from_checkpoint(tmp.path(), quant::GgmlType::q8_0, quant::GgmlType::bf16).write(gguf);

  const io::GgufFile file(gguf);
  const auto* exps = [&]() -> const io::GgufTensor* {
    for (const auto& t : file.tensors())
      if (t.name == "blk.1.ffn_down_exps.weight") return &t;
    return nullptr;
  }();
  ASSERT_NE(exps, nullptr);
  EXPECT_EQ(exps->type, quant::GgmlType::q8_0);
  EXPECT_EQ(exps->ne, (std::vector<std::int64_t>{64, 64, 8}));
  const auto from_file = model::configs_from_gguf(file).model;
  EXPECT_EQ(from_file.moe, cfg.moe);

  const std::vector<std::int32_t> prompt = {1, 17, 301, 42, 511, 0, 256, 9};
  const auto a = prompt_logits(from_file, io::Checkpoint::open_files({gguf}), prompt, std::nullopt);
  const auto b = prompt_logits(cfg, io::Checkpoint::open_dir(tmp.path()), prompt, quant::GgmlType::q8_0);
  float worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  EXPECT_LE(worst, 1e-5f) << "every position of the prompt";
  // And they are Q8_0 experts, not bf16 ones: the bf16 model's logits differ.
  const auto c = prompt_logits(cfg, io::Checkpoint::open_dir(tmp.path()), prompt, std::nullopt);
  float moved = 0;
  for (std::size_t i = 0; i < a.size(); ++i) moved = std::max(moved, std::abs(a[i] - c[i]));
  EXPECT_GT(moved, 1e-4f);
}

template <typename F>
void expect_error(F&& f, const std::string& kind, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << n << " in: " << e.what();
  }
}

TEST(GgufFamily, LayoutsThatCannotBeUndoneAreRefusedByName) {
  test_support::TempDir tmp("neuron-gguf-bad");
  {  // stacked experts must be 3-D
    test_support::GgufWriter w;
    w.add_string("general.architecture", "qwen3moe");
    w.add_floats("blk.0.ffn_gate_exps.weight", quant::GgmlType::f32, {16, 32}, std::vector<float>(512, 0.5f));
    w.write(tmp / "a.gguf");
    expect_error([&] { (void)io::Checkpoint::open_files({tmp / "a.gguf"}); }, errc::bad_model,
                 {"blk.0.ffn_gate_exps.weight", "stacked experts have 3"});
  }
  {  // LLaMA q rows that do not split into the heads the metadata names
    test_support::GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.attention.head_count", 3);
    w.add_floats("blk.0.attn_q.weight", quant::GgmlType::f32, {16, 16}, std::vector<float>(256, 0.5f));
    w.write(tmp / "b.gguf");
    expect_error([&] { (void)io::Checkpoint::open_files({tmp / "b.gguf"}); }, errc::bad_model,
                 {"blk.0.attn_q.weight", "3 heads"});
  }
  {  // rope_freqs of the wrong length for the head size
    auto w = test_support::gguf_from_checkpoint(family_dir("qwen3_moe-a"), quant::GgmlType::bf16);
    w.add_floats("rope_freqs.weight", quant::GgmlType::f32, {3}, {1.0f, 2.0f, 4.0f});
    w.write(tmp / "c.gguf");
    expect_error([&] { (void)model::configs_from_gguf(io::GgufFile(tmp / "c.gguf")); }, errc::bad_model,
                 {"factors", "head_dim 4) needs 2"});
  }
  {  // an architecture no family reads
    test_support::GgufWriter w;
    w.add_string("general.architecture", "mamba");
    w.write(tmp / "d.gguf");
    expect_error([&] { (void)model::configs_from_gguf(io::GgufFile(tmp / "d.gguf")); }, errc::unsupported_arch,
                 {"'mamba'", "qwen3", "llama", "qwen3_moe"});
  }
}

// The hybrids' Q8_0 GGUF files as the converter writes them for the fixtures (their 16-wide rows stay unquantized;
// out_proj, 64 columns of 16-wide value heads, is Q8_0 with its heads tiled, so it comes back dequantized): every
// position's logits stay within Q8_0's rounding of the checkpoint's (measured: 1.0-1.3% of the largest logit; with
// out_proj's columns left tiled they are off by more than the largest logit).
TEST(GgufFamily, HybridQ8_0FilesStayCloseToTheCheckpoint) {
  for (const char* family : {"qwen3_next-a", "qwen3_5-a", "qwen3_5_moe-a"}) {
    test_support::TempDir tmp("neuron-gguf-hybrid-q8");
    test_support::gguf_from_checkpoint(family_dir(family), quant::GgmlType::q8_0).write(tmp / "m.gguf");
    const auto cfg = model::configs_from_gguf(io::GgufFile(tmp / "m.gguf")).model;
    const std::vector<std::int32_t> prompt = {151644, 872, 198, 3838, 374, 279, 6722, 315, 9625, 30, 151645, 198};
    const auto q = prompt_logits(cfg, io::Checkpoint::open_files({tmp / "m.gguf"}), prompt, std::nullopt);
    const auto ref = prompt_logits(model::load_model_configs(family_dir(family)).model,
                                   io::Checkpoint::open_dir(family_dir(family)), prompt, std::nullopt);
    float worst = 0, scale = 0;
    for (std::size_t i = 0; i < q.size(); ++i) {
      worst = std::max(worst, std::abs(q[i] - ref[i]));
      scale = std::max(scale, std::abs(ref[i]));
    }
    EXPECT_GT(worst, 0.0f) << family << ": Q8_0 moves the logits";
    EXPECT_LE(worst, 0.02f * scale) << family << " (largest logit " << scale << ")";
  }
}

// The model a GGUF file describes, loaded as the daemon's loader does (config from the metadata, then the weights).
void load_gguf(const std::filesystem::path& file) {
  const auto cfg = model::configs_from_gguf(io::GgufFile(file)).model;
  const auto ckpt = io::Checkpoint::open_files({file});
  (void)backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{}, nullptr, {.max_context = 64});
}

// A hybrid's GGUF whose linear-attention tensors do not fit its ssm.* metadata names the GGUF tensor; metadata that
// cannot describe a model names the key. (Each file is the converter's output for qwen3_5-a, or qwen3_next-a, with one
// thing changed; the unchanged file loads.)
TEST(GgufFamily, HybridTensorsAndKeysThatDoNotFitAreNamed) {
  test_support::TempDir tmp("neuron-gguf-hybrid-bad");
  const auto qwen35 = [] { return test_support::gguf_from_checkpoint(family_dir("qwen3_5-a"), quant::GgmlType::bf16); };
  auto write = [&](const test_support::GgufWriter& w) {
    static int n = 0;
    const auto path = tmp / ("m" + std::to_string(n++) + ".gguf");
    w.write(path);
    return path;
  };
  load_gguf(write(qwen35()));
  {  // a layer's ssm_a missing
    auto w = qwen35();
    w.erase_tensor("blk.1.ssm_a");
    expect_error([&] { load_gguf(write(w)); }, errc::not_found, {"blk.1.ssm_a", "linear_attn.A_log"});
  }
  {  // ssm_a with 3 entries for 4 value heads
    auto w = qwen35();
    w.erase_tensor("blk.0.ssm_a");
    w.add_floats("blk.0.ssm_a", quant::GgmlType::f32, {3}, {-1.0f, -2.0f, -3.0f});
    expect_error([&] { load_gguf(write(w)); }, errc::bad_model, {"blk.0.ssm_a", "[3]", "[4]"});
  }
  {  // ssm_a is -exp(A_log): never positive
    auto w = qwen35();
    w.erase_tensor("blk.2.ssm_a");
    w.add_floats("blk.2.ssm_a", quant::GgmlType::f32, {4}, {-1.0f, 0.5f, -1.0f, -1.0f});
    expect_error([&] { load_gguf(write(w)); }, errc::bad_model, {"blk.2.ssm_a", "negative"});
  }
  {  // a conv1d of 3 taps where ssm.conv_kernel says 4
    auto w = qwen35();
    w.erase_tensor("blk.0.ssm_conv1d.weight");
    w.add_floats("blk.0.ssm_conv1d.weight", quant::GgmlType::f32, {128, 3}, std::vector<float>(384, 0.1f));
    expect_error([&] { load_gguf(write(w)); }, errc::bad_model, {"blk.0.ssm_conv1d.weight", "[128, 3]", "[128, 4]"});
  }
  {  // ssm_out with the columns of 3 value heads
    auto w = qwen35();
    w.erase_tensor("blk.1.ssm_out.weight");
    w.add_floats("blk.1.ssm_out.weight", quant::GgmlType::bf16, {16, 48}, std::vector<float>(768, 0.1f));
    expect_error([&] { load_gguf(write(w)); }, errc::bad_model, {"blk.1.ssm_out.weight", "64 columns"});
  }
  {  // Qwen3-Next's in_proj_qkvz needs both halves
    auto w = test_support::gguf_from_checkpoint(family_dir("qwen3_next-a"), quant::GgmlType::bf16);
    w.erase_tensor("blk.2.attn_gate.weight");
    expect_error([&] { load_gguf(write(w)); }, errc::bad_model, {"blk.2.attn_qkv.weight", "attn_gate"});
  }
  {  // 4 value heads cannot share 3 key heads
    auto w = qwen35();
    w.erase_key("qwen35.ssm.group_count");
    w.add_u32("qwen35.ssm.group_count", 3);
    expect_error([&] { (void)model::configs_from_gguf(io::GgufFile(write(w))); }, errc::bad_model,
                 {"qwen35.ssm.time_step_rank", "qwen35.ssm.group_count"});
  }
  {  // an inner size that is no whole number of value heads
    auto w = qwen35();
    w.erase_key("qwen35.ssm.inner_size");
    w.add_u32("qwen35.ssm.inner_size", 66);
    expect_error([&] { (void)model::configs_from_gguf(io::GgufFile(write(w))); }, errc::bad_model, {"qwen35.ssm.inner_size", "66"});
  }
  {  // no state size
    auto w = qwen35();
    w.erase_key("qwen35.ssm.state_size");
    expect_error([&] { (void)model::configs_from_gguf(io::GgufFile(write(w))); }, errc::bad_model, {"qwen35.ssm.state_size"});
  }
  {  // fewer recurrent-layer flags than layers
    auto w = qwen35();
    w.erase_key("qwen35.attention.recurrent_layers");
    w.add_bools("qwen35.attention.recurrent_layers", {true, true});
    expect_error([&] { (void)model::configs_from_gguf(io::GgufFile(write(w))); }, errc::bad_model,
                 {"qwen35.attention.recurrent_layers", "2 flags for 4 layers"});
  }
  {  // a rotary dimension past the head
    auto w = qwen35();
    w.erase_key("qwen35.rope.dimension_count");
    w.add_u32("qwen35.rope.dimension_count", 18);
    expect_error([&] { (void)model::configs_from_gguf(io::GgufFile(write(w))); }, errc::bad_model,
                 {"qwen35.rope.dimension_count", "18"});
  }
}

// Qwen3.5's multi-token-prediction block, as the converter stores it: one more block after the layers
// (nextn_predict_layers 1, block_count 5, a fifth recurrent_layers flag, blk.4.* tensors). The model is the 4 layers:
// the same logits as the file without it.
TEST(GgufFamily, HybridMtpBlocksAfterTheLayersAreSkipped) {
  test_support::TempDir tmp("neuron-gguf-mtp");
  auto plain = test_support::gguf_from_checkpoint(family_dir("qwen3_5-a"), quant::GgmlType::bf16);
  plain.write(tmp / "plain.gguf");
  auto mtp = plain;
  mtp.erase_key("qwen35.block_count");
  mtp.add_u32("qwen35.block_count", 5);
  mtp.add_u32("qwen35.nextn_predict_layers", 1);
  mtp.erase_key("qwen35.attention.recurrent_layers");
  mtp.add_bools("qwen35.attention.recurrent_layers", {true, true, true, false, false});
  const std::vector<float> row(16 * 32, 0.25f), norm(16, 0.5f);
  mtp.add_floats("blk.4.nextn.eh_proj.weight", quant::GgmlType::bf16, {16, 32}, row);
  mtp.add_floats("blk.4.nextn.enorm.weight", quant::GgmlType::f32, {16}, norm);
  mtp.add_floats("blk.4.attn_norm.weight", quant::GgmlType::f32, {16}, norm);
  mtp.write(tmp / "mtp.gguf");
  const auto with = model::configs_from_gguf(io::GgufFile(tmp / "mtp.gguf")).model;
  const auto without = model::configs_from_gguf(io::GgufFile(tmp / "plain.gguf")).model;
  EXPECT_EQ(with.num_hidden_layers, 4);
  EXPECT_EQ(with.linear, without.linear);
  const std::vector<std::int32_t> prompt = {9707, 11, 1879, 0, 151643};
  EXPECT_EQ(prompt_logits(with, io::Checkpoint::open_files({tmp / "mtp.gguf"}), prompt, std::nullopt),
            prompt_logits(without, io::Checkpoint::open_files({tmp / "plain.gguf"}), prompt, std::nullopt));
  auto all = plain;  // a block count the MTP blocks would leave empty
  all.add_u32("qwen35.nextn_predict_layers", 4);
  all.write(tmp / "all.gguf");
  expect_error([&] { (void)model::configs_from_gguf(io::GgufFile(tmp / "all.gguf")); }, errc::bad_model,
               {"qwen35.nextn_predict_layers 4"});
}

// A hybrid's GGUF through the daemon's registry (the Qwen3 tokenizer of models/qwen3-tiny-a in its metadata, as the
// converter would write it): it loads; metadata that cannot describe the model is refused before anything loads
// (POST /models/load answers 422), a tensor that is missing or misshapen fails the load itself (400), each named.
TEST(GgufFamily, HybridGgufThroughTheRegistry) {
  test_support::TempDir tmp("neuron-gguf-hybrid-registry");
  const auto src = tmp / "qwen3_5-a";
  std::filesystem::create_directories(src);
  const std::filesystem::path tiny = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";
  for (const auto& f : {(family_dir("qwen3_5-a") / "config.json").string(), (family_dir("qwen3_5-a") / "model.safetensors").string(),
                        (tiny / "tokenizer.json").string(), (tiny / "tokenizer_config.json").string()})
    std::filesystem::create_symlink(f, src / std::filesystem::path(f).filename());
  auto base = [&] { return test_support::gguf_from_checkpoint(src, quant::GgmlType::bf16); };
  base().write(tmp / "good.gguf");
  auto bad_key = base();
  bad_key.erase_key("qwen35.ssm.group_count");
  bad_key.add_u32("qwen35.ssm.group_count", 3);
  bad_key.write(tmp / "bad-key.gguf");
  auto missing = base();
  missing.erase_tensor("blk.1.ssm_a");
  missing.write(tmp / "missing.gguf");
  auto misshapen = base();
  misshapen.erase_tensor("blk.0.ssm_a");
  misshapen.add_floats("blk.0.ssm_a", quant::GgmlType::f32, {3}, {-1.0f, -2.0f, -3.0f});
  misshapen.write(tmp / "misshapen.gguf");

  engine::RegistryOptions options;
  options.model_roots = {tmp.path()};
  options.worker_binary = NEURON_BINARY;
  engine::Registry registry(options);
  auto spec = [&](const char* file) {
    engine::ModelSpec s;
    s.model_id = (tmp / file).string();
    s.max_context = 64;
    return s;
  };
  const engine::ModelInfo good = registry.load(spec("good.gguf"), true);
  EXPECT_EQ(good.status, engine::ModelStatus::loaded);
  EXPECT_EQ(registry.assets(good.model_id)->tokenizer->encode("Hello, world!"),
            (std::vector<std::int32_t>{9707, 11, 1879, 0}));
  // Refused in load() itself, before a load starts: the management API's impossible load (422).
  expect_error([&] { registry.load(spec("bad-key.gguf"), false); }, errc::bad_model,
               {"qwen35.ssm.time_step_rank", "qwen35.ssm.group_count"});
  // Accepted, then the load fails: the API's failed load (400).
  const engine::ModelInfo started = registry.load(spec("missing.gguf"), false);
  EXPECT_EQ(started.status, engine::ModelStatus::loading);
  expect_error([&] { registry.wait_loaded(started.model_id); }, errc::not_found, {"blk.1.ssm_a"});
  EXPECT_FALSE(registry.info(started.model_id).has_value()) << "a failed load leaves nothing behind";
  const engine::ModelInfo wrong = registry.load(spec("misshapen.gguf"), false);
  EXPECT_EQ(wrong.status, engine::ModelStatus::loading);
  expect_error([&] { registry.wait_loaded(wrong.model_id); }, errc::bad_model, {"blk.0.ssm_a", "[3]"});
}

// A tensor-parallel load of a llama GGUF: each rank opens the file, puts the
// q/k rows back and takes its heads; two ranks give the goldens' tokens.
TEST(GgufFamily, LlamaGgufAtTwoRanksGivesTheGreedyTokens) {
  using namespace std::chrono_literals;
  test_support::TempDir tmp("neuron-gguf-tp");
  test_support::gguf_from_checkpoint(family_dir("llama-a"), quant::GgmlType::bf16).write(tmp / "llama.gguf");
  engine::LoadOptions o;
  o.model_dir = tmp / "llama.gguf";
  o.model_id = "llama-gguf-tp";
  o.tensor_parallel = 2;
  o.max_context = 256;
  o.step_timeout = 20000ms;
  o.worker_binary = NEURON_BINARY;
  auto runner = engine::open_runner(o);
  std::ifstream in(family_dir("llama-a") / "golden.json");
  const auto golden = nlohmann::json::parse(in);
  for (const auto& p : golden.at("prompts")) {
    const auto ids = p.at("prompt_ids").get<std::vector<std::int32_t>>();
    if (ids.size() > 64) continue;  // the long prompt is FamilyGolden's
    const auto want = p.at("greedy_ids").get<std::vector<std::int32_t>>();
    backend::SingleSequence seq(*runner);
    std::vector<float> logits(static_cast<std::size_t>(runner->config().vocab_size));
    seq.forward(ids, 0, logits);
    std::vector<std::int32_t> got;
    auto pos = static_cast<std::int32_t>(ids.size());
    while (got.size() < 8) {
      got.push_back(static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      const std::array<std::int32_t, 1> one{got.back()};
      seq.forward(one, pos++, logits);
    }
    EXPECT_EQ(got, std::vector<std::int32_t>(want.begin(), want.begin() + 8)) << p.at("name");
  }
}

// Llama 3's RoPE scaling read back from rope_freqs: the same inverse
// frequencies as the config's llama3 parameters (to f32 rounding).
TEST(GgufFamily, RopeFreqsGiveLlama3Frequencies) {
  test_support::TempDir tmp("neuron-gguf-rope");
  test_support::gguf_from_checkpoint(family_dir("llama-a"), quant::GgmlType::bf16).write(tmp / "l.gguf");
  const auto from_file = model::configs_from_gguf(io::GgufFile(tmp / "l.gguf")).model;
  const auto from_dir = model::load_model_configs(family_dir("llama-a")).model;
  ASSERT_EQ(from_file.rope.type, model::RopeType::freq_factors);
  ASSERT_EQ(from_dir.rope.type, model::RopeType::llama3);
  const auto a = model::rope_inv_freq(from_file), b = model::rope_inv_freq(from_dir);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 2e-7f * b[i]) << "frequency " << i;
  EXPECT_NE(a.front() / a.back(), 1.0f);
}

}  // namespace
}  // namespace neuron
