#include "backend/cpu/attention_decode.hpp"

#include <utility>

#include "backend/cpu/isa.hpp"
#include "backend/cpu/simd.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

#define NEURON_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

constexpr std::int64_t kMaxChunks = 8;  // head_dim up to 128 (every Qwen3)

// 16 elements of a K or V row as f32: f32 loaded, bf16 widened.
NEURON_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
NEURON_AVX512 inline __m512 load16(const std::uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// Each K row is loaded once into registers (C chunks of 16) and meets every
// query of the group: an FMA a chunk, then one reduction a query.
template <int C, class T>
NEURON_AVX512 void scores_rows(const float* q, std::int64_t g, const T* k, std::int64_t count, float scale, float* s,
                               std::int64_t lds) {
  constexpr std::int64_t hd = 16 * C;
  constexpr std::int64_t kRowBytes = hd * static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t p = 0; p < count; ++p) {
    const T* kp = k + p * hd;
    const char* ahead = reinterpret_cast<const char*>(kp) + 8 * kRowBytes;  // 8 rows on
    for (std::int64_t b = 0; b < kRowBytes; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
    __m512 row[C];
    for (int c = 0; c < C; ++c) row[c] = load16(kp + 16 * c);
    for (std::int64_t r = 0; r < g; ++r) {
      const float* qr = q + r * hd;
      __m512 a0 = _mm512_mul_ps(row[0], _mm512_loadu_ps(qr));
      __m512 a1 = C > 1 ? _mm512_mul_ps(row[1], _mm512_loadu_ps(qr + 16)) : _mm512_setzero_ps();
      for (int c = 2; c < C; c += 2) {
        a0 = _mm512_fmadd_ps(row[c], _mm512_loadu_ps(qr + 16 * c), a0);
        if (c + 1 < C) a1 = _mm512_fmadd_ps(row[c + 1], _mm512_loadu_ps(qr + 16 * c + 16), a1);
      }
      s[r * lds + p] = scale * _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    }
  }
}

// Column slices of V: a pass takes W chunks of 16 columns for G queries
// (G * W = 8 accumulators, enough for the FMAs' latency), walking V's rows
// with the queries' weights broadcast; each pass reads its own cache lines of
// each row, so V is read once over all passes.
template <int G, int W, class T>
NEURON_AVX512 void weighted_pass(const float* a, std::int64_t lda, const T* v, std::int64_t count, std::int64_t hd,
                                 std::int64_t c0, float* o, std::int64_t ldo, bool accumulate) {
  __m512 acc[G][W];
  for (int r = 0; r < G; ++r)
    for (int w = 0; w < W; ++w)
      acc[r][w] = accumulate ? _mm512_loadu_ps(o + r * ldo + c0 + 16 * w) : _mm512_setzero_ps();
  for (std::int64_t p = 0; p < count; ++p) {
    const T* vp = v + p * hd + c0;
    __m512 col[W];
    for (int w = 0; w < W; ++w) col[w] = load16(vp + 16 * w);
    for (int r = 0; r < G; ++r) {
      const __m512 weight = _mm512_set1_ps(a[r * lda + p]);
      for (int w = 0; w < W; ++w) acc[r][w] = _mm512_fmadd_ps(weight, col[w], acc[r][w]);
    }
  }
  for (int r = 0; r < G; ++r)
    for (int w = 0; w < W; ++w) _mm512_storeu_ps(o + r * ldo + c0 + 16 * w, acc[r][w]);
}

// G queries over all of V's columns: passes of 8 / G chunks, then single chunks.
template <int G, class T>
void weighted_queries(const float* a, std::int64_t lda, const T* v, std::int64_t count, std::int64_t hd, float* o,
                      std::int64_t ldo, bool accumulate) {
  constexpr int W = 8 / G;
  std::int64_t c0 = 0;
  for (; c0 + 16 * W <= hd; c0 += 16 * W) weighted_pass<G, W>(a, lda, v, count, hd, c0, o, ldo, accumulate);
  for (; c0 < hd; c0 += 16) weighted_pass<G, 1>(a, lda, v, count, hd, c0, o, ldo, accumulate);
}

// ---- AVX2 + FMA: the same products 8 lanes at a time (head_dim a multiple of 8 up to 128) ----

#define NEURON_AVX2 __attribute__((target("avx2,fma,f16c")))

constexpr std::int64_t kMaxChunksAvx2 = 16;

NEURON_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
NEURON_AVX2 inline __m256 load8(const std::uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// Each K row (C chunks of 8) meets every query of the group: the row is
// widened into registers once when it fits (C <= 8), else each query reads
// it from L1 (the first brought it there).
template <int C, class T>
NEURON_AVX2 void scores_rows_avx2(const float* q, std::int64_t g, const T* k, std::int64_t count, float scale, float* s,
                                  std::int64_t lds) {
  constexpr std::int64_t hd = 8 * C;
  constexpr std::int64_t kRowBytes = hd * static_cast<std::int64_t>(sizeof(T));
  constexpr int kHeld = C <= 8 ? C : 1;
  for (std::int64_t p = 0; p < count; ++p) {
    const T* kp = k + p * hd;
    const char* ahead = reinterpret_cast<const char*>(kp) + 8 * kRowBytes;  // 8 rows on
    for (std::int64_t b = 0; b < kRowBytes; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
    __m256 row[kHeld];
    if constexpr (C <= 8)
      for (int c = 0; c < C; ++c) row[c] = load8(kp + 8 * c);
    for (std::int64_t r = 0; r < g; ++r) {
      const float* qr = q + r * hd;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      for (int c = 0; c < C; c += 2) {
        const __m256 k0 = C <= 8 ? row[c % kHeld] : load8(kp + 8 * c);
        a0 = _mm256_fmadd_ps(k0, _mm256_loadu_ps(qr + 8 * c), a0);
        if (c + 1 < C) {
          const __m256 k1 = C <= 8 ? row[(c + 1) % kHeld] : load8(kp + 8 * c + 8);
          a1 = _mm256_fmadd_ps(k1, _mm256_loadu_ps(qr + 8 * c + 8), a1);
        }
      }
      s[r * lds + p] = scale * hsum8(_mm256_add_ps(a0, a1));
    }
  }
}

// Column slices of V as the AVX-512 passes: W chunks of 8 columns for G
// queries (G * W = 8 accumulators), V read once over all passes.
template <int G, int W, class T>
NEURON_AVX2 void weighted_pass_avx2(const float* a, std::int64_t lda, const T* v, std::int64_t count, std::int64_t hd,
                                    std::int64_t c0, float* o, std::int64_t ldo, bool accumulate) {
  __m256 acc[G][W];
  for (int r = 0; r < G; ++r)
    for (int w = 0; w < W; ++w)
      acc[r][w] = accumulate ? _mm256_loadu_ps(o + r * ldo + c0 + 8 * w) : _mm256_setzero_ps();
  for (std::int64_t p = 0; p < count; ++p) {
    const T* vp = v + p * hd + c0;
    __m256 col[W];
    for (int w = 0; w < W; ++w) col[w] = load8(vp + 8 * w);
    for (int r = 0; r < G; ++r) {
      const __m256 weight = _mm256_set1_ps(a[r * lda + p]);
      for (int w = 0; w < W; ++w) acc[r][w] = _mm256_fmadd_ps(weight, col[w], acc[r][w]);
    }
  }
  for (int r = 0; r < G; ++r)
    for (int w = 0; w < W; ++w) _mm256_storeu_ps(o + r * ldo + c0 + 8 * w, acc[r][w]);
}

template <int G, class T>
void weighted_queries_avx2(const float* a, std::int64_t lda, const T* v, std::int64_t count, std::int64_t hd, float* o,
                           std::int64_t ldo, bool accumulate) {
  constexpr int W = 8 / G;
  std::int64_t c0 = 0;
  for (; c0 + 8 * W <= hd; c0 += 8 * W) weighted_pass_avx2<G, W>(a, lda, v, count, hd, c0, o, ldo, accumulate);
  for (; c0 < hd; c0 += 8) weighted_pass_avx2<G, 1>(a, lda, v, count, hd, c0, o, ldo, accumulate);
}

template <class T, int... C>
void scores_avx2(std::integer_sequence<int, C...>, const float* q, std::int64_t g, std::int64_t hd, const T* k,
                 std::int64_t count, float scale, float* s, std::int64_t lds) {
  ((hd == 8 * (C + 1) ? scores_rows_avx2<C + 1>(q, g, k, count, scale, s, lds) : void()), ...);
}

bool avx512(Isa isa) { return isa == Isa::avx512 || isa == Isa::avx512_bf16; }

template <class T>
void scores(Isa isa, const float* q, std::int64_t g, std::int64_t hd, const T* k, std::int64_t count, float scale,
            float* s, std::int64_t lds) {
  NEURON_ASSERT(decode_fits(isa, hd) && g >= 1);
  if (!avx512(isa))
    return scores_avx2(std::make_integer_sequence<int, kMaxChunksAvx2>{}, q, g, hd, k, count, scale, s, lds);
  switch (hd / 16) {
    case 1: return scores_rows<1>(q, g, k, count, scale, s, lds);
    case 2: return scores_rows<2>(q, g, k, count, scale, s, lds);
    case 3: return scores_rows<3>(q, g, k, count, scale, s, lds);
    case 4: return scores_rows<4>(q, g, k, count, scale, s, lds);
    case 5: return scores_rows<5>(q, g, k, count, scale, s, lds);
    case 6: return scores_rows<6>(q, g, k, count, scale, s, lds);
    case 7: return scores_rows<7>(q, g, k, count, scale, s, lds);
    default: return scores_rows<8>(q, g, k, count, scale, s, lds);
  }
}

template <class T>
void weighted_sum(Isa isa, const float* a, std::int64_t lda, std::int64_t g, const T* v, std::int64_t count,
                  std::int64_t hd, float* o, std::int64_t ldo, bool accumulate) {
  NEURON_ASSERT(decode_fits(isa, hd) && g >= 1);
  const bool wide = avx512(isa);
  for (std::int64_t r = 0; r < g;) {  // queries in chunks of 8, 4, 2, 1
    const float* ar = a + r * lda;
    float* orow = o + r * ldo;
    const std::int64_t left = g - r;
    if (left >= 8) {
      (wide ? weighted_queries<8, T> : weighted_queries_avx2<8, T>)(ar, lda, v, count, hd, orow, ldo, accumulate);
      r += 8;
    } else if (left >= 4) {
      (wide ? weighted_queries<4, T> : weighted_queries_avx2<4, T>)(ar, lda, v, count, hd, orow, ldo, accumulate);
      r += 4;
    } else if (left >= 2) {
      (wide ? weighted_queries<2, T> : weighted_queries_avx2<2, T>)(ar, lda, v, count, hd, orow, ldo, accumulate);
      r += 2;
    } else {
      (wide ? weighted_queries<1, T> : weighted_queries_avx2<1, T>)(ar, lda, v, count, hd, orow, ldo, accumulate);
      r += 1;
    }
  }
}

}  // namespace

bool decode_fits(Isa isa, std::int64_t head_dim) noexcept {
  if (!isa_supported(isa) || head_dim <= 0) return false;
  if (avx512(isa)) return head_dim % 16 == 0 && head_dim / 16 <= kMaxChunks;
  return isa == Isa::avx2 && head_dim % 8 == 0 && head_dim / 8 <= kMaxChunksAvx2;
}

bool decode_fits(std::int64_t head_dim) noexcept { return decode_fits(selected_isa(), head_dim); }

void decode_scores(Isa isa, const float* q, std::int64_t g, std::int64_t hd, const float* k, std::int64_t count,
                   float scale, float* s, std::int64_t lds) {
  scores(isa, q, g, hd, k, count, scale, s, lds);
}

void decode_scores(Isa isa, const float* q, std::int64_t g, std::int64_t hd, const std::uint16_t* k, std::int64_t count,
                   float scale, float* s, std::int64_t lds) {
  scores(isa, q, g, hd, k, count, scale, s, lds);
}

void decode_weighted_sum(Isa isa, const float* a, std::int64_t lda, std::int64_t g, const float* v, std::int64_t count,
                         std::int64_t hd, float* o, std::int64_t ldo, bool accumulate) {
  weighted_sum(isa, a, lda, g, v, count, hd, o, ldo, accumulate);
}

void decode_weighted_sum(Isa isa, const float* a, std::int64_t lda, std::int64_t g, const std::uint16_t* v,
                         std::int64_t count, std::int64_t hd, float* o, std::int64_t ldo, bool accumulate) {
  weighted_sum(isa, a, lda, g, v, count, hd, o, ldo, accumulate);
}

void decode_scores(const float* q, std::int64_t g, std::int64_t hd, const float* k, std::int64_t count, float scale,
                   float* s, std::int64_t lds) {
  scores(selected_isa(), q, g, hd, k, count, scale, s, lds);
}

void decode_scores(const float* q, std::int64_t g, std::int64_t hd, const std::uint16_t* k, std::int64_t count,
                   float scale, float* s, std::int64_t lds) {
  scores(selected_isa(), q, g, hd, k, count, scale, s, lds);
}

void decode_weighted_sum(const float* a, std::int64_t lda, std::int64_t g, const float* v, std::int64_t count,
                         std::int64_t hd, float* o, std::int64_t ldo, bool accumulate) {
  weighted_sum(selected_isa(), a, lda, g, v, count, hd, o, ldo, accumulate);
}

void decode_weighted_sum(const float* a, std::int64_t lda, std::int64_t g, const std::uint16_t* v, std::int64_t count,
                         std::int64_t hd, float* o, std::int64_t ldo, bool accumulate) {
  weighted_sum(selected_isa(), a, lda, g, v, count, hd, o, ldo, accumulate);
}

}  // namespace neuron::backend::cpu
