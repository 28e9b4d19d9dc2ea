#include "backend/cpu/matmul_quant.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/simd.hpp"
#include "backend/cpu/activations.hpp"
#include "backend/cpu/gemm_bf16_amx.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/gemm_bf16_few.hpp"
#include "backend/cpu/gemm_bf16_pairs.hpp"
#include "backend/cpu/gemm_bf16_avx2.hpp"
#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/cpu/gemm_quant_grouped.hpp"
#include "backend/cpu/gemm_quant_pairs.hpp"
#include "backend/cpu/matmul.hpp"
#include "quant/dequantize.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

constexpr std::int64_t kTileBytes = 512 << 10;  // a tile's f32 copy, as matmul_bf16's
constexpr std::int64_t kTileRowAlign = 16;
constexpr std::int64_t kGemvChunkRows = 16;
constexpr std::int64_t kAmxChunkElems = std::int64_t{4} << 20;  // weights of a row chunk on the AMX path (8 MiB a term)

float dot_scalar(const float* a, const float* b, std::int64_t n) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, std::int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  float s = hsum8(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Q8_0 straight from the blocks: per block d * sum(q_i x_i).
float q8_0_row_scalar(const std::byte* row, const float* x, std::int64_t cols) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / quant::kQK8_0; ++b, row += quant::kQ8_0Bytes, x += quant::kQK8_0) {
    std::uint16_t dh;
    std::memcpy(&dh, row, 2);
    float s = 0.0f;
    for (int j = 0; j < quant::kQK8_0; ++j) s += static_cast<float>(static_cast<std::int8_t>(row[2 + j])) * x[j];
    acc += f16_to_f32(dh) * s;
  }
  return acc;
}

__attribute__((target("avx2,fma"))) inline __m256 widen_i8x8(const std::byte* p) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));  // 8 bytes, upper half zero
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

__attribute__((target("avx2,fma,f16c"))) float q8_0_row_avx2(const std::byte* row, const float* x, std::int64_t cols) {
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < cols / quant::kQK8_0; ++b, row += quant::kQ8_0Bytes, x += quant::kQK8_0) {
    std::uint16_t dh;
    std::memcpy(&dh, row, 2);
    const std::byte* q = row + 2;
    __m256 s = _mm256_mul_ps(widen_i8x8(q), _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(widen_i8x8(q + 8), _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(widen_i8x8(q + 16), _mm256_loadu_ps(x + 16), s);
    s = _mm256_fmadd_ps(widen_i8x8(q + 24), _mm256_loadu_ps(x + 24), s);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(dh)), s, acc);
  }
  return hsum8(acc);
}

// Q8_0 on 16 lanes: a block is two int8x16 -> f32x16 products.
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) float q8_0_row_avx512(const std::byte* row, const float* x,
                                                                                  std::int64_t cols) {
  __m512 acc = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < cols / quant::kQK8_0; ++b, row += quant::kQ8_0Bytes, x += quant::kQK8_0) {
    std::uint16_t dh;
    std::memcpy(&dh, row, 2);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 18));
    __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), _mm512_loadu_ps(x));
    s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), _mm512_loadu_ps(x + 16), s);
    acc = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(dh)), s, acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// Sum over 8 groups of 8 int8/uint8 values in buf times x, each group scaled by scale[g] (broadcast).
__attribute__((target("avx2,fma"))) inline __m256 int8_groups(const std::int8_t* buf, const float* x, int groups,
                                                              const float* scale, int group_len, __m256 acc) {
  for (int g = 0; g < groups; ++g) {
    __m256 s = _mm256_setzero_ps();
    for (int k = 0; k < group_len; k += 8) {
      const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(buf + g * group_len + k));
      s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), _mm256_loadu_ps(x + g * group_len + k), s);
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale[g]), s, acc);
  }
  return acc;
}

