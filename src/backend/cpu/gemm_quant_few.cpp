#include "backend/cpu/gemm_quant_few.hpp"


#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "backend/cpu/simd.hpp"
#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/gemm_quant_grouped.hpp"
#include "backend/cpu/gemm_quant_int8_avx2.hpp"
#include "quant/dequantize.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

#define NEURON_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

using quant::GgmlType;

constexpr int kRowBlock = 4;   // rows dequantized together (8 registers of weights)
static_assert(kRowBlock % kGroupRows == 0);  // row chunks (chunk_rows' multiple) start on a Q4_K group
constexpr int kTokenTile = 4;  // tokens per pass (16 registers of accumulators)

// A block format's in-register dequantization: prepare() reads a block's
// scales, chunk(i) gives its columns [32 i, 32 i + 32) as two f32 vectors,
// computed as quant::dequantize_row computes them.

// Q8_0: d * q, with d applied to the block's sum: chunk() gives q, and the
// kernel adds d * (q . x) of each block (kBlockScale). One multiplication a
// block instead of one a weight, and a row's sum waits on one FMA a block,
// not two: one row at a time (the sequential walk) was bound by that chain.
// A block of 32 columns whose f16 scale d leads its quants and is applied
// to the block's sum (Q8_0, Q4_0): prepare() reads d and finds the quants.
template <std::size_t Bytes>
struct BlockScaled {
  static constexpr std::int64_t kCols = 32;
  static constexpr std::size_t kBytes = Bytes;
  static constexpr bool kBlockScale = true;
  const std::byte* q = nullptr;
  __m512 d;

  NEURON_AVX512 void prepare(const std::byte* block) {
    d = _mm512_set1_ps(f16_at(block));
    q = block + 2;
  }
};

struct Q8_0 : BlockScaled<quant::kQ8_0Bytes> {
  NEURON_AVX512 void chunk(int, __m512& lo, __m512& hi) const {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16));
    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1));
  }
};

// Whether a format's chunks come unscaled, its block's scale applied once to the block's sum (Q8_0).
template <class Q>
constexpr bool block_scale() {
  if constexpr (requires { Q::kBlockScale; }) return Q::kBlockScale;
  return false;
}

// A Q4_K super-block's scales and mins as f32, for both ISAs' kernels
// (256-bit operations, which every AVX-512 CPU runs too).
#define NEURON_SCALES __attribute__((target("avx2,f16c")))
struct Q4_KScales {
  static constexpr std::int64_t kCols = quant::kQK_K;
  static constexpr std::size_t kBytes = quant::kQ4_KBytes;
  const std::byte* q = nullptr;  // the 128 bytes of nibbles
  float scale[8], min[8];        // d * sc_j, dmin * m_j

  NEURON_SCALES void prepare(const std::byte* block) {
    __m128i sc, m;  // [8] u8 each, in registers (stored as bytes and reloaded wider, they stall store forwarding)
    unpack_k4_scales(block + 4, sc, m);
    const __m256 d = _mm256_set1_ps(f16_at(block)), dmin = _mm256_set1_ps(f16_at(block + 2));
    _mm256_storeu_ps(scale, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc))));
    _mm256_storeu_ps(min, _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m))));
    q = block + 16;
  }
};

// A Q6_K super-block's 16 scales as f32 (d * sc_k), for both ISAs' kernels.
struct Q6_KScales {
  static constexpr std::int64_t kCols = quant::kQK_K;
  static constexpr std::size_t kBytes = quant::kQ6_KBytes;
  const std::byte* block = nullptr;
  float scale[16];

  NEURON_SCALES void prepare(const std::byte* b) {
    block = b;
    const __m256 d = _mm256_set1_ps(f16_at(b + 208));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    _mm256_storeu_ps(scale, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(scale + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
  }
};

// Q4_K: (d * sc_j) * q - dmin * m_j for sub-block j (32 columns, a nibble of
// 32 bytes). The sub-block's 16 possible values are one fused multiply-add
// over 0..15, and vpermps looks them up by the nibble: no conversion to f32
// and no scale per weight. vpermps reads only an index's low 4 bits, so the
// low nibble needs no mask and the high one a single shift; one widening of
// 16 bytes serves both nibbles (the unrolled loop's two chunks of a byte load).
struct Q4_K : Q4_KScales {
  NEURON_AVX512 void chunk(int i, __m512& lo, __m512& hi) const {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 lut = _mm512_fmsub_ps(iota, _mm512_set1_ps(scale[i]), _mm512_set1_ps(min[i]));  // [16] weights by q
    const std::byte* p = q + (i / 2) * 32;
    __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
    if (i & 1) {
      a = _mm512_srli_epi32(a, 4);
      b = _mm512_srli_epi32(b, 4);
    }
    lo = _mm512_permutexvar_ps(a, lut);
    hi = _mm512_permutexvar_ps(b, lut);
  }
};

// Columns [128 h, 128 h + 64) and [128 h + 64, 128 h + 128) of the Q6_K block
// at `b` as 6-bit quants in bytes (0..63), with 512-bit operations: ql for
// k = 0 | 1 (low nibbles), 2 | 3 (high), and qh's bits for k = 0 | 1 (bytes
// 0-31 | 32-63 of a half) and k = 2 | 3 moved to bits 4-5 (16-bit shifts, so
// per half of the vector a count).
NEURON_AVX512 inline void q6_k_bytes(const std::byte* b, int h, __m512i& first, __m512i& second) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i mask01 = _mm512_inserti64x4(_mm512_set1_epi8(0x03), _mm256_set1_epi8(0x0C), 1);
  const __m512i mask23 = _mm512_inserti64x4(_mm512_set1_epi8(0x30), _mm256_set1_epi8(static_cast<char>(0xC0)), 1);
  const __m512i shift01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shift23 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  const __m512i l = _mm512_loadu_si512(b + 64 * h);
  const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
  const __m512i top01 = _mm512_sllv_epi16(_mm512_and_si512(qh, mask01), shift01);
  const __m512i top23 = _mm512_srlv_epi16(_mm512_and_si512(qh, mask23), shift23);
  // (nibble & 0x0F) | top: ternary-logic table 0xEA is (a & b) | c.
  first = _mm512_ternarylogic_epi32(l, low4, top01, 0xEA);
  second = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), low4, top23, 0xEA);
}

