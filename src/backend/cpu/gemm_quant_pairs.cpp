#include "backend/cpu/gemm_quant_pairs.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/gemm_quant_grouped.hpp"
#include "backend/cpu/gemm_bf16_pairs.hpp"
#include "backend/cpu/packed_terms.hpp"
#include "backend/cpu/simd.hpp"
#include "quant/dequantize.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

using quant::GgmlType;

#define NEURON_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c")))

constexpr int kRows = 12;    // rows of W a block: 2 x 12 accumulators, 4 x operands, 1 broadcast (of 32 registers)
constexpr int kGroups = 2;   // token groups of 16 a block meets at once (one for a last group alone)
constexpr std::int64_t kChunkBytes = 64 << 10;  // W bytes a pool task takes, at least

// Columns a sub-block of `type` covers (one scale, one constant).
std::int64_t sub_cols(GgmlType type) noexcept { return type == GgmlType::q6_k ? 16 : 32; }
// `type` has a constant per sub-block (the K-quants' mins).
bool has_constant(GgmlType type) noexcept { return type == GgmlType::q4_k || type == GgmlType::q5_k; }

// A block of rows of W unpacked: w[r, c] = scale[r, c / S] * q[r, c] + constant[r, c / S].
struct Unpacked {
  std::vector<std::uint16_t> q;  // [kRows, cols] bf16 (small integers)
  std::vector<float> scale;      // [kRows, cols / S] f32
  std::vector<float> constant;   // [kRows, cols / S] f32 (types with a constant)
  std::int64_t cols = 0, subs = 0;

  void size_for(std::int64_t c, std::int64_t s) {
    cols = c;
    subs = c / s;
    q.resize(static_cast<std::size_t>(kRows * cols));
    scale.resize(static_cast<std::size_t>(kRows * subs));
    constant.resize(static_cast<std::size_t>(kRows * subs));
  }
};

// 32 int8 to 32 bf16 (exact: |q| <= 128).
NEURON_AVX512_BF16 inline void store_bf16(__m256i q8, std::uint16_t* dst) {
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q8)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q8, 1)));
  _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

NEURON_AVX512_BF16 inline __m256i low_nibbles(__m256i b) { return _mm256_and_si256(b, _mm256_set1_epi8(0x0F)); }
NEURON_AVX512_BF16 inline __m256i high_nibbles(__m256i b) {
  return _mm256_and_si256(_mm256_srli_epi16(b, 4), _mm256_set1_epi8(0x0F));
}
NEURON_AVX512_BF16 inline __m256i load32(const std::byte* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Bits shift, shift + 1 of each byte of a Q6_K block's qh as bits 4, 5.
NEURON_AVX512_BF16 inline __m256i q6_high(__m256i h, int shift) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, shift), _mm256_set1_epi8(3)), 4);
}

// One row of `cols` columns of `type` at src into q (bf16), scale and constant (per sub-block).
NEURON_AVX512_BF16 void unpack_row(GgmlType type, const std::byte* src, std::int64_t cols, std::uint16_t* q,
                                   float* scale, float* constant) {
  switch (type) {
    case GgmlType::q8_0:
      for (std::int64_t b = 0; b < cols / quant::kQK8_0; ++b, src += quant::kQ8_0Bytes) {
        scale[b] = f16_at(src);
        store_bf16(load32(src + 2), q + b * 32);
      }
      return;
    case GgmlType::q4_0:
      for (std::int64_t b = 0; b < cols / quant::kQK4_0; ++b, src += quant::kQ4_0Bytes) {
        scale[b] = f16_at(src);
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2));
        const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(bytes), bytes, 1);
        const __m256i nib = _mm256_blend_epi32(low_nibbles(both), high_nibbles(both), 0xF0);  // columns 0-15, 16-31
        store_bf16(_mm256_sub_epi8(nib, _mm256_set1_epi8(8)), q + b * 32);
      }
      return;
    case GgmlType::q4_k:
    case GgmlType::q5_k: {
      const bool five = type == GgmlType::q5_k;
      const std::size_t bytes = five ? quant::kQ5_KBytes : quant::kQ4_KBytes;
      const float center = five ? 16.0f : 8.0f;
      for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b, src += bytes, q += quant::kQK_K) {
        const float d = f16_at(src), dmin = f16_at(src + 2);
        const std::byte* scales = src + 4;
        const std::byte* qs = src + (five ? 48 : 16);
        const __m256i qh = five ? load32(src + 16) : _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {  // 64 columns: sub-blocks 2j (low nibbles), 2j + 1 (high)
          for (int h = 0; h < 2; ++h) {
            std::uint8_t sc, m;
            quant::scale_min_k4(2 * j + h, scales, sc, m);
            const float d1 = d * sc, m1 = dmin * m;  // as dequantize_row: w = d1 q - m1
            scale[b * 8 + 2 * j + h] = d1;
            constant[b * 8 + 2 * j + h] = center * d1 - m1;
          }
          const __m256i packed = load32(qs + 32 * j);
          __m256i lo = low_nibbles(packed), hi = high_nibbles(packed);
          if (five) {  // bit 2j of qh[l] is column l's fifth bit in the low sub-block, bit 2j + 1 in the high one
            const __m256i b1 = _mm256_set1_epi8(static_cast<char>(1u << (2 * j)));
            const __m256i b2 = _mm256_set1_epi8(static_cast<char>(2u << (2 * j)));
            const __m256i sixteen = _mm256_set1_epi8(16);
            lo = _mm256_add_epi8(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), sixteen));
            hi = _mm256_add_epi8(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b2), b2), sixteen));
          }
          const __m256i c = _mm256_set1_epi8(static_cast<char>(center));
          store_bf16(_mm256_sub_epi8(lo, c), q + 64 * j);
          store_bf16(_mm256_sub_epi8(hi, c), q + 64 * j + 32);
        }
      }
      return;
    }
    case GgmlType::q6_k:
      for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b, src += quant::kQ6_KBytes) {
        const float d = f16_at(src + 208);
        const auto* sc = reinterpret_cast<const std::int8_t*>(src + 192);
        for (int s = 0; s < 16; ++s) scale[b * 16 + s] = d * static_cast<float>(sc[s]);  // as dequantize_row: (d sc) q
        const __m256i thirty_two = _mm256_set1_epi8(32);
        for (int half = 0; half < 2; ++half) {  // 128 columns: ql[64], qh[32]
          const std::byte* ql = src + 64 * half;
          const __m256i a = load32(ql), c = load32(ql + 32), h = load32(src + 128 + 32 * half);
          std::uint16_t* out = q + b * quant::kQK_K + 128 * half;
          store_bf16(_mm256_sub_epi8(_mm256_or_si256(low_nibbles(a), q6_high(h, 0)), thirty_two), out);
          store_bf16(_mm256_sub_epi8(_mm256_or_si256(low_nibbles(c), q6_high(h, 2)), thirty_two), out + 32);
          store_bf16(_mm256_sub_epi8(_mm256_or_si256(high_nibbles(a), q6_high(h, 4)), thirty_two), out + 64);
          store_bf16(_mm256_sub_epi8(_mm256_or_si256(high_nibbles(c), q6_high(h, 6)), thirty_two), out + 96);
        }
      }
      return;
    default:
      NEURON_ASSERT(false && "gemm_quant_pairs: unsupported type");
  }
}

