#include "backend/cpu/gemm_bf16_avx2.hpp"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/simd.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

#define NEURON_AVX2 __attribute__((target("avx2,fma")))

constexpr int kRows = 6;                      // rows of W a panel: 6 x 2 accumulators, 2 x operands, 1 broadcast (of 16 registers)
constexpr int kGroup = 16;                    // tokens a group: two vectors of 8
constexpr std::int64_t kTaskRows = 8 * kRows;  // rows of W a pool task takes

// x transposed into groups of 16 tokens: [groups][in][16] f32, tokens past n zero.
struct Packed {
  std::vector<float> data;  // [groups, in, 16] f32
  std::int64_t groups = 0;

  void pack(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx) {
    groups = (n + kGroup - 1) / kGroup;
    data.assign(static_cast<std::size_t>(groups * in * kGroup), 0.0f);
    for (std::int64_t t = 0; t < n; ++t) {
      const float* src = x + t * ldx;
      float* dst = data.data() + (t / kGroup) * in * kGroup + t % kGroup;
      for (std::int64_t c = 0; c < in; ++c) dst[c * kGroup] = src[c];
    }
  }
  const float* group(std::int64_t g, std::int64_t in) const { return data.data() + g * in * kGroup; }
};

// `rows` rows of W (row stride ldw, in a multiple of 8) widened to f32: panel [rows][in].
NEURON_AVX2 void widen_rows(const std::uint16_t* w, std::int64_t ldw, std::int64_t rows, std::int64_t in, float* panel) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < in; c += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + r * ldw + c));
      _mm256_storeu_ps(panel + r * in + c, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
}

// A panel's R rows (f32, [R][in]) against G vectors of 8 tokens of a group
// (xs: [in][16]): c[r][t] = sum over the columns of panel[r] x[token t]. c: [R][16] f32.
// The unroll pragmas keep acc in registers: without them GCC 12 stored every
// accumulator to the stack each column (0.55x the speed).
template <int R, int G>
NEURON_AVX2 void block(const float* panel, std::int64_t in, const float* xs, float* c) {
  __m256 acc[R][G];  // [R rows][G vectors of 8 tokens] f32
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < in; ++k, xs += kGroup) {
    __m256 xv[G];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) xv[g] = _mm256_loadu_ps(xs + 8 * g);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_broadcast_ss(panel + r * in + k);
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) acc[r][g] = _mm256_fmadd_ps(wv, xv[g], acc[r][g]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(c + r * kGroup + 8 * g, acc[r][g]);
}

using BlockFn = void (*)(const float*, std::int64_t, const float*, float*);

template <int G, int... R>
constexpr std::array<BlockFn, kRows> block_table(std::integer_sequence<int, R...>) {
  return {&block<R + 1, G>...};
}

// The block kernel for `rows` (1..kRows) rows and `vectors` (1, 2) vectors of tokens.
BlockFn block_for(std::int64_t rows, int vectors) {
  using Seq = std::make_integer_sequence<int, kRows>;
  static constexpr std::array<std::array<BlockFn, kRows>, 2> fns{block_table<1>(Seq{}), block_table<2>(Seq{})};
  return fns[static_cast<std::size_t>(vectors - 1)][static_cast<std::size_t>(rows - 1)];
}

}  // namespace

bool gemm_bf16_avx2_fits(std::int64_t in) noexcept {
  return in > 0 && in % 8 == 0 && isa_supported(Isa::avx2);
}

void gemm_avx2_widened(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, std::int64_t out,
                       const WidenRows& widen, float* y, std::int64_t ldy) {
  NEURON_ASSERT(gemm_bf16_avx2_fits(in));
  if (n <= 0 || out <= 0) return;
  thread_local Packed mine;  // the calling thread's, reused between calls
  Packed& packed = mine;     // a reference, so the pool's threads read this one
  packed.pack(x, n, in, ldx);
  const std::int64_t tasks = (out + kTaskRows - 1) / kTaskRows;
  ChunkPool::shared().run(tasks, [&](std::int64_t task) {
    thread_local std::vector<float> panel;  // [kRows, in] f32: a panel of W widened
    panel.resize(static_cast<std::size_t>(kRows * in));
    alignas(32) float c[kRows * kGroup];  // [kRows][16 tokens] f32
    const std::int64_t end = std::min(out, (task + 1) * kTaskRows);
    for (std::int64_t r0 = task * kTaskRows; r0 < end; r0 += kRows) {
      const std::int64_t rows = std::min<std::int64_t>(kRows, end - r0);
      widen(r0, rows, panel.data());
      for (std::int64_t g = 0; g < packed.groups; ++g) {
        const std::int64_t t0 = g * kGroup, tokens = std::min<std::int64_t>(kGroup, n - t0);
        block_for(rows, tokens > 8 ? 2 : 1)(panel.data(), in, packed.group(g, in), c);
        for (std::int64_t t = 0; t < tokens; ++t) {
          float* dst = y + (t0 + t) * ldy + r0;
          for (std::int64_t r = 0; r < rows; ++r) dst[r] = c[r * kGroup + t];
        }
      }
    }
  });
}

void gemm_bf16_avx2(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, const std::uint16_t* w,
                    std::int64_t out, float* y, std::int64_t ldy) {
  const auto widen = [&](std::int64_t r0, std::int64_t rows, float* panel) {
    widen_rows(w + r0 * in, in, rows, in, panel);
  };
  gemm_avx2_widened(x, n, in, ldx, out, widen, y, ldy);
}

}  // namespace neuron::backend::cpu
