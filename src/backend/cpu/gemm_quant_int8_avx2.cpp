#include "backend/cpu/gemm_quant_int8_avx2.hpp"

#include <cpuid.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <array>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/matmul_quant.hpp"
#include "backend/cpu/simd.hpp"
#include "quant/ggml_type.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

using quant::GgmlType;

// Every function here: AVX2 + FMA + F16C only. The AVX-VNNI instructions are
// written as VEX-encoded assembly (below), so no compiler choice can put
// one into a plain AVX2 kernel.
#define NEURON_AVX2 __attribute__((target("avx2,fma,f16c")))
#define NEURON_INLINE __attribute__((always_inline)) inline

constexpr int kTile = 4;                  // tokens a row meets at once (several tokens), rows at once (one token)
// Rows ahead that a kernel prefetches W's blocks (the same block of row r +
// kAhead): one row ahead left Q4_K's sequential walk (576 bytes a row at
// 1024 columns) waiting on memory.
constexpr std::size_t kAhead = 4;
constexpr std::int64_t kTokenBlock = 16;  // tokens a row chunk meets before the next 16 (their rounded x stays in L1 / L2)

// Block sizes for prefetch_block.
struct Q4_KBlock { static constexpr std::size_t kBytes = quant::kQ4_KBytes; };
struct Q5_KBlock { static constexpr std::size_t kBytes = quant::kQ5_KBytes; };
struct Q6_KBlock { static constexpr std::size_t kBytes = quant::kQ6_KBytes; };
struct Q8_0Block { static constexpr std::size_t kBytes = quant::kQ8_0Bytes; };
struct Q4_0Block { static constexpr std::size_t kBytes = quant::kQ4_0Bytes; };
// The 8 blocks of Q8_0 or Q4_0 (B) under one 256-column scale of x: prefetched
// as one span, a request a cache line (prefetching each 34- or 18-byte block
// asked for most lines twice: 16 requests a span where 5 or 3 do).
template <class B>
struct Span { static constexpr std::size_t kBytes = 8 * B::kBytes; };

// acc + the sums of each four products of unsigned bytes u and signed bytes
// s: vpmaddubsw (its pair sums must stay below 2^15), vpmaddwd by one and
// vpaddd, or AVX-VNNI's vpdpbusd (V; exact for any bytes).
template <bool V>
NEURON_AVX2 inline __m256i add_byte_dots(__m256i acc, __m256i u, __m256i s) {
  if constexpr (V) {
    asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
    return acc;
  } else {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
}

// Keeps v's sum in the order written: without it GCC reassociates a token's
// integer sums into trees of all the block's products at once, which spill
// past the 16 registers.
NEURON_AVX2 inline void in_order(__m256i& v) { asm("" : "+x"(v)); }

NEURON_AVX2 inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The tokens of a tile (T of them): each token's rounded x [cols], scales
// [cols / 256], sums of 16 [cols / 16], Q8_0's and Q4_0's corrections [cols / 4].
struct Tile {
  const std::int8_t* a[kTile];
  const float* scales[kTile];
  const std::int16_t* sums16[kTile];
  const std::int32_t* corrections[kTile];
};

// Word j of each 128-bit lane of v in all of that lane's words (vpshufb).
NEURON_AVX2 inline __m256i word(__m256i v, int j) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<short>(((2 * j + 1) << 8) | (2 * j))));
}

// Word j of v's low lane in all of the low lane's words, word j + 1 in the high lane's (vpshufb).
NEURON_AVX2 inline __m256i word2(__m256i v, int j) {
  const short lo = static_cast<short>(((2 * j + 1) << 8) | (2 * j)), hi = static_cast<short>(((2 * j + 3) << 8) | (2 * j + 2));
  return _mm256_shuffle_epi8(v, _mm256_setr_epi16(lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi));
}

