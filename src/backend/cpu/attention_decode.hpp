#pragma once
// The two products of a decoding sequence's attention, for the few query
// heads that share a KV head (one token each): their scores against a run of
// K rows, and the score-weighted sum of V rows. K and V are read once for
// all the group's queries, in place: BLAS would first pack the run into a
// scratch copy (on a Zen 4 guest, OpenBLAS's packing was 37% of a
// Qwen3-0.6B decode step at 1000 positions, bench/CPU.md).
//
// K and V rows in f32 or bf16 (a bf16 pool's, widened in registers). AVX-512
// when the CPU has it and head_dim is a multiple of 16 up to 128, AVX2 + FMA
// when head_dim is a multiple of 8 up to 128 (decode_fits); the caller keeps
// its BLAS path otherwise. The same sums up to summation order (within
// 1e-6 of each other).
#include <cstdint>

#include "backend/cpu/isa.hpp"

namespace neuron::backend::cpu {

// These kernels run here for this head size with selected_isa() (or `isa`:
// avx2, avx512 or avx512_bf16, supported by this CPU).
bool decode_fits(std::int64_t head_dim) noexcept;
bool decode_fits(Isa isa, std::int64_t head_dim) noexcept;

// s[r * lds + p] = scale * (q_r . k_p) for g queries q ([g, hd], row stride
// hd) and `count` rows of K (k: [count, hd] row-major, f32 or bf16).
void decode_scores(const float* q, std::int64_t g, std::int64_t hd, const float* k, std::int64_t count, float scale,
                   float* s, std::int64_t lds);
void decode_scores(const float* q, std::int64_t g, std::int64_t hd, const std::uint16_t* k, std::int64_t count,
                   float scale, float* s, std::int64_t lds);

// o_r (+)= sum_p a[r * lda + p] v_p for g queries and `count` rows of V
// (v: [count, hd] row-major, f32 or bf16); o: [g, hd] (row stride ldo);
// accumulate: add to o, else overwrite it.
void decode_weighted_sum(const float* a, std::int64_t lda, std::int64_t g, const float* v, std::int64_t count,
                         std::int64_t hd, float* o, std::int64_t ldo, bool accumulate);
void decode_weighted_sum(const float* a, std::int64_t lda, std::int64_t g, const std::uint16_t* v, std::int64_t count,
                         std::int64_t hd, float* o, std::int64_t ldo, bool accumulate);

// The same with `isa`'s kernels (decode_fits(isa, hd) must hold; tests compare them).
void decode_scores(Isa isa, const float* q, std::int64_t g, std::int64_t hd, const float* k, std::int64_t count,
                   float scale, float* s, std::int64_t lds);
void decode_scores(Isa isa, const float* q, std::int64_t g, std::int64_t hd, const std::uint16_t* k, std::int64_t count,
                   float scale, float* s, std::int64_t lds);
void decode_weighted_sum(Isa isa, const float* a, std::int64_t lda, std::int64_t g, const float* v, std::int64_t count,
                         std::int64_t hd, float* o, std::int64_t ldo, bool accumulate);
void decode_weighted_sum(Isa isa, const float* a, std::int64_t lda, std::int64_t g, const std::uint16_t* v,
                         std::int64_t count, std::int64_t hd, float* o, std::int64_t ldo, bool accumulate);

}  // namespace neuron::backend::cpu
