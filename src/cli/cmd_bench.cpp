// `neuron bench`: prefill and decode speed of a full-size Qwen3 shape on
// random weights, against the device's memory bandwidth measured in the same run.
//   neuron bench --config qwen3-0.6b|qwen3-8b|qwen3-32b|<config.json> --dummy-weights
//                --device cpu|cuda:N --prompt-len 128,2048 --gen 128 [--batch 1] [--json]
//
// A decode step reads every weight once (whatever the batch) plus each
// sequence's KV cache so far,
// so its floor is (weight bytes + KV bytes) per step / bandwidth. Bytes per
// step count what a step must read: every projection and norm, the LM head
// (the embedding table when tied), one embedding row, and the keys and values
// of every cached position at the KV cache's element size.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/bandwidth.hpp"
#include "backend/batch.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/decode_kernel.hpp"
#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/device.hpp"
#include "backend/model_runner.hpp"
#include "cli/command.hpp"
#include "dist/communicator.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"
#include "model/shard_weights.hpp"
#include "util/error.hpp"

#ifdef NEURON_HAVE_CUDA
#include "backend/cuda/cuda_runner.hpp"
#endif

namespace neuron::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string config;
  bool dummy_weights = false;
  std::string device = "cpu";
  std::vector<std::int32_t> prompt_lens{128};
  std::int32_t gen = 32;
  int batch = 1;
  bool json = false;
  std::string quant;  // quantize-at-load type: q8_0, q4_k, q6_k
};

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

model::ModelConfig load_config(const std::string& ref) {
  if (!fs::is_regular_file(ref)) return model::preset_config(ref);
  std::ifstream in(ref);
  std::stringstream text;
  text << in.rdbuf();
  return model::ModelConfig::parse(text.str());
}

double copy_bandwidth_gbs(const backend::Device& device) {
  if (!device.is_cuda()) return backend::cpu::measure_copy_bandwidth_gbs();
#ifdef NEURON_HAVE_CUDA
  return backend::cuda::measure_copy_bandwidth_gbs(device.index);
#else
  fail(errc::invalid_argument, "this build has no CUDA support");
#endif
}

struct StepBytes {
  double weights = 0;       // read once per decode step
  double kv_per_position = 0;  // keys + values of one position, all layers
};

// A MoE layer reads only its chosen experts: with `batch` sequences routed uniformly at random, an expert
// is read with probability 1 - (1 - k / E)^batch (exactly k of E at batch 1).
StepBytes step_bytes(const model::ModelConfig& cfg, const backend::ModelRunner& runner, int batch) {
  const backend::MemoryStats m = runner.memory();
  StepBytes b;
  b.weights = static_cast<double>(m.weight_bytes);
  if (cfg.moe.num_experts > 0) {
    const model::ShardPlan plan = model::ShardPlan::make(cfg, 0, 1);
    std::int64_t sparse = 0;
    for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l) sparse += cfg.moe.sparse_layer(l) ? 1 : 0;
    const double expert_elems = static_cast<double>(sparse) * static_cast<double>(cfg.moe.num_experts) * 3.0 *
                                static_cast<double>(cfg.hidden_size * cfg.moe.intermediate_size);
    const double bytes_per_elem = b.weights / static_cast<double>(model::weight_elements(cfg, plan));
    const double read = 1.0 - std::pow(1.0 - static_cast<double>(cfg.moe.experts_per_token) /
                                                  static_cast<double>(cfg.moe.num_experts), batch);
    b.weights -= expert_elems * bytes_per_elem * (1.0 - read);
  }
  // An untied model holds its embedding table but reads one row of it per step.
  if (!cfg.tie_word_embeddings) b.weights -= 2.0 * static_cast<double>((cfg.vocab_size - 1) * cfg.hidden_size);
  const backend::KvPoolShape pool = runner.kv_pool();
  b.kv_per_position = static_cast<double>(pool.bytes_per_block) / pool.block_size;
  return b;
}