// Q4_0: d * (q - 8), 32 columns a block: chunk() gives q - 8 (the low
// nibbles of its 16 bytes, then the high ones, looked up as Q4_K's are) and
// the kernel adds d * (q . x) of each block (kBlockScale), as for Q8_0.
struct Q4_0 : BlockScaled<quant::kQ4_0Bytes> {
  NEURON_AVX512 void chunk(int, __m512& lo, __m512& hi) const {
    const __m512 centred = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);  // [16] q - 8 by q
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    lo = _mm512_permutexvar_ps(bytes, centred);  // vpermps reads the index's low 4 bits: the low nibble
    hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), centred);
  }
};

// Q5_K: (d * sc_j) * q - dmin * m_j with q = nibble + 16 * (qh bit j) in
// 0..31, sub-block j's nibbles laid out as Q4_K's and its fifth bits bit j
// of qh's 32 bytes. The sub-block's 32 possible weights are two vectors (one
// fused multiply-add each) and vpermt2ps looks them up by a 5-bit index,
// the nibble with the fifth bit moved above it (one ternary-logic select).
struct Q5_K : Q4_KScales {  // prepare(): Q4_K's scales; q is then qh (32 bytes), the nibbles follow
  static constexpr std::size_t kBytes = quant::kQ5_KBytes;

  NEURON_AVX512 void chunk(int j, __m512& lo, __m512& hi) const {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 s = _mm512_set1_ps(scale[j]), m = _mm512_set1_ps(min[j]);
    const __m512 low = _mm512_fmsub_ps(iota, s, m);                                      // [16] q = 0..15
    const __m512 high = _mm512_fmsub_ps(_mm512_add_ps(iota, _mm512_set1_ps(16.0f)), s, m);  // [16] q = 16..31
    const std::byte* ql = q + 32 + (j / 2) * 32;
    const __m512i nib_mask = _mm512_set1_epi32(0x0F);
    for (int half = 0; half < 2; ++half) {
      __m512i n = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + 16 * half)));
      if (j & 1) n = _mm512_srli_epi32(n, 4);
      const __m512i h = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * half)));
      // bit j of qh to bit 4: shifted left by 4 - j (right by j - 4 for j > 4).
      const __m512i top = j <= 4 ? _mm512_slli_epi32(h, static_cast<unsigned>(4 - j)) : _mm512_srli_epi32(h, static_cast<unsigned>(j - 4));
      // (n & 0x0F) | (top & ~0x0F): ternary-logic table 0xCA is mask ? n : top.
      const __m512i index = _mm512_ternarylogic_epi32(nib_mask, n, top, 0xCA);
      (half == 0 ? lo : hi) = _mm512_permutex2var_ps(low, index, high);
    }
  }
};

// Q6_K: (d * sc_k) * (6-bit q - 32), a scale per 16 columns; columns 128 h +
// 32 k + l take ql's nibble (low for k < 2) at 64 h + 32 (k & 1) + l and qh's
// bits 2k, 2k + 1 at 32 h + l. prepare() reassembles the block's 256 6-bit
// quants into bytes in column order with 512-bit operations (64 columns per
// instruction, instead of per chunk on 32), and chunk() widens, converts and
// computes s * q - 32 s, one fused operation equal to s * (q - 32).
struct Q6_K : Q6_KScales {
  alignas(64) std::uint8_t q6[quant::kQK_K];  // [256] the 6-bit quants, column order
  float offset[16];                           // 32 * scale

  NEURON_AVX512 void prepare(const std::byte* b) {
    Q6_KScales::prepare(b);
    for (int k = 0; k < 16; k += 8) _mm256_storeu_ps(offset + k, _mm256_mul_ps(_mm256_set1_ps(32.0f), _mm256_loadu_ps(scale + k)));
    for (int h = 0; h < 2; ++h) {
      __m512i first, second;
      q6_k_bytes(b, h, first, second);
      _mm512_store_si512(q6 + 128 * h, first);
      _mm512_store_si512(q6 + 128 * h + 64, second);
    }
    // Keep scale, offset and q6 in memory: chunk() broadcasts and widens from
    // there for free, where GCC would otherwise keep the arrays in registers
    // and extract each lane with shuffles (measured 25% slower).
    asm volatile("" : : "r"(this) : "memory");
  }
  NEURON_AVX512 void chunk(int i, __m512& lo, __m512& hi) const {
    const __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q6 + 32 * i))));
    const __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q6 + 32 * i + 16))));
    lo = _mm512_fmsub_ps(a, _mm512_set1_ps(scale[2 * i]), _mm512_set1_ps(offset[2 * i]));
    hi = _mm512_fmsub_ps(b, _mm512_set1_ps(scale[2 * i + 1]), _mm512_set1_ps(offset[2 * i + 1]));
  }
};


