#include "engine/scheduler.hpp"

#include <algorithm>

#include "util/error.hpp"

namespace neuron::engine {

Scheduler::Scheduler(BlockManager& blocks, SchedulerOptions options)
    : blocks_(blocks), options_(options), snapshots_(options.state_slots > 0 ? options.state_snapshots : 0) {
  NEURON_ASSERT(options_.max_num_seqs >= 1 && options_.max_batch_tokens >= 1 && options_.state_slots >= 0 &&
                options_.state_snapshots >= 0);
  for (std::int32_t s = options_.state_slots - 1; s >= 0; --s) free_slots_.push_back(s);
  // A snapshot is the state at the end of a cached block: it goes when the block does.
  if (snapshots_.capacity() > 0) blocks_.on_evict([this](std::int32_t id) { snapshots_.drop(id); });
}

void Scheduler::release(Sequence& seq) {
  blocks_.release(seq.blocks);
  seq.computed = 0;
  seq.registered = 0;
  seq.snapshot_block = -1;
  if (seq.state_slot >= 0) {
    free_slots_.push_back(seq.state_slot);
    seq.state_slot = -1;
  }
}

void Scheduler::add(Sequence& seq) { waiting_.push_back(&seq); }

void Scheduler::remove(Sequence& seq) {
  if (auto it = std::find(running_.begin(), running_.end(), &seq); it != running_.end()) running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), &seq); it != waiting_.end()) waiting_.erase(it);
  release(seq);
}

void Scheduler::preempt(Sequence& seq) {
  running_.erase(std::find(running_.begin(), running_.end(), &seq));
  release(seq);
  seq.preemptions += 1;
  waiting_.push_front(&seq);
}

std::int32_t Scheduler::take_prefix(Sequence& seq) {
  NEURON_ASSERT(seq.blocks.empty() && seq.computed == 0);
  // At least the last token is computed: its logits pick the next token. Mean pooling needs every token's
  // hidden state, so such a sequence computes all of them.
  const bool every_row = seq.params().output == PrefillOutput::hidden_mean;
  seq.blocks = blocks_.match_prefix(seq.tokens, every_row ? 0 : seq.len() - 1);
  std::int32_t snapshot = -1;
  if (options_.state_slots > 0) {  // a hybrid resumes only where a snapshot holds the state: the longest such prefix
    auto keep = static_cast<std::int32_t>(seq.blocks.size());
    for (; keep > 0; --keep) {
      if (const auto found = snapshots_.find(seq.blocks[static_cast<std::size_t>(keep - 1)])) {
        snapshot = *found;
        break;
      }
    }
    blocks_.truncate(seq.blocks, keep);
  }
  seq.computed = static_cast<std::int32_t>(seq.blocks.size()) * blocks_.block_size();
  seq.registered = static_cast<std::int32_t>(seq.blocks.size());
  if (seq.cached_prompt_tokens < 0) seq.cached_prompt_tokens = std::min(seq.computed, seq.prompt_len());
  return snapshot;
}

std::int32_t Scheduler::last_boundary(const Sequence& seq) const noexcept {
  return (seq.len() - 1) / blocks_.block_size() * blocks_.block_size();
}

