#include "backend/cpu/gemm_quant_grouped.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "backend/cpu/activations.hpp"
#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/matmul_quant.hpp"
#include "backend/cpu/simd.hpp"
#include "quant/ggml_type.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

using quant::GgmlType;

#define NEURON_AVX2 __attribute__((target("avx2,fma,f16c")))

static_assert(kGroupBlockBytes == kGroupRows * quant::kQ4_KBytes);

// Where Q4_K's bytes go in a group block: row r's byte i (0 <= i < 144).
constexpr std::size_t grouped_offset(std::size_t r, std::size_t i) {
  if (i < 2) return 2 * r + i;                 // d
  if (i < 4) return 8 + 2 * r + (i - 2);       // dmin
  if (i < 16) return 16 + 4 * (i - 4) + r;     // scale byte k = i - 4
  const std::size_t q = i - 16, c = q / 32, o = (q % 32) / 8, h = (q % 8) / 4;
  return 64 + 128 * c + 32 * o + 16 * h + 4 * r + q % 4;
}

// Rows ahead (in bytes of the group stream) that the kernel prefetches: four blocks of a group.
constexpr std::size_t kAheadBytes = 4 * kGroupBlockBytes;
// Groups a row chunk of a several-token product holds (64 rows: L2-sized for any width up to 8192 columns).
constexpr std::int64_t kChunkGroups = 16;

NEURON_AVX2 inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
NEURON_AVX2 inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// vpshufb masks spreading bytes [j][r] (16 bytes, j < 4) over words: kScale[j] puts
// byte 4 j + (w % 8) / 2 in word w (lane i: row i % 4); kMin puts (j, r) pairs so
// that vpmaddwd's lane 4 p + r sums row r's sub-blocks 2 p and 2 p + 1.
struct Masks {
  alignas(32) std::int8_t scale[4][32];
  alignas(32) std::int8_t min[32];
  constexpr Masks() : scale{}, min{} {
    for (int j = 0; j < 4; ++j)
      for (int w = 0; w < 16; ++w) {
        scale[j][2 * w] = static_cast<std::int8_t>(4 * j + (w % 8) / 2);
        scale[j][2 * w + 1] = -128;
      }
    for (int k = 0; k < 16; ++k) {
      const int p = k / 8, r = (k % 8) / 2, j = 2 * p + k % 2;
      min[2 * k] = static_cast<std::int8_t>(4 * j + r);
      min[2 * k + 1] = -128;
    }
  }
};
constexpr Masks kMasks{};

// Groups [0, groups) of four rows from `group` on (each cols / 256 blocks,
// one after another), one token: y[4 g + r] for row r of group g.
template <bool V>
NEURON_AVX2 void q4_k_groups(const std::byte* group, std::int64_t groups, std::int64_t blocks, const std::int8_t* xg,
                             const std::int16_t* sg, const float* dx, float* y) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m128i low6 = _mm_set1_epi8(0x3F), nib = _mm_set1_epi8(0x0F), top2 = _mm_set1_epi8(0x30);
  const __m256i min_mask = load256(kMasks.min);
  __m256i scale_mask[4];
  for (int j = 0; j < 4; ++j) scale_mask[j] = load256(kMasks.scale[j]);
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256 acc = _mm256_setzero_ps();  // lane i: row i % 4
    for (std::int64_t b = 0; b < blocks; ++b, group += kGroupBlockBytes) {
      for (std::size_t off = 0; off < kGroupBlockBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(group + kAheadBytes + off), _MM_HINT_T0);
      // The four rows' scales and minimums, bytes [j][r] (Q4_K's get_scale_min_k4 on 16 bytes at once).
      const __m128i a = load128(group + 16), m = load128(group + 32), c = load128(group + 48);
      const __m128i sc_lo = _mm_and_si128(a, low6), mn_lo = _mm_and_si128(m, low6);
      const __m128i sc_hi = _mm_or_si128(_mm_and_si128(c, nib), _mm_and_si128(_mm_srli_epi16(a, 2), top2));
      const __m128i mn_hi =
          _mm_or_si128(_mm_and_si128(_mm_srli_epi16(c, 4), nib), _mm_and_si128(_mm_srli_epi16(m, 2), top2));
      const __m256i sc2[2] = {_mm256_broadcastsi128_si256(sc_lo), _mm256_broadcastsi128_si256(sc_hi)};
      const std::int8_t* xb = xg + 1024 * b;
      __m256i dot = _mm256_setzero_si256();  // lane i: row i % 4's sum_j sc_j (q . a)_j over half its columns
#pragma GCC unroll 4
      for (int ch = 0; ch < 4; ++ch) {  // sub-blocks 2 ch (low nibbles) and 2 ch + 1 (high)
        const std::byte* q = group + 64 + 128 * ch;
        const std::int8_t* xc = xb + 256 * ch;
        __m256i lo = _mm256_maddubs_epi16(_mm256_and_si256(load256(q), low4), load256(xc));
        __m256i hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(load256(q), 4), low4), load256(xc + 32));
