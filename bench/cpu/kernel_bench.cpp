// The CPU decode kernels on one thread, as weights a second (the
// "items_per_second" counter): each quantized type with every kernel this
// CPU runs (isa, and each int8 kernel family), both row walks, over rows that stay in L2 (256 x 1024)
// and rows streamed from memory (96 MiB, past a 32 MiB L3), one token; the same for
// gemv_bf16's kernels (bf16/<isa>/<walk>/...). And the
// prefill products (prefill/..., prefill_level/... at f32 and int8 activations
// through matmul_quant), multiply-adds a second.
//   cmake -B build -DNEURON_BENCH=ON && ninja -C build cpu_kernel_bench
//   build/bench/cpu_kernel_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/decode_kernel.hpp"
#include "backend/cpu/gemm_bf16_avx2.hpp"
#include "backend/cpu/gemm_bf16_few.hpp"
#include "backend/cpu/gemm_bf16_pairs.hpp"
#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/cpu/gemm_quant_grouped.hpp"
#include "backend/cpu/gemm_quant_pairs.hpp"
#include "backend/cpu/gemv_bf16.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/matmul.hpp"
#include "backend/cpu/matmul_quant.hpp"
#include "backend/cpu/recurrent_state.hpp"
#include "backend/cpu/activations.hpp"
#include "model/config.hpp"
#include "quant/dequantize.hpp"
#include "quant/quantize.hpp"
#include "tensor/dtype.hpp"

