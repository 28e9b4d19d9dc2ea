#pragma once
// Causal grouped-query attention over a paged f32 KV pool.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/batch.hpp"

namespace neuron::backend::cpu {

// Keys and values of one rank's KV heads in fixed-size blocks of positions
// (backend/batch.hpp). Each of K and V is laid out
// [layers, kv_heads, num_blocks, block_size, head_dim], so one (layer, head)
// is a [num_blocks * block_size, head_dim] matrix whose row
// block * block_size + slot holds (block, slot): a block is a contiguous
// block_size x head_dim tile, and blocks with consecutive ids are consecutive
// rows, so attention over a run of them is one BLAS call.
// Allocated once at load, uninitialised: the OS commits a page only when a
// slot on it is first written, so an unused pool costs address space, not memory.
class KvPool {
 public:
  KvPool(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim, std::int32_t block_size,
         std::int32_t num_blocks);

  // The [num_blocks * block_size, head_dim] K (V) matrix of one layer and KV head.
  float* k(std::int64_t layer, std::int64_t head) noexcept { return k_.get() + offset(layer, head); }
  float* v(std::int64_t layer, std::int64_t head) noexcept { return v_.get() + offset(layer, head); }
  const float* k(std::int64_t layer, std::int64_t head) const noexcept { return k_.get() + offset(layer, head); }
  const float* v(std::int64_t layer, std::int64_t head) const noexcept { return v_.get() + offset(layer, head); }

  std::int64_t head_dim() const noexcept { return head_dim_; }
  std::int32_t block_size() const noexcept { return block_size_; }
  std::int32_t num_blocks() const noexcept { return num_blocks_; }
  std::uint64_t bytes() const noexcept;  // both tensors, as allocated

 private:
  std::int64_t offset(std::int64_t layer, std::int64_t head) const noexcept {
    return (layer * kv_heads_ + head) * rows_per_head_ * head_dim_;
  }
  std::int64_t layers_, kv_heads_, head_dim_;
  std::int32_t block_size_, num_blocks_;
  std::int64_t rows_per_head_;  // num_blocks * block_size
  std::unique_ptr<float[]> k_;  // [layers, kv_heads, num_blocks, block_size, head_dim] f32
  std::unique_ptr<float[]> v_;  // [layers, kv_heads, num_blocks, block_size, head_dim] f32
};

// For every sequence of `batch` (already checked with check_batch), each of
// its new tokens and each local query head h attends to the sequence's
// positions [0, its own] of KV head kv_of_q[h] of `layer`, read through the
// sequence's block table; the pool must already hold those positions (this
// step's included). q: [T, q_heads * head_dim] (row stride ldq), already
// normed and rotated, one row per batch token; out: [T, q_heads * head_dim]
// (row stride ld_out). Scores are scaled by 1 / sqrt(head_dim) and
// soft-maxed in f32.
void attention(const float* q, std::int64_t ldq, const Batch& batch, const KvPool& pool, std::int64_t layer,
               const std::vector<std::int64_t>& kv_of_q, float* out, std::int64_t ld_out);

}  // namespace neuron::backend::cpu