// Q4_K from the blocks: per 32-element sub-block d*sc * sum(q x) - dmin*m * sum(x).
__attribute__((target("avx2,fma,f16c"))) float q4_k_row_avx2(const std::byte* row, const float* x, std::int64_t cols) {
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0F);
  alignas(32) std::int8_t buf[64];
  for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b, row += quant::kQ4_KBytes, x += quant::kQK_K) {
    std::uint16_t dh, mh;
    std::memcpy(&dh, row, 2);
    std::memcpy(&mh, row + 2, 2);
    const float d = _cvtsh_ss(dh), dmin = _cvtsh_ss(mh);
    const auto* scales = reinterpret_cast<const std::uint8_t*>(row + 4);
    for (int j = 0; j < 4; ++j) {
      float sc[2], mn[2];
      for (int h = 0; h < 2; ++h) {
        const int is = 2 * j + h;
        std::uint8_t s6, m6;
        if (is < 4) {
          s6 = scales[is] & 63;
          m6 = scales[is + 4] & 63;
        } else {
          s6 = static_cast<std::uint8_t>((scales[is + 4] & 0xF) | ((scales[is - 4] >> 6) << 4));
          m6 = static_cast<std::uint8_t>((scales[is + 4] >> 4) | ((scales[is] >> 6) << 4));
        }
        sc[h] = d * s6;
        mn[h] = dmin * m6;
      }
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16 + 32 * j));
      _mm256_store_si256(reinterpret_cast<__m256i*>(buf), _mm256_and_si256(q, low));
      _mm256_store_si256(reinterpret_cast<__m256i*>(buf + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), low));
      const float* xs = x + 64 * j;
      acc = int8_groups(buf, xs, 2, sc, 32, acc);
      for (int h = 0; h < 2; ++h) {
        const float* xh = xs + 32 * h;
        const __m256 sx = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xh), _mm256_loadu_ps(xh + 8)),
                                        _mm256_add_ps(_mm256_loadu_ps(xh + 16), _mm256_loadu_ps(xh + 24)));
        accm = _mm256_fmadd_ps(_mm256_set1_ps(mn[h]), sx, accm);
      }
    }
  }
  return hsum8(_mm256_sub_ps(acc, accm));
}

// Q6_K from the blocks: per 16-element group d*sc * sum(q x), q in [-32, 31].
__attribute__((target("avx2,fma,f16c"))) float q6_k_row_avx2(const std::byte* row, const float* x, std::int64_t cols) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03), off = _mm256_set1_epi8(32);
  alignas(32) std::int8_t buf[128];
  for (std::int64_t b = 0; b < cols / quant::kQK_K; ++b, row += quant::kQ6_KBytes, x += quant::kQK_K) {
    std::uint16_t dh;
    std::memcpy(&dh, row + 208, 2);
    const float d = _cvtsh_ss(dh);
    const auto* sc = reinterpret_cast<const std::int8_t*>(row + 192);
    for (int n = 0; n < 2; ++n) {
      const std::byte* ql = row + 64 * n;
      const std::byte* qh = row + 128 + 32 * n;
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      // The 2 high bits of each value, moved up to bits 4-5 (16-bit shifts; the masks drop what crosses bytes).
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(h, m2), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4);
      const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4);
      const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4);
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, m4), h0);
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, m4), h1);
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2);
      const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3);
      _mm256_store_si256(reinterpret_cast<__m256i*>(buf), _mm256_sub_epi8(q1, off));
      _mm256_store_si256(reinterpret_cast<__m256i*>(buf + 32), _mm256_sub_epi8(q2, off));
      _mm256_store_si256(reinterpret_cast<__m256i*>(buf + 64), _mm256_sub_epi8(q3, off));
      _mm256_store_si256(reinterpret_cast<__m256i*>(buf + 96), _mm256_sub_epi8(q4, off));
      float scale[8];
      for (int g = 0; g < 8; ++g) scale[g] = d * static_cast<float>(sc[8 * n + g]);
      acc = int8_groups(buf, x + 128 * n, 8, scale, 16, acc);
    }
  }
  return hsum8(acc);
}

// Every AVX-512 CPU has AVX2 + FMA + F16C (isa_supported checks F16C for
// avx2, which the fused kernels use to read f16 scales).
bool use_avx2(Isa isa) { return isa != Isa::scalar; }

}  // namespace

void gemv_quant_rows(Isa isa, const QuantMatrix& w, const float* x, std::int64_t r0, std::int64_t r1, float* y) {
  NEURON_ASSERT(w.grouped_rows == 0);
  const bool avx2 = use_avx2(isa);
  const bool avx512 = avx2 && (isa == Isa::avx512 || isa == Isa::avx512_bf16);
  if (w.type == quant::GgmlType::q8_0) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::byte* row = w.data.data() + static_cast<std::size_t>(r) * w.row_bytes;
      y[r] = avx512 ? q8_0_row_avx512(row, x, w.cols)
             : avx2 ? q8_0_row_avx2(row, x, w.cols)
                    : q8_0_row_scalar(row, x, w.cols);
    }
    return;
  }
  if (avx2 && (w.type == quant::GgmlType::q4_k || w.type == quant::GgmlType::q6_k)) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::byte* row = w.data.data() + static_cast<std::size_t>(r) * w.row_bytes;
      y[r] = w.type == quant::GgmlType::q4_k ? q4_k_row_avx2(row, x, w.cols) : q6_k_row_avx2(row, x, w.cols);
    }
    return;
  }
  thread_local std::vector<float> scratch;  // [cols] one dequantized row, L1/L2-resident
  scratch.resize(static_cast<std::size_t>(w.cols));
  for (std::int64_t r = r0; r < r1; ++r) {
    quant::dequantize_row(w.type, w.data.data() + static_cast<std::size_t>(r) * w.row_bytes, scratch.data(), w.cols);
    y[r] = avx2 ? dot_avx2(scratch.data(), x, w.cols) : dot_scalar(scratch.data(), x, w.cols);
  }
}

