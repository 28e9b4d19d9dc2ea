#pragma once
// The synchronous heart of continuous batching, shared by the Engine (on its
// thread) and generate() (the command-line tools): a Scheduler and a
// BlockManager over one runner's KV pool. Each step() plans a batch, runs
// the runner once, samples every sequence that reached the end of its tokens
// (in parallel: each sequence has its own Sampler; a sequence that asked for
// logprobs gets them from its raw row, which costs the others nothing), and tells each
// sequence's observer about its token. EOS ids, max_tokens and the context
// limit end a sequence here; its observer can end it too (stop strings,
// cancellation). A sequence with a grammar samples from its matcher's mask
// (computed in the same parallel loop), advances the matcher by the sampled
// token, and ends ("stop") when the grammar is done. A finished sequence's blocks go back to the pool at once
// (full ones stay cached for reuse). A prefill-only sequence (engine/prefill_output.hpp) samples nothing: its
// hidden rows are pooled here (last token, or the mean over every token) or its scored logits kept, into
// Sequence::output, and it ends ("stop") in the step that computes its last prompt token. A hybrid model's runner
// (KvPoolShape::state_slots > 0): each running sequence holds one of its state slots, and prefixes are reused
// through its state snapshots (KvPoolShape::state_snapshots; none: no prefix caching). The Scheduler plans the
// copies; the step runs the restores before the runner's step and the saves right after it.
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/model_runner.hpp"
#include "engine/block_manager.hpp"
#include "engine/scheduler.hpp"
#include "engine/sequence.hpp"

namespace neuron::engine {

struct BatcherOptions {
  SchedulerOptions scheduler;
  bool prefix_caching = true;
};

struct StepStats {
  std::int32_t seqs = 0;       // sequences in the step's batch (0: nothing to run)
  std::int32_t tokens = 0;     // new tokens in the batch
  std::int32_t sampled = 0;    // sequences that got a token
  std::int32_t preempted = 0;  // sequences preempted while planning it
};

class Batcher {
 public:
  // The runner must outlive the Batcher and have no other user.
  Batcher(backend::ModelRunner& runner, BatcherOptions options);

  // Throws Error{context_length_exceeded} when a sequence of this size could
  // never run: its prompt + max_tokens - 1 positions (the last token is never
  // fed) past the runner's max_context, or more blocks than the whole pool.
  void check_fits(std::int64_t prompt_len, std::int64_t max_tokens) const;
  // Queues a sequence (checked with check_fits by the caller); it must stay
  // alive until its observer's on_finish, or until drop().
  void add(Sequence& seq);
  // Ends a sequence now; its observer hears on_finish(reason).
  void finish(Sequence& seq, FinishReason reason);
  // Forgets a sequence without telling its observer (the caller reports why).
  void drop(Sequence& seq);

  // One step. Throws whatever the runner throws; then no sequence advanced
  // and the caller decides their fate (the runner may be unusable).
  StepStats step();

  bool idle() const noexcept { return scheduler_.waiting() == 0 && scheduler_.running() == 0; }
  std::size_t waiting() const noexcept { return scheduler_.waiting(); }
  std::size_t running() const noexcept { return scheduler_.running(); }
  const Scheduler& scheduler() const noexcept { return scheduler_; }
  BlockStats blocks() const noexcept { return blocks_.stats(); }
  std::int32_t max_context() const noexcept { return max_context_; }
  // Whether full blocks are shared between sequences: as asked, and for a hybrid (state slots) only with state snapshots.
  bool prefix_caching() const noexcept { return prefix_caching_; }

 private:
  // The pick for one host-sampled row: from the sampler, within the grammar's allowed tokens when constrained.
  std::int32_t sample_row(Sequence& s, std::span<float> row);
  static constexpr std::int32_t kNoToken = -1;  // a grammar allowed no token: the sequence ends ("length")
  // Applies a sampled token; returns true when the sequence finished.
  bool accept(Sequence& seq, std::int32_t token);

  backend::ModelRunner& runner_;
  std::int32_t max_context_;
  bool prefix_caching_;
  std::int64_t vocab_;
  std::int64_t hidden_size_;
  BlockManager blocks_;
  Scheduler scheduler_;
  backend::Batch batch_;             // reused between steps
  backend::HostFloats logits_;       // [logits_rows_, vocab] f32 from runner.alloc_logits (pinned on CUDA)
  std::int64_t logits_rows_ = 0;
  std::vector<std::int32_t> device_picks_;  // [argmax sequences] greedy picks the runner made
  std::vector<float> hidden_;               // [hidden rows, hidden] f32 final-norm rows of prefill-only sequences
  std::vector<std::int32_t> picks_;         // [sampling sequences] the tokens sampled this step on the host
  std::vector<std::optional<model::TokenLogprobs>> picked_logprobs_;  // [sampling sequences] set for rows that asked
};

}  // namespace neuron::engine
