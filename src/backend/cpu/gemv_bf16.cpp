#include "backend/cpu/gemv_bf16.hpp"

#include <algorithm>

#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/simd.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

GemvOperand::GemvOperand(Isa isa, const float* x, std::int64_t n) : x_(x), n_(n) {
  if (isa != Isa::avx512_bf16) return;
  hi_.resize(static_cast<std::size_t>(n));
  lo_.resize(static_cast<std::size_t>(n));
  split_bf16_terms(x, n, hi_.data(), lo_.data());
}

namespace {

// Interleaved walk: four rows (AVX2: two) share each load of x; a row group's sums stay
// in registers. Software prefetch a little ahead on each row: with four row
// streams per thread the hardware prefetcher alone left ~15% of decode speed
// on the table (Sapphire Rapids). The sequential walk is the one-row loop
// each kernel ends with, unprefetched: one stream for the hardware prefetcher.
constexpr std::int64_t kRowGroup = 4;
// Elements ahead of the loads to prefetch each row (1 KiB).
constexpr std::int64_t kPrefetch = 512;

void rows_scalar(const std::uint16_t* w, std::int64_t ld, std::int64_t rows, const float* x, std::int64_t n, float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint16_t* wr = w + r * ld;
    float acc = 0.0f;
    for (std::int64_t c = 0; c < n; ++c) acc += bf16_to_f32(wr[c]) * x[c];
    y[r] = acc;
  }
}

__attribute__((target("avx2,fma"))) inline __m256 widen8(const std::uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// AVX2: four accumulators a row (columns 32 i + 8 k into the k-th), as
// llama.cpp's bf16 dot: with one, the sequential walk waited an FMA's
// latency every 8 weights. The interleaved walk takes R = 2 rows side by
// side (8 accumulators; four rows' 16 would leave no register for the
// weights), prefetched ahead; the sequential walk R = 1. Every row adds in
// the same order either way.
constexpr std::int64_t kRowGroupAvx2 = 2;

template <int R>
__attribute__((target("avx2,fma"))) void rows_block_avx2(const std::uint16_t* w, std::int64_t ld, const float* x,
                                                          std::int64_t n, float* y) {
  const std::int64_t quads = n & ~std::int64_t{31}, body = n & ~std::int64_t{7};
  __m256 acc[R][4];
  for (int k = 0; k < R; ++k)
    for (int j = 0; j < 4; ++j) acc[k][j] = _mm256_setzero_ps();
  for (std::int64_t c = 0; c < quads; c += 32) {
    if constexpr (R > 1)
      for (int k = 0; k < R; ++k) _mm_prefetch(reinterpret_cast<const char*>(w + k * ld + c + kPrefetch), _MM_HINT_T0);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256 xv = _mm256_loadu_ps(x + c + 8 * j);
      for (int k = 0; k < R; ++k) acc[k][j] = _mm256_fmadd_ps(widen8(w + k * ld + c + 8 * j), xv, acc[k][j]);
    }
  }
#pragma GCC unroll 3
  for (int j = 0; j < 3; ++j) {  // up to three chunks of 8 left: accumulators 0, 1, 2
    const std::int64_t c = quads + 8 * j;
    if (c >= body) break;
    const __m256 xv = _mm256_loadu_ps(x + c);
    for (int k = 0; k < R; ++k) acc[k][j] = _mm256_fmadd_ps(widen8(w + k * ld + c), xv, acc[k][j]);
  }
  for (int k = 0; k < R; ++k) {
    const std::uint16_t* wr = w + k * ld;
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(acc[k][0], acc[k][1]), _mm256_add_ps(acc[k][2], acc[k][3])));
    for (std::int64_t c = body; c < n; ++c) s += bf16_to_f32(wr[c]) * x[c];
    y[k] = s;
  }
}

void rows_avx2(const std::uint16_t* w, std::int64_t ld, std::int64_t rows, const float* x, std::int64_t n, float* y,
               std::int64_t grouped) {
  std::int64_t r = 0;
  for (; r + kRowGroupAvx2 <= grouped; r += kRowGroupAvx2) rows_block_avx2<kRowGroupAvx2>(w + r * ld, ld, x, n, y + r);
  for (; r < rows; ++r) rows_block_avx2<1>(w + r * ld, ld, x, n, y + r);
}

