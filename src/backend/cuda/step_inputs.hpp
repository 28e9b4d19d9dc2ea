#pragma once
// The host side of a CUDA step, in plain C++ (no device code, testable
// without a GPU): how a Batch is cut into passes of at most a pass's rows,
// and how a pass's varying inputs are packed into one i32 buffer that goes to
// the device in one copy (StepLayout). The kernels read the packed arrays
// through kernels::StepSeqs and the work lists.
#include <cstdint>
#include <span>
#include <vector>

#include "backend/batch.hpp"
#include "backend/cuda/kernels.hpp"

namespace neuron::backend::cuda {

// Offsets (in i32) of one pass's inputs in the packed buffer. The block
// tables come last, so every decode pass of B sequences has the same layout
// up to them: what a CUDA graph captured for B stays valid whatever the
// tables hold and however long they are.
struct StepLayout {
  int tokens = 0;        // [T] token ids
  int positions = 0;     // [T] each token's position
  int slots = 0;         // [T] each token's pool slot: block * block_size + slot
  int q_start = 0;       // [S] kernels::StepSeqs, one array each
  int num_tokens = 0;    // [S]
  int position = 0;      // [S]
  int block_offset = 0;  // [S]
  int ctx_len = 0;       // [S]
  int state_slot = 0;    // [S] recurrent-state slot (hybrids; -1 without, the scratch slot for padding)
  int decode_items = 0;  // [n_decode] sequences with one new token
  int tiles = 0;         // [n_tiles, 2] (sequence, first row) prefill tiles of kernels::kPrefillTileRows, longest first
  int head_rows = 0;     // [n_rows] hidden rows the LM head reads (eager passes): logits rows, then picks
  int block_tables = 0;  // [n_block_ids]
  int pick_rows = 0;     // [n_picks] rows of the LM head's output whose argmax is picked (after the tables,
                         // outside what a graph reads)
  int end = 0;           // i32 elements in all

  static StepLayout make(int t, int s, int n_decode, int n_tiles, int n_rows, int n_block_ids, int n_picks);
};

// One sequence's share of a pass: a step's sequence, or a piece of one whose
// tokens did not fit in one pass.
struct PassSeq {
  std::span<const std::int32_t> tokens;
  std::int32_t position = 0;
  std::span<const std::int32_t> blocks;  // its block table, cut to the blocks of [0, position + tokens)
  LogitsWanted logits = LogitsWanted::none;
  std::int32_t state_slot = -1;  // SequenceStep::state_slot
};

// What a pass holds, counted before anything is written.
struct PassPlan {
  StepLayout layout;
  int tokens = 0;          // T rows of activations (padding rows included)
  int seqs = 0;            // S sequences (padding sequences included)
  int n_decode = 0;        // sequences with one new token: attention_decode items
  int n_tiles = 0;         // prefill tiles
  int max_decode_ctx = 0;  // the longest decode context of the real sequences
  int max_seq_tokens = 0;  // the most tokens one sequence has (1 for a decode-only pass)
  bool decode_only = false;
  bool padded = false;             // padded to a graph's batch size; no head_rows uploaded
  std::vector<std::int32_t> rows;   // hidden rows whose logits the pass returns, in output order
  std::vector<std::int32_t> picks;  // hidden rows whose greedy pick the pass returns, in output order
};

// Plans a pass of `seqs`; `graph_batch` > 0 pads a decode-only pass to that
// many sequences (one token each at position 0, in the scratch block).
PassPlan plan_pass(std::span<const PassSeq> seqs, int graph_batch);

// Writes the inputs of `plan` into out[0, plan.layout.end). Padding sequences'
// only block is `scratch_block`, and their state slot `scratch_state_slot`,
// which no real sequence holds.
void pack_pass(std::span<const PassSeq> seqs, const PassPlan& plan, std::int32_t block_size,
               std::int32_t scratch_block, std::span<std::int32_t> out, std::int32_t scratch_state_slot = -1);

// Cuts a (checked) batch into passes of at most `max_tokens` tokens, in
// order; a sequence that does not fit goes in pieces, and only its last piece
// gives a `last` row, an `argmax` pick or a `hidden_last` row (every piece
// gives its rows for `all` and `hidden_all`). With want_logits false no piece
// asks for logits, picks or hidden rows. Rows come out in the batch's order,
// pass after pass.
void split_passes(const Batch& batch, std::int32_t block_size, int max_tokens, bool want_logits,
                  std::vector<std::vector<PassSeq>>& passes);

// Logits rows a pass's pieces ask for (`last` and `all`).
std::int64_t pass_rows(std::span<const PassSeq> seqs) noexcept;
// Greedy picks a pass's pieces ask for (`argmax`).
std::int64_t pass_picks(std::span<const PassSeq> seqs) noexcept;
// Hidden rows a pass's pieces ask for (`hidden_last` and `hidden_all`).
std::int64_t pass_hidden_rows(std::span<const PassSeq> seqs) noexcept;

}  // namespace neuron::backend::cuda
