#include "backend/cpu/gemm_bf16_amx.hpp"


#include <algorithm>
#include <vector>

#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/packed_terms.hpp"
#include "backend/cpu/simd.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

#define NEURON_AMX __attribute__((target("amx-tile,amx-bf16,avx512f")))

constexpr int kTerms = 3;              // bf16 terms of x: hi, mid, lo
constexpr int kLoTerms = 2;            // the ones a low W term meets (its product with x's lo is below 2^-25 of w x)
constexpr std::int64_t kRows = kAmxRows;  // two A tiles of 16
constexpr std::int64_t kCols = kTermBlockCols;  // columns per tile: 64 bytes of bf16
constexpr std::int64_t kChunkBytes = 256 << 10;  // W bytes a pool task takes
constexpr std::int64_t kPassBytes = 1 << 20;     // packed x per pass: half of a Sapphire Rapids core's L2

// The tile registers: 0-3 accumulators ([16 rows of W, 16 tokens] f32), 4-5 W
// ([16 rows, 32 columns] bf16), 6-7 X ([16 column pairs, 16 tokens, 2] bf16).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};  // bytes per row of each tile
  std::uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      colsb[t] = 64;
      rows[t] = 16;
    }
  }
};

// The W tiles in registers 4-5 times x's first `terms` terms of token groups g and g + 1 (column block b),
// into the accumulators 0-3.
NEURON_AMX inline void meet_terms(const PackedTerms& x, int terms, std::int64_t g, std::int64_t b) {
  for (int term = 0; term < terms; ++term) {
    _tile_loadd(6, x.tile(term, g, b), 64);
    _tile_loadd(7, x.tile(term, g + 1, b), 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 5, 6);
    _tile_dpbf16ps(2, 4, 7);
    _tile_dpbf16ps(3, 5, 7);
  }
}

// Rows [0, 32) of W (row stride `in`) against x's token groups [g0, g1) (g0 even), into y's columns [0, 32).
// With w_lo, W is w + w_lo, whose low term meets x's first kLoTerms terms.
NEURON_AMX void row_block(const std::uint16_t* w, const std::uint16_t* w_lo, std::int64_t in, const PackedTerms& x,
                          std::int64_t g0, std::int64_t g1, std::int64_t n, float* y, std::int64_t ldy) {
  alignas(64) float c[4][16 * 16];  // the accumulators, stored: [16 rows][16 tokens] f32 each
  const std::int64_t stride = in * 2;
  const std::uint16_t* w1 = w + 16 * in;
  for (std::int64_t g = g0; g < g1; g += 2) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (std::int64_t b = 0; b < x.blocks; ++b) {
      _tile_loadd(4, w + b * kCols, stride);
      _tile_loadd(5, w1 + b * kCols, stride);
      meet_terms(x, kTerms, g, b);
      if (!w_lo) continue;
      _tile_loadd(4, w_lo + b * kCols, stride);
      _tile_loadd(5, w_lo + 16 * in + b * kCols, stride);
      meet_terms(x, kLoTerms, g, b);
    }
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
    for (int q = 0; q < 4; ++q) {
      const std::int64_t row0 = (q & 1) * 16, token0 = (g + q / 2) * 16;
      for (std::int64_t m = 0; m < 16 && token0 + m < n; ++m) {
        float* out = y + (token0 + m) * ldy + row0;
        for (int r = 0; r < 16; ++r) out[r] = c[q][r * 16 + m];
      }
    }
  }
}

NEURON_AMX void configure_tiles() {
  static const TileConfig config;
  _tile_loadconfig(&config);
}

NEURON_AMX void release_tiles() { _tile_release(); }

}  // namespace

bool gemm_bf16_amx_fits(std::int64_t in, std::int64_t out) noexcept {
  return in > 0 && in % kCols == 0 && out >= kRows && amx_bf16_usable();
}

void gemm_bf16_amx(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, const std::uint16_t* w,
                   std::int64_t out, float* y, std::int64_t ldy, const std::uint16_t* w_lo) {
  NEURON_ASSERT(gemm_bf16_amx_fits(in, out));
  if (n <= 0) return;
  thread_local PackedTerms mine;  // the calling thread's, reused between calls
  PackedTerms& packed = mine;     // a reference, so the pool's threads read this one
  packed.pack(x, n, in, ldx, kTerms);
  const std::int64_t blocks = out / kRows;
  const std::int64_t per_task = std::max<std::int64_t>(1, kChunkBytes / (kRows * in * 2));
  const std::int64_t tasks = (blocks + per_task - 1) / per_task;
  // Tokens in passes whose packed x stays in L2 while every row block of W
  // meets it: W is read once a pass, x once a pass from memory.
  const std::int64_t group_bytes = 16 * in * 2 * kTerms;
  const std::int64_t pass_groups = std::max<std::int64_t>(2, kPassBytes / group_bytes / 2 * 2);
  for (std::int64_t g0 = 0; g0 < packed.groups; g0 += pass_groups) {
    const std::int64_t g1 = std::min(packed.groups, g0 + pass_groups);
    ChunkPool::shared().run(tasks, [&](std::int64_t task) {
      configure_tiles();  // tile configuration is per thread
      const std::int64_t end = std::min(blocks, (task + 1) * per_task);
      for (std::int64_t b = task * per_task; b < end; ++b)
        row_block(w + b * kRows * in, w_lo ? w_lo + b * kRows * in : nullptr, in, packed, g0, g1, n, y + b * kRows,
                  ldy);
      release_tiles();
    });
  }
}

}  // namespace neuron::backend::cpu
