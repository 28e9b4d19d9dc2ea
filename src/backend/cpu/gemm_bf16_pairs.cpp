#include "backend/cpu/gemm_bf16_pairs.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/packed_terms.hpp"
#include "backend/cpu/simd.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

#define NEURON_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

constexpr int kRows = 12;    // rows of W a block: 2 x 12 accumulators, 4 x operands, 1 broadcast (of 32 registers)
constexpr int kGroups = 2;   // token groups of 16 a block meets at once (one for a last group alone)
constexpr std::int64_t kChunkBytes = 256 << 10;  // W bytes a pool task takes, at least

// Rows [0, R) of W (row stride in) against token groups [g, g + G) of x's first T terms:
// c[r][t] = sum over columns of w[r, col] x[token t of the groups, col]. c: [R][32] f32.
template <int R, int T, int G>
NEURON_AVX512_BF16 void block(const std::uint16_t* w, std::int64_t in, const PackedTerms& x, std::int64_t g,
                              float* c) {
  __m512 acc[R][G];  // [R rows][G groups of 16 tokens] f32
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < G; ++q) acc[r][q] = _mm512_setzero_ps();
  const std::uint16_t* xs[T][G];  // where each term's group starts: column pair c at + 32 c
  for (int t = 0; t < T; ++t)
    for (int q = 0; q < G; ++q) xs[t][q] = x.group_start(t, g + q);
  const std::int64_t pairs = in / 2;
  for (std::int64_t p = 0; p < pairs; ++p) {
    __m512bh xv[T][G];
    for (int t = 0; t < T; ++t)
      for (int q = 0; q < G; ++q) xv[t][q] = (__m512bh)_mm512_loadu_si512(xs[t][q] + p * 32);
    for (int r = 0; r < R; ++r) {
      std::int32_t pair;
      std::memcpy(&pair, w + r * in + 2 * p, 4);
      const __m512bh wv = (__m512bh)_mm512_set1_epi32(pair);
      for (int t = 0; t < T; ++t)
        for (int q = 0; q < G; ++q) acc[r][q] = _mm512_dpbf16_ps(acc[r][q], xv[t][q], wv);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < G; ++q) _mm512_storeu_ps(c + r * 32 + q * 16, acc[r][q]);
}

using BlockFn = void (*)(const std::uint16_t*, std::int64_t, const PackedTerms&, std::int64_t, float*);

template <int T, int G, int... R>
constexpr std::array<BlockFn, kRows> block_table(std::integer_sequence<int, R...>) {
  return {&block<R + 1, T, G>...};
}

// The block kernel for `rows` (1..kRows) rows, `terms` terms and `groups` (1, 2) token groups.
BlockFn block_for(int rows, int terms, int groups) {
  using Seq = std::make_integer_sequence<int, kRows>;
  static constexpr std::array<std::array<BlockFn, kRows>, 4> fns{block_table<1, 1>(Seq{}), block_table<1, 2>(Seq{}),
                                                                 block_table<2, 1>(Seq{}), block_table<2, 2>(Seq{})};
  return fns[static_cast<std::size_t>((terms - 1) * 2 + groups - 1)][static_cast<std::size_t>(rows - 1)];
}

}  // namespace

bool gemm_bf16_pairs_fits(std::int64_t in) noexcept {
  return in > 0 && in % kTermBlockCols == 0 && isa_supported(Isa::avx512_bf16) &&
         (selected_isa() == Isa::avx512 || selected_isa() == Isa::avx512_bf16) &&
         (!isa_forced() || selected_isa() == Isa::avx512_bf16);
}

void gemm_bf16_pairs(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, const std::uint16_t* w,
                     std::int64_t out, float* y, std::int64_t ldy, int terms) {
  NEURON_ASSERT(gemm_bf16_pairs_fits(in) && (terms == 1 || terms == 2));
  if (n <= 0 || out <= 0) return;
  thread_local PackedTerms mine;  // the calling thread's, reused between calls
  PackedTerms& packed = mine;     // a reference, so the pool's threads read this one
  packed.pack(x, n, in, ldx, terms);
  const std::int64_t blocks = (out + kRows - 1) / kRows;
  const std::int64_t per_task = std::max<std::int64_t>(1, kChunkBytes / (kRows * in * 2));
  const std::int64_t tasks = (blocks + per_task - 1) / per_task;
  ChunkPool::shared().run(tasks, [&](std::int64_t task) {
    alignas(64) float c[kRows * 32];  // [kRows][32 tokens] f32
    const std::int64_t end = std::min(blocks, (task + 1) * per_task);
    for (std::int64_t b = task * per_task; b < end; ++b) {
      const std::int64_t r0 = b * kRows;
      const int rows = static_cast<int>(std::min<std::int64_t>(kRows, out - r0));
      for (std::int64_t g = 0; g < packed.groups; g += kGroups) {
        const int groups = (g + 1) * 16 < n ? 2 : 1;  // the second group holds tokens
        block_for(rows, terms, groups)(w + r0 * in, in, packed, g, c);
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
