#pragma once
// One step of a batch of sequences: what the engine's scheduler hands a
// ModelRunner. Each sequence brings its new tokens (one when decoding, a chunk
// when prefilling), the position of the first, and its block table: the KV
// blocks that hold (and will hold) its positions. Position p of a sequence
// lives in block block_ids[block_begin + p / block_size], slot p % block_size.
//
// The engine owns the blocks (which sequence holds which, prefix sharing,
// reference counts); a runner owns the memory behind them (KvPoolShape) and
// only reads and writes where a Batch points. A step writes the keys and
// values of every new token and reads every position before it, so:
//   - positions [0, position) of a sequence must already be in its blocks;
//   - no two new tokens of a step may write the same (block, slot), and no
//     sequence may read a slot another writes in the same step (the engine
//     shares only full blocks that earlier steps computed).
// check_batch() verifies all of it, so a scheduler bug is an Error, never a
// write outside the pool.
//
// A hybrid model (linear-attention layers, model::LinearAttentionConfig) also
// keeps a recurrent state per sequence, which cannot be paged or shared: the
// runner owns a pool of state slots (KvPoolShape::state_slots) and each
// sequence of a step names the one it holds (SequenceStep::state_slot; the
// engine assigns it at admission and frees it at finish, cancel and
// preemption). A step at position 0 starts the slot from zero; a later step
// continues from what the slot holds, which must be the state after exactly
// `position` tokens of this sequence (the previous step's, so chunks of a
// prompt follow each other). A sequence resumes from a shared prefix only
// through a snapshot: the runner also keeps KvPoolShape::state_snapshots
// snapshot slots, and between steps the engine copies a sequence's slot into
// one when its computed length reaches a block boundary
// (ModelRunner::save_state) and copies one back into a new sequence's slot
// whose first tokens are that same prefix (ModelRunner::restore_state), so
// its first step starts at the boundary.
#include <cstdint>
#include <span>
#include <vector>

#include "model/config.hpp"

namespace neuron::backend {

// The KV memory of one rank, in fixed-size blocks of positions.
struct KvPoolShape {
  std::int32_t block_size = 0;  // positions per block
  std::int32_t num_blocks = 0;  // blocks in the pool; ids are [0, num_blocks)
  std::uint64_t bytes_per_block = 0;  // K and V of every full-attention layer and local KV head, as held on the device
  std::int32_t state_slots = 0;       // recurrent-state slots; 0: the model has none (no linear attention)
  std::uint64_t bytes_per_state_slot = 0;  // one sequence's conv and delta-rule state of every linear layer
  std::int32_t state_snapshots = 0;  // snapshot slots of that state (prefix reuse), bytes_per_state_slot each; 0: none
};

// What a sequence wants from a step's last stage: logits from the LM head, a
// greedy pick, or (prefill-only sequences: embeddings) the final-norm hidden
// state itself, which skips the LM head.
enum class LogitsWanted : std::uint8_t {
  none,  // a prefill chunk that is not the prompt's last: no LM head
  last,  // one row: the last new token's (decode, or the prompt's last chunk)
  all,   // num_tokens rows, one per new token (tests, prompt logprobs)
  argmax,  // the last new token's greedy pick (model::greedy_pick's rule), not its row: a runner
           // that can picks on its device and copies one id back instead of a [vocab] row
  hidden_last,  // one row of the hidden output: the last new token's final-norm hidden state
  hidden_all,   // num_tokens rows of the hidden output, one per new token
};


struct SequenceStep {
  std::int32_t token_begin = 0;  // its new tokens: Batch::tokens[token_begin, token_begin + num_tokens)
  std::int32_t num_tokens = 0;   // >= 1
  std::int32_t position = 0;     // position of its first new token
  std::int32_t block_begin = 0;  // its block table: Batch::block_ids[block_begin, block_begin + num_blocks)
  std::int32_t num_blocks = 0;   // covers positions [0, position + num_tokens)
  LogitsWanted logits = LogitsWanted::last;
  std::int32_t state_slot = -1;  // its recurrent-state slot when the pool has state_slots, else -1
};

// Rows a sequence adds to the logits output (`last` 1, `all` num_tokens) and to the hidden output
// (`hidden_last` 1, `hidden_all` num_tokens).
std::int64_t logit_rows_of(const SequenceStep& s) noexcept;
std::int64_t hidden_rows_of(const SequenceStep& s) noexcept;

struct Batch {
  std::vector<std::int32_t> tokens;     // [T] every sequence's new tokens, in sequence order
  std::vector<SequenceStep> seqs;       // [S]
  std::vector<std::int32_t> block_ids;  // [sum of num_blocks] every sequence's block table, concatenated

  // Appends one sequence; its logits rows follow the earlier sequences' rows.
  void add(std::span<const std::int32_t> new_tokens, std::int32_t position, std::span<const std::int32_t> blocks,
           LogitsWanted logits, std::int32_t state_slot = -1);
  void clear();
  bool empty() const noexcept { return seqs.empty(); }
  std::int64_t num_tokens() const noexcept { return static_cast<std::int64_t>(tokens.size()); }
  // Rows of the logits output: 1 per `last`, num_tokens per `all`, in sequence order.
  std::int64_t logit_rows() const noexcept;
  // Entries of the picks output: 1 per `argmax` sequence, in sequence order.
  std::int64_t pick_rows() const noexcept;
  // Rows of the hidden output ([rows, hidden] f32): 1 per `hidden_last`, num_tokens per `hidden_all`.
  std::int64_t hidden_rows() const noexcept;
};

// The runner-independent checks of a step, one owner for every backend:
// at least one sequence; every token id inside the vocabulary; positions >= 0;
// position + num_tokens <= max_context; spans inside tokens and block_ids;
// a block table long enough for the new positions and no longer than the
// pool; block ids inside the pool; no (block, slot) written twice and none
// read by one sequence while another writes it (so a block written this step
// appears once in one table); logits.size() equal to
// logit_rows() * vocab_size, picks.size() equal to pick_rows() and
// hidden.size() equal to hidden_rows() * hidden_size, or all three empty (no
// LM head: a tensor-parallel worker); with state slots, every sequence's slot
// inside [0, state_slots) and no slot named twice, else -1. Throws Error{invalid_argument}
// (or context_length_exceeded) naming the sequence and the field.
void check_batch(const Batch& batch, const model::ModelConfig& cfg, const KvPoolShape& pool, std::int32_t max_context,
                 std::span<const float> logits, std::span<const std::int32_t> picks = {},
                 std::span<const float> hidden = {});

}  // namespace neuron::backend