#pragma GCC unroll 3
        for (int o = 1; o < 4; ++o) {
          const __m256i v = load256(q + 32 * o);
          lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(_mm256_and_si256(v, low4), load256(xc + 64 * o)));
          hi = _mm256_add_epi16(
              hi, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4), load256(xc + 64 * o + 32)));
        }
        const int j = 2 * ch;  // sub-blocks j, j + 1: bytes of sc_lo (j < 4) or sc_hi
        dot = add_word_dots<V>(dot, lo, _mm256_shuffle_epi8(sc2[j / 4], scale_mask[j % 4]));
        dot = add_word_dots<V>(dot, hi, _mm256_shuffle_epi8(sc2[j / 4], scale_mask[j % 4 + 1]));
      }
      const __m256i mins = _mm256_add_epi32(
          _mm256_madd_epi16(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(mn_lo), min_mask), load256(sg + 32 * b)),
          _mm256_madd_epi16(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(mn_hi), min_mask),
                            load256(sg + 32 * b + 16)));  // lane 4 p + r: row r's m_j S_j, j in 2 p, 2 p + 1, +4
      const __m256 d = _mm256_cvtph_ps(_mm_set1_epi64x(*reinterpret_cast<const long long*>(group)));
      const __m256 dmin = _mm256_cvtph_ps(_mm_set1_epi64x(*reinterpret_cast<const long long*>(group + 8)));
      const __m256 s = _mm256_set1_ps(dx[b]);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, s), acc);
      acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmin, s), acc);
    }
    _mm_storeu_ps(y + 4 * g, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)));
  }
}

}  // namespace

bool q4_k_grouping_pays(std::int64_t cols) {
  static const bool off = [] {
    const char* env = std::getenv("NEURON_CPU_Q4K_GROUPS");
    return env && std::string_view(env) == "0";
  }();
  return !off && cols % quant::kQK_K == 0 && int8_quant_products(cpu_activations()) &&
         gemm_quant_few_int8(selected_isa(), GgmlType::q4_k);
}

void group_rows(QuantMatrix& w) {
  NEURON_ASSERT(w.type == GgmlType::q4_k && w.cols % quant::kQK_K == 0 && w.grouped_rows == 0);
  const std::int64_t blocks = w.cols / quant::kQK_K;
  const std::int64_t groups = w.rows / kGroupRows;
  // Groups spread over the pool, each through a copy of its rows as stored.
  ChunkPool::shared().run(groups, [&](std::int64_t g) {
    thread_local std::vector<std::byte> src;  // [4, row_bytes] one group as stored
    src.resize(static_cast<std::size_t>(kGroupRows) * w.row_bytes);
    std::byte* dst = w.data.data() + static_cast<std::size_t>(g * kGroupRows) * w.row_bytes;
    std::memcpy(src.data(), dst, src.size());
    for (std::int64_t b = 0; b < blocks; ++b)
      for (std::size_t r = 0; r < kGroupRows; ++r) {
        const std::byte* in = src.data() + r * w.row_bytes + static_cast<std::size_t>(b) * quant::kQ4_KBytes;
        std::byte* out = dst + static_cast<std::size_t>(b) * kGroupBlockBytes;
        for (std::size_t i = 0; i < 16; ++i) out[grouped_offset(r, i)] = in[i];
        for (std::size_t i = 16; i < quant::kQ4_KBytes; i += 4) std::memcpy(out + grouped_offset(r, i), in + i, 4);
      }
  });
  w.grouped_rows = groups * kGroupRows;
}

void ungroup_rows(const QuantMatrix& w, std::int64_t r0, std::int64_t r1, std::byte* out) {
  NEURON_ASSERT(r0 >= 0 && r0 <= r1 && r1 <= w.rows);
  const std::int64_t blocks = w.cols / quant::kQK_K;
  for (std::int64_t r = r0; r < r1; ++r, out += w.row_bytes) {
    if (r >= w.grouped_rows) {
      std::memcpy(out, w.data.data() + static_cast<std::size_t>(r) * w.row_bytes, w.row_bytes);
      continue;
    }
    const std::byte* group = w.data.data() + static_cast<std::size_t>(r / kGroupRows * kGroupRows) * w.row_bytes;
    const auto lane = static_cast<std::size_t>(r % kGroupRows);
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::byte* in = group + static_cast<std::size_t>(b) * kGroupBlockBytes;
      std::byte* dst = out + static_cast<std::size_t>(b) * quant::kQ4_KBytes;
      for (std::size_t i = 0; i < 16; ++i) dst[i] = in[grouped_offset(lane, i)];
      for (std::size_t i = 16; i < quant::kQ4_KBytes; i += 4) std::memcpy(dst + i, in + grouped_offset(lane, i), 4);
    }
  }
}

