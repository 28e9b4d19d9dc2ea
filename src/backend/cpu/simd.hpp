#pragma once
// What the SIMD kernel files share: <immintrin.h> with GCC 12's false
// positive silenced, and the small helpers each of them needs.
//
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which it
// reports as uninitialized once they are inlined into templates
// (-Wuninitialized, -Wmaybe-uninitialized). Include this instead of
// <immintrin.h> in a kernel file; the pragmas then cover that file.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tensor/dtype.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace neuron::backend::cpu {

// acc + the sums of each two word products of a and b: vpmaddwd then vpaddd,
// or AVX-VNNI's vpdpwssd (V; the int8 AVX2 kernels).
template <bool V>
__attribute__((target("avx2,fma,f16c"))) inline __m256i add_word_dots(__m256i acc, __m256i a, __m256i b) {
  if constexpr (V) {
    asm("%{vex%} vpdpwssd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
    return acc;
  } else {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
}

// The sum of a vector's 8 lanes.
__attribute__((target("avx2,fma"))) inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// x = hi + lo + r with hi = bf16(x) and lo = bf16(x - hi), |r| below
// 2^-17 |x|: the two bf16 terms the vdpbf16ps kernels multiply x by.
// x, hi, lo: [n].
inline void split_bf16_terms(const float* x, std::int64_t n, std::uint16_t* hi, std::uint16_t* lo) noexcept {
  for (std::int64_t i = 0; i < n; ++i) {
    hi[i] = f32_to_bf16(x[i]);
    lo[i] = f32_to_bf16(x[i] - bf16_to_f32(hi[i]));
  }
}

// e^x of 16 values, within 2e-7 of the exact value relative (f32's own
// rounding is 6e-8): e^x = 2^n e^r with n = round(x log2 e) and r = x - n ln 2
// (ln 2 in two parts, |r| <= ln 2 / 2), e^r by its degree-7 Taylor
// polynomial. Below -104 gives 0 (as expf's underflow), above 88.7 +inf's
// neighbourhood; NaN stays NaN.
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // NaN passes through (max returns the second operand)
  x = _mm512_min_ps(_mm512_set1_ps(88.7f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  for (const float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  return _mm512_scalef_ps(p, n);
}

// exp16's e^x on 8 values with AVX2 + FMA, the same reduction and polynomial
// (within 2e-7 relative; below -104 gives 0, NaN stays NaN). AVX2 has no
// vscalefps: 2^n is applied as 2^(n >> 1) times 2^(n - (n >> 1)), two
// normal powers (n is -150..128), the first product exact, so the result
// rounds once as exp16's does.
__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);  // NaN passes through (max returns the second operand)
  x = _mm256_min_ps(_mm256_set1_ps(88.7f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  for (const float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, p1), p2);
}

// An f16 at any alignment (a GGUF block's scale) as f32.
__attribute__((target("f16c"))) inline float f16_at(const std::byte* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// One bf16 term of a split of 16 f32 values: rest rounded to bf16 (nearest
// even), and rest reduced by it (exactly). Called again on what is left, it
// gives the next term: hi, then lo (weights), or hi, mid, lo (activations).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline __m256bh bf16_term(__m512& rest) {
  const __m256bh term = _mm512_cvtneps_pbh(rest);
  rest = _mm512_sub_ps(
      rest, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(term)), 16)));
  return term;
}

// Every cache line of the block at `block`. The kernels pass the same block
// of the row R rows below: the next row block's, one block pass ahead (a
// fixed 1 KiB ahead left Q8_0 decode 25% slower); in the sequential walk
// (decode_kernel.hpp, R = 1) the next row's, which on Zen 4 still beat none
// (Q4_K decode 27.2 against 25.3 tok/s, 2026-12-04).
template <class Q>
inline void prefetch_block(const std::byte* block) {
  for (std::size_t off = 0; off < Q::kBytes + 63; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(block + (off < Q::kBytes ? off : Q::kBytes - 1)), _MM_HINT_T0);
}

// The eight 6-bit scales and mins of a Q4_K super-block from its 12 packed
// bytes, all at once with 32-bit masks and shifts (llama.cpp's unpacking of
// the same layout), as the low 8 bytes of two vectors: sc[j], m[j] equal
// quant::scale_min_k4(j) for j = 0..7. Built in registers: stored as bytes
// and reloaded as a vector they would stall store forwarding (an int8
// kernel ran at half speed so).
__attribute__((target("sse4.1"))) inline void unpack_k4_scales(const std::byte* packed, __m128i& sc, __m128i& m) {
  constexpr std::uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  std::uint32_t u[3];
  std::memcpy(u, packed, 12);
  sc = _mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(u[0] & kLow6)),
                        static_cast<int>((u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4)), 1);
  m = _mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(u[1] & kLow6)),
                       static_cast<int>(((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4)), 1);
}

}  // namespace neuron::backend::cpu