// R rows from `rows` (row r at rows + r * row_bytes) times T tokens (token t at x + t * ldx), into y[t * ldy + r].
template <class Q, int R, int T>
NEURON_AVX512 void block_kernel(const std::byte* rows, std::size_t row_bytes, std::int64_t cols, const float* x,
                                std::int64_t ldx, float* y, std::int64_t ldy) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const std::int64_t blocks = cols / Q::kCols;
  for (std::int64_t b = 0; b < blocks; ++b) {
    Q q[R];
    for (int r = 0; r < R; ++r) {
      const std::byte* block = rows + r * row_bytes + static_cast<std::size_t>(b) * Q::kBytes;
      prefetch_block<Q>(block + R * row_bytes);
      q[r].prepare(block);
    }
    const float* xb = x + b * Q::kCols;
#pragma GCC unroll 8  // a constant i: no branches on it, and a Q4_K byte load serves two chunks
    for (int i = 0; i < static_cast<int>(Q::kCols / 32); ++i) {
      __m512 lo[R], hi[R];
      for (int r = 0; r < R; ++r) q[r].chunk(i, lo[r], hi[r]);
      for (int t = 0; t < T; ++t) {
        const __m512 x0 = _mm512_loadu_ps(xb + t * ldx + 32 * i), x1 = _mm512_loadu_ps(xb + t * ldx + 32 * i + 16);
        for (int r = 0; r < R; ++r) {
          if constexpr (block_scale<Q>()) {
            static_assert(Q::kCols == 32, "one chunk a block");
            acc[r][t] = _mm512_fmadd_ps(_mm512_fmadd_ps(hi[r], x1, _mm512_mul_ps(lo[r], x0)), q[r].d, acc[r][t]);
          } else {
            acc[r][t] = _mm512_fmadd_ps(hi[r], x1, _mm512_fmadd_ps(lo[r], x0, acc[r][t]));
          }
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// ---- AVX-512 BF16: Q4_K and Q6_K a token at a time, quants times x's bf16 terms in pairs ----

#define NEURON_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

// Word i of the table is the bf16 of (i mod period) - offset: the centred
// quants, small integers, exact in bf16.
template <int Period, int Offset>
constexpr std::array<std::uint16_t, 64> centred_bf16() {
  std::array<std::uint16_t, 64> t{};
  for (int i = 0; i < 64; ++i) t[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(static_cast<float>(i % Period - Offset)) >> 16);
  return t;
}
alignas(64) constexpr std::array<std::uint16_t, 64> kQ4Words = centred_bf16<16, 8>();   // [64] bf16(q - 8) by any index with q in its low 4 bits
alignas(64) constexpr std::array<std::uint16_t, 64> kQ6Words = centred_bf16<64, 32>();  // [64] bf16(q - 32)

// acc += (q . hi + q . lo) * scale over 32 columns: q's 32 bf16 words meet
// the two terms' pairs, a sub-block's sums start from zero and are scaled once.
NEURON_AVX512_BF16 inline __m512 scaled_pairs(__m512 acc, __m512bh q, __m512bh hi, __m512bh lo, __m512 scale) {
  return _mm512_fmadd_ps(_mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), q, hi), q, lo), scale, acc);
}

NEURON_AVX512_BF16 inline __m512bh bf16_at(const std::uint16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}

// Row sums of R rows: acc[r][0] and [r][1] the even and odd sub-blocks (a
// row never waits one FMA's latency per sub-block, and every R adds a row
// in the same order: the walks' bits agree).
NEURON_AVX512_BF16 inline float row_sum(__m512 even, __m512 odd, __m256 constant) {
  return _mm512_reduce_add_ps(_mm512_add_ps(even, odd)) + hsum8(constant);
}

// Q4_K: w = (d sc_j) (q - 8) + (8 d sc_j - dmin m_j). A 32-byte load is two
// sub-blocks (low nibbles, then high): widened to 32 words once, each
// nibble is looked up by vpermw, which reads an index's low 5 bits (the
// table repeats every 16, so the low nibble needs no mask, the high one a
// shift). The constant terms meet x's sub-block sums, 8 at once.
template <int R>
NEURON_AVX512_BF16 void q4_k_pairs(const std::byte* rows, std::size_t row_bytes, std::int64_t cols,
                                   const std::uint16_t* hi, const std::uint16_t* lo, const float* sums, float* y) {
  const __m512i table = _mm512_load_si512(kQ4Words.data());
  const __m256 eight = _mm256_set1_ps(8.0f);
  __m512 acc[R][2];
  __m256 constant[R];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps(), constant[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b) {
    Q4_KScales q[R];
    const __m256 x_sums = _mm256_loadu_ps(sums + 8 * b);
    for (int r = 0; r < R; ++r) {
      const std::byte* block = rows + r * row_bytes + static_cast<std::size_t>(b) * quant::kQ4_KBytes;
      prefetch_block<Q4_KScales>(block + R * row_bytes);
      q[r].prepare(block);
      const __m256 c = _mm256_fmsub_ps(eight, _mm256_loadu_ps(q[r].scale), _mm256_loadu_ps(q[r].min));  // [8] 8 d sc - dmin m
      constant[r] = _mm256_fmadd_ps(c, x_sums, constant[r]);
    }
    const std::uint16_t* h = hi + b * quant::kQK_K;
    const std::uint16_t* l = lo + b * quant::kQK_K;
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {  // sub-blocks 2g (low nibbles) and 2g + 1 (high)
      const __m512bh h0 = bf16_at(h + 64 * g), l0 = bf16_at(l + 64 * g);
      const __m512bh h1 = bf16_at(h + 64 * g + 32), l1 = bf16_at(l + 64 * g + 32);
      for (int r = 0; r < R; ++r) {
        const __m512i bytes = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r].q + 32 * g)));
        const auto q0 = reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(bytes, table));
        const auto q1 = reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(_mm512_srli_epi16(bytes, 4), table));
        acc[r][0] = scaled_pairs(acc[r][0], q0, h0, l0, _mm512_set1_ps(q[r].scale[2 * g]));
        acc[r][1] = scaled_pairs(acc[r][1], q1, h1, l1, _mm512_set1_ps(q[r].scale[2 * g + 1]));
      }
    }
  }
  for (int r = 0; r < R; ++r) y[r] = row_sum(acc[r][0], acc[r][1], constant[r]);
}

// Q6_K: w = (d sc_k) (q - 32), a scale per 16 columns. Q6_K::prepare lays
// the 6-bit quants out as bytes in column order; 32 of them widen to words
// and vpermt2w looks up q - 32 in two 32-word tables (index bit 5 picks
// the table). A chunk's 16 pair sums are its two 16-column groups' halves.
template <int R>
NEURON_AVX512_BF16 void q6_k_pairs(const std::byte* rows, std::size_t row_bytes, std::int64_t cols,
                                   const std::uint16_t* hi, const std::uint16_t* lo, const float*, float* y) {
  const __m512i low = _mm512_load_si512(kQ6Words.data()), high = _mm512_load_si512(kQ6Words.data() + 32);
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b) {
    Q6_K q[R];
    for (int r = 0; r < R; ++r) {
      const std::byte* block = rows + r * row_bytes + static_cast<std::size_t>(b) * quant::kQ6_KBytes;
      prefetch_block<Q6_K>(block + R * row_bytes);
      q[r].prepare(block);
    }
    const std::uint16_t* h = hi + b * quant::kQK_K;
    const std::uint16_t* l = lo + b * quant::kQK_K;
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {  // columns [32 i, 32 i + 32)
      const __m512bh hx = bf16_at(h + 32 * i), lx = bf16_at(l + 32 * i);
      for (int r = 0; r < R; ++r) {
        const __m512i bytes = _mm512_cvtepu8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(q[r].q6 + 32 * i)));
        const auto w = reinterpret_cast<__m512bh>(_mm512_permutex2var_epi16(low, bytes, high));
        const __m512 scale = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(q[r].scale[2 * i]), _mm512_set1_ps(q[r].scale[2 * i + 1]));
        acc[r][i & 1] = scaled_pairs(acc[r][i & 1], w, hx, lx, scale);
      }
    }
  }
  for (int r = 0; r < R; ++r) y[r] = row_sum(acc[r][0], acc[r][1], _mm256_setzero_ps());
}