// The tokens' sums of x over each sub-block of S columns: [groups][subs][16 tokens] f32, tokens past n zero.
// With one term, of x rounded to bf16 (the x the q sums take).
void sub_sums(const float* x, std::int64_t n, std::int64_t ldx, std::int64_t cols, std::int64_t s, int terms,
              std::int64_t groups, std::vector<float>& out) {
  const std::int64_t subs = cols / s;
  out.assign(static_cast<std::size_t>(groups * subs * 16), 0.0f);
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t b = 0; b < subs; ++b) {
      float sum = 0.0f;
      for (std::int64_t c = 0; c < s; ++c) {
        const float v = x[t * ldx + b * s + c];
        sum += terms == 1 ? bf16_to_f32(f32_to_bf16(v)) : v;
      }
      out[static_cast<std::size_t>(((t / 16) * subs + b) * 16 + t % 16)] = sum;
    }
}

// Rows [0, R) of the unpacked block against token groups [g, g + G) of x's first T terms:
// c[r][t] = sum over columns of w[r, col] x[token t of the groups, col]. c: [R][32] f32.
// SP: column pairs a sub-block; C: the type has constants (sums: sub_sums' output).
// A sub-block's sums of q x stay in registers; c takes them scaled once a sub-block (in L1).
template <int R, int T, int G, int SP, bool C>
NEURON_AVX512_BF16 void block(const Unpacked& u, const PackedTerms& x, const float* sums, std::int64_t g, float* c) {
  std::memset(c, 0, sizeof(float) * R * 32);
  const std::uint16_t* xs[T][G];  // where each term's group starts: column pair p at + 32 p
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < G; ++k) xs[t][k] = x.group_start(t, g + k);
  for (std::int64_t s = 0; s < u.subs; ++s) {
    __m512 sub[R][G];  // [R rows][G groups of 16 tokens] f32: this sub-block's sums of q x
    for (int r = 0; r < R; ++r)
      for (int k = 0; k < G; ++k) sub[r][k] = _mm512_setzero_ps();
    for (std::int64_t p = s * SP; p < (s + 1) * SP; ++p) {
      __m512bh xv[T][G];
      for (int t = 0; t < T; ++t)
        for (int k = 0; k < G; ++k) xv[t][k] = (__m512bh)_mm512_loadu_si512(xs[t][k] + p * 32);
      for (int r = 0; r < R; ++r) {
        std::int32_t pair;
        std::memcpy(&pair, u.q.data() + r * u.cols + 2 * p, 4);
        const __m512bh wv = (__m512bh)_mm512_set1_epi32(pair);
        for (int t = 0; t < T; ++t)
          for (int k = 0; k < G; ++k) sub[r][k] = _mm512_dpbf16_ps(sub[r][k], xv[t][k], wv);
      }
    }
    __m512 xsum[G];
    if constexpr (C)
      for (int k = 0; k < G; ++k) xsum[k] = _mm512_loadu_ps(sums + ((g + k) * u.subs + s) * 16);
    for (int r = 0; r < R; ++r) {
      const __m512 sc = _mm512_set1_ps(u.scale[static_cast<std::size_t>(r * u.subs + s)]);
      for (int k = 0; k < G; ++k) {
        float* at = c + r * 32 + k * 16;
        __m512 v = _mm512_fmadd_ps(sub[r][k], sc, _mm512_loadu_ps(at));
        if constexpr (C) v = _mm512_fmadd_ps(xsum[k], _mm512_set1_ps(u.constant[static_cast<std::size_t>(r * u.subs + s)]), v);
        _mm512_storeu_ps(at, v);
      }
    }
  }
}

