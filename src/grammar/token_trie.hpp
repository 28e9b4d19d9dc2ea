#pragma once
// A model's vocabulary as a byte trie, for computing which tokens keep a
// grammar's output valid (grammar/matcher.hpp walks it with the parser state
// and prunes a whole subtree at the first byte the grammar refuses).
//
// Holds every token that stands for bytes: the byte-level BPE vocabulary and
// the non-special added tokens (Qwen3's <tool_call>, <think>, ...). Special
// tokens (<|im_end|>, ...) and the embedding's padding ids past the
// tokenizer's vocabulary are never in it, so a grammar can never emit them
// (EOS is allowed separately, when the grammar is complete). Immutable after
// construction; shared by every sequence of the model.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.hpp"
#include "tokenizer/tokenizer.hpp"

namespace neuron::grammar {

class TokenTrie {
 public:
  struct Node {
    std::uint32_t first_child = 0;  // children are nodes [first_child, first_child + num_children), by byte
    std::uint32_t num_children = 0;
    std::uint32_t ids_begin = 0;    // tokens whose bytes end here: ids()[ids_begin, ids_end)
    std::uint32_t ids_end = 0;
    std::uint32_t subtree_end = 0;  // tokens at or below this node: ids()[ids_begin, subtree_end)
    std::uint8_t byte = 0;          // the byte leading here from the parent (root: unused)
  };

  // `logits_vocab`: the model's logits row size (>= the tokenizer's ids; Qwen3 pads to 151936).
  TokenTrie(const tokenizer::Tokenizer& tok, std::int64_t logits_vocab);
  // A vocabulary given as each id's bytes (an empty string: no bytes, never
  // allowed); the logits row is as long as the list. For tests and tools.
  explicit TokenTrie(const std::vector<std::string>& bytes_by_id);

  std::int64_t logits_vocab() const noexcept { return logits_vocab_; }
  const std::vector<Node>& nodes() const noexcept { return nodes_; }  // [0] is the root (the empty prefix)
  const std::vector<std::int32_t>& ids() const noexcept { return ids_; }
  // Every byte on the paths below `node` (not its own): a state that loops on
  // all of them allows the whole subtree without walking it.
  const ByteSet& below(std::uint32_t node) const noexcept { return below_[node]; }
  // The bytes of a token in the trie; empty for any other id.
  std::string_view bytes(std::int32_t id) const noexcept;

 private:
  void build(const std::vector<std::int32_t>& ids);  // from offsets_/data_
  std::int64_t logits_vocab_;
  std::vector<Node> nodes_;
  std::vector<std::int32_t> ids_;
  std::vector<ByteSet> below_;  // [nodes]
  std::vector<std::uint32_t> offsets_;  // [logits_vocab + 1] token id -> its bytes in data_
  std::string data_;
};

}  // namespace neuron::grammar
