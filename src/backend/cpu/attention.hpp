#pragma once
// Causal grouped-query attention over a preallocated f32 KV cache.
#include <cstdint>
#include <memory>
#include <vector>

namespace neuron::backend::cpu {

// Keys and values of one rank's KV heads for every layer and position.
// Allocated once at load, uninitialised: the OS commits a page only when a
// position on it is first written, so a long max_context costs address space,
// not memory, until it is used.
class KvCache {
 public:
  KvCache(std::int64_t layers, std::int64_t kv_heads, std::int64_t max_context, std::int64_t head_dim);

  float* k(std::int64_t layer, std::int64_t head, std::int64_t pos) noexcept { return k_.get() + index(layer, head, pos); }
  float* v(std::int64_t layer, std::int64_t head, std::int64_t pos) noexcept { return v_.get() + index(layer, head, pos); }
  const float* k(std::int64_t layer, std::int64_t head, std::int64_t pos) const noexcept {
    return k_.get() + index(layer, head, pos);
  }
  const float* v(std::int64_t layer, std::int64_t head, std::int64_t pos) const noexcept {
    return v_.get() + index(layer, head, pos);
  }
  std::int64_t max_context() const noexcept { return max_context_; }
  std::int64_t head_dim() const noexcept { return head_dim_; }
  std::uint64_t bytes() const noexcept;  // both tensors, as allocated

 private:
  std::int64_t index(std::int64_t layer, std::int64_t head, std::int64_t pos) const noexcept {
    return ((layer * kv_heads_ + head) * max_context_ + pos) * head_dim_;
  }
  std::int64_t layers_, kv_heads_, max_context_, head_dim_;
  std::unique_ptr<float[]> k_;  // [layers, kv_heads, max_context, head_dim] f32
  std::unique_ptr<float[]> v_;  // [layers, kv_heads, max_context, head_dim] f32
};

// For the n queries at positions [offset, offset + n), each local query head h
// attends to positions [0, its own] of KV head kv_of_q[h] of `layer`, which the
// cache must already hold. q: [n, q_heads * head_dim] (row stride ldq), already
// normed and rotated; out: [n, q_heads * head_dim] (row stride ld_out).
// Scores are scaled by 1 / sqrt(head_dim) and soft-maxed in f32.
void attention(const float* q, std::int64_t ldq, std::int64_t n, std::int64_t offset, const KvCache& cache,
               std::int64_t layer, const std::vector<std::int64_t>& kv_of_q, float* out, std::int64_t ld_out);

}  // namespace neuron::backend::cpu
