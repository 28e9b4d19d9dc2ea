#include "engine/block_manager.hpp"

#include <algorithm>
#include <numeric>

#include "util/error.hpp"

namespace neuron::engine {

namespace {
// splitmix64's finaliser: a cheap, well-mixed step for chaining.
std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

BlockManager::BlockManager(std::int32_t num_blocks, std::int32_t block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching), blocks_(static_cast<std::size_t>(num_blocks)) {
  NEURON_ASSERT(num_blocks > 0 && block_size > 0);
  free_.resize(static_cast<std::size_t>(num_blocks));
  // A stack popped from the back: low ids first, so a lightly used pool touches few pages.
  std::iota(free_.rbegin(), free_.rend(), 0);
}

std::uint64_t BlockManager::chain(std::uint64_t parent, std::span<const std::int32_t> tokens) const noexcept {
  std::uint64_t h = mix(parent ^ 0x6e6575726f6e2121ull);
  for (std::int32_t t : tokens) h = mix(h ^ static_cast<std::uint32_t>(t));
  return h == 0 ? 1 : h;  // 0 is "no parent"
}

std::int32_t BlockManager::find(std::uint64_t parent, std::span<const std::int32_t> tokens) const {
  const std::uint64_t key = chain(parent, tokens);
  const auto [lo, hi] = by_key_.equal_range(key);
  for (auto it = lo; it != hi; ++it) {
    const Block& b = blocks_[static_cast<std::size_t>(it->second)];
    if (b.parent_key == parent && std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin(), tokens.end()))
      return it->second;
  }
  return -1;
}

std::vector<std::int32_t> BlockManager::match_prefix(std::span<const std::int32_t> tokens, std::int32_t max_tokens) {
  std::vector<std::int32_t> out;
  if (!prefix_caching_) return out;
  const auto limit = std::min<std::int64_t>(max_tokens, static_cast<std::int64_t>(tokens.size()));
  std::uint64_t parent = 0;
  for (std::int64_t at = 0; at + block_size_ <= limit; at += block_size_) {
    const std::int32_t id = find(parent, tokens.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(block_size_)));
    if (id < 0) break;
    Block& b = blocks_[static_cast<std::size_t>(id)];
    if (b.refs == 0) {
      lru_.erase(b.lru);
      ++used_;
    }
    ++b.refs;
    parent = b.key;
    out.push_back(id);
  }
  return out;
}

std::int32_t BlockManager::available() const noexcept {
  return static_cast<std::int32_t>(free_.size() + lru_.size());
}

std::int32_t BlockManager::blocks_for(std::int32_t positions) const noexcept {
  return (positions + block_size_ - 1) / block_size_;
}

void BlockManager::uncache(std::int32_t id) {
  Block& b = blocks_[static_cast<std::size_t>(id)];
  const auto [lo, hi] = by_key_.equal_range(b.key);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == id) {
      by_key_.erase(it);
      break;
    }
  }
  b.cached = false;
  b.tokens.clear();
  b.key = b.parent_key = 0;
}

std::int32_t BlockManager::take_fresh() {
  std::int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    NEURON_ASSERT(!lru_.empty());
    id = lru_.front();  // evict the least recently used cached block
    lru_.pop_front();
    uncache(id);
    if (on_evict_) on_evict_(id);
  }
  Block& b = blocks_[static_cast<std::size_t>(id)];
  NEURON_ASSERT(b.refs == 0 && !b.cached);
  if (b.duplicate) {  // a private duplicate's record goes with its last holder
    b.duplicate = false;
    b.tokens.clear();
    b.key = b.parent_key = 0;
  }
  b.refs = 1;
  ++used_;
  return id;
}

bool BlockManager::grow(std::vector<std::int32_t>& table, std::int32_t positions) {
  const std::int32_t need = blocks_for(positions) - static_cast<std::int32_t>(table.size());
  if (need <= 0) return true;
  if (need > available()) return false;
  for (std::int32_t i = 0; i < need; ++i) table.push_back(take_fresh());
  return true;
}

std::int32_t BlockManager::register_full(std::span<const std::int32_t> table, std::span<const std::int32_t> tokens,
                                         std::int32_t computed, std::int32_t registered) {
  if (!prefix_caching_) return registered;
  const std::int32_t full = std::min<std::int32_t>(computed / block_size_, static_cast<std::int32_t>(table.size()));
  std::uint64_t parent = registered > 0 ? blocks_[static_cast<std::size_t>(table[registered - 1])].key : 0;
  for (std::int32_t i = registered; i < full; ++i) {
    const auto block_tokens = tokens.subspan(static_cast<std::size_t>(i) * block_size_, static_cast<std::size_t>(block_size_));
    Block& b = blocks_[static_cast<std::size_t>(table[static_cast<std::size_t>(i)])];
    if (b.cached) {  // shared from the cache already
      parent = b.key;
      continue;
    }
    const std::uint64_t key = chain(parent, block_tokens);
    if (find(parent, block_tokens) < 0) {
      b.cached = true;
      b.key = key;
      b.parent_key = parent;
      b.tokens.assign(block_tokens.begin(), block_tokens.end());
      by_key_.emplace(key, table[static_cast<std::size_t>(i)]);
    } else {  // a duplicate stays private, but its key still chains its successors, in a later call too
      b.duplicate = true;
      b.key = key;
      b.parent_key = parent;
      b.tokens.assign(block_tokens.begin(), block_tokens.end());
    }
    parent = key;
  }
  return std::max(registered, full);
}

void BlockManager::release(std::vector<std::int32_t>& table) { truncate(table, 0); }

std::int32_t BlockManager::cached_block(std::int32_t id) const {
  NEURON_ASSERT(id >= 0 && id < num_blocks());
  const Block& b = blocks_[static_cast<std::size_t>(id)];
  NEURON_ASSERT(b.refs > 0);
  if (b.cached) return id;
  return b.duplicate ? find(b.parent_key, b.tokens) : -1;
}

void BlockManager::truncate(std::vector<std::int32_t>& table, std::int32_t keep) {
  NEURON_ASSERT(keep >= 0);
  if (static_cast<std::size_t>(keep) >= table.size()) return;
  // Last blocks first into the LRU, so a prefix's head outlives its tail.
  for (auto it = table.rbegin(); it != table.rend() - keep; ++it) {
    Block& b = blocks_[static_cast<std::size_t>(*it)];
    NEURON_ASSERT(b.refs > 0);
    if (--b.refs > 0) continue;
    --used_;
    if (b.cached) {
      b.lru = lru_.insert(lru_.end(), *it);
    } else {
      free_.push_back(*it);
    }
  }
  table.resize(static_cast<std::size_t>(keep));
}

BlockStats BlockManager::stats() const noexcept {
  BlockStats s;
  s.total = num_blocks();
  s.used = used_;
  s.cached = static_cast<std::int32_t>(by_key_.size());
  s.evictable = static_cast<std::int32_t>(lru_.size());
  return s;
}

}  // namespace neuron::engine
