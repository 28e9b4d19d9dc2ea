#pragma once
// gemm_quant_few's int8 kernels for CPUs without AVX-512 VNNI (every x86-64
// CPU since Haswell and Zen 1): Q4_K, Q5_K, Q6_K, Q8_0 and Q4_0 rows against
// tokens rounded to int8 per 256 columns (QuantOperand's int8 form,
// llama.cpp's Q8_K), in 256-bit integer products as llama.cpp's AVX2
// kernels multiply: vpmaddubsw (unsigned quants times signed x, pairs of
// products, none past 2^15: at most 2 * 63 * 127), then vpmaddwd (K-quants:
// times each sub-block's scale; Q8_0 and Q4_0: times one), one f32 FMA a
// block with the two scales. With AVX-VNNI (Alder Lake, Zen 5, ...) the
// vpmaddwd and its add are one vpdpwssd, and Q8_0's and Q4_0's products one
// vpdpbusd on unsigned quants (Q8_0 as q + 128, Q4_0 as q), the operand's
// corrections taking the bias back out; plain AVX2 multiplies Q8_0 by sign
// (|q| times x with q's sign), as llama.cpp does.
//
// Exact up to x's rounding, as the AVX-512 VNNI kernels: the result equals
// the dequantized W times the rounded x within 1e-5 of sum |w x|. Every row's
// sum is accumulated in the same order whichever walk or token tile
// computes it, so the walks give the same bits.
//
// One token (decode) walks rows four at a time side by side (interleaved)
// or one at a time (sequential), as decode_kernel measures; several tokens
// (batched decode, prefill) take one row at a time against tiles of four
// tokens, the row's unpacked quants shared by the tile, 16 tokens' rounded
// x at a time (L1-sized) so the weights are read from memory once and x from
// cache.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/decode_kernel.hpp"

namespace neuron::backend::cpu {

class QuantOperand;
struct QuantMatrix;

// This CPU has AVX-VNNI (the VEX vpdpbusd / vpdpwssd; CPUID.(7,1):EAX bit 4)
// and NEURON_CPU_AVX_VNNI is not 0 (which, with NEURON_CPU_ISA=avx2, runs
// the kernels an AVX2-only CPU such as Zen 1-3 runs).
bool avx_vnni_supported() noexcept;

// One block of 256 columns of x rounded to int8 on AVX2, bit for bit as the
// AVX-512 rounding (QuantOperand): q = nearbyint(x 127 / max|x|), sums16 its
// sums of 16; returns max|x| / 127. A NaN or infinity makes the scale NaN and
// q zero. x: [256], q: [256], sums16: [16].
float round_to_int8_avx2(const float* x, std::int8_t* q, std::int16_t* sums16) noexcept;

// Rows [r0, r1) of x.int8()'s product with W (Q4_K, Q5_K, Q6_K, Q8_0 or
// Q4_0, cols a multiple of 256) into y [x.tokens(), ldy] on the calling
// thread; vnni: the AVX-VNNI kernels (avx_vnni_supported() must hold).
void gemm_quant_int8_avx2_rows(bool vnni, RowWalk walk, const QuantOperand& x, const QuantMatrix& w, std::int64_t r0,
                               std::int64_t r1, float* y, std::int64_t ldy);

}  // namespace neuron::backend::cpu
