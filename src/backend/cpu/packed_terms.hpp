#pragma once
// X (f32 activations of a multi-token product) split into bf16 terms and
// packed in the pair-interleaved layout that bf16 dot products read: the
// AMX tiles (gemm_bf16_amx) and vdpbf16ps (gemm_bf16_pairs) alike.
//
// x = hi + mid + lo: each term is the bf16 rounding (to nearest even) of what
// the terms before it left, so the first holds x's leading 8 mantissa bits,
// two terms leave less than 2^-17 |x|, and three hold every bit of an f32.
// A product of a bf16 weight with a term is exact in f32.
//
// Layout: [terms][token groups of 16][column blocks of 32] tiles, a tile
// [16 column pairs][16 tokens][2] bf16: one 64-byte row holds a column pair
// (2c, 2c + 1) of 16 tokens, which is one operand of vdpbf16ps and one row of
// a TDPBF16PS tile. Within a (term, group) the column pairs follow each other
// 64 bytes apart. Token groups come in pairs (32 tokens); tokens past n are zeros.
#include <cstdint>
#include <vector>

namespace neuron::backend::cpu {

inline constexpr std::int64_t kTermBlockCols = 32;               // columns of x per tile
inline constexpr std::int64_t kTermTile = 16 * kTermBlockCols;   // bf16 elements of one tile

struct PackedTerms {
  std::vector<std::uint16_t> data;  // [terms * groups * blocks * kTermTile] bf16
  int terms = 0;
  std::int64_t groups = 0, blocks = 0;

  // Where term `term` of token group `group` starts: column pair c of it at + 32 * c.
  const std::uint16_t* group_start(int term, std::int64_t group) const noexcept {
    return data.data() + (term * groups + group) * blocks * kTermTile;
  }
  const std::uint16_t* tile(int term, std::int64_t group, std::int64_t block) const noexcept {
    return group_start(term, group) + block * kTermTile;
  }
  // Elements from one term's group to the next term's same group.
  std::int64_t term_stride() const noexcept { return groups * blocks * kTermTile; }

  // x: [n, in] f32 (row stride ldx); in a multiple of kTermBlockCols, terms in
  // [1, 3]. Requires a CPU with AVX-512 BF16.
  void pack(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, int terms);
};

}  // namespace neuron::backend::cpu