namespace {

// Rows [r0, r1) of W dequantized and split into two bf16 terms: hi = bf16(w),
// lo = bf16(w - hi), each [r1 - r0, cols] at hi / lo.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void split_rows(const QuantMatrix& w, std::int64_t r0,
                                                                          std::int64_t r1, std::uint16_t* hi,
                                                                          std::uint16_t* lo) {
  thread_local std::vector<float> row;  // [cols] one dequantized row
  StoredRows stored;  // grouped rows as stored
  row.resize(static_cast<std::size_t>(w.cols));
  for (std::int64_t r = r0; r < r1; ++r) {
    quant::dequantize_row(w.type, stored.row(w, r), row.data(), w.cols);
    std::uint16_t* h = hi + (r - r0) * w.cols;
    std::uint16_t* l = lo + (r - r0) * w.cols;
    for (std::int64_t c = 0; c < w.cols; c += 16) {  // cols is a multiple of 32 (gemm_bf16_amx_fits)
      __m512 rest = _mm512_loadu_ps(row.data() + c);
      const __m256bh top = bf16_term(rest);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + c), reinterpret_cast<__m256i>(top));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(l + c), reinterpret_cast<__m256i>(bf16_term(rest)));
    }
  }
}

// The first `rows` rows (a multiple of kAmxRows) of a prefill product on AMX:
// row chunks of W dequantized and split into two bf16 terms over the pool,
// then multiplied on the tiles (gemm_bf16_amx with its low term). Each weight
// is within 2^-17 of the dequantized one, so the product stays within 1e-5
// of the f32 one, at the tile unit's speed instead of sgemm's.
void matmul_quant_amx(const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, std::int64_t rows,
                      float* y, std::int64_t ldy) {
  const std::int64_t in = w.cols;
  const std::int64_t chunk = std::max(kAmxRows, kAmxChunkElems / in / kAmxRows * kAmxRows);
  thread_local std::vector<std::uint16_t> mine_hi, mine_lo;  // [chunk, in] bf16 each: a row chunk's two terms
  mine_hi.resize(static_cast<std::size_t>(chunk * in));
  mine_lo.resize(static_cast<std::size_t>(chunk * in));
  std::uint16_t* hi = mine_hi.data();  // the calling thread's, which the pool's threads fill
  std::uint16_t* lo = mine_lo.data();
  for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const std::int64_t k = std::min(chunk, rows - r0);
    ChunkPool::shared().run((k + kGemvChunkRows - 1) / kGemvChunkRows, [&](std::int64_t t) {
      const std::int64_t a = t * kGemvChunkRows, b = std::min(k, a + kGemvChunkRows);
      split_rows(w, r0 + a, r0 + b, hi + a * in, lo + a * in);
    });
    gemm_bf16_amx(x, n, in, ldx, hi, k, y + r0, ldy, lo);
  }
}

}  // namespace

void gemv_quant(const QuantMatrix& w, const float* x, float* y) {
  const Isa isa = selected_isa();
  const std::int64_t chunks = (w.rows + kGemvChunkRows - 1) / kGemvChunkRows;
  ChunkPool::shared().run(chunks, [&](std::int64_t c) {
    const std::int64_t r0 = c * kGemvChunkRows;
    gemv_quant_rows(isa, w, x, r0, std::min(w.rows, r0 + kGemvChunkRows), y);
  });
}

bool avx2_int8_products(quant::GgmlType type, std::int64_t cols) {
  const Isa isa = selected_isa();
  const bool k_quant = type == quant::GgmlType::q4_k || type == quant::GgmlType::q5_k || type == quant::GgmlType::q6_k;
  return k_quant && int8_quant_products(cpu_activations()) && gemm_quant_few_int8(isa, type) &&
         cols % quant::kQK_K == 0 && int8_kernels(isa) != Int8Kernels::avx512_vnni &&
         !gemm_quant_pairs_fits(type, cols) && !amx_bf16_usable();
}

namespace {

constexpr std::int64_t kSlabRows = 64;  // rows of a grouped matrix ungrouped at a time for other kernels

// The product on slabs of w's rows ungrouped (each a plain QuantMatrix).
void matmul_quant_ungrouped(const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y,
                            std::int64_t ldy) {
  QuantMatrix slab;
  slab.type = w.type;
  slab.cols = w.cols;
  slab.row_bytes = w.row_bytes;
  for (std::int64_t r0 = 0; r0 < w.rows; r0 += kSlabRows) {
    slab.rows = std::min(kSlabRows, w.rows - r0);
    slab.data.resize(static_cast<std::size_t>(slab.rows) * w.row_bytes);
    ungroup_rows(w, r0, r0 + slab.rows, slab.data.data());
    matmul_quant(x, n, ldx, slab, y + r0, ldy);
  }
}

}  // namespace