#define NEURON_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

NEURON_AVX512 inline __m512 widen16(const std::uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Each row's sum runs in two accumulators, the even and the odd 16 columns
// of every 32, added at the end: one accumulator made a row wait an FMA's
// latency every 16 weights, which held one row at a time (the sequential
// walk) to ~27 GB/s a Zen 4 core. Both walks use the same two, so they
// still add each row in the same order.
NEURON_AVX512 void rows_avx512(const std::uint16_t* w, std::int64_t ld, std::int64_t rows, const float* x,
                               std::int64_t n, float* y, std::int64_t grouped) {
  const std::int64_t pairs = n & ~std::int64_t{31}, body = n & ~std::int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - body)) - 1u);
  std::int64_t r = 0;
  for (; r + kRowGroup <= grouped; r += kRowGroup) {
    const std::uint16_t* wr[kRowGroup] = {w + r * ld, w + (r + 1) * ld, w + (r + 2) * ld, w + (r + 3) * ld};
    __m512 even[kRowGroup], odd[kRowGroup];
    for (int k = 0; k < kRowGroup; ++k) even[k] = odd[k] = _mm512_setzero_ps();
    for (std::int64_t c = 0; c < pairs; c += 32) {
      for (int k = 0; k < kRowGroup; ++k)
        _mm_prefetch(reinterpret_cast<const char*>(wr[k] + c + kPrefetch), _MM_HINT_T0);
      const __m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
      for (int k = 0; k < kRowGroup; ++k) {
        even[k] = _mm512_fmadd_ps(widen16(wr[k] + c, 0xffff), x0, even[k]);
        odd[k] = _mm512_fmadd_ps(widen16(wr[k] + c + 16, 0xffff), x1, odd[k]);
      }
    }
    if (pairs < body) {
      const __m512 xv = _mm512_loadu_ps(x + pairs);
      for (int k = 0; k < kRowGroup; ++k) even[k] = _mm512_fmadd_ps(widen16(wr[k] + pairs, 0xffff), xv, even[k]);
    }
    if (tail) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + body);
      for (int k = 0; k < kRowGroup; ++k) odd[k] = _mm512_fmadd_ps(widen16(wr[k] + body, tail), xv, odd[k]);
    }
    for (int k = 0; k < kRowGroup; ++k) y[r + k] = _mm512_reduce_add_ps(_mm512_add_ps(even[k], odd[k]));
  }
  for (; r < rows; ++r) {
    const std::uint16_t* wr = w + r * ld;
    __m512 even = _mm512_setzero_ps(), odd = even;
    for (std::int64_t c = 0; c < pairs; c += 32) {
      even = _mm512_fmadd_ps(widen16(wr + c, 0xffff), _mm512_loadu_ps(x + c), even);
      odd = _mm512_fmadd_ps(widen16(wr + c + 16, 0xffff), _mm512_loadu_ps(x + c + 16), odd);
    }
    if (pairs < body) even = _mm512_fmadd_ps(widen16(wr + pairs, 0xffff), _mm512_loadu_ps(x + pairs), even);
    if (tail) odd = _mm512_fmadd_ps(widen16(wr + body, tail), _mm512_maskz_loadu_ps(tail, x + body), odd);
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(even, odd));
  }
}

#define NEURON_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

NEURON_AVX512_BF16 inline __m512bh load_bf16(const std::uint16_t* p, __mmask32 m) {
  return (__m512bh)_mm512_maskz_loadu_epi16(m, p);
}

// acc += w . hi + w . lo over 32 (masked) elements.
NEURON_AVX512_BF16 inline __m512 dot2(__m512 acc, __m512bh w, __m512bh hi, __m512bh lo) {
  return _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc, w, hi), w, lo);
}