// Q4_K (Five: Q5_K): per block, d dx sum_j sc_j (q . a)_j - dmin dx sum_j m_j
// (sum a)_j. A 32-byte load is sub-blocks 2g (low nibbles) and 2g + 1 (high),
// as x's 64 columns lie; Q5_K's fifth bits (qh, bit 2g / 2g + 1 of byte l for
// column l) become bit 4. vpmaddubsw takes each quant pair times x, the
// sub-block's 6-bit scale (a word spread by vpshufb) each pair sum. The
// minimums meet x's sums of 16 in one vpmaddwd (each m_j twice).
template <int R, int T, bool V, bool Five>
NEURON_AVX2 NEURON_INLINE void q4_k(const std::byte* rows, std::size_t row_bytes, std::int64_t cols, const Tile& x, float* y,
                      std::int64_t ldy) {
  using Block = std::conditional_t<Five, Q5_KBlock, Q4_KBlock>;
  constexpr std::size_t kQs = Five ? 48 : 16;  // where the nibbles start (Q5_K: after qh)
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b) {
    for (int r = 0; r < R; ++r) {
      const std::byte* block = rows + r * row_bytes + static_cast<std::size_t>(b) * Block::kBytes;
      prefetch_block<Block>(block + kAhead * row_bytes);
      __m128i sc8, m8;  // [8] u8 each
      unpack_k4_scales(block + 4, sc8, m8);
      const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));  // [2][8] u16, both lanes alike
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));      // [16] u16: m_j twice
      __m256i dot[T];
      for (int t = 0; t < T; ++t) dot[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {  // sub-blocks 2g and 2g + 1
        const __m256i v = load256(block + kQs + 32 * g);
        __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        if constexpr (Five) {
          const __m256i qh = load256(block + 16), bit4 = _mm256_set1_epi8(0x10);
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * g), 4), bit4));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * g + 1), 4), bit4));
        }
        const __m256i s_lo = word(sc, 2 * g), s_hi = word(sc, 2 * g + 1);
        for (int t = 0; t < T; ++t) {
          const std::int8_t* a = x.a[t] + b * quant::kQK_K + 64 * g;
          dot[t] = add_word_dots<V>(dot[t], _mm256_maddubs_epi16(lo, load256(a)), s_lo);
          dot[t] = add_word_dots<V>(dot[t], _mm256_maddubs_epi16(hi, load256(a + 32)), s_hi);
          in_order(dot[t]);
        }
      }
      const float d = f16_at(block), dmin = f16_at(block + 2);
      for (int t = 0; t < T; ++t) {
        const float dx = x.scales[t][b];
        const __m256i min_dot = _mm256_madd_epi16(load256(x.sums16[t] + 16 * b), mins);  // [8] m_j (sum a)_j
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t]), _mm256_set1_ps(d * dx), acc[r][t]);
        acc[r][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(min_dot), _mm256_set1_ps(dmin * dx), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * ldy + r] = hsum8(acc[r][t]);
}

// Q6_K: per block, d dx sum_k sc_k ((q . a)_k - 32 (sum a)_k), the 6-bit
// quants (0..63) put together 128 columns at a time from ql's nibbles and
// qh's bit pairs, a 32-column chunk's two 16-column scales spread over its
// two lanes.
template <int R, int T, bool V>
NEURON_AVX2 NEURON_INLINE void q6_k(const std::byte* rows, std::size_t row_bytes, std::int64_t cols, const Tile& x, float* y,
                      std::int64_t ldy) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x30);
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b) {
    for (int r = 0; r < R; ++r) {
      const std::byte* block = rows + r * row_bytes + static_cast<std::size_t>(b) * quant::kQ6_KBytes;
      prefetch_block<Q6_KBlock>(block + kAhead * row_bytes);
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192));  // [16] i8
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);                                       // [16] i16
      __m256i dot[T];
      for (int t = 0; t < T; ++t)  // -32 sum_k sc_k (sum a)_k
        dot[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                  _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(x.sums16[t] + 16 * b)), 5));
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {  // columns [128 h, 128 h + 128)
        // [2][8] i16: sc_8h.. in both lanes (the immediate a constant on either branch: clang requires one)
        const __m256i half = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
        const __m256i l0 = load256(block + 64 * h), l1 = load256(block + 64 * h + 32);
        const __m256i qh = load256(block + 128 + 32 * h);
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2)),
            _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, top2)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2))};
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          // The chunk's scales, k = 8 h + 2 c (columns 0-15) and k + 1 (16-31): words 2c and 2c + 1 of the half.
          const __m256i s = word2(half, 2 * c);  // [16] i16: sc_k x 8, sc_k+1 x 8
          for (int t = 0; t < T; ++t) {
            const std::int8_t* a = x.a[t] + b * quant::kQK_K + 128 * h + 32 * c;
            dot[t] = add_word_dots<V>(dot[t], _mm256_maddubs_epi16(q[c], load256(a)), s);
            in_order(dot[t]);
          }
        }
      }
      const float d = f16_at(block + 208);
      for (int t = 0; t < T; ++t)
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t]), _mm256_set1_ps(d * x.scales[t][b]), acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * ldy + r] = hsum8(acc[r][t]);
}