// `batch` sequences over disjoint block ranges of the pool, stepped together.
class BenchBatch {
 public:
  BenchBatch(backend::ModelRunner& runner, int sequences, std::int32_t positions) : runner_(runner) {
    const backend::KvPoolShape pool = runner.kv_pool();
    per_seq_ = (positions + pool.block_size - 1) / pool.block_size;
    if (static_cast<std::int64_t>(per_seq_) * sequences > pool.num_blocks)
      fail(errc::out_of_memory, std::to_string(sequences) + " sequences of " + std::to_string(positions) +
                                    " positions need " + std::to_string(per_seq_ * sequences) + " KV blocks; the pool has " +
                                    std::to_string(pool.num_blocks));
    stateful_ = pool.state_slots > 0;  // a hybrid: sequence i holds recurrent-state slot i
    if (stateful_ && sequences > pool.state_slots)
      fail(errc::invalid_argument, std::to_string(sequences) + " sequences need as many state slots; the runner has " +
                                       std::to_string(pool.state_slots));
    tables_.resize(static_cast<std::size_t>(sequences));
    for (int i = 0; i < sequences; ++i)
      for (std::int32_t b = 0; b < per_seq_; ++b) tables_[static_cast<std::size_t>(i)].push_back(i * per_seq_ + b);
    picks_.resize(static_cast<std::size_t>(sequences));
  }
  // Prefills sequence i's prompt; returns its greedy next token (picked where the logits are, as the engine does).
  std::int32_t prefill(int i, const std::vector<std::int32_t>& prompt) {
    batch_.clear();
    batch_.add(prompt, 0, tables_[static_cast<std::size_t>(i)], backend::LogitsWanted::argmax, slot(i));
    runner_.step(batch_, {}, std::span<std::int32_t>(picks_).first(1));
    return picks_[0];
  }
  // One decode step of every sequence at `pos`; tokens[i] in, the greedy next tokens out.
  void decode(std::vector<std::int32_t>& tokens, std::int32_t pos) {
    batch_.clear();
    for (std::size_t i = 0; i < tokens.size(); ++i)
      batch_.add(std::span<const std::int32_t>(&tokens[i], 1), pos, tables_[i], backend::LogitsWanted::argmax,
                 slot(static_cast<int>(i)));
    runner_.step(batch_, {}, std::span<std::int32_t>(picks_).first(tokens.size()));
    std::copy_n(picks_.begin(), tokens.size(), tokens.begin());
  }

 private:
  std::int32_t slot(int i) const noexcept { return stateful_ ? i : -1; }

  backend::ModelRunner& runner_;
  bool stateful_ = false;
  std::int32_t per_seq_ = 0;
  std::vector<std::vector<std::int32_t>> tables_;  // [batch][per_seq_] block ids
  std::vector<std::int32_t> picks_;                // [batch] greedy picks of a step
  backend::Batch batch_;
};