// w . x = w . hi + w . lo: each vdpbf16ps multiplies 32 bf16 pairs exactly and
// accumulates in f32, so one weight load feeds two dot products and no widening.
NEURON_AVX512_BF16 void rows_avx512_bf16(const std::uint16_t* w, std::int64_t ld, std::int64_t rows,
                                         const std::uint16_t* hi, const std::uint16_t* lo, std::int64_t n, float* y,
                                         std::int64_t grouped) {
  const std::int64_t body = n & ~std::int64_t{31};
  const __mmask32 all = ~__mmask32{0};
  const __mmask32 tail = static_cast<__mmask32>((std::uint64_t{1} << (n - body)) - 1u);
  std::int64_t r = 0;
  for (; r + kRowGroup <= grouped; r += kRowGroup) {
    const std::uint16_t* w0 = w + r * ld;
    const std::uint16_t* w1 = w0 + ld;
    const std::uint16_t* w2 = w1 + ld;
    const std::uint16_t* w3 = w2 + ld;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (std::int64_t c = 0; c < n; c += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(w0 + c + kPrefetch), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w1 + c + kPrefetch), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w2 + c + kPrefetch), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w3 + c + kPrefetch), _MM_HINT_T0);
      const __mmask32 m = c < body ? all : tail;
      const __m512bh h = load_bf16(hi + c, m), l = load_bf16(lo + c, m);
      a0 = dot2(a0, load_bf16(w0 + c, m), h, l);
      a1 = dot2(a1, load_bf16(w1 + c, m), h, l);
      a2 = dot2(a2, load_bf16(w2 + c, m), h, l);
      a3 = dot2(a3, load_bf16(w3 + c, m), h, l);
    }
    y[r] = _mm512_reduce_add_ps(a0);
    y[r + 1] = _mm512_reduce_add_ps(a1);
    y[r + 2] = _mm512_reduce_add_ps(a2);
    y[r + 3] = _mm512_reduce_add_ps(a3);
  }
  for (; r < rows; ++r) {
    const std::uint16_t* wr = w + r * ld;
    __m512 a = _mm512_setzero_ps();
    for (std::int64_t c = 0; c < n; c += 32) {
      const __mmask32 m = c < body ? all : tail;
      a = dot2(a, load_bf16(wr + c, m), load_bf16(hi + c, m), load_bf16(lo + c, m));
    }
    y[r] = _mm512_reduce_add_ps(a);
  }
}

}  // namespace

void gemv_bf16_rows(Isa isa, const std::uint16_t* w, std::int64_t ld, std::int64_t rows, const GemvOperand& x,
                    float* y, RowWalk walk) {
  const std::int64_t grouped = walk == RowWalk::interleaved ? rows : 0;  // rows the four-row loop takes
  switch (isa) {
    case Isa::scalar: return rows_scalar(w, ld, rows, x.f32(), x.size(), y);
    case Isa::avx2: return rows_avx2(w, ld, rows, x.f32(), x.size(), y, grouped);
    case Isa::avx512: return rows_avx512(w, ld, rows, x.f32(), x.size(), y, grouped);
    case Isa::avx512_bf16:
      NEURON_ASSERT(x.size() == 0 || x.hi() != nullptr);  // operand prepared for this kernel
      return rows_avx512_bf16(w, ld, rows, x.hi(), x.lo(), x.size(), y, grouped);
  }
}

void gemv_bf16(const std::uint16_t* w, std::int64_t rows, std::int64_t cols, const float* x, float* y) {
  const DecodeKernel kernel = decode_kernel(quant::GgmlType::bf16);
  const Isa isa = kernel.isa;  // (not structured bindings: lambdas capture them only from clang 16)
  const RowWalk walk = kernel.walk;
  const GemvOperand operand(isa, x, cols);
  // Below ~2 MiB of weights, waking a second thread costs more than it saves.
  if (rows * cols < (std::int64_t{1} << 20)) return gemv_bf16_rows(isa, w, cols, rows, operand, y, walk);
  const std::int64_t chunk_rows = ChunkPool::shared().chunk_rows(rows, 2 * cols, kRowGroup);
  const std::int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  ChunkPool::shared().run(chunks, [&](std::int64_t c) {
    const std::int64_t begin = c * chunk_rows, n = std::min(chunk_rows, rows - begin);
    gemv_bf16_rows(isa, w + begin * cols, cols, n, operand, y + begin, walk);
  });
}

}  // namespace neuron::backend::cpu