using PairFn = void (*)(const std::byte*, std::size_t, std::int64_t, const std::uint16_t*, const std::uint16_t*,
                        const float*, float*);

// fn[r - 1]: the pair kernel for r rows of `type` (Q4_K or Q6_K).
const std::array<PairFn, kRowBlock>& pair_table(GgmlType type) {
  static constexpr std::array<PairFn, kRowBlock> q4{&q4_k_pairs<1>, &q4_k_pairs<2>, &q4_k_pairs<3>, &q4_k_pairs<4>};
  static constexpr std::array<PairFn, kRowBlock> q6{&q6_k_pairs<1>, &q6_k_pairs<2>, &q6_k_pairs<3>, &q6_k_pairs<4>};
  return type == GgmlType::q4_k ? q4 : q6;
}

// ---- AVX-512 VNNI: Q4_K and Q6_K a token at a time against x rounded to int8 ----

#define NEURON_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

// vpermw indices spreading a block's scale words over its four 64-column
// chunks, K scales a chunk: word i of chunk c reads scale K c + i / (32 / K)
// (the 32 pair words of a chunk, 32 / K of them a scale).
template <int K>
constexpr std::array<std::uint16_t, 4 * 32> scale_index() {
  std::array<std::uint16_t, 4 * 32> t{};
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 32; ++i) t[32 * c + i] = static_cast<std::uint16_t>(K * c + i / (32 / K));
  return t;
}

// One token of an int8 operand (QuantOperand): x rounded [cols], its scales
// [cols / 256], sums of 16 [cols / 16] (K-quants) and Q8_0's or Q4_0's corrections [cols / 4].
struct Int8Token {
  const std::int8_t* a;
  const float* scales;
  const std::int16_t* sums16;
  const std::int32_t* corrections;
};

// Q4_K: per block, d dx sum_j sc_j (q . a)_j - dmin dx sum_j m_j (sum a)_j, all
// but the two scales in integers. A 32-byte load, broadcast to both halves
// and shifted by 0 or 4 a half, is sub-blocks 2g (low nibbles) and 2g + 1
// (high), as x's 64 columns lie; vpmaddubsw adds each nibble pair times x
// (at most 2 * 15 * 127, no saturation), vpdpwssd scales the pairs by the
// sub-block's 6-bit scale (vpermw spreads the block's 8 scales, words 0-15
// sub-block 2g, 16-31 sub-block 2g + 1) and adds them up. The minimums meet
// x's sums of 16 in one vpmaddwd (each m_j twice).
// Q5_K (Five) adds a fifth bit a quant: qh's 32 bytes, broadcast to both
// halves and shifted by 2g in the low half and 2g + 1 in the high one, give
// bit 4 of sub-blocks 2g and 2g + 1 (quants up to 31: vpmaddubsw's pairs stay
// below 2 * 31 * 127).
template <int R, bool Five = false>
NEURON_AVX512_VNNI void q4_k_int8(const std::byte* rows, std::size_t row_bytes, std::int64_t cols, const Int8Token& x,
                                  float* y) {
  constexpr std::size_t kBytes = Five ? quant::kQ5_KBytes : quant::kQ4_KBytes;
  constexpr std::size_t kQs = Five ? 48 : 16;  // where the nibbles start (Q5_K: after qh)
  const std::int8_t* a = x.a;
  const float* scales = x.scales;
  alignas(64) static constexpr auto kIndex = scale_index<2>();  // chunk g: sub-blocks 2g, 2g + 1
  const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);  // [32] 0 (low half), 4
  const __m512i halves = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(1), 1);  // [32] 0, 1
  const __m512i low4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
  __m512 acc[R];
  __m256 mins[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), mins[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b) {
    const std::int8_t* ab = a + b * quant::kQK_K;
    const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.sums16 + b * 16));  // [16] i16
    for (int r = 0; r < R; ++r) {
      const std::byte* block = rows + r * row_bytes + static_cast<std::size_t>(b) * kBytes;
      if constexpr (Five)
        prefetch_block<Q5_K>(block + R * row_bytes);
      else
        prefetch_block<Q4_KScales>(block + R * row_bytes);
      __m128i sc8, m8;  // [8] u8 each, in registers: bytes stored then reloaded wider stall store forwarding
      unpack_k4_scales(block + 4, sc8, m8);
      const __m512i sc_words = _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(sc8));
      __m512i dot = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kQs + 32 * g)));
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(v, shift), low4);  // [64] sub-block 2g, then 2g + 1
        if constexpr (Five) {
          const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16)));
          const __m512i at = _mm512_add_epi16(halves, _mm512_set1_epi16(static_cast<short>(2 * g)));
          q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, at), one), 4));
        }
        const __m512i pairs = _mm512_maddubs_epi16(q, _mm512_loadu_si512(ab + 64 * g));
        dot = _mm512_dpwssd_epi32(dot, pairs, _mm512_permutexvar_epi16(_mm512_load_si512(kIndex.data() + 32 * g), sc_words));
      }
      const __m256i min_dot = _mm256_madd_epi16(sums, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8)));  // [8] m_j (sum a)_j
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(f16_at(block) * scales[b]), acc[r]);
      mins[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_dot), _mm256_set1_ps(f16_at(block + 2) * scales[b]), mins[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]) - hsum8(mins[r]);
}