namespace neuron::backend::cpu {
namespace {

constexpr std::int64_t kCols = 1024;

// rows x kCols of `type`: 64 distinct quantized random rows, repeated.
QuantMatrix make(quant::GgmlType type, std::int64_t rows) {
  QuantMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = kCols;
  m.row_bytes = quant::row_bytes(type, kCols);
  m.data.resize(static_cast<std::size_t>(rows) * m.row_bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> row(kCols);  // [kCols]
  constexpr std::int64_t kDistinct = 64;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::byte* dst = m.data.data() + static_cast<std::size_t>(r) * m.row_bytes;
    if (r < kDistinct && (type == quant::GgmlType::q4_0 || type == quant::GgmlType::q5_k)) {
      // Not quantize_row's types: random quants, f16 scales (d, dmin) of about 0.01 at each block's start.
      for (std::size_t i = 0; i < m.row_bytes; ++i) dst[i] = static_cast<std::byte>(rng() & 0xFF);
      const std::size_t block = quant::row_bytes(type, type == quant::GgmlType::q4_0 ? 32 : 256);
      for (std::size_t at = 0; at < m.row_bytes; at += block) {
        const std::uint16_t d = 0x2100;
        std::memcpy(dst + at, &d, 2);
        if (type == quant::GgmlType::q5_k) std::memcpy(dst + at + 2, &d, 2);
      }
    } else if (r < kDistinct) {
      for (auto& v : row) v = normal(rng);
      quant::quantize_row(type, row.data(), dst, kCols);
    } else {
      std::memcpy(dst, m.data.data() + static_cast<std::size_t>(r % kDistinct) * m.row_bytes, m.row_bytes);
    }
  }
  return m;
}

// int8: the int8 kernels of `family` (NEURON_CPU_ACTIVATIONS=int8), `isa` then unused.
// grouped: Q4_K rows four to a group and their kernel (gemm_quant_grouped.hpp; an AVX2 family), `walk` unused.
void run(benchmark::State& state, quant::GgmlType type, Isa isa, RowWalk walk, std::int64_t rows, bool int8,
         Int8Kernels family = Int8Kernels::avx2, bool grouped = false) {
  if (int8 ? !int8_kernels_supported(family) : !gemm_quant_few_supported(isa, type))
    return state.SkipWithError("kernel not supported on this CPU");
  QuantMatrix m = make(type, rows);
  if (grouped) group_rows(m);
  std::vector<float> x(kCols), y(static_cast<std::size_t>(rows));  // [kCols], [rows]
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  const QuantOperand operand = int8 ? QuantOperand(Activations::int8, type, x.data(), 1, kCols, kCols, grouped)
                                    : QuantOperand(isa, type, x.data(), 1, kCols, kCols);
  for (auto _ : state) {
    if (grouped)
      gemm_q4_k_grouped_rows(family == Int8Kernels::avx_vnni, operand, m, 0, rows, y.data(), rows);
    else if (int8)
      gemm_quant_few_rows(family, walk, operand, m, 0, rows, y.data(), rows);
    else
      gemm_quant_few_rows(isa, walk, operand, m, 0, rows, y.data(), rows);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * rows * kCols);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(m.data.size()));
}

// gemv_bf16's kernel for `isa` walking `walk` over rows x kCols bf16 weights, one token.
void gemv(benchmark::State& state, Isa isa, RowWalk walk, std::int64_t rows) {
  if (!isa_supported(isa)) return state.SkipWithError("kernel not supported on this CPU");
  std::vector<std::uint16_t> w(static_cast<std::size_t>(rows * kCols));  // [rows, kCols] bf16
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (std::size_t i = 0; i < std::min<std::size_t>(w.size(), 64 * kCols); ++i) w[i] = f32_to_bf16(normal(rng));
  for (std::size_t i = 64 * kCols; i < w.size(); ++i) w[i] = w[i % (64 * kCols)];
  std::vector<float> x(kCols), y(static_cast<std::size_t>(rows));  // [kCols], [rows]
  for (auto& v : x) v = normal(rng);
  const GemvOperand operand(isa, x.data(), kCols);
  for (auto _ : state) {
    gemv_bf16_rows(isa, w.data(), kCols, rows, operand, y.data(), walk);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * rows * kCols);
  state.SetBytesProcessed(state.iterations() * rows * kCols * 2);
}

// The prefill products (128 tokens, 3072 x 1024 weights, two threads as the
// runner has them) on AVX-512 BF16: gemm_bf16_pairs for bf16 weights (type
// bf16), gemm_quant_pairs for the rest, with x in `terms` bf16 terms; items
// are multiply-adds.
void prefill(benchmark::State& state, quant::GgmlType type, int terms) {
  constexpr std::int64_t kTokens = 128, kRowsOut = 3072;
  if (!gemm_bf16_pairs_fits(kCols)) return state.SkipWithError("no AVX-512 BF16 here");
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(kTokens * kCols)), y(static_cast<std::size_t>(kTokens * kRowsOut));  // [n, cols], [n, rows]
  for (auto& v : x) v = normal(rng);
  if (type == quant::GgmlType::bf16) {
    std::vector<std::uint16_t> w(static_cast<std::size_t>(kRowsOut * kCols));  // [rows, cols] bf16
    for (auto& v : w) v = f32_to_bf16(normal(rng) * 0.02f);
    for (auto _ : state) {
      gemm_bf16_pairs(x.data(), kTokens, kCols, kCols, w.data(), kRowsOut, y.data(), kRowsOut, terms);
      benchmark::DoNotOptimize(y.data());
    }
  } else {
    const QuantMatrix m = make(type, kRowsOut);
    for (auto _ : state) {
      gemm_quant_pairs(x.data(), kTokens, kCols, m, y.data(), kRowsOut, terms);
      benchmark::DoNotOptimize(y.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * kTokens * kRowsOut * kCols);
}

// A prefill product (128 tokens, 3072 x 1024 weights) through matmul_quant
// at an activation level, on the pool's threads as the runner runs it: with
// NEURON_CPU_ISA=avx2, f32 is the dequantized tiles and sgemm, int8 the AVX2
// int8 kernels; items are multiply-adds.
// grouped: Q4_K rows four to a group (gemm_quant_grouped.hpp), as the runner holds them under int8 products.
void prefill_level(benchmark::State& state, quant::GgmlType type, Activations level, bool grouped = false) {
  constexpr std::int64_t kTokens = 128, kRowsOut = 3072;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(kTokens * kCols)), y(static_cast<std::size_t>(kTokens * kRowsOut));  // [n, cols], [n, rows]
  for (auto& v : x) v = normal(rng);
  QuantMatrix m = make(type, kRowsOut);
  if (grouped) group_rows(m);
  const Activations before = cpu_activations();
  set_cpu_activations(level);
  for (auto _ : state) {
    matmul_quant(x.data(), kTokens, kCols, m, y.data(), kRowsOut);
    benchmark::DoNotOptimize(y.data());
  }
  set_cpu_activations(before);
  state.SetItemsProcessed(state.iterations() * kTokens * kRowsOut * kCols);
}

// The int8 kernels' prefill tiles on one thread (128 tokens against 256 rows
// of 1024 columns, in L2), in the thread's CPU time (robust on a shared
// machine); `family` < 0: the dequantized rows and sgemm (OpenBLAS on this
// thread, OPENBLAS_NUM_THREADS=1; OPENBLAS_CORETYPE=Haswell for its AVX2
// kernel) as matmul_quant's f32 prefill runs them. Items are multiply-adds.
// grouped: Q4_K rows four to a group and their kernel (an AVX2 family).
void prefill_tile(benchmark::State& state, quant::GgmlType type, int family, bool grouped = false) {
  constexpr std::int64_t kTokens = 128, kRows = 256;
  if (family >= 0 && !int8_kernels_supported(static_cast<Int8Kernels>(family)))
    return state.SkipWithError("kernel not supported on this CPU");
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(kTokens * kCols)), y(static_cast<std::size_t>(kTokens * kRows));  // [n, cols], [n, rows]
  for (auto& v : x) v = normal(rng);
  QuantMatrix m = make(type, kRows);
  if (grouped) {
    group_rows(m);
    for (auto _ : state) {
      const QuantOperand operand(Activations::int8, type, x.data(), kTokens, kCols, kCols, true);
      gemm_q4_k_grouped_rows(family == static_cast<int>(Int8Kernels::avx_vnni), operand, m, 0, kRows, y.data(), kRows);
      benchmark::DoNotOptimize(y.data());
    }
    state.SetItemsProcessed(state.iterations() * kTokens * kRows * kCols);
    return;
  }
  if (family < 0) {
    std::vector<float> w(static_cast<std::size_t>(kRows * kCols));  // [rows, cols] f32
    for (auto _ : state) {
      for (std::int64_t r = 0; r < kRows; ++r)
        quant::dequantize_row(type, m.data.data() + static_cast<std::size_t>(r) * m.row_bytes, w.data() + r * kCols, kCols);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kTokens, kRows, kCols, 1.0f, x.data(), kCols, w.data(), kCols,
                  0.0f, y.data(), kRows);
      benchmark::DoNotOptimize(y.data());
    }
  } else {
    for (auto _ : state) {
      const QuantOperand operand(Activations::int8, type, x.data(), kTokens, kCols, kCols);
      gemm_quant_few_rows(static_cast<Int8Kernels>(family), RowWalk::interleaved, operand, m, 0, kRows, y.data(), kRows);
      benchmark::DoNotOptimize(y.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * kTokens * kRows * kCols);
}

// A bf16 prefill product (128 tokens, 3072 x 1024 weights) on the AVX2
// kernels, on the pool's threads (OMP_NUM_THREADS=1: the calling thread
// alone, whose CPU time is then the measure): `path` sgemm is tiles of W
// widened to f32 and OpenBLAS sgemm (OPENBLAS_CORETYPE=Haswell for its AVX2
// kernel), as matmul_bf16 ran it before gemm_bf16_avx2; avx2 gemm_bf16_avx2;
// few gemm_bf16_few at the AVX2 level. Items are multiply-adds.
void prefill_bf16_avx2(benchmark::State& state, const std::string& path, std::int64_t n) {
  constexpr std::int64_t kRowsOut = 3072;
  if (!gemm_bf16_avx2_fits(kCols)) return state.SkipWithError("no AVX2 here");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n * kCols)), y(static_cast<std::size_t>(n * kRowsOut));  // [n, cols], [n, rows]
  for (auto& v : x) v = normal(rng);
  std::vector<std::uint16_t> w(static_cast<std::size_t>(kRowsOut * kCols));  // [rows, cols] bf16
  for (auto& v : w) v = f32_to_bf16(normal(rng) * 0.02f);
  init_blas_threads();
  constexpr std::int64_t kTileRows = 128;  // 512 KiB of f32, as matmul_bf16's tiles
  for (auto _ : state) {
    if (path == "avx2") {
      gemm_bf16_avx2(x.data(), n, kCols, kCols, w.data(), kRowsOut, y.data(), kRowsOut);
    } else if (path == "few") {
      gemm_bf16_few_rows(Isa::avx2, RowWalk::interleaved, x.data(), n, kCols, kCols, w.data(), kCols, kRowsOut,
                         y.data(), kRowsOut);
    } else {
      ChunkPool::shared().run(kRowsOut / kTileRows, [&](std::int64_t t) {
        thread_local std::vector<float> tile;  // [kTileRows, kCols] f32
        tile.resize(static_cast<std::size_t>(kTileRows * kCols));
        widen_bf16(w.data() + t * kTileRows * kCols, tile.data(), kTileRows * kCols);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), kTileRows, kCols, 1.0f, x.data(), kCols,
                    tile.data(), kCols, 0.0f, y.data() + t * kTileRows, kRowsOut);
      });
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n * kRowsOut * kCols);
}

