#pragma once
// Decides, step by step, which sequences run and how many of their tokens:
// continuous batching with chunked prefill (vLLM v1's scheduler, reduced).
//
// Each step has a token budget (max_batch_tokens). Running sequences come
// first: those decoding (one token each), then those still prefilling (the
// rest of their prompt, or a chunk of it). Then waiting sequences are
// admitted in arrival order while the budget, max_num_seqs and the KV pool
// allow: a new one first takes the longest cached prefix of its tokens (at
// least its last token is always computed, since its logits pick the next
// one), then a chunk of the rest. FIFO: when the head of the queue cannot be
// admitted, nobody behind it is.
//
// When a running sequence needs a block and none is left, the most recently
// admitted running sequence is preempted: its blocks go back to the pool and
// it returns to the front of the queue, to be recomputed from its tokens
// (prompt and what it generated so far) later. Every admitted sequence fits
// the pool alone (the engine refuses one that cannot), so this always ends.
//
// A hybrid model's sequences also each hold one of the runner's recurrent-
// state slots (SchedulerOptions::state_slots) from admission until they
// finish, are cancelled or preempted (a preempted one restarts from scratch
// with whichever slot is free when it is admitted again); no free slot stops
// admission like a full pool does.
//
// With state snapshots (SchedulerOptions::state_snapshots > 0, and prefix
// caching on) a hybrid reuses prefixes too (engine/state_snapshots.hpp): when a
// sequence's computed length reaches the last block boundary before its last
// token (a prefill chunk that would run past it is cut there: a repeat of the
// prompt, or a sibling choice, resumes there), the end of its prompt when that
// is a boundary, or any boundary past its prompt (decode: the answer is the
// next turn's prompt; each one replaces the sequence's previous such
// snapshot), the step's complete() asks for its slot to be saved into a
// snapshot of the block that ends there. At admission the longest cached prefix whose last block has a
// snapshot is taken: the blocks after it are let go, the plan asks for the
// snapshot to be restored into the new slot, and the rest is prefilled.
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.hpp"
#include "engine/sequence.hpp"
#include "engine/state_snapshots.hpp"

namespace neuron::engine {

struct SchedulerOptions {
  std::int32_t max_num_seqs = 64;        // running sequences at most
  std::int32_t max_batch_tokens = 2048;  // new tokens per step at most (>= 1)
  std::int32_t state_slots = 0;          // the runner's recurrent-state slots (hybrids, backend/batch.hpp); 0: none
  std::int32_t state_snapshots = 0;      // the runner's snapshot slots to reuse prefixes with; 0: hybrids reuse none
};

// One copy of a recurrent state between a sequence's slot and a snapshot slot (ModelRunner::save_state / restore_state).
struct StateCopy {
  std::int32_t slot = -1;
  std::int32_t snapshot = -1;
};

struct ScheduledSequence {
  Sequence* seq = nullptr;
  std::int32_t num_new = 0;  // tokens[computed, computed + num_new) run this step
  bool sample = false;       // the step reaches the end of its tokens: sample from its logits
};

struct StepPlan {
  std::vector<ScheduledSequence> seqs;  // in batch order
  std::int32_t preempted = 0;           // sequences preempted while planning
  std::int32_t num_tokens = 0;
  std::vector<StateCopy> restores;      // before the step runs: snapshot -> an admitted sequence's slot
  bool empty() const noexcept { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(BlockManager& blocks, SchedulerOptions options);
  Scheduler(const Scheduler&) = delete;  // the BlockManager's eviction listener points at this one
  Scheduler& operator=(const Scheduler&) = delete;

  void add(Sequence& seq);     // to the back of the queue
  // Drops a sequence wherever it is (finished, cancelled, failed) and gives its blocks back.
  void remove(Sequence& seq);
  StepPlan schedule();
  // After the step ran: advances each sequence's computed positions and
  // registers its newly full blocks for reuse. Returns the saves to run now,
  // before any slot changes hands (slot -> snapshot).
  std::vector<StateCopy> complete(const StepPlan& plan);

  std::size_t waiting() const noexcept { return waiting_.size(); }
  std::size_t running() const noexcept { return running_.size(); }
  const std::deque<Sequence*>& waiting_list() const noexcept { return waiting_; }
  const std::vector<Sequence*>& running_list() const noexcept { return running_; }
  const SchedulerOptions& options() const noexcept { return options_; }
  const StateSnapshots& snapshots() const noexcept { return snapshots_; }

 private:
  void preempt(Sequence& seq);
  // Takes what can be reused of the prefix cache for a sequence being admitted;
  // returns the snapshot its state slot must start from, or -1 (position 0).
  std::int32_t take_prefix(Sequence& seq);
  // Tokens of `seq` to run now within `budget`: up to the end of its tokens, cut at
  // last_boundary() when snapshots are taken.
  std::int32_t chunk(const Sequence& seq, std::int32_t budget) const;
  // The last block boundary before its last token: the longest prefix a repeat of its tokens can resume from.
  std::int32_t last_boundary(const Sequence& seq) const noexcept;

  void release(Sequence& seq);  // its blocks and state slot back

  BlockManager& blocks_;
  SchedulerOptions options_;
  StateSnapshots snapshots_;
  std::vector<std::int32_t> free_slots_;  // state slots no running sequence holds (a stack)
  std::deque<Sequence*> waiting_;   // arrival order; preempted ones go back to the front
  std::vector<Sequence*> running_;  // admission order; the last is preempted first
};

}  // namespace neuron::engine