namespace {

// Group g's four rows as stored into out [4, row_bytes]: each 256-bit load of
// quants holds 8 bytes of every row (vpermd puts each row's in one 64-bit
// lane), the scale bytes [k][r] are transposed 4 x 4 by vpshufb.
NEURON_AVX2 void ungroup_group(const std::byte* group, std::size_t row_bytes, std::int64_t blocks, std::byte* out) {
  const __m256i rows = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m128i transpose = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (std::int64_t b = 0; b < blocks; ++b, group += kGroupBlockBytes) {
    std::byte* dst = out + static_cast<std::size_t>(b) * quant::kQ4_KBytes;
    alignas(16) std::uint32_t sc[3][4];  // [k / 4][r]: row r's scale bytes 4 (k / 4) ..
    for (int k = 0; k < 3; ++k)
      _mm_store_si128(reinterpret_cast<__m128i*>(sc[k]), _mm_shuffle_epi8(load128(group + 16 + 16 * k), transpose));
    for (std::size_t r = 0; r < kGroupRows; ++r) {
      std::byte* d = dst + r * row_bytes;
      std::memcpy(d, group + 2 * r, 2);
      std::memcpy(d + 2, group + 8 + 2 * r, 2);
      for (int k = 0; k < 3; ++k) std::memcpy(d + 4 + 4 * k, &sc[k][r], 4);
    }
    for (int c = 0; c < 4; ++c)
      for (int o = 0; o < 4; ++o) {
        const __m256i v = _mm256_permutevar8x32_epi32(load256(group + 64 + 128 * c + 32 * o), rows);
        const std::size_t at = 16 + 32 * static_cast<std::size_t>(c) + 8 * static_cast<std::size_t>(o);
        const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + at), lo);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + row_bytes + at), _mm_unpackhi_epi64(lo, lo));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 2 * row_bytes + at), hi);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 3 * row_bytes + at), _mm_unpackhi_epi64(hi, hi));
      }
  }
}

}  // namespace

const std::byte* StoredRows::row(const QuantMatrix& w, std::int64_t r) {
  if (r >= w.grouped_rows) return w.data.data() + static_cast<std::size_t>(r) * w.row_bytes;
  const std::int64_t first = r / kGroupRows * kGroupRows;
  if (of_ != &w || first_ != first) {
    group_.resize(static_cast<std::size_t>(kGroupRows) * w.row_bytes);
    ungroup_group(w.data.data() + static_cast<std::size_t>(first) * w.row_bytes, w.row_bytes, w.cols / quant::kQK_K,
                  group_.data());
    of_ = &w;
    first_ = first;
  }
  return group_.data() + static_cast<std::size_t>(r - first) * w.row_bytes;
}

void group_operand(const std::int8_t* q, const std::int16_t* sums16, std::int64_t cols, std::int8_t* xg,
                   std::int16_t* sg) {
  for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b) {
    for (int c = 0; c < 4; ++c)
      for (int o = 0; o < 4; ++o)
        for (int n = 0; n < 2; ++n)
          for (int i = 0; i < 8; ++i)
            std::memcpy(xg + 1024 * b + 256 * c + 64 * o + 32 * n + 4 * i,
                        q + 256 * b + 64 * c + 32 * n + 8 * o + 4 * (i / 4), 4);
    std::int16_t s[8];  // sub-block sums of x (|.| <= 32 * 127)
    for (int j = 0; j < 8; ++j) s[j] = static_cast<std::int16_t>(sums16[16 * b + 2 * j] + sums16[16 * b + 2 * j + 1]);
    for (int v = 0; v < 2; ++v)
      for (int k = 0; k < 16; ++k) sg[32 * b + 16 * v + k] = s[4 * v + 2 * (k / 8) + k % 2];
  }
}

void gemm_q4_k_grouped_rows(bool vnni, const QuantOperand& x, const QuantMatrix& w, std::int64_t r0, std::int64_t r1,
                            float* y, std::int64_t ldy) {
  NEURON_ASSERT(w.type == GgmlType::q4_k && x.grouped() && r0 % kGroupRows == 0 && r0 <= r1 && r1 <= w.grouped_rows &&
                r1 % kGroupRows == 0);
  const std::int64_t blocks = w.cols / quant::kQK_K;
  const auto kernel = vnni ? &q4_k_groups<true> : &q4_k_groups<false>;
  const auto group = [&](std::int64_t r) { return w.data.data() + static_cast<std::size_t>(r) * w.row_bytes; };
  if (x.tokens() == 1) return kernel(group(r0), (r1 - r0) / kGroupRows, blocks, x.q8_grouped(0), x.q8_grouped_sums(0),
                                     x.q8_scales(0), y + r0);
  // Several tokens: a chunk of rows (L2-sized) meets every token before the next chunk.
  for (std::int64_t c0 = r0; c0 < r1; c0 += kChunkGroups * kGroupRows) {
    const std::int64_t c1 = std::min(r1, c0 + kChunkGroups * kGroupRows);
    for (std::int64_t t = 0; t < x.tokens(); ++t)
      kernel(group(c0), (c1 - c0) / kGroupRows, blocks, x.q8_grouped(t), x.q8_grouped_sums(t), x.q8_scales(t),
             y + t * ldy + c0);
  }
}

}  // namespace neuron::backend::cpu