// Batched decode's products (n tokens, 3072 x 1024 weights, two threads,
// f32 activations): the few-token kernels (gemm_bf16_few, gemm_quant_few)
// against the pairs kernels with two terms and with one, to place the switch
// from one to the other (kPairsTokensMin); items are multiply-adds.
void few_tokens(benchmark::State& state, quant::GgmlType type, std::int64_t n, bool pairs, int terms) {
  constexpr std::int64_t kRowsOut = 3072;
  if (pairs && !gemm_bf16_pairs_fits(kCols)) return state.SkipWithError("no AVX-512 BF16 here");
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n * kCols)), y(static_cast<std::size_t>(n * kRowsOut));  // [n, cols], [n, rows]
  for (auto& v : x) v = normal(rng);
  std::vector<std::uint16_t> w;  // [rows, cols] bf16, for type bf16
  QuantMatrix m;                 // for the others
  if (type == quant::GgmlType::bf16) {
    w.resize(static_cast<std::size_t>(kRowsOut * kCols));
    for (auto& v : w) v = f32_to_bf16(normal(rng) * 0.02f);
  } else {
    m = make(type, kRowsOut);
  }
  const Isa isa = selected_isa();
  for (auto _ : state) {
    if (type == quant::GgmlType::bf16 && pairs)
      gemm_bf16_pairs(x.data(), n, kCols, kCols, w.data(), kRowsOut, y.data(), kRowsOut, terms);
    else if (type == quant::GgmlType::bf16)
      gemm_bf16_few(x.data(), n, kCols, kCols, w.data(), kRowsOut, y.data(), kRowsOut);
    else if (pairs)
      gemm_quant_pairs(x.data(), n, kCols, m, y.data(), kRowsOut, terms);
    else
      gemm_quant_few(isa, x.data(), n, kCols, m, y.data(), kRowsOut);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n * kRowsOut * kCols);
}

