// CUDA backend benchmark on random weights with full-size Qwen3 shapes:
// load time, TTFT per prompt length, batch-1 decode tokens/s and the fraction
// of the measured copy bandwidth that decode reaches; plus the batch-1
// projection shapes on the GEMV kernel against cuBLAS; plus batched decode:
// B sequences of a `--prompt` token prompt each (prefilled in batched steps),
// then `--gen` decode steps of all B at once, timed one by one.
//
//   cuda_bench --config qwen3-8b [--prompt-lens 128,2048] [--gen 128] [--gemv-shapes]
//   cuda_bench --config qwen3-8b --batch 1,8,32,64 [--prompt 128] [--gen 64]
//   cuda_bench --config qwen3-8b --quant-gemv [--only gate_up]  (the projections'
//              GEMV per weight format: bf16, Q8_0, Q4_K, Q5_K, Q6_K, FP8, at 1, 2, 4
//              and 8 tokens, the block formats also at 16 and 32)
//   cuda_bench --config qwen3-8b --attention    (decode attention of one sequence
//              by context length and split count)
//
// Batched decode feeds a fixed token per step (not the argmax, which would
// time the host's scan of B x vocab logits); a step's speed does not depend
// on the token ids. Each step is timed with the logits of every sequence
// copied to the host (as the engine asks) and, separately, without the LM
// head (LogitsWanted::none), to show what the [B, vocab] f32 logits cost.
//
// Bytes per decode step = every weight the step reads (the embedding table
// only as the tied LM head, never the gather) + the KV cache read at the mean
// context of the run. Bandwidth convention: read + write bytes of a copy
// (measure_copy_bandwidth_gbs). One JSON object per line on stdout.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "backend/batch.hpp"
#include "backend/cuda/blas.hpp"
#include "backend/cuda/cuda_runner.hpp"
#include "backend/cuda/device_buffer.hpp"
#include "backend/cuda/fp8_kernels.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/quant_kernels.hpp"
#include "quant/ggml_type.hpp"
#include "backend/single_sequence.hpp"
#include "dist/communicator.hpp"
#include "model/config.hpp"
#include "util/error.hpp"

using namespace neuron;
using namespace neuron::backend;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of launch(i) over 50 timed runs after 5 warm-ups, i
// cycling through `copies` weight copies (so a pass does not sit in L2).
template <class Launch>
double median_ms(cudaStream_t stream, int copies, Launch&& launch) {
  using namespace neuron::backend::cuda;
  Event start(cudaEventDefault), stop(cudaEventDefault);
  for (int i = 0; i < 5; ++i) launch(i % copies);
  std::vector<double> ms;
  for (int rep = 0; rep < 50; ++rep) {
    NEURON_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    launch(rep % copies);
    NEURON_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    NEURON_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float t = 0;
    NEURON_CUDA_CHECK(cudaEventElapsedTime(&t, start.get(), stop.get()));
    ms.push_back(t);
  }
  return median(ms);
}

