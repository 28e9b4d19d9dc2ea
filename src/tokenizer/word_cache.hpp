#pragma once
// A bounded, thread-safe memo of word -> token ids. Natural text repeats a
// small set of words, so most BPE runs are skipped. Sharded by hash so that
// the daemon's HTTP threads encoding at once rarely wait on each other; a
// full shard is cleared rather than tracked for recency, which keeps hits
// cheap and bounds memory at kShards * kShardCapacity words.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace neuron::tokenizer {

class WordCache {
 public:
  WordCache() : shards_(std::make_unique<std::array<Shard, kShards>>()) {}

  static constexpr std::size_t kShards = 32;
  static constexpr std::size_t kShardCapacity = 4096;
  static constexpr std::size_t kMaxWordBytes = 64;  // longer words are rare and would crowd the cache

  // Appends the cached ids of `word` to `out`; false on a miss.
  bool lookup(std::string_view word, std::vector<std::int32_t>& out) const {
    if (word.size() > kMaxWordBytes) return false;
    const Prehashed key{word, std::hash<std::string_view>{}(word)};
    Shard& s = (*shards_)[key.hash % kShards];
    std::lock_guard lock(s.mutex);
    const auto it = s.map.find(key);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view word, std::span<const std::int32_t> ids) const {
    if (word.size() > kMaxWordBytes) return;
    const std::size_t h = std::hash<std::string_view>{}(word);
    Shard& s = (*shards_)[h % kShards];
    std::lock_guard lock(s.mutex);
    if (s.map.size() >= kShardCapacity) s.map.clear();
    s.map.try_emplace(std::string(word), ids.begin(), ids.end());
  }

 private:
  // A word with its hash, computed once per lookup for both the shard and the map.
  struct Prehashed {
    std::string_view word;
    std::size_t hash;
  };
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
    std::size_t operator()(const Prehashed& p) const noexcept { return p.hash; }
  };
  struct Equal {
    using is_transparent = void;
    bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
    bool operator()(const Prehashed& a, std::string_view b) const noexcept { return a.word == b; }
    bool operator()(std::string_view a, const Prehashed& b) const noexcept { return a == b.word; }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<std::int32_t>, Hash, Equal> map;
  };
  // Behind a pointer so the cache (and the tokenizer holding it) can move;
  // the shards themselves are mutated under their locks by const callers.
  std::unique_ptr<std::array<Shard, kShards>> shards_;
};

}  // namespace neuron::tokenizer