// A hybrid's state snapshot (issue 27's prefix reuse): RecurrentStates::save of one sequence's whole state,
// every linear layer's [Hv, dk, dv] f32 delta-rule state and its conv taps, at Qwen3-Next-80B-A3B's shape
// (48 layers, 3 of 4 linear; 16 key heads and 32 value heads of 128; conv kernel 4), and with 48 value
// heads over 64 layers.
void state_snapshot(benchmark::State& state, std::int64_t layers, std::int64_t value_heads) {
  model::ModelConfig cfg;
  cfg.model_type = "qwen3_next";
  cfg.num_hidden_layers = layers;
  cfg.linear.num_key_heads = 16;
  cfg.linear.num_value_heads = value_heads;
  cfg.linear.key_head_dim = 128;
  cfg.linear.value_head_dim = 128;
  cfg.linear.conv_kernel = 4;
  for (std::int64_t l = 0; l < layers; ++l)
    cfg.linear.layer_types.push_back(l % 4 == 3 ? model::LayerType::full_attention : model::LayerType::linear_attention);
  model::ShardPlan plan;  // one rank: every linear head
  plan.linear_key_heads = cfg.linear.num_key_heads;
  plan.linear_value_heads = cfg.linear.num_value_heads;
  RecurrentStates states(cfg, plan, 1, 1);
  const auto conv = static_cast<std::size_t>(cfg.linear.conv_dim() * (cfg.linear.conv_kernel - 1));
  const auto delta = static_cast<std::size_t>(value_heads * 128 * 128);
  for (std::int64_t l = 0; l < layers * 3 / 4; ++l) {  // a written state, as in a serving process
    std::fill_n(states.conv(0, l), conv, 0.5f);
    std::fill_n(states.delta(0, l), delta, 0.5f);
  }
  states.save(0, 0);  // and the snapshot's pages committed
  for (auto _ : state) states.save(0, 0);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(states.bytes_per_slot()));
  state.counters["MiB"] = static_cast<double>(states.bytes_per_slot()) / (1 << 20);
}