// Q6_K: per block, d dx sum_k sc_k ((q . a)_k - 32 (sum a)_k) with the 6-bit
// quants put together in registers 64 columns at a time (q6_k_bytes, bytes
// 0..63): vpmaddubsw (at most 2 * 63 * 127), then vpdpwssd with each 16
// columns' signed scale.
template <int R>
NEURON_AVX512_VNNI void q6_k_int8(const std::byte* rows, std::size_t row_bytes, std::int64_t cols, const Int8Token& x,
                                  float* y) {
  const std::int8_t* a = x.a;
  const float* scales = x.scales;
  alignas(64) static constexpr auto kIndex = scale_index<4>();  // chunk c: scales 4c .. 4c + 3, 16 columns each
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b) {
    const std::int8_t* ab = a + b * quant::kQK_K;
    const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.sums16 + b * 16));  // [16] i16
    for (int r = 0; r < R; ++r) {
      const std::byte* block = rows + r * row_bytes + static_cast<std::size_t>(b) * quant::kQ6_KBytes;
      prefetch_block<Q6_K>(block + R * row_bytes);
      const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192)));  // [16] i16
      const __m512i sc32 = _mm512_castsi256_si512(sc);
      // -32 sum_k sc_k (sum a)_k, in the first 8 lanes.
      __m512i dot = _mm512_zextsi256_si512(_mm256_mullo_epi32(_mm256_madd_epi16(sc, sums), _mm256_set1_epi32(-32)));
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m512i quants[2];  // columns [128 h, 128 h + 64), [128 h + 64, 128 h + 128)
        q6_k_bytes(block, h, quants[0], quants[1]);
        for (int c = 2 * h; c < 2 * h + 2; ++c) {
          const __m512i pairs = _mm512_maddubs_epi16(quants[c - 2 * h], _mm512_loadu_si512(ab + 64 * c));
          dot = _mm512_dpwssd_epi32(dot, pairs, _mm512_permutexvar_epi16(_mm512_load_si512(kIndex.data() + 32 * c), sc32));
        }
      }
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(f16_at(block + 208) * scales[b]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
}

// Two consecutive blocks' 64 quants as the unsigned bytes vpdpbusd takes.
// Q8_0: q + 128 (one xor). Q4_0: q itself (0..15): the 16 quant bytes of
// each block fill a vector as [b0, b0, b1, b1] 128-bit lanes, shifted by 0
// or 4 a lane (low nibbles are columns 0-15, high ones 16-31).
template <class Q>
NEURON_AVX512_VNNI inline __m512i int8_quants(const std::byte* b0, const std::byte* b1) {
  if constexpr (std::is_same_v<Q, Q8_0>) {
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2))),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
    return _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
  } else {
    const __m512i shift = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0, 0x0004000400040004,
                                           0x0004000400040004, 0, 0);  // [32] words: 0 in lanes 0, 2; 4 in lanes 1, 3
    const __m256i both = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 2)), 1);
    const __m512i v = _mm512_shuffle_i64x2(_mm512_castsi256_si512(both), _mm512_castsi256_si512(both),
                                           _MM_SHUFFLE(1, 1, 0, 0));  // lanes b0, b0, b1, b1
    return _mm512_and_si512(_mm512_srlv_epi16(v, shift), _mm512_set1_epi8(0x0F));
  }
}

// The two blocks' d times dx as [16] f32: d0 dx in lanes 0-7, d1 dx in 8-15
// (both f16 scales converted by one vcvtph2ps; the products as scalar ones).
NEURON_AVX512_VNNI inline __m512 pair_scale(const std::byte* b0, const std::byte* b1, float dx) {
  std::uint16_t h0, h1;
  std::memcpy(&h0, b0, 2);
  std::memcpy(&h1, b1, 2);
  const __m128 d = _mm_mul_ps(_mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(h0), h1, 1)), _mm_set1_ps(dx));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_castps128_ps512(d));
}

// Q8_0 and Q4_0 (Q): per block, d dx ((q . a) - bias (sum a)), bias 128 for
// Q8_0's q + 128 and 8 for Q4_0's q - 8: vpdpbusd adds the unsigned quants
// times x to the operand's corrections (-bias times each 4 columns' sum);
// two blocks fill a vector, their scales its two halves.
template <class Q, int R>
NEURON_AVX512_VNNI void block_scaled_int8(const std::byte* rows, std::size_t row_bytes, std::int64_t cols,
                                          const Int8Token& x, float* y) {
  const std::int8_t* a = x.a;
  const float* scales = x.scales;
  const std::int32_t* corrections = x.corrections;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < cols / 64; ++p) {  // blocks 2p and 2p + 1
    const __m512i ap = _mm512_loadu_si512(a + 64 * p);
    const __m512i cp = _mm512_loadu_si512(corrections + 16 * p);
    const float dx = scales[p / 4];
    for (int r = 0; r < R; ++r) {
      const std::byte* b0 = rows + r * row_bytes + static_cast<std::size_t>(2 * p) * Q::kBytes;
      const std::byte* b1 = b0 + Q::kBytes;
      prefetch_block<Q>(b0 + R * row_bytes);
      prefetch_block<Q>(b1 + R * row_bytes);
      const __m512i dot = _mm512_dpbusd_epi32(cp, int8_quants<Q>(b0, b1), ap);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), pair_scale(b0, b1, dx), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
}

using Int8Fn = void (*)(const std::byte*, std::size_t, std::int64_t, const Int8Token&, float*);

// fn[r - 1]: the int8 kernel for r rows of `type` (Q4_K, Q6_K, Q8_0, Q5_K or Q4_0).
const std::array<Int8Fn, kRowBlock>& int8_table(GgmlType type) {
  static constexpr std::array<Int8Fn, kRowBlock> q4{&q4_k_int8<1>, &q4_k_int8<2>, &q4_k_int8<3>, &q4_k_int8<4>};
  static constexpr std::array<Int8Fn, kRowBlock> q6{&q6_k_int8<1>, &q6_k_int8<2>, &q6_k_int8<3>, &q6_k_int8<4>};
  static constexpr std::array<Int8Fn, kRowBlock> q8{&block_scaled_int8<Q8_0, 1>, &block_scaled_int8<Q8_0, 2>,
                                                    &block_scaled_int8<Q8_0, 3>, &block_scaled_int8<Q8_0, 4>};
  static constexpr std::array<Int8Fn, kRowBlock> q5{&q4_k_int8<1, true>, &q4_k_int8<2, true>, &q4_k_int8<3, true>,
                                                    &q4_k_int8<4, true>};
  static constexpr std::array<Int8Fn, kRowBlock> q40{&block_scaled_int8<Q4_0, 1>, &block_scaled_int8<Q4_0, 2>,
                                                     &block_scaled_int8<Q4_0, 3>, &block_scaled_int8<Q4_0, 4>};
  switch (type) {
    case GgmlType::q4_k: return q4;
    case GgmlType::q6_k: return q6;
    case GgmlType::q5_k: return q5;
    case GgmlType::q4_0: return q40;
    default: return q8;
  }
}


// ---- AVX2: the same formats 16 columns at a time, two rows per block (16 registers) ----

#define NEURON_AVX2 __attribute__((target("avx2,fma,f16c")))