std::int32_t Scheduler::chunk(const Sequence& seq, std::int32_t budget) const {
  std::int32_t n = std::min(seq.len() - seq.computed, budget);
  if (snapshots_.capacity() > 0) {  // end the chunk at the last block boundary before its last token: a snapshot there
    const std::int32_t boundary = last_boundary(seq);
    if (seq.computed < boundary && seq.computed + n > boundary) n = boundary - seq.computed;
  }
  return n;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  std::int32_t budget = options_.max_batch_tokens;

  // Running sequences: decodes first (one token each), then unfinished prefills.
  std::vector<Sequence*> order;
  order.reserve(running_.size());
  for (Sequence* s : running_)
    if (s->len() - s->computed == 1) order.push_back(s);
  for (Sequence* s : running_)
    if (s->len() - s->computed > 1) order.push_back(s);

  std::vector<Sequence*> preempted;
  for (Sequence* s : order) {
    if (budget == 0) break;
    if (std::find(preempted.begin(), preempted.end(), s) != preempted.end()) continue;
    const std::int32_t n = chunk(*s, budget);
    bool ran = true;
    while (!blocks_.grow(s->blocks, s->computed + n)) {
      // Room from the most recently admitted sequence that is not already in this step.
      Sequence* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        const bool planned = std::any_of(plan.seqs.begin(), plan.seqs.end(), [&](const auto& p) { return p.seq == *it; });
        if (!planned) {
          victim = *it;
          break;
        }
      }
      NEURON_ASSERT(victim != nullptr);  // s itself is never planned yet
      preempt(*victim);
      preempted.push_back(victim);
      plan.preempted += 1;
      if (victim == s) {
        ran = false;
        break;
      }
    }
    if (!ran) continue;
    plan.seqs.push_back({s, n, s->computed + n == s->len()});
    plan.num_tokens += n;
    budget -= n;
  }

  // Waiting sequences, in order, while there is room; none after a preemption.
  while (plan.preempted == 0 && budget > 0 && !waiting_.empty() &&
         static_cast<std::int32_t>(running_.size()) < options_.max_num_seqs &&
         (options_.state_slots == 0 || !free_slots_.empty())) {
    Sequence* s = waiting_.front();
    const std::int32_t snapshot = take_prefix(*s);
    const std::int32_t n = chunk(*s, budget);
    if (!blocks_.grow(s->blocks, s->computed + n)) {
      blocks_.release(s->blocks);  // the prefix references: it stays queued, holding nothing
      s->computed = 0;
      s->registered = 0;
      break;
    }
    waiting_.pop_front();
    running_.push_back(s);
    if (options_.state_slots > 0) {  // its recurrent state starts from zero at position 0, or from the prefix's snapshot
      NEURON_ASSERT((s->computed == 0) == (snapshot < 0));
      s->state_slot = free_slots_.back();
      free_slots_.pop_back();
      if (snapshot >= 0) plan.restores.push_back({s->state_slot, snapshot});
    }
    plan.seqs.push_back({s, n, s->computed + n == s->len()});
    plan.num_tokens += n;
    budget -= n;
  }
  return plan;
}

std::vector<StateCopy> Scheduler::complete(const StepPlan& plan) {
  std::vector<StateCopy> saves;
  const std::int32_t bs = blocks_.block_size();
  for (const ScheduledSequence& p : plan.seqs) {
    Sequence& s = *p.seq;
    s.computed += p.num_new;
    s.registered = blocks_.register_full(s.blocks, s.tokens, s.computed, s.registered);
    if (snapshots_.capacity() == 0 || s.state_slot < 0 || s.computed % bs != 0) continue;
    // Its slot holds the state after exactly `computed` tokens, a block boundary: worth a snapshot from the last
    // boundary before its last token on (a prefill chunk ended there on purpose: what a repeat of the prompt
    // resumes from; the end of its prompt; every boundary of its answer, the next turn's prefix).
    if (s.computed < last_boundary(s)) continue;
    const bool past_prompt = s.computed > s.prompt_len();
    // The cached block that ends there (this sequence's own, or the one its private duplicate copies).
    const std::int32_t block = blocks_.cached_block(s.blocks[static_cast<std::size_t>(s.computed / bs - 1)]);
    if (block < 0) continue;
    const auto snapshot = snapshots_.take(block);
    if (!snapshot) continue;
    if (past_prompt) {
      if (s.snapshot_block >= 0) snapshots_.drop(s.snapshot_block);
      s.snapshot_block = block;
    }
    saves.push_back({s.state_slot, *snapshot});
  }
  return saves;
}

}  // namespace neuron::engine
