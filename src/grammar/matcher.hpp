#pragma once
// Constrained decoding at run time.
//
// CompiledGrammar: one grammar bound to one model's vocabulary (TokenTrie),
// immutable but for a cache of token masks keyed by parser state, shared by
// every sequence using the grammar (and by later requests with the same
// constraint, through grammar/cache.hpp). Thread-safe.
//
// Matcher: one sequence's parser state. The grammar is parsed byte by byte as
// a set of stacks (a nondeterministic pushdown automaton, as llama.cpp's GBNF
// does): each stack is a chain of positions in the grammar's element array,
// its top a byte set to match next, the rest the places to return to. Stacks
// live in a per-matcher arena as immutable (position, parent) nodes, so the
// stacks of a state share their tails; within one step a (position, parent)
// pair is made and expanded once, so ambiguity never multiplies work. Bounds:
// at most kMaxStacks stacks (more are dropped: every stack left is still a
// valid parse) and kMaxStackDepth nested returns (deeper parses are dropped,
// so a model cannot nest without end).
//
// mask(): the tokens that keep the output a valid prefix, as a bitset over
// the logits row, computed by walking the TokenTrie with the state (a
// refused byte prunes the subtree; a `star` top whose set holds every byte
// below a node takes its whole subtree) and cached by the state's canonical form;
// EOS ids are added when the grammar is complete. The walk's work is bounded
// (kMaxMaskWork), so a hostile schema cannot stall the batch. accept_token() advances
// the state by a sampled token's bytes. done(): the output is complete and
// nothing may follow (the caller ends the sequence).
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.hpp"
#include "grammar/token_trie.hpp"

namespace neuron::grammar {

inline constexpr std::size_t kMaxStacks = 1024;
inline constexpr std::uint32_t kMaxStackDepth = 512;
// Stack advances one mask may cost (a JSON string state over Qwen3's
// vocabulary takes about 3M, 130-200 ms on the 2-core Xeon guest).
// A pathological grammar (hundreds of ambiguous stacks over a permissive
// state) stops there with the tokens found so far: still only valid ones.
inline constexpr std::uint64_t kMaxMaskWork = 8'000'000;

// Tokens allowed in one state: a bitset over the logits row.
struct TokenMask {
  std::vector<std::uint64_t> bits;  // [(logits_vocab + 63) / 64] bit id: token id allowed
  std::int64_t count = 0;           // bits set
};

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenTrie> trie);

  const Grammar& grammar() const noexcept { return grammar_; }
  const TokenTrie& trie() const noexcept { return *trie_; }
  std::int64_t logits_vocab() const noexcept { return trie_->logits_vocab(); }

  // The cached mask of a state key (Matcher's canonical form), or null.
  std::shared_ptr<const TokenMask> cached(const std::string& key) const;
  void remember(const std::string& key, std::shared_ptr<const TokenMask> mask) const;
  struct CacheStats {
    std::uint64_t hits = 0, misses = 0;
  };
  CacheStats cache_stats() const;

 private:
  static constexpr std::size_t kMaxCachedMasks = 256;  // ~19 KB each for Qwen3: at most ~5 MB per grammar

  Grammar grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> masks_;
  mutable CacheStats stats_;
};

class Matcher {
 public:
  // `max_mask_work`: the bound on one mask's walk (tests lower it).
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::uint64_t max_mask_work = kMaxMaskWork);

  // Advances by `bytes` if the grammar allows all of them; false (state
  // unchanged) otherwise.
  bool accept_bytes(std::string_view bytes);
  // Advances by a token's bytes (TokenTrie::bytes); false for a token the
  // grammar does not allow here (or one with no bytes).
  bool accept_token(std::int32_t id);

  // The tokens allowed next, plus `eos_ids` when complete(). Valid until the
  // next call on this matcher. count == 0: nothing can follow (a bound
  // refused the only way on): the caller ends the sequence.
  const TokenMask& mask(std::span<const std::int32_t> eos_ids);

  // The mask if this state's is already cached (cheap), else null; as mask().
  const TokenMask* cached_mask(std::span<const std::int32_t> eos_ids);
  // Whether `id` may come next (an EOS id: whether complete()), without
  // changing the state: checks one token without computing a mask.
  bool allows(std::int32_t id, std::span<const std::int32_t> eos_ids);

  bool complete() const noexcept { return state_.accepted; }                   // the output so far is a whole value
  bool done() const noexcept { return state_.accepted && state_.tops.empty(); }  // ... and nothing may follow
  const CompiledGrammar& grammar() const noexcept { return *g_; }

 private:
  struct Node {
    std::uint32_t pos;     // element: a byte set to match (top) or where to resume (a return frame)
    std::int32_t parent;   // next node down the stack; -1: the bottom
    std::uint32_t depth;   // nodes in this stack
  };
  // One step's set of stacks.
  struct State {
    std::vector<std::int32_t> tops;
    bool accepted = false;
  };

  void begin_round();
  std::size_t slot(std::uint32_t pos, std::int32_t parent);   // the round's table entry for (pos, parent)
  std::int32_t node(std::uint32_t pos, std::int32_t parent);  // made once per round; -1: too deep
  // Expands (pos, parent) into tops whose element is a byte set; `existing`: reuse this node for it.
  void expand(std::uint32_t pos, std::int32_t parent, State& out, std::int32_t existing = -1);
  void advance(const State& in, std::uint8_t byte, State& out);
  std::string key(const State& s) const;
  void compute(const State& s, TokenMask& out);
  void collect_garbage();
  const TokenMask& with_eos(std::span<const std::int32_t> eos_ids);

  std::shared_ptr<const CompiledGrammar> g_;
  std::uint64_t max_mask_work_;
  std::vector<Node> arena_;
  State state_;
  State scratch_;  // accept_bytes' next state

  // The round's (pos, parent) -> node table: open addressing, cleared by a generation bump.
  struct Slot {
    std::uint64_t key = 0;
    std::int32_t id = -1;
    std::uint32_t gen = 0;
    bool expanded = false;
  };
  std::vector<Slot> table_;
  std::uint32_t gen_ = 0;
  std::size_t round_nodes_ = 0;
  struct Item {
    std::uint32_t pos;
    std::int32_t parent, existing;
  };
  std::vector<Item> work_;  // expand's worklist

  std::vector<State> levels_;  // trie walk: the state after each depth's byte
  std::shared_ptr<const TokenMask> current_;  // the state's cached mask
  TokenMask with_eos_;                        // current_ plus EOS ids, when complete
};

}  // namespace neuron::grammar
