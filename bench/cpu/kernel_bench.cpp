// The CPU decode kernels on one thread, as weights a second (the
// "items_per_second" counter): each quantized type with every kernel this
// CPU runs (isa, and int8 activations), both row walks, over rows that stay in L2 (256 x 1024)
// and rows streamed from memory (96 MiB, past a 32 MiB L3), one token.
//   cmake -B build -DNEURON_BENCH=ON && ninja -C build cpu_kernel_bench
//   build/bench/cpu_kernel_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/decode_kernel.hpp"
#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/cpu/isa.hpp"
#include "quant/quantize.hpp"

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
    if (r < kDistinct) {
      for (auto& v : row) v = normal(rng);
      quant::quantize_row(type, row.data(), dst, kCols);
    } else {
      std::memcpy(dst, m.data.data() + static_cast<std::size_t>(r % kDistinct) * m.row_bytes, m.row_bytes);
    }
  }
  return m;
}

// int8: the int8 kernels (NEURON_CPU_ACTIVATIONS=int8), `isa` then only names them.
void run(benchmark::State& state, quant::GgmlType type, Isa isa, RowWalk walk, std::int64_t rows, bool int8) {
  if (!gemm_quant_few_supported(isa, type) || (int8 && !gemm_quant_few_int8(type)))
    return state.SkipWithError("kernel not supported on this CPU");
  const QuantMatrix m = make(type, rows);
  std::vector<float> x(kCols), y(static_cast<std::size_t>(rows));  // [kCols], [rows]
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  const QuantOperand operand = int8 ? QuantOperand(Activations::int8, type, x.data(), 1, kCols, kCols)
                                    : QuantOperand(isa, type, x.data(), 1, kCols, kCols);
  for (auto _ : state) {
    gemm_quant_few_rows(isa, walk, operand, m, 0, rows, y.data(), rows);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * rows * kCols);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(m.data.size()));
}

const bool registered = [] {
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_k, quant::GgmlType::q6_k})
    for (int kind = 0; kind < 4; ++kind) {  // avx2, avx512, avx512_bf16 (f32 x); int8 x
      const bool int8 = kind == 3;
      const Isa isa = int8 ? Isa::avx512 : std::array{Isa::avx2, Isa::avx512, Isa::avx512_bf16}[kind];
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
