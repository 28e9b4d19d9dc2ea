#pragma once
// Which of a hybrid runner's snapshot slots (backend/batch.hpp: copies of a
// sequence's recurrent state at a block boundary) hold the state after which
// prefix. A snapshot belongs to the cached full block that ends at its
// boundary (BlockManager: while a block is cached its id stands for its
// hash-chained key, i.e. every token up to that boundary), so a hit needs both
// the KV blocks of the prefix and the snapshot; the BlockManager drops a
// block's snapshot when it evicts the block (drop()). At most one snapshot per
// block; when all slots are taken the least recently used snapshot gives its
// slot up. The runner owns the memory; this class only counts. Single-threaded:
// the engine thread owns it.
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace neuron::engine {

class StateSnapshots {
 public:
  explicit StateSnapshots(std::int32_t capacity);  // the runner's KvPoolShape::state_snapshots (>= 0)

  // The snapshot that holds the state after the block `block` ends, marked recently used; nullopt when none.
  std::optional<std::int32_t> find(std::int32_t block);
  // A slot to save the state at the end of `block` into, now attached to it: a free one, else the least
  // recently used snapshot's (detached from its block). nullopt when the block has one already or capacity is 0.
  std::optional<std::int32_t> take(std::int32_t block);
  // Frees the block's snapshot, if it has one (the block left the cache, or its owner replaced it).
  void drop(std::int32_t block);

  std::int32_t capacity() const noexcept { return capacity_; }
  std::int32_t used() const noexcept { return static_cast<std::int32_t>(by_block_.size()); }

 private:
  struct Entry {
    std::int32_t snapshot = 0;
    std::list<std::int32_t>::iterator lru;  // its block's place in lru_
  };

  std::int32_t capacity_;
  std::vector<std::int32_t> free_;                     // unattached snapshot ids (a stack)
  std::list<std::int32_t> lru_;                        // blocks with a snapshot; front = least recently used
  std::unordered_map<std::int32_t, Entry> by_block_;   // block id -> its snapshot
};

}  // namespace neuron::engine
