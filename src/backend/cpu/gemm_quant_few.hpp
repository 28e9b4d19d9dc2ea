#pragma once
// Y = X W^T for one or a few tokens with W in Q8_0, Q4_K or Q6_K blocks (and
// Q4_0, Q5_K with AVX-512): the decode step's products on a quantized model
// (batch 1 and batched decode).
//
// The quantized counterpart of gemm_bf16_few: each thread takes chunks of W's
// rows; four rows' blocks are dequantized in registers, 32 columns at a time,
// exactly as quant::dequantize_row computes them (up to one fused
// multiply-add for Q4_K's minimum), and multiplied with every token of the
// call, four tokens at a time, while the rows' blocks are in L1. W is read
// from memory once per call; by default the activations stay f32 (no int8
// rounding of x), so the result is a dequantize-then-f32 product up to
// summation order.
// AVX-512 (4 rows, 32 columns a step) and AVX2 + FMA + F16C (2 rows, 16
// columns); matmul_quant keeps its other paths for the scalar CPU and types.
//
// With Isa::avx512_bf16, Q4_K and Q6_K take the bf16-pair kernels instead,
// a token at a time: each quant (Q4_K's q - 8, Q6_K's q - 32: integers
// below 33 in magnitude, exact in bf16) meets x's hi and lo bf16 terms in
// vdpbf16ps, a sub-block's 32 sums scaled by one FMA, and Q4_K's constant
// term (8 d sc - dmin m) meets the sub-block's sum of x. The f32 kernels
// spend a conversion and an FMA on every 16 weights, these two dot
// instructions on 32 and a scale on the sub-block (decode_kernel.hpp
// measures which is faster). Every other type takes the AVX-512 kernels.
//
// With int8 activations (activations.hpp), Q4_K, Q6_K, Q8_0, Q5_K and Q4_0
// (rows of whole 256 columns) take the int8 kernels instead: each token's x
// is rounded to int8 per 256 columns (d = max|x| / 127, llama.cpp's Q8_K; a
// NaN or infinity makes its block's products NaN) and the quants meet it in
// integer multiply-adds, a sub-block's scale applied as an integer, one f32
// FMA a block. Three families (Int8Kernels): AVX-512 VNNI (vpdpbusd /
// vpdpwssd on 512 bits; Q8_0's quants as q + 128, x's sums of 4 taking the
// 128 back out; Q4_0 likewise its 8), and on every other AVX2 CPU the
// 256-bit kernels of gemm_quant_int8_avx2.hpp (vpmaddubsw / vpmaddwd, or
// AVX-VNNI's vpdpbusd / vpdpwssd where the CPU has them). Exact up to x's
// rounding (up to d / 2 an element), which the 1e-5 bound of the f32
// kernels does not cover: the result equals the dequantized W times the
// rounded x within 1e-5, and is about 1e-2 of sum |w x| from the f32
// product (bench/CPU.md). Prefill (40 tokens and more) takes
// gemm_quant_pairs or sgemm instead (matmul_quant.hpp), except on CPUs
// whose int8 family is an AVX2 one, where the int8 kernels take every
// token count of the K-quants.
#include <cstdint>
#include <string_view>
#include <vector>

#include "backend/cpu/activations.hpp"
#include "backend/cpu/decode_kernel.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/matmul_quant.hpp"
#include "quant/ggml_type.hpp"

namespace neuron::backend::cpu {

// This kernel handles `type` with `isa` (any but scalar; Q8_0, Q4_K, Q6_K;
// Q4_0 and Q5_K with AVX-512 only).
bool gemm_quant_few_supported(Isa isa, quant::GgmlType type) noexcept;

// `isa` multiplies `type` in bf16 pairs (avx512_bf16 and Q4_K or Q6_K).
bool gemm_quant_few_bf16_pairs(Isa isa, quant::GgmlType type) noexcept;

// The int8 kernels' instruction families.
enum class Int8Kernels {
  avx2,         // vpmaddubsw + vpmaddwd on 256 bits (gemm_quant_int8_avx2.hpp)
  avx_vnni,     // the same with AVX-VNNI's vpdpbusd / vpdpwssd (VEX, 256 bits)
  avx512_vnni,  // AVX-512 BW + VNNI on 512 bits
};
std::string_view int8_kernels_name(Int8Kernels k) noexcept;  // "avx2", "avx_vnni", "avx512_vnni"
bool int8_kernels_supported(Int8Kernels k) noexcept;          // this CPU runs them
// The family `isa`'s int8 products take on this CPU: avx512_vnni for the
// AVX-512 ISAs where the CPU has VNNI, else avx_vnni where it has AVX-VNNI,
// else avx2 (so NEURON_CPU_ISA=avx2 runs an AVX2 CPU's kernels on any CPU).
Int8Kernels int8_kernels(Isa isa) noexcept;

// `isa` has int8 kernels for `type` (any ISA but scalar, supported; Q4_K,
// Q6_K, Q8_0, Q5_K, Q4_0; x's columns a multiple of 256).
bool gemm_quant_few_int8(Isa isa, quant::GgmlType type) noexcept;

// The activations of one product as the kernels read them, prepared once
// per product (not per row chunk): x itself, and where the kernel takes bf16
// pairs each token split into hi + lo bf16 terms (x - hi - lo below
// 2^-17 |x|) and each 32 columns' f32 sum.
class QuantOperand {
 public:
  // x: [n, cols] f32 (row stride ldx), kept by pointer (it must outlive the operand).
  QuantOperand(Isa isa, quant::GgmlType type, const float* x, std::int64_t n, std::int64_t ldx, std::int64_t cols);
  // The int8 form (gemm_quant_few_int8(Isa::avx2, type) must hold; cols a
  // multiple of 256); the same bits whichever family multiplies it.
  // grouped: also the layout grouped Q4_K rows read (gemm_quant_grouped.hpp).
  QuantOperand(Activations, quant::GgmlType type, const float* x, std::int64_t n, std::int64_t ldx, std::int64_t cols,
               bool grouped = false);