void matmul_quant_avx2(const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y,
                       std::int64_t ldy) {
  const std::int64_t in = w.cols;
  gemm_avx2_widened(x, n, in, ldx, w.rows,
                    [&](std::int64_t r0, std::int64_t rows, float* panel) {
                      StoredRows stored;  // grouped rows as stored
                      for (std::int64_t r = 0; r < rows; ++r)
                        quant::dequantize_row(w.type, stored.row(w, r0 + r), panel + r * in, in);
                    },
                    y, ldy);
}

void matmul_quant(const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y, std::int64_t ldy) {
  if (n <= 0 || w.rows <= 0) return;
  // With one bf16 term of x (a reduced activation level), the pairs kernel
  // beats the few-token ones from kPairsTokensMin tokens (batched decode).
  const bool one_term = cpu_activations() != Activations::f32;
  const bool pairs = gemm_quant_pairs_fits(w.type, w.cols) && !amx_bf16_usable();
  const Isa isa = selected_isa();
  const bool int8 = int8_quant_products(cpu_activations()) && gemm_quant_few_int8(isa, w.type) &&
                    w.cols % quant::kQK_K == 0;
  // The AVX2 int8 kernels share a row's unpacked quants between tokens: on a
  // CPU without AVX-512 BF16 or AMX they take the K-quants' prefill too
  // (ahead of sgemm there; Q8_0's and Q4_0's behind it, bench/CPU.md).
  if (avx2_int8_products(w.type, w.cols)) return gemm_quant_few(isa, x, n, ldx, w, y, ldy);
  const bool few = n < kFewTokensMax && (gemm_quant_few_supported(isa, w.type) || int8) &&
                   !(pairs && one_term && n >= kPairsTokensMin);
  // Grouped rows: the int8 kernels, or the prefill paths below, which read a
  // row at a time (StoredRows); the f32 few-token kernels and gemv_quant read
  // rows in place, so without int8 products they take the rows ungrouped in slabs.
  if (w.grouped_rows > 0 && !int8 && (few || n == 1)) return matmul_quant_ungrouped(x, n, ldx, w, y, ldy);
  if (few) return gemm_quant_few(isa, x, n, ldx, w, y, ldy);
  if (n == 1) return gemv_quant(w, x, y);
  const std::int64_t in = w.cols;
  // At the AVX2 level the rows are dequantized a panel at a time straight into bf16's prefill kernel
  // (gemm_bf16_avx2.hpp) rather than into tiles that sgemm packs again (bench/CPU.md, 2026-12-07:
  // Q8_0 prefill 1.03-1.08x on a Zen 3).
  if (selected_isa() == Isa::avx2 && gemm_bf16_avx2_fits(in)) return matmul_quant_avx2(x, n, ldx, w, y, ldy);
  std::int64_t first = 0;  // rows below it are done
  if (gemm_bf16_amx_fits(in, w.rows) && isa_supported(Isa::avx512_bf16)) {
    first = w.rows / kAmxRows * kAmxRows;
    matmul_quant_amx(x, n, ldx, w, first, y, ldy);
    if (first == w.rows) return;
  }
  if (first == 0 && gemm_quant_pairs_fits(w.type, in)) return gemm_quant_pairs(x, n, ldx, w, y, ldy, one_term ? 1 : 2);
  init_blas_threads();
  const std::int64_t tile_rows = std::max(kTileRowAlign, kTileBytes / (in * 4) / kTileRowAlign * kTileRowAlign);
  const std::int64_t tiles = (w.rows - first + tile_rows - 1) / tile_rows;
  ChunkPool::shared().run(tiles, [&](std::int64_t t) {
    thread_local std::vector<float> scratch;  // [tile_rows, in] f32
    StoredRows stored;  // grouped rows as stored
    scratch.resize(static_cast<std::size_t>(tile_rows * in));
    const std::int64_t r0 = first + t * tile_rows, rows = std::min(tile_rows, w.rows - r0);
    for (std::int64_t r = 0; r < rows; ++r)
      quant::dequantize_row(w.type, stored.row(w, r0 + r), scratch.data() + r * in, in);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(rows), static_cast<int>(in),
                1.0f, x, static_cast<int>(ldx), scratch.data(), static_cast<int>(in), 0.0f, y + r0, static_cast<int>(ldy));
  });
}

}  // namespace neuron::backend::cpu