int run_bench_command(const BenchArgs& a) {
  if (!a.dummy_weights)
    fail(errc::invalid_argument, "bench runs on random weights: pass --dummy-weights (real checkpoints: neuron generate)");
  if (a.batch < 1 || a.batch > 1024) fail(errc::invalid_argument, "--batch must be in [1, 1024], got " + std::to_string(a.batch));
  if (a.prompt_lens.empty()) fail(errc::invalid_argument, "--prompt-len needs at least one length");
  for (auto n : a.prompt_lens)
    if (n < 1) fail(errc::invalid_argument, "--prompt-len values must be positive (got " + std::to_string(n) + ")");
  if (a.gen < 1) fail(errc::invalid_argument, "--gen must be at least 1");

  const model::ModelConfig cfg = load_config(a.config);
  const backend::Device device = backend::Device::parse(a.device);
  const model::ShardPlan plan = model::ShardPlan::make(cfg, 0, 1);
  backend::RunnerOptions ro;
  ro.max_context = *std::max_element(a.prompt_lens.begin(), a.prompt_lens.end()) + a.gen;
  ro.kv_block_size = backend::kDefaultKvBlockSize;
  ro.kv_blocks = a.batch * ((ro.max_context + ro.kv_block_size - 1) / ro.kv_block_size);
  ro.state_slots = a.batch;  // hybrids: one recurrent-state slot per sequence (ignored otherwise)
  ro.state_snapshots = 0;    // no prefix reuse here: snapshot slots would only take memory (2 a slot by default)
  if (!a.quant.empty() && a.quant != "none" && a.quant != "bf16") {
    ro.quantize = quant::parse_ggml_type(a.quant);
    if (!ro.quantize) fail(errc::invalid_argument, "--quant must be none, bf16, q8_0, q4_k, q6_k or fp8, got " + a.quant);
  }

  auto t = Clock::now();
  const auto runner = backend::make_runner(cfg, nullptr, plan, device, std::make_shared<dist::LocalCommunicator>(), ro);
  const double load_ms = ms_since(t);
  const backend::MemoryStats mem = runner->memory();
  const backend::KvPoolShape pool = runner->kv_pool();  // hybrids: the recurrent-state slots beside the KV
  const StepBytes bytes = step_bytes(cfg, *runner, a.batch);
  const std::string kernel = device.is_cuda() ? "cuda" : std::string(backend::cpu::isa_name(backend::cpu::selected_isa()));
  BenchBatch seqs(*runner, a.batch, ro.max_context);

  nlohmann::json runs = nlohmann::json::array();
  std::vector<double> achieved;
  for (std::int32_t len : a.prompt_lens) {
    // Every sequence its own prompt, so none shares another's keys.
    auto prompt_of = [&](int i) {
      std::vector<std::int32_t> p(static_cast<std::size_t>(len));
      for (std::int32_t k = 0; k < len; ++k)
        p[static_cast<std::size_t>(k)] = static_cast<std::int32_t>((k * 7919LL + 13 + i * 104729LL) % cfg.vocab_size);
      return p;
    };
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(a.batch));
    // Untimed warm-up: the first use of a shape loads kernels, picks GEMM
    // algorithms (cuBLAS) and captures the decode graph (CUDA).
    for (int i = 0; i < a.batch; ++i) tokens[static_cast<std::size_t>(i)] = seqs.prefill(i, prompt_of(i));
    seqs.decode(tokens, len);

    t = Clock::now();
    tokens[0] = seqs.prefill(0, prompt_of(0));
    const double prefill_ms = ms_since(t);
    const double ttft_ms = prefill_ms;  // the greedy pick is inside prefill()
    for (int i = 1; i < a.batch; ++i) tokens[static_cast<std::size_t>(i)] = seqs.prefill(i, prompt_of(i));

    double kv_read = 0;
    t = Clock::now();
    for (std::int32_t step = 0; step < a.gen; ++step) {
      const std::int32_t pos = len + step;
      seqs.decode(tokens, pos);
      kv_read += bytes.kv_per_position * (pos + 1) * a.batch;
    }
    const double decode_s = ms_since(t) / 1000.0;
    const double per_step = bytes.weights + kv_read / a.gen;
    const double steps_s = a.gen / decode_s;
    const double tok_s = steps_s * a.batch;
    achieved.push_back(per_step * steps_s / 1e9);
    runs.push_back({{"prompt_len", len},
                    {"prefill_ms", prefill_ms},
                    {"prefill_tok_s", len / (prefill_ms / 1000.0)},
                    {"ttft_ms", ttft_ms},
                    {"gen", a.gen},
                    {"decode_tok_s", tok_s},
                    {"decode_ms_per_step", 1000.0 / steps_s},
                    {"bytes_per_step", per_step},
                    {"weight_bytes_per_step", bytes.weights},
                    {"kv_bytes_per_step", kv_read / a.gen},
                    {"achieved_gbs", achieved.back()}});
  }

  // After the model runs, so the probe does not warm anything for it.
  const double copy_gbs = copy_bandwidth_gbs(device);
  const double read_gbs = device.is_cuda() ? 0.0 : backend::cpu::measure_read_bandwidth_gbs();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    runs[i]["ratio_to_copy_bandwidth"] = achieved[i] / copy_gbs;
    if (read_gbs > 0) runs[i]["ratio_to_read_bandwidth"] = achieved[i] / read_gbs;
  }
  nlohmann::json out = {{"config", a.config},
                        {"device", device.str()},
                        {"kernel", kernel},
                        {"threads", device.is_cuda() ? 0 : omp_get_max_threads()},
                        {"batch", a.batch},
                        {"quant", a.quant.empty() ? std::string("bf16") : a.quant},
                        {"load_ms", load_ms},
                        {"weight_bytes", mem.weight_bytes},
                        {"kv_cache_bytes", mem.kv_cache_bytes},
                        {"state_slots", pool.state_slots},
                        {"state_snapshots", pool.state_snapshots},
                        {"state_bytes", pool.bytes_per_state_slot *
                                            static_cast<std::uint64_t>(pool.state_slots + pool.state_snapshots)},
                        {"copy_bandwidth_gbs", copy_gbs},
                        {"runs", runs}};
  if (read_gbs > 0) out["read_bandwidth_gbs"] = read_gbs;
  if (!device.is_cuda()) {  // the decode kernels taken (backend/cpu/decode_kernel.hpp): bf16, the quantized type
    using backend::cpu::decode_kernel, backend::cpu::isa_name, backend::cpu::row_walk_name;
    const auto describe = [](quant::GgmlType type) {
      const auto k = decode_kernel(type);
      const bool int8 = backend::cpu::int8_quant_products(backend::cpu::cpu_activations()) &&
                        backend::cpu::gemm_quant_few_int8(backend::cpu::selected_isa(), type);
      return nlohmann::json{
          {"walk", row_walk_name(k.walk)}, {"isa", isa_name(k.isa)}, {"activations", int8 ? "int8" : "f32"},
          {"int8_kernels", backend::cpu::int8_kernels_name(backend::cpu::int8_kernels(k.isa))}};
    };
    out["decode_kernels"] = {{"bf16", describe(quant::GgmlType::bf16)}};
    out["cpu_activations"] = backend::cpu::activations_name(backend::cpu::cpu_activations());
    if (ro.quantize) out["decode_kernels"][quant::ggml_type_name(*ro.quantize)] = describe(*ro.quantize);
  }

  if (a.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%s on %s (%s, %d threads), random weights, batch %d\n", a.config.c_str(), device.str().c_str(),
              kernel.c_str(), device.is_cuda() ? 0 : omp_get_max_threads(), a.batch);
  std::printf("load %.0f ms; weights %.3f GB; KV cache %.3f GB (%d positions a sequence)\n", load_ms,
              mem.weight_bytes / 1e9, mem.kv_cache_bytes / 1e9, runner->max_context());
  std::printf("memory bandwidth: copy %.1f GB/s", copy_gbs);
  if (read_gbs > 0) std::printf(", read %.1f GB/s", read_gbs);
  std::printf("\n");
  for (const auto& r : runs) {
    std::printf(
        "prompt %5d: prefill %9.1f ms (%8.1f tok/s), TTFT %9.1f ms | decode %d: %8.2f tok/s (all sequences), %.3f GB/step, "
        "%.1f GB/s = %.0f%% of copy",
        r["prompt_len"].get<int>(), r["prefill_ms"].get<double>(), r["prefill_tok_s"].get<double>(),
        r["ttft_ms"].get<double>(), a.gen, r["decode_tok_s"].get<double>(), r["bytes_per_step"].get<double>() / 1e9,
        r["achieved_gbs"].get<double>(), 100 * r["ratio_to_copy_bandwidth"].get<double>());
    if (r.contains("ratio_to_read_bandwidth"))
      std::printf(", %.0f%% of read", 100 * r["ratio_to_read_bandwidth"].get<double>());
    std::printf("\n");
  }
  return 0;
}

Run setup_bench(CLI::App& sub) {
  auto a = std::make_shared<BenchArgs>();
  sub.add_option("--config", a->config, "qwen3-0.6b, qwen3-8b, qwen3-32b, ... or a config.json")->required();
  sub.add_flag("--dummy-weights", a->dummy_weights, "Random weights (the speed does not depend on their values)");
  sub.add_option("--device", a->device, "cpu, cuda or cuda:N");
  sub.add_option("--prompt-len", a->prompt_lens, "Prompt lengths to prefill, comma separated")->delimiter(',');
  sub.add_option("--gen", a->gen, "Tokens to decode after each prompt");
  sub.add_option("--batch", a->batch, "Sequences decoded together in each step (tokens/s counts all of them)");
  sub.add_flag("--json", a->json, "Print one JSON object");
  sub.add_option("--quant", a->quant, "Quantize the projections at load: q8_0, q4_k, q6_k or fp8 (CUDA) (default bf16)");
  return [a] { return run_bench_command(*a); };
}

NEURON_COMMAND(bench, "Prefill / decode speed on random weights vs memory bandwidth", setup_bench);

}  // namespace
}  // namespace neuron::cli
