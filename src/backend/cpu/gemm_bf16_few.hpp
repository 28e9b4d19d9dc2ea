#pragma once
// Y = X W^T for a few tokens at once, with W in bf16: the batched decode
// step's products (a handful of sequences, one new token each).
//
// Decode is bound by reading W, so, like gemv_bf16, this streams W from memory
// once per call and widens it in registers; unlike matmul_bf16's sgemm path it
// never writes an f32 copy of W. Each thread takes chunks of W's rows; a block
// of four rows (a few KiB, in L1) is multiplied with every token of the call
// before the next block is read. The tokens are copied once per call into a
// layout that matches the in-register widening (even and odd columns apart),
// so a weight costs one load and one shift or mask, never a shuffle.
#include <cstdint>

#include "backend/cpu/isa.hpp"
#include "backend/cpu/decode_kernel.hpp"

namespace neuron::backend::cpu {

// matmul_bf16 sends fewer tokens than this here. Measured on a 2-core Sapphire
// Rapids guest (bench/CPU.md): this kernel is 1.8x the tile-widening sgemm
// path at 8 tokens, 1.16x at 32, and 0.93x at 47-48.
inline constexpr std::int64_t kFewTokensMax = 40;

// x: [n, in] f32 (row stride ldx), w: [out, in] bf16 row-major (row stride in),
// y: [n, out] f32 (row stride ldy). Rows split in chunks over ChunkPool::shared(), walked as row_walk(bf16, n) says.
void gemm_bf16_few(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, const std::uint16_t* w,
                   std::int64_t out, float* y, std::int64_t ldy);

// The same on the calling thread with the given kernel and walk (decode_kernel.hpp:
// blocks of four rows, or one; the same sums either way), for rows [0, rows)
// of W (row r at w + r * ldw); y's column r is W's row r. `isa` must be supported.
void gemm_bf16_few_rows(Isa isa, RowWalk walk, const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx,
                        const std::uint16_t* w, std::int64_t ldw, std::int64_t rows, float* y, std::int64_t ldy);

}  // namespace neuron::backend::cpu
