#pragma once
// Y = X W^T for several tokens (prefill, batched decode from
// kAvx2TokensMin) with W in bf16, on AVX2 + FMA: the CPUs without AVX-512
// (Intel desktop and laptop CPUs, AMD Zen 1-3), and any CPU NEURON_CPU_ISA=avx2
// forces to that level. gemm_avx2_widened runs the same kernel over any W
// whose rows a callback widens to f32 (the quantized types' prefill).
//
// X is packed once per call, transposed into groups of 16 tokens (column c
// of a group: two vectors of 8 tokens). Each thread of ChunkPool::shared()
// takes tasks of 48 rows of W; a panel of 6 rows is widened to f32 (a
// shift each, into an L1/L2-sized buffer: W is read from memory once per
// call), then meets every group of tokens: for each column, the 6 rows'
// weights broadcast from the panel (a load each, no arithmetic) times the
// group's two vectors, into 6 x 2 accumulators (12 of the 16 registers).
// One FMA per 8 multiply-adds, none of them spent widening, and no
// horizontal sums: the classic sgemm register tile with the widening fused
// into its packing, which the tiles-and-sgemm path it replaces did in a
// separate pass and OpenBLAS then packed again (bench/CPU.md, 2026-12-06
// (afternoon): 1.06x that path at 128 tokens, 1.12x at 40; 1.4x
// gemm_bf16_few at 16).
//
// x stays f32 at every activation level: products are f32's up to
// summation order. Rounding x to bf16 (what llama.cpp's AVX2 product does)
// measured no faster here, as the kernel multiplies in f32 either way.
#include <cstdint>
#include <functional>

namespace neuron::backend::cpu {

// matmul_bf16 at the AVX2 level sends this many tokens and more here (fewer
// go to gemm_bf16_few). Measured on one thread of a Zen 5 forced to AVX2
// (3072 x 1024, bench/cpu/kernel_bench.cpp prefill_avx2/): 0.8x
// gemm_bf16_few at 8 tokens, 1.1x at 12, 1.4x at 16 (medians of 3).
inline constexpr std::int64_t kAvx2TokensMin = 12;

// The product can run here: the CPU has AVX2, FMA and F16C, and `in` is a
// multiple of 8.
bool gemm_bf16_avx2_fits(std::int64_t in) noexcept;

// x: [n, in] f32 (row stride ldx), w: [out, in] bf16 row-major (row stride in),
// y: [n, out] f32 (row stride ldy). Requires gemm_bf16_avx2_fits(in).
void gemm_bf16_avx2(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, const std::uint16_t* w,
                    std::int64_t out, float* y, std::int64_t ldy);

// Writes rows [r0, r0 + rows) of W (rows <= 6) as f32 into panel [rows][in];
// called from the pool's threads, each with its own panel.
using WidenRows = std::function<void(std::int64_t r0, std::int64_t rows, float* panel)>;

// The same product over a W of any type that `widen` writes as f32 a panel
// at a time: a quantized matrix's rows dequantized straight into the panel
// (matmul_quant's prefill at the AVX2 level) instead of into tiles that
// sgemm then packs again. Requires gemm_bf16_avx2_fits(in).
void gemm_avx2_widened(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, std::int64_t out,
                       const WidenRows& widen, float* y, std::int64_t ldy);

}  // namespace neuron::backend::cpu