// Microseconds a launch costs inside a chain, as a decode step's graph runs
// it: `chain` launches (cycling through the weight copies) captured into one
// graph with programmatic dependent launch, the graph replayed 20 times, the
// median divided by the chain's length.
template <class Launch>
double chained_us(cudaStream_t stream, int copies, Launch&& launch) {
  using namespace neuron::backend::cuda;
  const int chain = std::max(copies, 16);
  NEURON_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < chain; ++i) launch(i % copies);
  cudaGraph_t graph = nullptr;
  NEURON_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  NEURON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaGraphDestroy(graph);
  const double ms = median_ms(stream, 1, [&](int) { NEURON_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  cudaGraphExecDestroy(exec);
  return ms * 1e3 / chain;
}

void gemv_shapes(const model::ModelConfig& c, double copy_gbs) {
  using namespace neuron::backend::cuda;
  struct Shape { const char* name; int rows, cols; };
  const int h = static_cast<int>(c.hidden_size), hd = static_cast<int>(c.head_dim);
  const int qkv = static_cast<int>((c.num_attention_heads + 2 * c.num_key_value_heads) * hd);
  const int f = static_cast<int>(c.intermediate_size);
  const Shape shapes[] = {{"qkv", qkv, h},
                          {"o", h, static_cast<int>(c.num_attention_heads * hd)},
                          {"gate_up", 2 * f, h},
                          {"down", h, f},
                          {"lm_head", static_cast<int>(c.vocab_size), h}};
  Stream stream;
  Blas blas(stream.get());
  for (const Shape& s : shapes) {
    const std::size_t bytes = 2ull * s.rows * s.cols;
    // Enough copies that a pass over them does not fit in the 60 MB L2.
    const int copies = static_cast<int>(std::max<std::size_t>(1, (256ull << 20) / bytes + 1));
    std::vector<DeviceBuffer> w;
    for (int i = 0; i < copies; ++i) {
      w.emplace_back(bytes);
      kernels::fill_random_bf16(w.back().data<kernels::bf16_t>(), s.rows, s.cols, 0, 0, s.cols, 7 + i, 0.03f,
                                stream.get());
    }
    DeviceBuffer x(2ull * s.cols), y(4ull * s.rows);
    kernels::fill_random_bf16(x.data<kernels::bf16_t>(), 1, s.cols, 0, 0, s.cols, 3, 1.f, stream.get());
    auto time = [&](auto&& launch) { return median_ms(stream.get(), copies, launch); };
    const double t_gemv = time([&](int i) {
      kernels::gemv(w[i].data<kernels::bf16_t>(), x.data<kernels::bf16_t>(), s.rows, s.cols, y.data<float>(),
                    stream.get());
    });
    const double t_blas = time([&](int i) {
      blas.linear(x.data<kernels::bf16_t>(), 1, w[i].data<kernels::bf16_t>(), s.rows, s.cols, y.data<float>());
    });
    std::printf(
        "{\"gemv_shape\":\"%s\",\"rows\":%d,\"cols\":%d,\"gemv_us\":%.2f,\"cublas_us\":%.2f,"
        "\"gemv_bw_fraction\":%.3f,\"cublas_bw_fraction\":%.3f}\n",
        s.name, s.rows, s.cols, t_gemv * 1e3, t_blas * 1e3, bytes / (t_gemv * 1e-3) / 1e9 / copy_gbs,
        bytes / (t_blas * 1e-3) / 1e9 / copy_gbs);
    std::fflush(stdout);
  }
}

// The GEMV of each weight format on the model's projection shapes, at 1 and
// 8 tokens: microseconds and the fraction of the copy bandwidth its weight
// bytes reach. Weights are arbitrary bytes (speed does not depend on them).
void quant_gemv_shapes(const model::ModelConfig& c, double copy_gbs, const std::string& only) {
  using namespace neuron::backend::cuda;
  using quant::GgmlType;
  struct Shape { const char* name; int rows, cols; };
  const int h = static_cast<int>(c.hidden_size), hd = static_cast<int>(c.head_dim);
  const int qkv = static_cast<int>((c.num_attention_heads + 2 * c.num_key_value_heads) * hd);
  const int f = static_cast<int>(c.intermediate_size);
  const Shape shapes[] = {{"qkv", qkv, h}, {"o", h, static_cast<int>(c.num_attention_heads * hd)},
                          {"gate_up", 2 * f, h}, {"down", h, f}, {"lm_head", static_cast<int>(c.vocab_size), h}};
  const GgmlType types[] = {GgmlType::bf16, GgmlType::q8_0, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k,
                            GgmlType::fp8_e4m3};
  Stream stream;
  for (const Shape& s : shapes)
    for (GgmlType t : types) {
      if (!only.empty() && only != s.name) continue;
      const std::size_t row = quant::row_bytes(t, s.cols);
      const std::size_t bytes = row * s.rows;
      const int copies = static_cast<int>(std::max<std::size_t>(1, (256ull << 20) / bytes + 1));
      std::vector<DeviceBuffer> w;
      for (int i = 0; i < copies; ++i) {
        w.emplace_back(bytes);
        NEURON_CUDA_CHECK(cudaMemsetAsync(w.back().data(), 0x11 + i, bytes, stream.get()));  // finite f16 scales
      }
      DeviceBuffer scales(4ull * s.rows), x(2ull * 32 * s.cols), y(4ull * 32 * s.rows);  // up to 32 tokens
      NEURON_CUDA_CHECK(cudaMemsetAsync(scales.data(), 0x3c, scales.bytes(), stream.get()));
      kernels::fill_random_bf16(x.data<kernels::bf16_t>(), 32, s.cols, 0, 0, s.cols, 3, 1.f, stream.get());
      for (int n : {1, 2, 4, 8, 16, 32}) {
        // bf16 runs a GEMV per token, FP8 serves up to 8 tokens a call: the wider batches are the block formats'.
        if (n > 8 && (t == GgmlType::bf16 || t == GgmlType::fp8_e4m3)) continue;
        auto run = [&](int i) {
          const auto* xp = x.data<kernels::bf16_t>();
          if (t == GgmlType::bf16) {
            for (int k = 0; k < n; ++k)
              kernels::gemv(w[i].data<kernels::bf16_t>(), xp + k * s.cols, s.rows, s.cols, y.data<float>() + k * s.rows,
                            stream.get());
          } else if (t == GgmlType::fp8_e4m3) {
            kernels::fp8_gemv(w[i].data<std::uint8_t>(), scales.data<float>(), s.rows, s.cols, xp, n, y.data<float>(),
                              s.rows, false, stream.get());
          } else {
            kernels::quant_gemv(t, w[i].data(), s.rows, s.cols, xp, n, y.data<float>(), s.rows, false, stream.get());
          }
        };
        const double m = median_ms(stream.get(), copies, run);
        const double chained = chained_us(stream.get(), copies, run);
        std::printf("{\"quant_gemv\":\"%s\",\"type\":\"%s\",\"tokens\":%d,\"rows\":%d,\"cols\":%d,\"us\":%.2f,"
                    "\"weight_bw_fraction\":%.3f,\"chained_us\":%.2f,\"chained_bw_fraction\":%.3f}\n",
                    s.name, std::string(quant::ggml_type_name(t)).c_str(), n, s.rows, s.cols, m * 1e3,
                    bytes / (m * 1e-3) / 1e9 / copy_gbs, chained, bytes / (chained * 1e-6) / 1e9 / copy_gbs);
        std::fflush(stdout);
      }
    }
}

// Decode attention of one sequence (the fused q/k norm + RoPE variant, as a
// decode step runs it) at several context lengths and split counts: the
// microseconds a launch costs chained in a graph, and the fraction of the
// copy bandwidth its K/V bytes reach. The chain cycles through copies of the
// pool larger than L2 together.
void attention_shapes(const model::ModelConfig& c, double copy_gbs) {
  using namespace neuron::backend::cuda;
  const int hq = static_cast<int>(c.num_attention_heads), hkv = static_cast<int>(c.num_key_value_heads);
  const int d = static_cast<int>(c.head_dim), bs = 16;
  Stream stream;
  const int width = (hq + 2 * hkv) * d;
  DeviceBuffer qkv(2ull * width), qn(2ull * d), kn(2ull * d), inv(4ull * d / 2), out(2ull * hq * d);
  kernels::fill_random_bf16(qkv.data<kernels::bf16_t>(), 1, width, 0, 0, width, 5, 1.f, stream.get());
  kernels::fill_random_bf16(qn.data<kernels::bf16_t>(), 1, d, 0, 0, d, 6, 1.f, stream.get());
  kernels::fill_random_bf16(kn.data<kernels::bf16_t>(), 1, d, 0, 0, d, 7, 1.f, stream.get());
  std::vector<float> inv_h(static_cast<std::size_t>(d / 2));
  for (int j = 0; j < d / 2; ++j) inv_h[static_cast<std::size_t>(j)] = static_cast<float>(std::pow(1e6, -2.0 * j / d));
  NEURON_CUDA_CHECK(cudaMemcpy(inv.data(), inv_h.data(), 4 * inv_h.size(), cudaMemcpyHostToDevice));
  {  // the step's RMSNorm (residual add + norm of one token) for scale: a small kernel's cost in the chain
    const int h = static_cast<int>(c.hidden_size);
    DeviceBuffer x(4ull * h), delta(4ull * h), w(2ull * h), o(2ull * h);
    NEURON_CUDA_CHECK(cudaMemset(x.data(), 0, x.bytes()));
    NEURON_CUDA_CHECK(cudaMemset(delta.data(), 0, delta.bytes()));
    kernels::fill_random_bf16(w.data<kernels::bf16_t>(), 1, h, 0, 0, h, 8, 1.f, stream.get());
    const double us = chained_us(stream.get(), 1, [&](int) {
      kernels::add_rmsnorm(x.data<float>(), delta.data<float>(), w.data<kernels::bf16_t>(),
                           o.data<kernels::bf16_t>(), 1, h, 1e-6f, stream.get());
    });
    std::printf("{\"kernel\":\"add_rmsnorm\",\"hidden\":%d,\"chained_us\":%.2f}\n", h, us);
  }
  for (int ctx : {256, 2048, 8192}) {
    const int blocks = ctx / bs + 1;
    const std::size_t plane = static_cast<std::size_t>(blocks) * hkv * bs * d;  // bf16 elements of K (and of V)
    const int copies = static_cast<int>(std::max<std::size_t>(1, (256ull << 20) / (4 * plane) + 1));
    std::vector<DeviceBuffer> pools;
    for (int i = 0; i < copies; ++i) {
      pools.emplace_back(4 * plane);
      kernels::fill_random_bf16(pools.back().data<kernels::bf16_t>(), 1, static_cast<std::int64_t>(2 * plane), 0, 0,
                                static_cast<std::int64_t>(2 * plane), 11 + i, 1.f, stream.get());
    }
    // Step inputs of one sequence: q_start, num_tokens, position, block_offset, ctx_len, items, then its table.
    std::vector<std::int32_t> in = {0, 1, ctx - 1, 0, ctx, 0};
    for (int b = 0; b < blocks; ++b) in.push_back(b);
    DeviceBuffer din(4 * in.size());
    NEURON_CUDA_CHECK(cudaMemcpy(din.data(), in.data(), 4 * in.size(), cudaMemcpyHostToDevice));
    const auto* ip = din.data<std::int32_t>();
    const kernels::StepSeqs seqs{ip, ip + 1, ip + 2, ip + 3, ip + 4, ip + 6};
    const kernels::DecodeRope rope{qkv.data<kernels::bf16_t>(), qn.data<kernels::bf16_t>(),
                                   kn.data<kernels::bf16_t>(), inv.data<float>(), 1e-6f};
    DeviceBuffer scratch(4 * kernels::decode_scratch_floats(1, hq, d, kernels::kDecodeMaxSplits));
    DeviceBuffer counters(4 * kernels::decode_counters(1, hq, hkv));
    NEURON_CUDA_CHECK(cudaMemset(counters.data(), 0, counters.bytes()));
    const double bytes = 2.0 * 2.0 * ctx * hkv * d;  // K and V of the context
    for (int splits = 1; splits <= kernels::kDecodeMaxSplits; splits *= 2) {
      if (splits > 1 && splits * kernels::kDecodeMinSplitKeys > 2 * ctx) break;
      for (const bool fused : {true, false}) {
        auto run = [&](int i) {
          kernels::bf16_t* k = pools[static_cast<std::size_t>(i)].data<kernels::bf16_t>();
          kernels::attention_decode(fused ? nullptr : qkv.data<kernels::bf16_t>(), fused ? rope : kernels::DecodeRope{},
                                    kernels::PagedKv{k, k + plane, hkv, bs}, seqs, ip + 5, 1, hq, d,
                                    1.f / std::sqrt(static_cast<float>(d)), splits, scratch.data<float>(),
                                    counters.data<unsigned>(), out.data<kernels::bf16_t>(), stream.get());
        };
        const double us = chained_us(stream.get(), copies, run);
        std::printf("{\"attention\":\"decode%s\",\"ctx\":%d,\"splits\":%d,\"chained_us\":%.2f,"
                    "\"kv_bw_fraction\":%.3f}\n",
                    fused ? "+rope" : "", ctx, splits, us, bytes / (us * 1e-6) / 1e9 / copy_gbs);
        std::fflush(stdout);
      }
    }
  }
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string t; std::getline(ss, t, ',');) out.push_back(std::stoi(t));
  return out;
}