// Q8_0 and Q4_0 (Four): per 32-column block, d dx (q . a) with Q4_0's q - 8.
// Q4_0's nibbles (low: columns 0-15, high: 16-31) go in as q, the operand's
// corrections (-8 times each 4 columns' sum) taking the 8 back out. Q8_0:
// with AVX-VNNI q + 128 and the corrections likewise (-128); on AVX2 |q|
// against x with q's sign (vpsignb), as vpmaddubsw's pairs of q + 128 could
// pass 2^15.
template <int R, int T, bool V, bool Four>
NEURON_AVX2 NEURON_INLINE void block_scaled(const std::byte* rows, std::size_t row_bytes, std::int64_t cols, const Tile& x, float* y,
                              std::int64_t ldy) {
  using Block = std::conditional_t<Four, Q4_0Block, Q8_0Block>;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (std::int64_t s = 0; s < cols / quant::kQK_K; ++s) {
    __m256 dx[T];
    for (int t = 0; t < T; ++t) dx[t] = _mm256_set1_ps(x.scales[t][s]);
    for (int r = 0; r < R; ++r)
      prefetch_block<Span<Block>>(rows + (r + kAhead) * row_bytes + static_cast<std::size_t>(8 * s) * Block::kBytes);
    for (std::int64_t b = 8 * s; b < 8 * s + 8; ++b) {
      for (int r = 0; r < R; ++r) {
        const std::byte* block = rows + r * row_bytes + static_cast<std::size_t>(b) * Block::kBytes;
        const __m256 d = _mm256_set1_ps(f16_at(block));
        __m256i q;
        if constexpr (Four) {
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
          q = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                               _mm256_set1_epi8(0x0F));
        } else {
          q = load256(block + 2);
        }
        const __m256i u = Four ? q : V ? _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))) : _mm256_sign_epi8(q, q);
        for (int t = 0; t < T; ++t) {
          const __m256i a = load256(x.a[t] + 32 * b);
          __m256i dot;
          if constexpr (Four || V)
            dot = add_byte_dots<V>(load256(x.corrections[t] + 8 * b), u, a);
          else
            dot = add_byte_dots<false>(_mm256_setzero_si256(), u, _mm256_sign_epi8(a, q));
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, dx[t]), acc[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * ldy + r] = hsum8(acc[r][t]);
}

// `groups` groups of R rows one after another (rows, y advancing by R rows
// each) with the same tile: one call per row chunk rather than per row, the
// kernel's constants loaded once (a call a row was 3% of a Q4_K_M decode,
// its LM head 151936 rows).
template <auto Kernel, int R>
NEURON_AVX2 void over_groups(const std::byte* rows, std::size_t row_bytes, std::int64_t cols, const Tile& x, float* y,
                             std::int64_t ldy, std::int64_t groups) {
  for (std::int64_t g = 0; g < groups; ++g)
    Kernel(rows + static_cast<std::size_t>(g * R) * row_bytes, row_bytes, cols, x, y + g * R, ldy);
}

using Fn = void (*)(const std::byte*, std::size_t, std::int64_t, const Tile&, float*, std::int64_t, std::int64_t);

// fn[r - 1][t - 1]: r rows against t tokens, for r t <= 4 (one token: up to 4
// rows; one row: up to 4 tokens); null otherwise.
using Kernels = std::array<std::array<Fn, kTile>, kTile>;

template <GgmlType Type, bool V>
struct Table {
  Kernels fn{};
  constexpr Table() { fill(std::make_integer_sequence<int, kTile * kTile>{}); }
  template <int... I>
  constexpr void fill(std::integer_sequence<int, I...>) {
    ((fn[I / kTile][I % kTile] = pick<I / kTile + 1, I % kTile + 1>()), ...);
  }
  template <int R, int T>
  static constexpr Fn pick() {
    if constexpr (R > 1 && T > 1) return nullptr;
    else if constexpr (Type == GgmlType::q4_k) return &over_groups<&q4_k<R, T, V, false>, R>;
    else if constexpr (Type == GgmlType::q5_k) return &over_groups<&q4_k<R, T, V, true>, R>;
    else if constexpr (Type == GgmlType::q6_k) return &over_groups<&q6_k<R, T, V>, R>;
    else if constexpr (Type == GgmlType::q4_0) return &over_groups<&block_scaled<R, T, V, true>, R>;
    else return &over_groups<&block_scaled<R, T, V, false>, R>;
  }
};

