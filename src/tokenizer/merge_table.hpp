#pragma once
// The BPE merge rules as a flat open-addressing hash table keyed by the pair
// of token ids: (left, right) -> (rank, merged id). Looked up once per
// adjacent pair per merge step, so it is the tokenizer's hottest structure;
// a flat table costs one cache miss where a node-based map costs several.
#include <cstdint>
#include <optional>
#include <vector>

namespace neuron::tokenizer {

struct Merge {
  std::int32_t rank;  // priority: lower merges first (the line number in "merges")
  std::int32_t id;    // token produced by the merge
};

class MergeTable {
 public:
  MergeTable() = default;
  explicit MergeTable(std::size_t expected) {
    std::size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    slots_.assign(cap, Slot{kEmpty, {}});
    shift_ = 64 - __builtin_ctzll(cap);
  }

  // A repeated pair keeps the later rule, as Hugging Face's merge map does.
  // Precondition: fewer distinct pairs than `expected`.
  void insert(std::int32_t left, std::int32_t right, Merge m) {
    const std::uint64_t k = key(left, right);
    for (std::size_t i = index(k);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == k || slots_[i].key == kEmpty) {
        slots_[i] = {k, m};
        return;
      }
    }
  }

  const Merge* find(std::int32_t left, std::int32_t right) const noexcept {
    if (slots_.empty()) return nullptr;
    const std::uint64_t k = key(left, right);
    for (std::size_t i = index(k);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == k) return &slots_[i].merge;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  // Token ids are non-negative, so the all-ones key never occurs.
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  struct Slot {
    std::uint64_t key;
    Merge merge;
  };
  static std::uint64_t key(std::int32_t l, std::int32_t r) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(l)) << 32) | static_cast<std::uint32_t>(r);
  }
  std::size_t index(std::uint64_t k) const noexcept { return (k * 0x9E3779B97F4A7C15ull) >> shift_; }

  std::vector<Slot> slots_;  // [capacity] power of two, at most half full
  int shift_ = 64;
};

}  // namespace neuron::tokenizer