constexpr int kRowBlockAvx2 = 2;


NEURON_AVX2 inline __m256 i8x8(const std::byte* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// chunk(i): columns [16 i, 16 i + 16) as two f32 vectors of 8.
struct Q8_0x8 {
  static constexpr std::int64_t kCols = quant::kQK8_0;
  static constexpr std::size_t kBytes = quant::kQ8_0Bytes;
  const std::byte* q = nullptr;
  __m256 d;
  NEURON_AVX2 void prepare(const std::byte* block) {
    d = _mm256_set1_ps(f16_at(block));
    q = block + 2;
  }
  NEURON_AVX2 void chunk(int i, __m256& lo, __m256& hi) const {
    lo = _mm256_mul_ps(i8x8(q + 16 * i), d);
    hi = _mm256_mul_ps(i8x8(q + 16 * i + 8), d);
  }
};

struct Q4_Kx8 : Q4_KScales {
  NEURON_AVX2 void chunk(int i, __m256& lo, __m256& hi) const {
    const int j = i / 2;  // the 32-column sub-block
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (j / 2) * 32 + (i & 1) * 16));
    const __m128i nib = (j & 1) ? _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F)) : _mm_and_si128(v, _mm_set1_epi8(0x0F));
    const __m256 s = _mm256_set1_ps(scale[j]), m = _mm256_set1_ps(min[j]);
    lo = _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(nib)), s, m);
    hi = _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(nib, 8))), s, m);
  }
};

struct Q6_Kx8 : Q6_KScales {
  NEURON_AVX2 void chunk(int i, __m256& lo, __m256& hi) const {
    const int c = i / 2, half = i & 1, h = c / 4, k = c % 4;
    const __m128i l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + h * 64 + (k & 1) * 32 + half * 16));
    const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 128 + h * 32 + half * 16));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i nib = k >= 2 ? _mm_and_si128(_mm_srli_epi16(l, 4), low4) : _mm_and_si128(l, low4);
    const __m128i top = _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), _mm_set1_epi8(0x03)), 4);
    const __m128i q = _mm_sub_epi8(_mm_or_si128(nib, top), _mm_set1_epi8(32));
    const __m256 s = _mm256_set1_ps(scale[h * 8 + 2 * k + half]);
    lo = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    hi = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))));
  }
};

template <class Q, int R, int T>
NEURON_AVX2 void block_kernel_avx2(const std::byte* rows, std::size_t row_bytes, std::int64_t cols, const float* x,
                                   std::int64_t ldx, float* y, std::int64_t ldy) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const std::int64_t blocks = cols / Q::kCols;
  for (std::int64_t b = 0; b < blocks; ++b) {
    Q q[R];
    for (int r = 0; r < R; ++r) {
      const std::byte* block = rows + r * row_bytes + static_cast<std::size_t>(b) * Q::kBytes;
      prefetch_block<Q>(block + R * row_bytes);
      q[r].prepare(block);
    }
    const float* xb = x + b * Q::kCols;
#pragma GCC unroll 16
    for (int i = 0; i < static_cast<int>(Q::kCols / 16); ++i) {
      __m256 lo[R], hi[R];
      for (int r = 0; r < R; ++r) q[r].chunk(i, lo[r], hi[r]);
      for (int t = 0; t < T; ++t) {
        const __m256 x0 = _mm256_loadu_ps(xb + t * ldx + 16 * i), x1 = _mm256_loadu_ps(xb + t * ldx + 16 * i + 8);
        for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(hi[r], x1, _mm256_fmadd_ps(lo[r], x0, acc[r][t]));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * ldy + r] = hsum8(acc[r][t]);
}

using BlockFn = void (*)(const std::byte*, std::size_t, std::int64_t, const float*, std::int64_t, float*, std::int64_t);

using Kernels = std::array<std::array<BlockFn, kTokenTile>, kRowBlock>;

// fn[r - 1][t - 1]: the kernel for r rows and t tokens of format Q (AVX-512),
// or of format Q8 (AVX2, at most kRowBlockAvx2 rows).
template <class Q, class Q8, bool Avx2>
struct Table {
  Kernels fn{};
  constexpr Table() { fill(std::make_integer_sequence<int, kRowBlock * kTokenTile>{}); }
  template <int... I>
  constexpr void fill(std::integer_sequence<int, I...>) {
    ((fn[I / kTokenTile][I % kTokenTile] = pick<I / kTokenTile + 1, I % kTokenTile + 1>()), ...);
  }
  template <int R, int T>
  static constexpr BlockFn pick() {
    if constexpr (!Avx2) return &block_kernel<Q, R, T>;
    else if constexpr (R <= kRowBlockAvx2) return &block_kernel_avx2<Q8, R, T>;
    else return nullptr;
  }
};

constexpr Table<Q8_0, Q8_0x8, false> kQ8_0{};
constexpr Table<Q4_K, Q4_Kx8, false> kQ4_K{};
constexpr Table<Q6_K, Q6_Kx8, false> kQ6_K{};
constexpr Table<Q4_0, Q4_0, false> kQ4_0{};  // AVX-512 only
constexpr Table<Q5_K, Q5_K, false> kQ5_K{};
constexpr Table<Q8_0, Q8_0x8, true> kQ8_0Avx2{};
constexpr Table<Q4_K, Q4_Kx8, true> kQ4_KAvx2{};
constexpr Table<Q6_K, Q6_Kx8, true> kQ6_KAvx2{};

const Kernels& table(Isa isa, GgmlType type) {
  const bool avx2 = isa == Isa::avx2;
  switch (type) {
    case GgmlType::q4_k: return avx2 ? kQ4_KAvx2.fn : kQ4_K.fn;
    case GgmlType::q6_k: return avx2 ? kQ6_KAvx2.fn : kQ6_K.fn;
    case GgmlType::q4_0: return kQ4_0.fn;
    case GgmlType::q5_k: return kQ5_K.fn;
    default: return avx2 ? kQ8_0Avx2.fn : kQ8_0.fn;
  }
}

}  // namespace

bool gemm_quant_few_supported(Isa isa, quant::GgmlType type) noexcept {
  if (isa == Isa::scalar || !isa_supported(isa)) return false;
  if (type == GgmlType::q4_0 || type == GgmlType::q5_k) return isa != Isa::avx2;  // AVX-512 kernels only
  return type == GgmlType::q8_0 || type == GgmlType::q4_k || type == GgmlType::q6_k;
}

