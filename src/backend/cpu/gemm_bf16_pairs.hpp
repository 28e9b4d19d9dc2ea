#pragma once
// Y = X W^T for many tokens (prefill) with W in bf16, on AVX-512 BF16
// dot products (vdpbf16ps), for CPUs that have them but no AMX tiles (AMD
// Zen 4 and later).
//
// W is read in place: a pair of adjacent weights of a row, (w[o, 2c],
// w[o, 2c + 1]), is one 32-bit word, broadcast to the 16 lanes of a vector
// whose lanes are 16 tokens. X is packed once per call into its bf16 terms
// (packed_terms.hpp), whose column pair c of 16 tokens is that vector's other
// operand. A block of 12 rows of W meets 32 tokens at a time in 24 f32
// accumulators; each thread of ChunkPool::shared() takes chunks of W's rows
// against every token, so W is read from memory once per call and never
// widened or copied.
//
// The terms of x are the precision: two (hi + lo, within 2^-17 |x|, the
// exact mode's ~1e-6 relative error per product, like the decode pair
// kernels) cost two dot products per weight pair, as many multiply-adds an
// instruction as an f32 FMA; one (x rounded to bf16, as llama.cpp's bf16
// product does) costs one, twice the f32 rate.
#include <cstdint>

namespace neuron::backend::cpu {

// matmul_bf16 sends this many tokens and more here where the product fits
// (fewer go to gemm_bf16_few). Measured with two terms on a 2-core Zen 4 guest
// (3072 x 1024, bench/cpu/kernel_bench.cpp): 1.5x gemm_bf16_few at 16 tokens,
// 1.1x at 12, 0.75x at 8.
inline constexpr std::int64_t kPairsTokensMin = 16;

// The product can run here: the CPU has AVX-512 BF16 (and NEURON_CPU_ISA does
// not force a kernel without it), and `in` is a multiple of 32.
bool gemm_bf16_pairs_fits(std::int64_t in) noexcept;

// x: [n, in] f32 (row stride ldx), w: [out, in] bf16 row-major (row stride in),
// y: [n, out] f32 (row stride ldy); terms of x: 1 or 2. Requires gemm_bf16_pairs_fits(in).
void gemm_bf16_pairs(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, const std::uint16_t* w,
                     std::int64_t out, float* y, std::int64_t ldy, int terms);

}  // namespace neuron::backend::cpu
