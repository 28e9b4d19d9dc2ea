#pragma once
// The byte-level BPE model of tokenizer.json ("model": {"type": "BPE", ...}).
//
// Words arrive as raw bytes. Each byte starts as the token of its byte-level
// character; then the adjacent pair with the lowest merge rank is merged,
// leftmost first on ties, until no pair has a rule. A min-heap of candidate
// pairs over a linked list of symbols makes that O(n log n) in the word
// length, so a hostile 64 KiB "word" costs milliseconds, not minutes.
// Results for short words are memoized in a WordCache.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/merge_table.hpp"
#include "tokenizer/word_cache.hpp"

namespace neuron::tokenizer {

// Ids at or above this are refused at load time: id-indexed tables cost
// about 50 bytes per id, so a hostile file naming id 2^31 must not get its
// table. Real vocabularies stay under 300k.
inline constexpr std::int64_t kMaxTokenId = 4 * 1024 * 1024;

class Bpe {
 public:
  // `model` is tokenizer.json's "model" object. Throws Error{bad_model} naming
  // the problem: wrong type, missing or malformed vocab, a merge entry that is
  // not two tokens, a merge naming a token missing from the vocab, ...
  static Bpe from_json(const nlohmann::json& model);

  // Appends the ids of one word (raw bytes, non-empty). Thread-safe.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;

  // The vocabulary in tokenizer.json's own (byte-level) spelling.
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(std::int32_t id) const;  // nullptr if the id is not in the vocab
  std::size_t size() const noexcept { return vocab_.size(); }
  std::int32_t max_id() const noexcept { return static_cast<std::int32_t>(tokens_.size()) - 1; }

 private:
  void merge_word(std::string_view word, std::vector<std::int32_t>& out) const;

  std::unordered_map<std::string, std::int32_t> vocab_;  // byte-level token -> id
  // [max id + 1] id -> its key in vocab_ (nodes never move, even when the
  // map does), nullptr for ids the vocab skips.
  std::vector<const std::string*> tokens_;
  std::array<std::int32_t, 256> byte_ids_{};             // byte -> id of its one-character token, -1 if absent
  MergeTable merges_;
  bool ignore_merges_ = false;  // look the whole word up before merging (Llama 3 style)
  WordCache cache_;
};

}  // namespace neuron::tokenizer