bool gemm_quant_few_bf16_pairs(Isa isa, quant::GgmlType type) noexcept {
  return isa == Isa::avx512_bf16 && (type == GgmlType::q4_k || type == GgmlType::q6_k);
}


namespace {
bool int8_type(GgmlType type) noexcept {
  return type == GgmlType::q4_k || type == GgmlType::q6_k || type == GgmlType::q8_0 || type == GgmlType::q5_k ||
         type == GgmlType::q4_0;
}
}  // namespace

std::string_view int8_kernels_name(Int8Kernels k) noexcept {
  switch (k) {
    case Int8Kernels::avx2: return "avx2";
    case Int8Kernels::avx_vnni: return "avx_vnni";
    case Int8Kernels::avx512_vnni: return "avx512_vnni";
  }
  return "avx2";
}

bool int8_kernels_supported(Int8Kernels k) noexcept {
  switch (k) {
    case Int8Kernels::avx2: return isa_supported(Isa::avx2);
    case Int8Kernels::avx_vnni: return avx_vnni_supported();
    case Int8Kernels::avx512_vnni:
      static const bool vnni = isa_supported(Isa::avx512) && __builtin_cpu_supports("avx512vnni");
      return vnni;
  }
  return false;
}

Int8Kernels int8_kernels(Isa isa) noexcept {
  if ((isa == Isa::avx512 || isa == Isa::avx512_bf16) && int8_kernels_supported(Int8Kernels::avx512_vnni))
    return Int8Kernels::avx512_vnni;
  return avx_vnni_supported() ? Int8Kernels::avx_vnni : Int8Kernels::avx2;
}

bool gemm_quant_few_int8(Isa isa, quant::GgmlType type) noexcept {
  return isa != Isa::scalar && isa_supported(isa) && isa_supported(Isa::avx2) && int8_type(type);
}

namespace {

// One block of 256 columns of x rounded to int8: q = nearbyint(x 127 / max|x|)
// (llama.cpp's Q8_K), sums16 its sums of 16; returns the block's scale
// max|x| / 127. A NaN or infinity makes the scale NaN (so the block's
// products are NaN, as in f32) and q zero. x: [256], q: [256], sums16: [16].
NEURON_AVX512_VNNI float round_to_int8(const float* x, std::int8_t* q, std::int16_t* sums16) noexcept {
  constexpr int kVectors = quant::kQK_K / 16;
  __m512 amax = _mm512_setzero_ps();
  __mmask16 finite = 0xFFFF;
  for (int i = 0; i < kVectors; ++i) {
    const __m512 v = _mm512_loadu_ps(x + 16 * i);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
    finite &= _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_EQ_OQ);  // x - x is 0 unless inf or NaN
  }
  const float max = _mm512_reduce_max_ps(amax);
  if (finite != 0xFFFF) {
    std::memset(q, 0, quant::kQK_K);
    std::memset(sums16, 0, 16 * sizeof(std::int16_t));
    return std::numeric_limits<float>::quiet_NaN();
  }
  const __m512 inv = _mm512_set1_ps(max > 0.0f ? 127.0f / max : 0.0f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int i = 0; i < kVectors; ++i) {
    // Round to nearest even (the default mode, as nearbyint); |x inv| <= 127 as |x| <= max, clamped all the same.
    const __m512i v = _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * i), inv))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * i), _mm512_cvtepi32_epi8(v));
    sums16[i] = static_cast<std::int16_t>(_mm512_reduce_add_epi32(v));
  }
  return max / 127.0f;
}

}  // namespace

QuantOperand::QuantOperand(Activations, quant::GgmlType type, const float* x, std::int64_t n, std::int64_t ldx,
                           std::int64_t cols, bool grouped)
    : x_(x), n_(n), ldx_(ldx), cols_(cols) {
  NEURON_ASSERT(gemm_quant_few_int8(Isa::avx2, type) && cols % quant::kQK_K == 0);
  if (n <= 0) return;
  q8_.resize(static_cast<std::size_t>(n * cols));
  sums_.resize(static_cast<std::size_t>(n * (cols / quant::kQK_K)));
  q8_sums_.resize(static_cast<std::size_t>(n * (cols / 16)));
  // Q8_0's quants go in as q + 128, Q4_0's as q: -128 or -8 times each 4 columns' sum takes the bias back out.
  const int bias = type == GgmlType::q8_0 ? 128 : type == GgmlType::q4_0 ? 8 : 0;
  // The selected ISA's rounding (NEURON_CPU_ISA=avx2 runs no AVX-512); the same bits either way.
  const bool avx512 = int8_kernels(selected_isa()) == Int8Kernels::avx512_vnni;
  if (bias != 0) corrections_.resize(static_cast<std::size_t>(n * (cols / 4)));
  for (std::int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * ldx;
    std::int8_t* q = q8_.data() + t * cols;
    for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b)
      sums_[static_cast<std::size_t>(t * (cols / quant::kQK_K) + b)] =
          (avx512 ? round_to_int8 : round_to_int8_avx2)(xt + b * quant::kQK_K, q + b * quant::kQK_K,
                                                        q8_sums_.data() + t * (cols / 16) + b * 16);
    if (bias != 0)
      for (std::int64_t k = 0; k < cols / 4; ++k)
        corrections_[static_cast<std::size_t>(t * (cols / 4) + k)] =
            -bias * (q[4 * k] + q[4 * k + 1] + q[4 * k + 2] + q[4 * k + 3]);
  }
  if (!grouped) return;
  NEURON_ASSERT(type == GgmlType::q4_k);
  grouped_.resize(static_cast<std::size_t>(n * cols * kGroupedXBytes));
  grouped_sums_.resize(static_cast<std::size_t>(n * (cols / quant::kQK_K * 32)));
  for (std::int64_t t = 0; t < n; ++t)
    group_operand(q8(t), q8_sums(t), cols, grouped_.data() + t * cols * kGroupedXBytes,
                  grouped_sums_.data() + t * (cols / quant::kQK_K * 32));
}

