#include "backend/cpu/matmul_quant.hpp"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/matmul.hpp"
#include "quant/dequantize.hpp"
#include "tensor/dtype.hpp"

namespace neuron::backend::cpu {

namespace {

constexpr std::int64_t kTileBytes = 512 << 10;  // a tile's f32 copy, as matmul_bf16's
constexpr std::int64_t kTileRowAlign = 16;
constexpr std::int64_t kGemvChunkRows = 16;

float dot_scalar(const float* a, const float* b, std::int64_t n) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

__attribute__((target("avx2,fma"))) inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
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

__attribute__((target("avx2,fma"))) float q8_0_row_avx2(const std::byte* row, const float* x, std::int64_t cols) {
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < cols / quant::kQK8_0; ++b, row += quant::kQ8_0Bytes, x += quant::kQK8_0) {
    std::uint16_t dh;
    std::memcpy(&dh, row, 2);
    const std::byte* q = row + 2;
    __m256 s = _mm256_mul_ps(widen_i8x8(q), _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(widen_i8x8(q + 8), _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(widen_i8x8(q + 16), _mm256_loadu_ps(x + 16), s);
    s = _mm256_fmadd_ps(widen_i8x8(q + 24), _mm256_loadu_ps(x + 24), s);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_to_f32(dh)), s, acc);
  }
  return hsum8(acc);
}

bool use_avx2(Isa isa) { return isa != Isa::scalar; }  // every AVX-512 CPU has AVX2 + FMA

}  // namespace

void gemv_quant_rows(Isa isa, const QuantMatrix& w, const float* x, std::int64_t r0, std::int64_t r1, float* y) {
  const bool avx2 = use_avx2(isa);
  if (w.type == quant::GgmlType::q8_0) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::byte* row = w.data.data() + static_cast<std::size_t>(r) * w.row_bytes;
      y[r] = avx2 ? q8_0_row_avx2(row, x, w.cols) : q8_0_row_scalar(row, x, w.cols);
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

void gemv_quant(const QuantMatrix& w, const float* x, float* y) {
  const Isa isa = selected_isa();
  const std::int64_t chunks = (w.rows + kGemvChunkRows - 1) / kGemvChunkRows;
  ChunkPool::shared().run(chunks, [&](std::int64_t c) {
    const std::int64_t r0 = c * kGemvChunkRows;
    gemv_quant_rows(isa, w, x, r0, std::min(w.rows, r0 + kGemvChunkRows), y);
  });
}

void matmul_quant(const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y, std::int64_t ldy) {
  if (n <= 0 || w.rows <= 0) return;
  if (n == 1) return gemv_quant(w, x, y);
  init_blas_threads();
  const std::int64_t in = w.cols;
  const std::int64_t tile_rows = std::max(kTileRowAlign, kTileBytes / (in * 4) / kTileRowAlign * kTileRowAlign);
  const std::int64_t tiles = (w.rows + tile_rows - 1) / tile_rows;
  ChunkPool::shared().run(tiles, [&](std::int64_t t) {
    thread_local std::vector<float> scratch;  // [tile_rows, in] f32
    scratch.resize(static_cast<std::size_t>(tile_rows * in));
    const std::int64_t r0 = t * tile_rows, rows = std::min(tile_rows, w.rows - r0);
    for (std::int64_t r = 0; r < rows; ++r)
      quant::dequantize_row(w.type, w.data.data() + static_cast<std::size_t>(r0 + r) * w.row_bytes, scratch.data() + r * in, in);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(rows), static_cast<int>(in),
                1.0f, x, static_cast<int>(ldx), scratch.data(), static_cast<int>(in), 0.0f, y + r0, static_cast<int>(ldy));
  });
}

}  // namespace neuron::backend::cpu
