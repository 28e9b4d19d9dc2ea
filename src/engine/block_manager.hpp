#pragma once
// Which KV blocks of a model's pool each sequence holds, and which full
// blocks are kept for reuse (prefix caching). The runner owns the memory
// behind the block ids (backend::KvPoolShape); this class only counts.
//
// A full block is identified by its tokens and everything before it: the key
// is a hash chained over the block's tokens and its parent's key, and a match
// also compares the tokens and the parent's key, so a hash collision can
// never hand a sequence another prefix's keys and values. Full blocks are
// shared by reference count. When the last sequence lets go of a cached
// block it stays cached, evictable, in least-recently-used order; fresh
// blocks are taken from the never-cached free list first, then by evicting
// the least recently used. Single-threaded: the engine thread owns it.
#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace neuron::engine {

struct BlockStats {
  std::int32_t total = 0;      // blocks in the pool
  std::int32_t used = 0;       // held by at least one sequence
  std::int32_t cached = 0;     // full blocks registered for reuse (held or evictable)
  std::int32_t evictable = 0;  // cached and held by no sequence
};

class BlockManager {
 public:
  BlockManager(std::int32_t num_blocks, std::int32_t block_size, bool prefix_caching);

  // The longest run of cached full blocks that starts `tokens` and covers at
  // most `max_tokens` of them. Takes a reference on each (they are the start
  // of the caller's table) and marks them recently used. Returns the ids.
  std::vector<std::int32_t> match_prefix(std::span<const std::int32_t> tokens, std::int32_t max_tokens);

  // Grows `table` so it covers `positions` positions; all or nothing: returns
  // false (and leaves `table` as it was) when too few blocks can be had.
  bool grow(std::vector<std::int32_t>& table, std::int32_t positions);
  // Fresh blocks that can be had now (never-cached free plus evictable).
  std::int32_t available() const noexcept;
  // Blocks `positions` positions take.
  std::int32_t blocks_for(std::int32_t positions) const noexcept;

  // Registers the table's full blocks among its first `computed` positions
  // (whose tokens are `tokens`) for reuse, from block `registered` on;
  // returns the new count of registered leading blocks. A block whose
  // content is already cached under another id stays private (its id is not
  // swapped: the runner already wrote it).
  std::int32_t register_full(std::span<const std::int32_t> table, std::span<const std::int32_t> tokens,
                             std::int32_t computed, std::int32_t registered);

  // Drops the sequence's reference on every block of `table` and clears it.
  void release(std::vector<std::int32_t>& table);
  // Drops the references on the blocks of `table` past its first `keep` and shortens it to `keep`.
  void truncate(std::vector<std::int32_t>& table, std::int32_t keep);

  // The cached block that holds block `id`'s prefix (its id stands for that prefix until it is evicted): `id`
  // itself when it is cached, the cached block with the same tokens and parent when `id` is a registered private
  // duplicate of one, else -1. `id` must be held by the caller's table.
  std::int32_t cached_block(std::int32_t id) const;
  // Called with a cached block's id when eviction takes it out of the cache (hybrids drop its state snapshot).
  void on_evict(std::function<void(std::int32_t id)> listener) { on_evict_ = std::move(listener); }

  BlockStats stats() const noexcept;
  std::int32_t block_size() const noexcept { return block_size_; }
  std::int32_t num_blocks() const noexcept { return static_cast<std::int32_t>(blocks_.size()); }

 private:
  struct Block {
    std::int32_t refs = 0;
    bool cached = false;                   // registered in by_key_
    // key, parent_key and tokens are valid when cached, or registered as a private duplicate (duplicate).
    bool duplicate = false;
    std::uint64_t key = 0;                 // chained hash
    std::uint64_t parent_key = 0;          // the previous block's key; 0 for the first block
    std::vector<std::int32_t> tokens;      // [block_size] this block's tokens
    std::list<std::int32_t>::iterator lru;  // position in lru_ when cached and refs == 0
  };

  std::uint64_t chain(std::uint64_t parent, std::span<const std::int32_t> tokens) const noexcept;
  std::int32_t find(std::uint64_t parent, std::span<const std::int32_t> tokens) const;
  std::int32_t take_fresh();  // a block with refs 0 and no cache entry; caller checked available()
  void uncache(std::int32_t id);

  std::int32_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;                                  // [num_blocks]
  std::vector<std::int32_t> free_;                             // never-cached, unreferenced ids (a stack)
  std::list<std::int32_t> lru_;                                // cached, unreferenced ids; front = least recent
  std::unordered_multimap<std::uint64_t, std::int32_t> by_key_;  // key -> cached block id
  std::int32_t used_ = 0;
  std::function<void(std::int32_t)> on_evict_;
};

}  // namespace neuron::engine