using BlockFn = void (*)(const Unpacked&, const PackedTerms&, const float*, std::int64_t, float*);

template <int T, int G, int SP, bool C, int... R>
constexpr std::array<BlockFn, kRows> table(std::integer_sequence<int, R...>) {
  return {&block<R + 1, T, G, SP, C>...};
}

template <int SP, bool C>
constexpr std::array<std::array<BlockFn, kRows>, 4> tables() {
  using Seq = std::make_integer_sequence<int, kRows>;
  return {table<1, 1, SP, C>(Seq{}), table<1, 2, SP, C>(Seq{}), table<2, 1, SP, C>(Seq{}), table<2, 2, SP, C>(Seq{})};
}

// The block kernel for `rows` (1..kRows) rows, `terms` terms, `groups` (1, 2) token groups and `type`'s sub-blocks.
BlockFn block_for(int rows, int terms, int groups, GgmlType type) {
  static constexpr auto plain = tables<16, false>();     // Q8_0, Q4_0
  static constexpr auto constant = tables<16, true>();   // Q4_K, Q5_K
  static constexpr auto sixteen = tables<8, false>();    // Q6_K
  const auto& fns = type == GgmlType::q6_k ? sixteen : has_constant(type) ? constant : plain;
  return fns[static_cast<std::size_t>((terms - 1) * 2 + groups - 1)][static_cast<std::size_t>(rows - 1)];
}

}  // namespace

bool gemm_quant_pairs_fits(GgmlType type, std::int64_t cols) noexcept {
  const bool known = type == GgmlType::q8_0 || type == GgmlType::q4_0 || type == GgmlType::q4_k ||
                     type == GgmlType::q5_k || type == GgmlType::q6_k;
  return known && gemm_bf16_pairs_fits(cols);
}

void gemm_quant_pairs(const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y,
                      std::int64_t ldy, int terms) {
  NEURON_ASSERT(gemm_quant_pairs_fits(w.type, w.cols) && (terms == 1 || terms == 2));
  if (n <= 0 || w.rows <= 0) return;
  const std::int64_t in = w.cols, s = sub_cols(w.type);
  thread_local PackedTerms packed_mine;  // the calling thread's, reused between calls
  thread_local std::vector<float> sums_mine;
  PackedTerms& packed = packed_mine;  // references, so the pool's threads read these
  std::vector<float>& sums = sums_mine;
  packed.pack(x, n, in, ldx, terms);
  if (has_constant(w.type)) sub_sums(x, n, ldx, in, s, terms, packed.groups, sums);
  const std::int64_t blocks = (w.rows + kRows - 1) / kRows;
  const std::int64_t per_task = std::max<std::int64_t>(1, kChunkBytes / (kRows * static_cast<std::int64_t>(w.row_bytes)));
  const std::int64_t tasks = (blocks + per_task - 1) / per_task;
  ChunkPool::shared().run(tasks, [&](std::int64_t task) {
    thread_local Unpacked u;
    StoredRows stored;  // grouped rows as stored
    u.size_for(in, s);
    alignas(64) float c[kRows * 32];  // [kRows][32 tokens] f32
    const std::int64_t end = std::min(blocks, (task + 1) * per_task);
    for (std::int64_t b = task * per_task; b < end; ++b) {
      const std::int64_t r0 = b * kRows;
      const int rows = static_cast<int>(std::min<std::int64_t>(kRows, w.rows - r0));
      for (int r = 0; r < rows; ++r)
        unpack_row(w.type, stored.row(w, r0 + r), in, u.q.data() + r * in,
                   u.scale.data() + r * u.subs, u.constant.data() + r * u.subs);
      for (std::int64_t g = 0; g < packed.groups; g += kGroups) {
        const int groups = (g + 1) * 16 < n ? 2 : 1;  // the second group holds tokens
        block_for(rows, terms, groups, w.type)(u, packed, sums.data(), g, c);
        const std::int64_t t0 = g * 16, tokens = std::min<std::int64_t>(32, n - t0);
        for (std::int64_t t = 0; t < tokens; ++t) {
          float* dst = y + (t0 + t) * ldy + r0;
          for (int r = 0; r < rows; ++r) dst[r] = c[r * 32 + t];
        }
      }
    }
  });
}

}  // namespace neuron::backend::cpu
