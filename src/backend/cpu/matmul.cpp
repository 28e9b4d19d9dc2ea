#include "backend/cpu/matmul.hpp"

#include <cblas.h>
#include "backend/cpu/simd.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

#include "backend/cpu/activations.hpp"
#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/gemm_bf16_amx.hpp"
#include "backend/cpu/gemm_bf16_avx2.hpp"
#include "backend/cpu/gemm_bf16_few.hpp"
#include "backend/cpu/gemm_bf16_pairs.hpp"
#include "backend/cpu/gemv_bf16.hpp"
#include "backend/cpu/isa.hpp"
#include "tensor/dtype.hpp"

namespace neuron::backend::cpu {

namespace {

// A tile's f32 copy: about 512 KiB, a quarter of this machine's L2, so the
// sgemm streams it from cache while the next tile's bf16 arrives.
constexpr std::int64_t kTileBytes = 512 << 10;
constexpr std::int64_t kTileRowAlign = 16;

__attribute__((target("avx512f,avx512bw,avx512vl"))) void widen_avx512(const std::uint16_t* src, float* dst,
                                                                       std::int64_t count) {
  std::int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
  for (; i < count; ++i) dst[i] = neuron::bf16_to_f32(src[i]);
}

}  // namespace

void widen_bf16(const std::uint16_t* src, float* dst, std::int64_t count) {
  if (selected_isa() == Isa::avx512 || selected_isa() == Isa::avx512_bf16) return widen_avx512(src, dst, count);
  for (std::int64_t i = 0; i < count; ++i) dst[i] = neuron::bf16_to_f32(src[i]);
}

void init_blas_threads() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void matmul_bf16(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, const std::uint16_t* w,
                 std::int64_t out, float* y, std::int64_t ldy) {
  if (n <= 0 || out <= 0) return;
  if (n == 1) return gemv_bf16(w, out, in, x, y);
  const bool pairs = gemm_bf16_pairs_fits(in), amx = gemm_bf16_amx_fits(in, out);
  const bool avx2 = selected_isa() == Isa::avx2 && gemm_bf16_avx2_fits(in);
  const int terms = bf16_float_products(cpu_activations()) ? 1 : 2;
  const std::int64_t few_max = pairs && !amx ? kPairsTokensMin : avx2 ? kAvx2TokensMin : kFewTokensMax;
  if (n < few_max) return gemm_bf16_few(x, n, in, ldx, w, out, y, ldy);
  if (avx2) return gemm_bf16_avx2(x, n, in, ldx, w, out, y, ldy);
  if (amx) {
    gemm_bf16_amx(x, n, in, ldx, w, out, y, ldy);
    const std::int64_t done = out / kAmxRows * kAmxRows;  // the rest below
    if (done == out) return;
    w += done * in;
    y += done;
    out -= done;
  }
  if (pairs) return gemm_bf16_pairs(x, n, in, ldx, w, out, y, ldy, terms);
  init_blas_threads();
  const std::int64_t tile_rows =
      std::max(kTileRowAlign, kTileBytes / (in * 4) / kTileRowAlign * kTileRowAlign);
  const std::int64_t tiles = (out + tile_rows - 1) / tile_rows;
  ChunkPool::shared().run(tiles, [&](std::int64_t t) {
    thread_local std::vector<float> scratch;  // [tile_rows, in] f32
    scratch.resize(static_cast<std::size_t>(tile_rows * in));
    const std::int64_t r0 = t * tile_rows, rows = std::min(tile_rows, out - r0);
    widen_bf16(w + r0 * in, scratch.data(), rows * in);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(rows),
                static_cast<int>(in), 1.0f, x, static_cast<int>(ldx), scratch.data(), static_cast<int>(in), 0.0f,
                y + r0, static_cast<int>(ldy));
  });
}

}  // namespace neuron::backend::cpu
