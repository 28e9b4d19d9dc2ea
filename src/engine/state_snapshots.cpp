#include "engine/state_snapshots.hpp"

#include <numeric>

#include "util/error.hpp"

namespace neuron::engine {

StateSnapshots::StateSnapshots(std::int32_t capacity) : capacity_(capacity) {
  NEURON_ASSERT(capacity >= 0);
  free_.resize(static_cast<std::size_t>(capacity));
  std::iota(free_.rbegin(), free_.rend(), 0);  // low ids first
}

std::optional<std::int32_t> StateSnapshots::find(std::int32_t block) {
  const auto it = by_block_.find(block);
  if (it == by_block_.end()) return std::nullopt;
  lru_.splice(lru_.end(), lru_, it->second.lru);
  return it->second.snapshot;
}

std::optional<std::int32_t> StateSnapshots::take(std::int32_t block) {
  if (capacity_ == 0 || by_block_.contains(block)) return std::nullopt;
  std::int32_t snapshot;
  if (!free_.empty()) {
    snapshot = free_.back();
    free_.pop_back();
  } else {
    const std::int32_t oldest = lru_.front();
    lru_.pop_front();
    const auto it = by_block_.find(oldest);
    snapshot = it->second.snapshot;
    by_block_.erase(it);
  }
  by_block_.emplace(block, Entry{snapshot, lru_.insert(lru_.end(), block)});
  return snapshot;
}

void StateSnapshots::drop(std::int32_t block) {
  const auto it = by_block_.find(block);
  if (it == by_block_.end()) return;
  lru_.erase(it->second.lru);
  free_.push_back(it->second.snapshot);
  by_block_.erase(it);
}

}  // namespace neuron::engine
