#pragma once
// y = W x with W in bf16 and x, y in f32: the decode step's matrix-vector
// product. Batch-1 decode reads every weight exactly once per token, so this
// kernel's job is to stream W at memory bandwidth; the arithmetic is free.
// Weights stay bf16 (2 bytes each) and are widened to f32 in registers, so
// products and sums are plain f32 (the avx512_bf16 variant excepted).
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/isa.hpp"
#include "backend/cpu/decode_kernel.hpp"

namespace neuron::backend::cpu {

// The vector operand, prepared once per product for the chosen kernel.
class GemvOperand {
 public:
  // Keeps a pointer to x (which must outlive the operand); for avx512_bf16 it
  // also splits x into hi + lo bf16 terms (x - hi - lo is below 2^-17 |x|).
  GemvOperand(Isa isa, const float* x, std::int64_t n);

  const float* f32() const noexcept { return x_; }
  const std::uint16_t* hi() const noexcept { return hi_.data(); }
  const std::uint16_t* lo() const noexcept { return lo_.data(); }
  std::int64_t size() const noexcept { return n_; }

 private:
  const float* x_;
  std::int64_t n_;
  std::vector<std::uint16_t> hi_, lo_;  // [n] bf16, only for avx512_bf16
};

// Rows [0, rows) of W (row r at w + r * ld, `x.size()` columns) into y[0, rows), on
// the calling thread with the given kernel and walk (decode_kernel.hpp: four rows
// (two with AVX2) side by side, prefetched ahead, or one after another; the same
// sums either way). `isa` must be supported and match x's.
void gemv_bf16_rows(Isa isa, const std::uint16_t* w, std::int64_t ld, std::int64_t rows, const GemvOperand& x,
                    float* y, RowWalk walk);

// The whole product with decode_kernel(bf16)'s kernel and walk, rows split in chunks over ChunkPool::shared().
void gemv_bf16(const std::uint16_t* w, std::int64_t rows, std::int64_t cols, const float* x, float* y);

}  // namespace neuron::backend::cpu