const bool registered = [] {
  benchmark::RegisterBenchmark("state_snapshot/qwen3-next-80b", [](benchmark::State& s) { state_snapshot(s, 48, 32); })
      ->UseRealTime();
  benchmark::RegisterBenchmark("state_snapshot/64-layers-48-value-heads", [](benchmark::State& s) { state_snapshot(s, 64, 48); })
      ->UseRealTime();
  for (auto type : {quant::GgmlType::bf16, quant::GgmlType::q8_0, quant::GgmlType::q4_k, quant::GgmlType::q6_k})
    for (const std::int64_t n : {4, 8, 12, 16, 24, 32, 39})
      for (const int kind : {0, 2, 1}) {  // few-token kernel, pairs with two terms, pairs with one
        const bool pairs = kind > 0;
        const int terms = kind == 1 ? 1 : 2;
        const std::string name = "few/" + std::string(quant::ggml_type_name(type)) +
                                 (pairs ? "/pairs" + std::to_string(terms) : std::string("/few")) + "/n:" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { few_tokens(s, type, n, pairs, terms); })
            ->UseRealTime();
      }
  for (auto type : {quant::GgmlType::bf16, quant::GgmlType::q8_0, quant::GgmlType::q4_k, quant::GgmlType::q6_k})
    for (const int terms : {1, 2}) {
      const std::string name = "prefill/" + std::string(quant::ggml_type_name(type)) + "/terms:" + std::to_string(terms);
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { prefill(s, type, terms); })->UseRealTime();
    }
  for (const std::int64_t n : {4, 8, 12, 16, 24, 40, 128})
    for (const std::string path : {"sgemm", "few", "avx2"}) {
      const std::string name = "prefill_avx2/bf16/" + path + "/n:" + std::to_string(n);
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { prefill_bf16_avx2(s, path, n); });
    }
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_0, quant::GgmlType::q4_k, quant::GgmlType::q5_k,
                    quant::GgmlType::q6_k})
    for (const int family : {-1, 0, 1, 2}) {  // sgemm, then Int8Kernels avx2, avx_vnni, avx512_vnni
      const std::string name = "prefill_tile/" + std::string(quant::ggml_type_name(type)) + "/" +
                               (family < 0 ? std::string("sgemm") : "int8_" + std::string(int8_kernels_name(static_cast<Int8Kernels>(family))));
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { prefill_tile(s, type, family); });
      if (type == quant::GgmlType::q4_k && (family == 0 || family == 1))
        benchmark::RegisterBenchmark((name + "_grouped").c_str(),
                                     [=](benchmark::State& s) { prefill_tile(s, type, family, true); });
    }
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_0, quant::GgmlType::q4_k, quant::GgmlType::q5_k,
                    quant::GgmlType::q6_k})
    for (const Activations level : {Activations::f32, Activations::int8}) {
      const std::string name = "prefill_level/" + std::string(quant::ggml_type_name(type)) + "/" +
                               std::string(activations_name(level)) + "/isa:" + std::string(isa_name(selected_isa()));
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { prefill_level(s, type, level); })
          ->UseRealTime();
      if (type == quant::GgmlType::q4_k && level == Activations::int8)
        benchmark::RegisterBenchmark((name + "/grouped").c_str(),
                                     [=](benchmark::State& s) { prefill_level(s, type, level, true); })
            ->UseRealTime();
    }
  for (const Isa isa : {Isa::avx2, Isa::avx512, Isa::avx512_bf16})
    for (RowWalk walk : {RowWalk::interleaved, RowWalk::sequential})
      for (const bool l2 : {true, false}) {
        const std::int64_t rows = l2 ? 256 : (std::int64_t{96} << 20) / (2 * kCols);
        const std::string name = "bf16/" + std::string(isa_name(isa)) + "/" + std::string(row_walk_name(walk)) +
                                 (l2 ? "/l2" : "/memory");
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { gemv(s, isa, walk, rows); });
      }
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_0, quant::GgmlType::q4_k, quant::GgmlType::q5_k,
                    quant::GgmlType::q6_k})
    for (const Int8Kernels family : {Int8Kernels::avx2, Int8Kernels::avx_vnni, Int8Kernels::avx512_vnni})
      for (RowWalk walk : {RowWalk::interleaved, RowWalk::sequential})
        for (const bool l2 : {true, false}) {
          const std::int64_t rows = l2 ? 256 : (std::int64_t{96} << 20) / static_cast<std::int64_t>(quant::row_bytes(type, kCols));
          const std::string name = std::string(quant::ggml_type_name(type)) + "/int8_" +
                                   std::string(int8_kernels_name(family)) + "/" + std::string(row_walk_name(walk)) +
                                   (l2 ? "/l2" : "/memory");
          benchmark::RegisterBenchmark(name.c_str(),
                                       [=](benchmark::State& s) { run(s, type, Isa::avx2, walk, rows, true, family); });
        }
  for (const Int8Kernels family : {Int8Kernels::avx2, Int8Kernels::avx_vnni})
    for (const bool l2 : {true, false}) {
      const std::int64_t rows =  // whole groups
          l2 ? 256 : (std::int64_t{96} << 20) / static_cast<std::int64_t>(quant::row_bytes(quant::GgmlType::q4_k, kCols)) / 4 * 4;
      const std::string name = "Q4_K/int8_" + std::string(int8_kernels_name(family)) + "/grouped" + (l2 ? "/l2" : "/memory");
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
        run(s, quant::GgmlType::q4_k, Isa::avx2, RowWalk::interleaved, rows, true, family, true);
      });
    }
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_k, quant::GgmlType::q6_k})
    for (int kind = 0; kind < 3; ++kind) {  // avx2, avx512, avx512_bf16 (f32 x)
      const bool int8 = false;
      const Isa isa = std::array{Isa::avx2, Isa::avx512, Isa::avx512_bf16}[kind];
      if (isa == Isa::avx512_bf16 && !gemm_quant_few_bf16_pairs(isa, type)) continue;  // the avx512 kernel again
      for (RowWalk walk : {RowWalk::interleaved, RowWalk::sequential})
        for (const bool l2 : {true, false}) {
          const std::int64_t rows = l2 ? 256 : (std::int64_t{96} << 20) / static_cast<std::int64_t>(quant::row_bytes(type, kCols));
          const std::string name = std::string(quant::ggml_type_name(type)) + "/" +
                                   (int8 ? std::string("int8") : std::string(isa_name(isa))) + "/" +
                                   std::string(row_walk_name(walk)) + (l2 ? "/l2" : "/memory");
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { run(s, type, isa, walk, rows, int8); });
        }
    }
  return true;
}();

}  // namespace
}  // namespace neuron::backend::cpu

BENCHMARK_MAIN();