// B sequences of `prompt` tokens, prefilled, then `gen` decode steps of all B; one JSON line per B.
void batched_decode(const model::ModelConfig& cfg, const std::string& config, const std::vector<int>& batches,
                    int prompt, int gen) {
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  RunnerOptions options;
  options.max_context = prompt + 3 * gen + 16;
  const int per_seq = (options.max_context + kDefaultKvBlockSize - 1) / kDefaultKvBlockSize;
  options.kv_blocks = max_batch * per_seq;
  auto runner = cuda::make_cuda_runner(cfg, nullptr, model::ShardPlan::make(cfg, 0, 1), Device{Device::Kind::cuda, 0},
                                       std::make_shared<dist::LocalCommunicator>(), options);
  const auto vocab = static_cast<std::size_t>(cfg.vocab_size);
  for (const int b : batches) {
    // Sequence i owns blocks [i * per_seq, (i + 1) * per_seq).
    std::vector<std::vector<std::int32_t>> tables(static_cast<std::size_t>(b));
    for (int i = 0; i < b; ++i) {
      tables[i].resize(static_cast<std::size_t>(per_seq));
      std::iota(tables[i].begin(), tables[i].end(), i * per_seq);
    }
    std::vector<std::int32_t> prompt_ids(static_cast<std::size_t>(prompt));
    Batch batch;
    std::vector<float> logits;
    // Prefill in steps of at most 4096 tokens, as a scheduler's token budget would.
    const auto t_prefill = clock_type::now();
    for (int i = 0; i < b;) {
      batch.clear();
      for (int used = 0; i < b && (used == 0 || used + prompt <= 4096); ++i, used += prompt) {
        for (int k = 0; k < prompt; ++k) prompt_ids[k] = (k * 7919 + i * 104729 + 13) % static_cast<int>(cfg.vocab_size);
        batch.add(prompt_ids, 0, tables[i], LogitsWanted::last);
      }
      logits.resize(static_cast<std::size_t>(batch.logit_rows()) * vocab);
      runner->step(batch, logits);
    }
    const double prefill_s = seconds_since(t_prefill);
    auto decode_batch = [&](int pos, LogitsWanted want) {
      batch.clear();
      for (int i = 0; i < b; ++i) {
        const std::int32_t tok = (pos * 31 + i * 17 + 5) % static_cast<std::int32_t>(cfg.vocab_size);
        batch.add(std::span<const std::int32_t>(&tok, 1), pos, tables[i], want);
      }
    };
    // Rotate steps with logits rows, without any LM head and with device greedy picks, so all three see the
    // same contexts; the first of each captures its graph.
    std::vector<double> with_ms, without_ms, picks_ms;
    std::vector<std::int32_t> picks(static_cast<std::size_t>(b));
    int pos = prompt;
    for (int step = 0; step < 3 * gen + 3; ++step, ++pos) {
      const int mode = step % 3;  // 0 logits, 1 none, 2 picks
      decode_batch(pos, mode == 2 ? LogitsWanted::argmax : LogitsWanted::last);
      logits.resize(mode == 0 ? static_cast<std::size_t>(b) * vocab : 0);
      const auto t0 = clock_type::now();
      runner->step(batch, logits, mode == 2 ? std::span<std::int32_t>(picks) : std::span<std::int32_t>());
      const double ms = seconds_since(t0) * 1e3;
      if (step >= 3) (mode == 0 ? with_ms : mode == 1 ? without_ms : picks_ms).push_back(ms);
    }
    const double step_ms = median(with_ms), bare_ms = median(without_ms), pick_ms = median(picks_ms);
    std::printf(
        "{\"config\":\"%s\",\"batch\":%d,\"prompt\":%d,\"gen\":%d,\"prefill_s\":%.3f,"
        "\"decode_step_ms\":%.3f,\"decode_tok_s\":%.1f,\"decode_step_ms_no_logits\":%.3f,"
        "\"decode_tok_s_no_logits\":%.1f,\"decode_step_ms_device_picks\":%.3f,\"decode_tok_s_device_picks\":%.1f,"
        "\"logits_mb_per_step\":%.1f}\n",
        config.c_str(), b, prompt, gen, prefill_s, step_ms, b / (step_ms * 1e-3), bare_ms, b / (bare_ms * 1e-3), pick_ms,
        b / (pick_ms * 1e-3), 4.0 * b * vocab / 1e6);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  std::string config = "qwen3-0.6b";
  std::vector<int> prompt_lens = {128, 2048};
  int gen = 128;
  int batch_prompt = 128;
  std::vector<int> batches;
  bool shapes = false, quant_shapes = false, attention = false;
  std::string only;  // --quant-gemv: one matrix (qkv, o, gate_up, down, lm_head)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) config = argv[++i];
    else if (a == "--gen" && i + 1 < argc) gen = std::stoi(argv[++i]);
    else if (a == "--gemv-shapes") shapes = true;
    else if (a == "--quant-gemv") quant_shapes = true;
    else if (a == "--attention") attention = true;
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--prompt-lens" && i + 1 < argc) prompt_lens = parse_list(argv[++i]);
    else if (a == "--batch" && i + 1 < argc) batches = parse_list(argv[++i]);
    else if (a == "--prompt" && i + 1 < argc) batch_prompt = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: cuda_bench --config NAME [--prompt-lens 128,2048] [--gen 128] [--gemv-shapes]\n"
                   "       cuda_bench --config NAME --batch 1,8,32,64 [--prompt 128] [--gen 64]\n");
      return 2;
    }
  }
  const model::ModelConfig cfg = model::preset_config(config);
  if (const char* pdl = std::getenv("NEURON_CUDA_PDL"); pdl && std::string(pdl) == "0")
    backend::cuda::kernels::set_programmatic_launch(false);  // as the runner reads it, for the kernel benchmarks too
  if (!batches.empty()) {
    batched_decode(cfg, config, batches, batch_prompt, gen);
    return 0;
  }
  const double copy_gbs = cuda::measure_copy_bandwidth_gbs(0);
  if (shapes) gemv_shapes(cfg, copy_gbs);
  if (quant_shapes || attention) {
    if (quant_shapes) quant_gemv_shapes(cfg, copy_gbs, only);
    if (attention) attention_shapes(cfg, copy_gbs);
    return 0;
  }

  RunnerOptions options;
  options.max_context = *std::max_element(prompt_lens.begin(), prompt_lens.end()) + gen + 16;
  auto t0 = clock_type::now();
  auto runner = cuda::make_cuda_runner(cfg, nullptr, model::ShardPlan::make(cfg, 0, 1), Device{Device::Kind::cuda, 0},
                                       std::make_shared<dist::LocalCommunicator>(), options);
  const double load_s = seconds_since(t0);
  const MemoryStats mem = runner->memory();
  const auto vocab = static_cast<std::size_t>(cfg.vocab_size);
  std::vector<float> logits(vocab);
  SingleSequence seq(*runner);

  for (int len : prompt_lens) {
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(len));
    for (int i = 0; i < len; ++i) prompt[i] = (i * 7919 + 13) % static_cast<int>(cfg.vocab_size);
    std::vector<double> ttft;
    for (int rep = 0; rep < 6; ++rep) {  // the first is warm-up (cuBLAS heuristics, module load)
      t0 = clock_type::now();
      seq.forward(prompt, 0, logits);
      if (rep > 0) ttft.push_back(seconds_since(t0));
    }
    const double t = median(ttft);
    // Decode from this prompt: the first step captures the graph and is not timed.
    std::int32_t pos = len;
    std::int32_t tok = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    seq.forward(std::span<const std::int32_t>(&tok, 1), pos++, logits);
    t0 = clock_type::now();
    for (int i = 0; i < gen; ++i) {
      tok = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      seq.forward(std::span<const std::int32_t>(&tok, 1), pos++, logits);
    }
    const double decode_s = seconds_since(t0);
    const double tps = gen / decode_s;
    const double embed_bytes = 2.0 * cfg.vocab_size * cfg.hidden_size;
    const double weights_read = static_cast<double>(mem.weight_bytes) - (cfg.tie_word_embeddings ? 0.0 : embed_bytes);
    const double mean_ctx = len + 1 + gen / 2.0;
    const double kv_read = 2.0 * 2.0 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * mean_ctx;
    const double step_bytes = weights_read + kv_read;
    std::printf(
        "{\"config\":\"%s\",\"device\":\"cuda:0\",\"copy_bandwidth_gbs\":%.1f,\"load_s\":%.3f,\"weight_gb\":%.3f,"
        "\"prompt_len\":%d,\"ttft_ms\":%.2f,\"prefill_tok_s\":%.0f,\"gen\":%d,\"decode_tok_s\":%.1f,"
        "\"decode_step_bytes\":%.0f,\"decode_bw_gbs\":%.1f,\"decode_bw_fraction\":%.3f}\n",
        config.c_str(), copy_gbs, load_s, mem.weight_bytes / 1e9, len, t * 1e3, len / t, gen, tps, step_bytes,
        step_bytes * tps / 1e9, step_bytes * tps / 1e9 / copy_gbs);
    std::fflush(stdout);
  }
  return 0;
} catch (const neuron::Error& e) {
  std::fprintf(stderr, "cuda_bench: %s: %s\n", e.kind().c_str(), e.what());
  return 1;
}
