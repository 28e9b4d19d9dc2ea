#include "backend/cpu/packed_terms.hpp"

#include "backend/cpu/simd.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

// 32 columns of a token at a time, each pair of columns scattered to its row
// of the tile (rows 64 bytes apart).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void PackedTerms::pack(
    const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, int term_count) {
  NEURON_ASSERT(term_count >= 1 && term_count <= 3 && in % kTermBlockCols == 0);
  terms = term_count;
  groups = (n + 31) / 32 * 2;
  blocks = in / kTermBlockCols;
  data.assign(static_cast<std::size_t>(terms * groups * blocks * kTermTile), 0);
  const std::int64_t stride = term_stride();
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(64));  // byte offset of each column pair's tile row
  for (std::int64_t t = 0; t < n; ++t) {
    const float* row = x + t * ldx;
    std::uint16_t* group = data.data() + (t / 16) * blocks * kTermTile + (t % 16) * 2;
    for (std::int64_t b = 0; b < blocks; ++b) {
      __m512 left = _mm512_loadu_ps(row + b * kTermBlockCols),
             right = _mm512_loadu_ps(row + b * kTermBlockCols + 16);  // what is left to pack
      for (int term = 0; term < terms; ++term) {
        const __m256bh bl = bf16_term(left), br = bf16_term(right);
        const __m512i pairs = _mm512_inserti64x4(_mm512_castsi256_si512((__m256i)bl), (__m256i)br, 1);
        _mm512_i32scatter_epi32(group + term * stride + b * kTermTile, rows, pairs, 1);
      }
    }
  }
}

}  // namespace neuron::backend::cpu