  const float* f32() const noexcept { return x_; }
  std::int64_t tokens() const noexcept { return n_; }
  std::int64_t ldx() const noexcept { return ldx_; }
  bool pairs() const noexcept { return !hi_.empty(); }
  // Token t's terms [cols] and sums [cols / 32]; only when pairs().
  const std::uint16_t* hi(std::int64_t t) const noexcept { return hi_.data() + t * cols_; }
  const std::uint16_t* lo(std::int64_t t) const noexcept { return lo_.data() + t * cols_; }
  const float* sums(std::int64_t t) const noexcept { return sums_.data() + t * (cols_ / 32); }
  // Token t rounded to int8 [cols], its scales [cols / 256] and its sums of
  // 16 rounded values [cols / 16]; only when int8().
  bool int8() const noexcept { return !q8_.empty(); }
  const std::int8_t* q8(std::int64_t t) const noexcept { return q8_.data() + t * cols_; }
  const float* q8_scales(std::int64_t t) const noexcept { return sums_.data() + t * (cols_ / 256); }
  const std::int16_t* q8_sums(std::int64_t t) const noexcept { return q8_sums_.data() + t * (cols_ / 16); }
  // Q8_0's and Q4_0's: -128 (Q8_0, whose kernel adds the quants as q + 128) or
  // -8 (Q4_0, q - 8 added as q) times each 4 rounded values' sum [cols / 4].
  const std::int32_t* q8_corrections(std::int64_t t) const noexcept {
    return corrections_.empty() ? nullptr : corrections_.data() + t * (cols_ / 4);
  }
  // Token t's grouped form (group_operand): [cols * kGroupedXBytes] and its
  // sub-block sums [cols / 256 * 32]; only when grouped().
  bool grouped() const noexcept { return !grouped_.empty(); }
  const std::int8_t* q8_grouped(std::int64_t t) const noexcept { return grouped_.data() + t * cols_ * 4; }
  const std::int16_t* q8_grouped_sums(std::int64_t t) const noexcept {
    return grouped_sums_.data() + t * (cols_ / 256 * 32);
  }

 private:
  const float* x_;
  std::int64_t n_, ldx_, cols_;
  std::vector<std::uint16_t> hi_, lo_;  // [n, cols] bf16
  std::vector<float> sums_;             // [n, cols / 32] f32 sums, or [n, cols / 256] int8 scales
  std::vector<std::int8_t> q8_;         // [n, cols]
  std::vector<std::int16_t> q8_sums_;   // [n, cols / 16]
  std::vector<std::int32_t> corrections_;  // [n, cols / 4], Q8_0 and Q4_0 only
  std::vector<std::int8_t> grouped_;       // [n, cols * 4] when grouped
  std::vector<std::int16_t> grouped_sums_; // [n, cols / 256 * 32] when grouped
};

// x: [n, w.cols] f32 (row stride ldx), y: [n, w.rows] f32 (row stride ldy).
// Rows split in chunks over ChunkPool::shared(). With cpu_activations()
// int8 and gemm_quant_few_int8(isa, w.type), every token takes the int8
// kernels of int8_kernels(isa), walked as row_walk(w.type, n) says. Otherwise one token runs
// decode_kernel(w.type)'s walk and kernel when `isa` is selected_isa(), more
// tokens row_walk(w.type, n) and the f32 kernels (bf16 pairs would redo the
// products for each token where the f32 kernels share a dequantized weight).
// `isa` must be supported for w.type.
void gemm_quant_few(Isa isa, const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y,
                    std::int64_t ldy);

// Rows [r0, r1) of the same product on the calling thread with `isa`'s
// kernel (the int8 kernels of int8_kernels(isa) when x.int8()), walked as `walk` says (decode_kernel.hpp: blocks of four rows (two
// with AVX2), or one; the same sums either way). `x` must be prepared for
// `isa` and w.type. Tests compare it with the reference.
void gemm_quant_few_rows(Isa isa, RowWalk walk, const QuantOperand& x, const QuantMatrix& w, std::int64_t r0,
                         std::int64_t r1, float* y, std::int64_t ldy);
// The same for an int8 operand with the int8 kernels of family `k` (supported).
void gemm_quant_few_rows(Int8Kernels k, RowWalk walk, const QuantOperand& x, const QuantMatrix& w, std::int64_t r0,
                         std::int64_t r1, float* y, std::int64_t ldy);
// The same with the operand prepared for this call.
void gemm_quant_few_rows(Isa isa, RowWalk walk, const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w,
                         std::int64_t r0, std::int64_t r1, float* y, std::int64_t ldy);

}  // namespace neuron::backend::cpu