template <bool V>
const Kernels& kernels(GgmlType type) {
  static constexpr Table<GgmlType::q4_k, V> q4_k{};
  static constexpr Table<GgmlType::q5_k, V> q5_k{};
  static constexpr Table<GgmlType::q6_k, V> q6_k{};
  static constexpr Table<GgmlType::q4_0, V> q4_0{};
  static constexpr Table<GgmlType::q8_0, V> q8_0{};
  switch (type) {
    case GgmlType::q4_k: return q4_k.fn;
    case GgmlType::q5_k: return q5_k.fn;
    case GgmlType::q6_k: return q6_k.fn;
    case GgmlType::q4_0: return q4_0.fn;
    case GgmlType::q8_0: return q8_0.fn;
    default: NEURON_ASSERT(false && "gemm_quant_int8_avx2: unsupported type");
  }
  return q8_0.fn;
}

}  // namespace

bool avx_vnni_supported() noexcept {
  static const bool vnni = [] {
    if (const char* env = std::getenv("NEURON_CPU_AVX_VNNI"); env && std::string_view(env) == "0") return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return isa_supported(Isa::avx2) && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 4)) != 0;
  }();
  return vnni;
}

NEURON_AVX2 float round_to_int8_avx2(const float* x, std::int8_t* q, std::int16_t* sums16) noexcept {
  constexpr int kVectors = quant::kQK_K / 8;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int i = 0; i < kVectors; ++i) {
    const __m256 v = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v));
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_EQ_OQ));
  }
  if (_mm256_movemask_ps(finite) != 0xFF) {
    std::memset(q, 0, quant::kQK_K);
    std::memset(sums16, 0, 16 * sizeof(std::int16_t));
    return std::numeric_limits<float>::quiet_NaN();
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float max = _mm_cvtss_f32(m);
  const __m256 inv = _mm256_set1_ps(max > 0.0f ? 127.0f / max : 0.0f);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  for (int i = 0; i < kVectors; i += 2) {
    // Round to nearest even (the default mode, as nearbyint), clamped as the AVX-512 rounding is.
    const __m256i v0 = _mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), inv))));
    const __m256i v1 = _mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i + 8), inv))));
    // [16] i32 to i16 to i8 in column order (the packs work per lane: fix the lane order after each).
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), _MM_SHUFFLE(3, 1, 2, 0));  // [16] i16
    const __m128i b = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 8 * i), b);
    __m256i s = _mm256_add_epi32(v0, v1);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    sums16[i / 2] = static_cast<std::int16_t>(_mm_cvtsi128_si32(s4));
  }
  return max / 127.0f;
}

void gemm_quant_int8_avx2_rows(bool vnni, RowWalk walk, const QuantOperand& x, const QuantMatrix& w, std::int64_t r0,
                               std::int64_t r1, float* y, std::int64_t ldy) {
  NEURON_ASSERT(x.int8() || x.tokens() == 0);
  NEURON_ASSERT(!vnni || avx_vnni_supported());
  NEURON_ASSERT(w.cols % quant::kQK_K == 0);
  const Kernels& fn = vnni ? kernels<true>(w.type) : kernels<false>(w.type);
  const auto tile = [&](std::int64_t t0, std::int64_t count) {
    Tile tile{};
    for (std::int64_t t = 0; t < count; ++t) {
      tile.a[t] = x.q8(t0 + t);
      tile.scales[t] = x.q8_scales(t0 + t);
      tile.sums16[t] = x.q8_sums(t0 + t);
      tile.corrections[t] = x.q8_corrections(t0 + t);
    }
    return tile;
  };
  NEURON_ASSERT(w.grouped_rows <= r0);  // grouped rows take gemm_q4_k_grouped_rows (gemm_quant_few)
  const auto row = [&](std::int64_t r) { return w.data.data() + static_cast<std::size_t>(r) * w.row_bytes; };
  if (x.tokens() == 1) {
    const Tile one = tile(0, 1);
    const std::int64_t group = walk == RowWalk::sequential ? 1 : kTile;
    const std::int64_t full = (r1 - r0) / group, rest = (r1 - r0) % group;
    if (full > 0) fn[group - 1][0](row(r0), w.row_bytes, w.cols, one, y + r0, ldy, full);
    if (rest > 0) fn[rest - 1][0](row(r0 + full * group), w.row_bytes, w.cols, one, y + r0 + full * group, ldy, 1);
    return;
  }
  for (std::int64_t t0 = 0; t0 < x.tokens(); t0 += kTokenBlock) {
    const std::int64_t t1 = std::min(x.tokens(), t0 + kTokenBlock);
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t t = t0; t < t1; t += kTile) {
        const std::int64_t tt = std::min<std::int64_t>(kTile, t1 - t);
        fn[0][tt - 1](row(r), w.row_bytes, w.cols, tile(t, tt), y + t * ldy + r, ldy, 1);
      }
  }
}

}  // namespace neuron::backend::cpu
