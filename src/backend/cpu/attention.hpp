#pragma once
// Causal grouped-query attention over a paged KV pool (f32 or bf16).
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "backend/batch.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

// Keys and values of one rank's KV heads in fixed-size blocks of positions
// (backend/batch.hpp). Each of K and V is laid out
// [layers, kv_heads, num_blocks, block_size, head_dim], so one (layer, head)
// is a [num_blocks * block_size, head_dim] matrix whose row
// block * block_size + slot holds (block, slot): a block is a contiguous
// block_size x head_dim tile, and blocks with consecutive ids are consecutive
// rows, so attention over a run of them is one product.
// Elements are f32 (exact), or bf16 (half the bytes to hold and to read each
// decode step; llama.cpp keeps f16) when the process allows bf16 activations
// (kv_element(), activations.hpp).
// Allocated once at load, uninitialised: the OS commits a page only when a
// slot on it is first written, so an unused pool costs address space, not memory.
class KvPool {
 public:
  enum class Element { f32, bf16 };

  KvPool(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim, std::int32_t block_size,
         std::int32_t num_blocks, Element element = Element::f32);

  Element element() const noexcept { return element_; }
  // The [num_blocks * block_size, head_dim] K (V) matrix of one layer and KV
  // head, in the pool's element (f32: float, bf16: std::uint16_t).
  template <class T>
  T* k(std::int64_t layer, std::int64_t head) noexcept { return typed<T>(k_.get()) + offset(layer, head); }
  template <class T>
  T* v(std::int64_t layer, std::int64_t head) noexcept { return typed<T>(v_.get()) + offset(layer, head); }
  template <class T>
  const T* k(std::int64_t layer, std::int64_t head) const noexcept { return typed<T>(k_.get()) + offset(layer, head); }
  template <class T>
  const T* v(std::int64_t layer, std::int64_t head) const noexcept { return typed<T>(v_.get()) + offset(layer, head); }

  // Writes one position: row `row` of (layer, head) takes k and v ([head_dim] f32 each), rounded to bf16 in a bf16 pool.
  void store(std::int64_t layer, std::int64_t head, std::int64_t row, const float* k, const float* v) noexcept;

  std::int64_t head_dim() const noexcept { return head_dim_; }
  std::int32_t block_size() const noexcept { return block_size_; }
  std::int32_t num_blocks() const noexcept { return num_blocks_; }
  std::uint64_t bytes() const noexcept;  // both tensors, as allocated
  static std::uint64_t element_bytes(Element e) noexcept { return e == Element::bf16 ? 2 : 4; }

 private:
  template <class T>
  T* typed(std::byte* p) const noexcept;
  template <class T>
  const T* typed(const std::byte* p) const noexcept;
  std::int64_t offset(std::int64_t layer, std::int64_t head) const noexcept {
    return (layer * kv_heads_ + head) * rows_per_head_ * head_dim_;
  }
  std::int64_t layers_, kv_heads_, head_dim_;
  std::int32_t block_size_, num_blocks_;
  std::int64_t rows_per_head_;  // num_blocks * block_size
  Element element_;
  std::unique_ptr<std::byte[]> k_;  // [layers, kv_heads, num_blocks, block_size, head_dim] f32 or bf16
  std::unique_ptr<std::byte[]> v_;  // [layers, kv_heads, num_blocks, block_size, head_dim] f32 or bf16
};

template <class T>
T* KvPool::typed(std::byte* p) const noexcept {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, std::uint16_t>);
  NEURON_ASSERT((std::is_same_v<T, float>) == (element_ == Element::f32));
  return reinterpret_cast<T*>(p);
}
template <class T>
const T* KvPool::typed(const std::byte* p) const noexcept {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, std::uint16_t>);
  NEURON_ASSERT((std::is_same_v<T, float>) == (element_ == Element::f32));
  return reinterpret_cast<const T*>(p);
}

// The element this process's CPU pools take: bf16 from the bf16 activation level on (activations.hpp).
KvPool::Element kv_element();

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
