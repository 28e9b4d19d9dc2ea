#pragma once
// Q4_K rows four to a group, interleaved, for the int8 products of one or a
// few tokens (the decode of a Q4_K_M file), and their 256-bit kernel, which
// every int8 family takes for those rows (AVX2, AVX-VNNI, AVX-512 VNNI).
//
// gemm_quant_int8_avx2's Q4_K kernel walks one row at a time: each row
// unpacks its own scales, spreads each sub-block's scale over a vector,
// sums its lanes at the end and pays one f32 FMA a block, about 75
// instructions a 256 weights, bound by that unpacking in L2 (~40 G
// weights/s on a Zen 5 core at the AVX2 level) where llama.cpp repacks
// Q4_K eight rows interleaved (ggml_gemv_q4_K_8x8_q8_K). Here four rows'
// blocks b lie together, so that every 32-bit lane of a 256-bit load holds
// four quants of one of the four rows, lanes i and i + 4 row i (two column
// halves): one vpmaddubsw multiplies four rows, a sub-block's products are
// summed in 16 bits (at most 4 * 2 * 15 * 127 a word) and scaled by one
// vpmaddwd, the scales and minimums of the four rows unpack in one pass,
// one FMA pair a block scales four rows, and a group's four sums come out
// of one vector. x is laid out to match once per product (QuantOperand's
// grouped form: each 4 columns repeated in the four lanes of their half).
//
// The layout (a permutation of the rows' bytes, so QuantMatrix keeps its
// size and ungroup_rows gives the blocks back exactly): rows [0,
// grouped_rows) in groups of four, group g at 4 g row_bytes, its block b
// (576 bytes: four Q4_K blocks) at + 576 b:
//   [0, 8)     d of rows 0-3 (f16)       [8, 16)   dmin of rows 0-3 (f16)
//   [16, 64)   scale byte k of row r at 16 + 4 k + r (k < 12: Q4_K's 12 packed bytes)
//   [64, 576)  qs: chunk c (64 columns), octet o, half h, row r: Q4_K's qs
//              bytes [32 c + 8 o + 4 h, + 4) of row r at 64 + 128 c + 32 o + 16 h + 4 r
// Rows from grouped_rows on stay as they were (fewer than four).
//
// Exact up to x's rounding, as the other int8 kernels: the dequantized W
// times the rounded x within 1e-5 of sum |w x|. Every row's sum is
// accumulated in the same order for every token count and row split, so
// batched decode and prefill give the bits one token gives.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace neuron::backend::cpu {

class QuantOperand;
struct QuantMatrix;

inline constexpr std::int64_t kGroupRows = 4;                   // rows a group interleaves
inline constexpr std::size_t kGroupBlockBytes = 4 * 144;        // one block of a group's four rows
inline constexpr std::int64_t kGroupedXBytes = 4;               // x bytes a grouped operand keeps a column

// Whether Q4_K weights of `cols` columns are worth grouping in this process:
// its one-token products round x to int8 (the calling thread's activation
// level) on a CPU with AVX2 (the AVX-512 VNNI ones too: on a Zen 5 core
// this kernel streams 1.1-1.7x the one-row AVX-512 VNNI kernel's weights,
// bench/CPU.md), and NEURON_CPU_Q4K_GROUPS is not 0 (which keeps the rows
// as stored, to measure against).
bool q4_k_grouping_pays(std::int64_t cols);

// Regroups w's rows in place (Q4_K, cols a multiple of 256; rows past the
// last whole group stay as stored) and sets w.grouped_rows.
void group_rows(QuantMatrix& w);

// Rows [r0, r1) of w as stored before grouping, into out [(r1 - r0) * row_bytes].
void ungroup_rows(const QuantMatrix& w, std::int64_t r0, std::int64_t r1, std::byte* out);

// Rows of a matrix as stored, read one at a time: in w.data for a row not
// grouped; a grouped row's whole group is ungrouped at once (256-bit
// shuffles) into the reader's buffer, so the next rows of that group cost
// nothing. How the kernels that read a row at a time (prefill's dequantized
// tiles, the pair and AMX paths, embedding lookups) read any matrix. One
// reader a thread (it holds the last group).
class StoredRows {
 public:
  // Row r's blocks as stored [w.row_bytes], valid until the next call.
  const std::byte* row(const QuantMatrix& w, std::int64_t r);

 private:
  std::vector<std::byte> group_;  // [4, row_bytes] the last group ungrouped
  const QuantMatrix* of_ = nullptr;
  std::int64_t first_ = -1;       // its first row
};

// x's grouped form for one token: xg [cols * kGroupedXBytes] (block b, chunk
// c, octet o, nibble half n: 32 bytes at 1024 b + 256 c + 64 o + 32 n, lane
// i the rounded x[256 b + 64 c + 32 n + 8 o + 4 (i / 4), + 4)) and sg [cols
// / 256 * 32] i16 (block b's sub-block sums S_j of x, words k of vector v
// (v = 0, 1) at 32 b + 16 v + k: S_(4 v + 2 (k / 8) + k % 2)).
// q: [cols] x rounded to int8, sums16: [cols / 16] its sums of 16.
void group_operand(const std::int8_t* q, const std::int16_t* sums16, std::int64_t cols, std::int8_t* xg,
                   std::int16_t* sg);

// Rows [r0, r1) of W x for every token of x (its grouped form) into y
// [x.tokens(), ldy], on the calling thread: w grouped, r0 a multiple of
// four, r1 <= w.grouped_rows. vnni: AVX-VNNI's vpdpwssd (avx_vnni_supported()).
// Every int8 family's products of grouped rows come here (gemm_quant_few).
void gemm_q4_k_grouped_rows(bool vnni, const QuantOperand& x, const QuantMatrix& w, std::int64_t r0, std::int64_t r1,
                            float* y, std::int64_t ldy);

}  // namespace neuron::backend::cpu