QuantOperand::QuantOperand(Isa isa, quant::GgmlType type, const float* x, std::int64_t n, std::int64_t ldx,
                           std::int64_t cols)
    : x_(x), n_(n), ldx_(ldx), cols_(cols) {
  if (!gemm_quant_few_bf16_pairs(isa, type) || n <= 0) return;
  const auto size = static_cast<std::size_t>(n * cols);
  hi_.resize(size);
  lo_.resize(size);
  sums_.resize(static_cast<std::size_t>(n * (cols / 32)));
  for (std::int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * ldx;
    split_bf16_terms(xt, cols, hi_.data() + t * cols, lo_.data() + t * cols);
    for (std::int64_t j = 0; j < cols / 32; ++j) {
      float sum = 0.0f;
      for (std::int64_t c = 0; c < 32; ++c) sum += xt[32 * j + c];
      sums_[static_cast<std::size_t>(t * (cols / 32) + j)] = sum;
    }
  }
}

void gemm_quant_few_rows(Isa isa, RowWalk walk, const QuantOperand& x, const QuantMatrix& w, std::int64_t r0,
                         std::int64_t r1, float* y, std::int64_t ldy) {
  if (x.int8()) return gemm_quant_few_rows(int8_kernels(isa), walk, x, w, r0, r1, y, ldy);
  NEURON_ASSERT(gemm_quant_few_supported(isa, w.type));
  const std::int64_t group = walk == RowWalk::sequential ? 1 : isa == Isa::avx2 ? kRowBlockAvx2 : kRowBlock;
  if (gemm_quant_few_bf16_pairs(isa, w.type)) {
    NEURON_ASSERT(x.pairs() || x.tokens() == 0);  // operand prepared for this kernel
    const auto& fn = pair_table(w.type);
    for (std::int64_t t = 0; t < x.tokens(); ++t)
      for (std::int64_t r = r0; r < r1; r += group) {
        const std::int64_t rr = std::min<std::int64_t>(group, r1 - r);
        fn[rr - 1](w.data.data() + static_cast<std::size_t>(r) * w.row_bytes, w.row_bytes, w.cols, x.hi(t), x.lo(t),
                   x.sums(t), y + t * ldy + r);
      }
    return;
  }
  const Kernels& fn = table(isa, w.type);
  for (std::int64_t r = r0; r < r1; r += group) {
    const std::int64_t rr = std::min<std::int64_t>(group, r1 - r);
    const std::byte* rows = w.data.data() + static_cast<std::size_t>(r) * w.row_bytes;
    for (std::int64_t t = 0; t < x.tokens(); t += kTokenTile) {
      const std::int64_t tt = std::min<std::int64_t>(kTokenTile, x.tokens() - t);
      fn[rr - 1][tt - 1](rows, w.row_bytes, w.cols, x.f32() + t * x.ldx(), x.ldx(), y + t * ldy + r, ldy);
    }
  }
}

void gemm_quant_few_rows(Int8Kernels k, RowWalk walk, const QuantOperand& x, const QuantMatrix& w, std::int64_t r0,
                         std::int64_t r1, float* y, std::int64_t ldy) {
  NEURON_ASSERT(int8_type(w.type) && int8_kernels_supported(k) && (x.int8() || x.tokens() == 0));
  if (w.grouped_rows > r0) {  // Q4_K rows four to a group: their kernel (AVX-VNNI's where the CPU has it), the rest below
    const std::int64_t end = std::min(r1, w.grouped_rows);
    gemm_q4_k_grouped_rows(k != Int8Kernels::avx2 && avx_vnni_supported(), x, w, r0, end, y, ldy);
    if (end == r1) return;
    r0 = end;
  }
  if (k != Int8Kernels::avx512_vnni)
    return gemm_quant_int8_avx2_rows(k == Int8Kernels::avx_vnni, walk, x, w, r0, r1, y, ldy);
  const auto& fn = int8_table(w.type);
  const std::int64_t rows_at_once = walk == RowWalk::sequential ? 1 : kRowBlock;
  for (std::int64_t t = 0; t < x.tokens(); ++t)
    for (std::int64_t r = r0; r < r1; r += rows_at_once) {
      const std::int64_t rr = std::min<std::int64_t>(rows_at_once, r1 - r);
      const Int8Token token{x.q8(t), x.q8_scales(t), x.q8_sums(t), x.q8_corrections(t)};
      fn[rr - 1](w.data.data() + static_cast<std::size_t>(r) * w.row_bytes, w.row_bytes, w.cols, token,
                 y + t * ldy + r);
    }
}

void gemm_quant_few_rows(Isa isa, RowWalk walk, const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w,
                         std::int64_t r0, std::int64_t r1, float* y, std::int64_t ldy) {
  gemm_quant_few_rows(isa, walk, QuantOperand(isa, w.type, x, n, ldx, w.cols), w, r0, r1, y, ldy);
}

void gemm_quant_few(Isa isa, const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y,
                    std::int64_t ldy) {
  if (n <= 0 || w.rows <= 0) return;
  RowWalk walk = row_walk(w.type, n);
  const bool int8 =
      int8_quant_products(cpu_activations()) && gemm_quant_few_int8(isa, w.type) && w.cols % quant::kQK_K == 0;
  if (int8) {
    walk = row_walk(w.type, n);
  } else if (n == 1 && isa == selected_isa()) {
    const DecodeKernel k = decode_kernel(w.type);
    walk = k.walk;
    isa = k.isa;
  } else if (gemm_quant_few_bf16_pairs(isa, w.type)) {
    isa = Isa::avx512;  // several tokens share each dequantized weight in the f32 kernels
  }
  // Grouped rows (gemm_quant_grouped.hpp) are read only by the int8 kernels (matmul_quant routes the rest).
  NEURON_ASSERT(w.grouped_rows == 0 || int8);
  const QuantOperand operand = int8 ? QuantOperand(Activations::int8, w.type, x, n, ldx, w.cols, w.grouped_rows > 0)
                                    : QuantOperand(isa, w.type, x, n, ldx, w.cols);
  const std::int64_t chunk_rows =
      ChunkPool::shared().chunk_rows(w.rows, static_cast<std::int64_t>(w.row_bytes), kRowBlock);
  const std::int64_t chunks = (w.rows + chunk_rows - 1) / chunk_rows;
  if (chunks == 1) return gemm_quant_few_rows(isa, walk, operand, w, 0, w.rows, y, ldy);
  ChunkPool::shared().run(chunks, [&](std::int64_t c) {
    const std::int64_t r0 = c * chunk_rows;
    gemm_quant_few_rows(isa, walk, operand, w, r0, std::min(w.rows, r0 + chunk_rows), y, ldy);
  });
}

}  // namespace neuron::backend::cpu
