#pragma once
// Y = X W^T for many tokens (prefill) with W in bf16, on Intel AMX tiles.
//
// A tile multiply (TDPBF16PS) takes bf16 on both sides, so X is split into
// three bf16 terms, x = hi + mid + lo exactly up to f32's last bit (each term
// holds the next 8 bits of x's mantissa), and every tile of W meets all three.
// Each product of a bf16 weight with a bf16 term is exact and accumulates in
// f32, so the result is an f32 product up to summation order, like the sgemm
// path it replaces, at several times its speed.
//
// The W side is read in place: a tile is 16 rows of W by 32 columns (its
// natural row-major layout). The X side is packed once per call into the
// tiles' pair-interleaved layout, 16 tokens by 32 columns a tile, tokens
// padded with zeros to a multiple of 32. Each thread of ChunkPool::shared()
// takes blocks of 32 rows of W and runs them against every token, so W is
// read from memory once per call.
#include <cstdint>

namespace neuron::backend::cpu {

// Rows of W per block: the product covers out / kAmxRows * kAmxRows rows.
inline constexpr std::int64_t kAmxRows = 32;

// This product can run here: amx_bf16_usable(), in a multiple of 32 and at
// least 32 rows (the rows past the last multiple of 32 are the caller's).
bool gemm_bf16_amx_fits(std::int64_t in, std::int64_t out) noexcept;

// x: [n, in] f32 (row stride ldx), w: [out, in] bf16 row-major (row stride in),
// y: [n, out] f32 (row stride ldy). Computes y's columns [0, out / kAmxRows * kAmxRows).
// Requires gemm_bf16_amx_fits(in, out).
//
// With w_lo ([out, in] bf16, like w) the weights are w + w_lo: a float matrix
// split into two bf16 terms (w = bf16(W), w_lo = bf16(W - w), within 2^-17 of
// W), which is how dequantized blocks reach the tiles (matmul_quant). The low
// term meets x's two leading terms (what it leaves out is below 2^-25 of each
// product).
void gemm_bf16_amx(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, const std::uint16_t* w,
                   std::int64_t out, float* y, std::int64_t ldy, const std::uint16_t* w_lo = nullptr);

}  // namespace neuron::backend::cpu
