#pragma once
// Y = X W^T for n tokens at once (prefill), with W held in bf16.
//
// One token is a matrix-vector product (gemv_bf16); a few (batched decode,
// fewer than kFewTokensMax) go to gemm_bf16_few, which streams W once. More go
// to the AMX tiles where the CPU has them (gemm_bf16_amx), the rows past their
// last block of 32, and on CPUs with AVX-512 BF16 but no AMX everything from
// kPairsTokensMin tokens, to AVX-512 BF16 dot products (gemm_bf16_pairs; x
// in two bf16 terms, or one with cpu_activations() bf16 or int8). At the
// AVX2 level everything from kAvx2TokensMin tokens goes to gemm_bf16_avx2
// (f32 FMAs on panels of W widened in L1). Otherwise each thread of
// ChunkPool::shared() takes tiles of W's rows, widens a tile to f32 in a
// scratch buffer sized to stay in its L2 cache, and multiplies it with
// OpenBLAS sgemm (single-threaded per tile: the tiles are the parallelism). W is read from
// memory once per call whatever n is, and never held in f32 as a whole.
#include <cstdint>

namespace neuron::backend::cpu {

// x: [n, in] f32 row-major (row stride ldx), w: [out, in] bf16 row-major,
// y: [n, out] f32 (row stride ldy).
void matmul_bf16(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, const std::uint16_t* w,
                 std::int64_t out, float* y, std::int64_t ldy);

// Widens bf16 to f32 (SIMD when the CPU has it).
void widen_bf16(const std::uint16_t* src, float* dst, std::int64_t count);

// OpenBLAS runs single-threaded inside our parallel loops; call before any BLAS use.
void init_blas_threads();

}  // namespace neuron::backend::cpu
