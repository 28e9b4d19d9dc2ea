#include "engine/batcher.hpp"

#include <algorithm>
#include <exception>
#include <span>
#include <string>

#include "util/error.hpp"

namespace neuron::engine {

namespace {

SchedulerOptions with_states(SchedulerOptions o, const backend::KvPoolShape& pool, bool prefix_caching) {
  o.state_slots = pool.state_slots;
  o.state_snapshots = prefix_caching ? pool.state_snapshots : 0;
  return o;
}

}  // namespace

Batcher::Batcher(backend::ModelRunner& runner, BatcherOptions options)
    : runner_(runner),
      max_context_(runner.max_context()),
      // A hybrid's recurrent state resumes from a shared prefix only through a state snapshot: without
      // snapshot slots its sequences always compute their whole prompt.
      prefix_caching_(options.prefix_caching &&
                      (runner.kv_pool().state_slots == 0 || runner.kv_pool().state_snapshots > 0)),
      vocab_(runner.config().vocab_size),
      hidden_size_(runner.config().hidden_size),
      blocks_(runner.kv_pool().num_blocks, runner.kv_pool().block_size, prefix_caching_),
      scheduler_(blocks_, with_states(options.scheduler, runner.kv_pool(), prefix_caching_)) {}

void Batcher::check_fits(std::int64_t prompt_len, std::int64_t max_tokens) const {
  // The last sampled token is never fed, so a sequence holds prompt + max_tokens - 1 positions.
  const std::int64_t positions = prompt_len + max_tokens - 1;
  if (positions > max_context_)
    fail(errc::context_length_exceeded, "the prompt (" + std::to_string(prompt_len) + " tokens) and max_tokens (" +
                                            std::to_string(max_tokens) + ") need " + std::to_string(positions) +
                                            " positions; this model's context is " + std::to_string(max_context_));
  const std::int64_t blocks = (positions + blocks_.block_size() - 1) / blocks_.block_size();
  if (blocks > blocks_.num_blocks())
    fail(errc::context_length_exceeded, "the prompt and max_tokens need " + std::to_string(blocks) +
                                            " KV blocks, but the whole KV cache has " +
                                            std::to_string(blocks_.num_blocks()));
}

void Batcher::add(Sequence& seq) {
  NEURON_ASSERT(!seq.tokens.empty() && seq.computed == 0 && seq.blocks.empty());
  scheduler_.add(seq);
}

void Batcher::finish(Sequence& seq, FinishReason reason) {
  if (seq.finished) return;
  seq.finished = true;
  scheduler_.remove(seq);
  seq.observer().on_finish(reason);
}

void Batcher::drop(Sequence& seq) {
  seq.finished = true;
  scheduler_.remove(seq);
}

bool Batcher::accept(Sequence& seq, std::int32_t token) {
  const SequenceParams& p = seq.params();
  if (token == kNoToken) {  // the grammar allows nothing here (a depth bound cut the only way on)
    finish(seq, FinishReason::length);
    return true;
  }
  grammar::Matcher* matcher = seq.matcher();
  const bool is_eos = std::find(p.stop_ids.begin(), p.stop_ids.end(), token) != p.stop_ids.end();
  // With a grammar, EOS is only ever sampled once the output is complete.
  if (is_eos && (!p.ignore_eos || (matcher && matcher->complete()))) {
    finish(seq, FinishReason::stop);
    return true;
  }
  // The sampler drew from the grammar's mask, so the grammar takes the token.
  const bool grammar_ok = !matcher || matcher->accept_token(token);
  NEURON_ASSERT(grammar_ok);
  seq.tokens.push_back(token);
  seq.generated += 1;
  if (const auto reason = seq.observer().on_token(token)) {
    finish(seq, *reason);
    return true;
  }
  if (matcher && matcher->done()) {  // a whole value and nothing may follow: end here, as EOS would
    finish(seq, FinishReason::stop);
    return true;
  }
  // The next step would write position len() - 1.
  if (seq.generated >= p.max_tokens || seq.len() > max_context_) {
    finish(seq, FinishReason::length);
    return true;
  }
  return false;
}

std::int32_t Batcher::sample_row(Sequence& s, std::span<float> row) {
  grammar::Matcher* m = s.matcher();
  if (!m) return s.sampler().sample(row, s.tokens, static_cast<std::size_t>(s.prompt_len()));
  const auto eos = std::span<const std::int32_t>(s.params().stop_ids);
  const grammar::TokenMask* mask = m->cached_mask(eos);
  if (!mask) {
    // No mask cached for this state: computing one walks the vocabulary.
    // Draw without it first and keep the token if the grammar takes it
    // (sampling p and, on a refusal, p restricted to the allowed set gives
    // exactly the constrained distribution; greedy keeps the argmax).
    thread_local std::vector<float> saved;
    saved.assign(row.begin(), row.end());
    const std::int32_t t = s.sampler().sample(row, s.tokens, static_cast<std::size_t>(s.prompt_len()));
    if (m->allows(t, eos)) return t;
    std::copy(saved.begin(), saved.end(), row.begin());
    mask = &m->mask(eos);
  }
  if (mask->count == 0) return kNoToken;
  return s.sampler().sample(row, s.tokens, static_cast<std::size_t>(s.prompt_len()), mask->bits.data());
}

StepStats Batcher::step() {
  StepStats stats;
  const StepPlan plan = scheduler_.schedule();
  stats.preempted = plan.preempted;
  if (plan.empty()) return stats;

  // A plain greedy, unconstrained sequence that wants no logprobs takes its pick from the runner (made on the device: one
  // id copied back instead of a [vocab] row); the others sample their logits row here. Prefill-only sequences ask for
  // hidden rows (embeddings) or, at their last token, a logits row (scores).
  batch_.clear();
  std::vector<Sequence*> sampled, greedy;  // in batch order within each kind
  std::vector<std::int64_t> sampled_rows;  // [sampled] each one's row of the logits output
  struct Scored {
    Sequence* seq;
    std::int64_t row;  // of the logits output
  };
  std::vector<Scored> scored;
  struct Pooled {
    Sequence* seq;
    std::int64_t first_row, rows;  // of the hidden output
    std::int64_t first_pos;        // the position of its first row
    bool restart;                  // the chunk starts at position 0: the sum starts over (a preempted sequence recomputes)
  };
  std::vector<Pooled> pooled;
  std::vector<Sequence*> prefilled;  // prefill-only sequences whose prompt this step completes
  std::int64_t logit_row = 0, hidden_row = 0;
  for (const ScheduledSequence& p : plan.seqs) {
    Sequence& s = *p.seq;
    const auto tokens = std::span<const std::int32_t>(s.tokens).subspan(static_cast<std::size_t>(s.computed),
                                                                        static_cast<std::size_t>(p.num_new));
    backend::LogitsWanted want = backend::LogitsWanted::none;
    const PrefillOutput output = s.params().output;
    if (output != PrefillOutput::none) {
      if (output == PrefillOutput::hidden_mean) {
        want = backend::LogitsWanted::hidden_all;
        pooled.push_back({p.seq, hidden_row, p.num_new, s.computed, s.computed == 0});
        hidden_row += p.num_new;
      } else if (p.sample && output == PrefillOutput::hidden_last) {
        want = backend::LogitsWanted::hidden_last;
        pooled.push_back({p.seq, hidden_row, 1, s.computed + p.num_new - 1, true});
        hidden_row += 1;
      } else if (p.sample) {
        want = backend::LogitsWanted::last;
        scored.push_back({p.seq, logit_row++});
      }
      if (p.sample) prefilled.push_back(p.seq);
    } else if (p.sample && s.sampler().plain_greedy() && s.params().top_logprobs < 0 && !s.matcher()) {
      want = backend::LogitsWanted::argmax;
      greedy.push_back(p.seq);
    } else if (p.sample) {
      want = backend::LogitsWanted::last;
      sampled.push_back(p.seq);
      sampled_rows.push_back(logit_row++);
    }
    batch_.add(tokens, s.computed, s.blocks, want, s.state_slot);
  }
  const std::int64_t rows = logit_row;
  if (rows > logits_rows_) {  // grows to the widest step seen, at least max_num_seqs rows
    logits_rows_ = std::max<std::int64_t>(rows, scheduler_.options().max_num_seqs);
    logits_.reset();
    logits_ = runner_.alloc_logits(static_cast<std::size_t>(logits_rows_ * vocab_));
  }
  const std::span<float> logits(logits_.get(), static_cast<std::size_t>(rows * vocab_));
  device_picks_.assign(greedy.size(), -1);
  hidden_.resize(static_cast<std::size_t>(hidden_row * hidden_size_));
  for (const StateCopy& c : plan.restores) runner_.restore_state(c.snapshot, c.slot);
  runner_.step(batch_, logits, device_picks_, hidden_);
  // Snapshots now, while each slot still holds its sequence's state (finishing below frees slots).
  for (const StateCopy& c : scheduler_.complete(plan)) runner_.save_state(c.slot, c.snapshot);
  stats.seqs = static_cast<std::int32_t>(plan.seqs.size());
  stats.tokens = plan.num_tokens;

  // Prefill-only sequences: pool their hidden rows, keep their scored logits, and end the complete ones.
  const auto hid = static_cast<std::size_t>(hidden_size_);
  for (const Pooled& p : pooled) {
    Sequence& s = *p.seq;
    const float* rows_at = hidden_.data() + static_cast<std::size_t>(p.first_row) * hid;
    if (s.params().output == PrefillOutput::hidden_last) {
      s.output.assign(rows_at, rows_at + hid);
      continue;
    }
    if (p.restart) s.hidden_sum.assign(hid, 0.0);
    NEURON_ASSERT(s.hidden_sum.size() == hid);
    for (std::int64_t r = std::max<std::int64_t>(0, s.params().mean_from - p.first_pos); r < p.rows; ++r)
      for (std::size_t c = 0; c < hid; ++c) s.hidden_sum[c] += rows_at[static_cast<std::size_t>(r) * hid + c];
  }
  for (const Scored& sc : scored) {
    const float* row = logits.data() + static_cast<std::size_t>(sc.row) * static_cast<std::size_t>(vocab_);
    sc.seq->output.clear();
    for (const std::int32_t id : sc.seq->params().output_ids) sc.seq->output.push_back(row[id]);
  }
  for (Sequence* s : prefilled) {
    if (s->params().output == PrefillOutput::hidden_mean) {
      // Every position was computed here (no prefix reuse for mean pooling), so the sum has the rows of
      // positions [mean_from, len()); none (a text that is all prompt): zeros, as sentence-transformers gives.
      const std::int32_t rows = s->len() - s->params().mean_from;
      s->output.assign(hid, 0.0f);
      for (std::size_t c = 0; c < hid && rows > 0; ++c) s->output[c] = static_cast<float>(s->hidden_sum[c] / rows);
    }
    finish(*s, FinishReason::stop);
  }

  // Sample every row in parallel (each sequence owns its sampler and history).
  picks_.assign(sampled.size(), -1);
  picked_logprobs_.assign(sampled.size(), std::nullopt);
  std::exception_ptr error;
  const auto n = static_cast<std::int64_t>(sampled.size());
#pragma omp parallel for schedule(dynamic, 1) if (n >= 4)
  for (std::int64_t i = 0; i < n; ++i) {
    try {
      Sequence& s = *sampled[static_cast<std::size_t>(i)];
      const auto row = logits.subspan(static_cast<std::size_t>(sampled_rows[static_cast<std::size_t>(i)] * vocab_),
                                      static_cast<std::size_t>(vocab_));
      const std::int32_t top_n = s.params().top_logprobs;
      // The sampler's penalties rewrite the row in place; logprobs are of the raw one.
      thread_local std::vector<float> raw;  // [vocab] a copy of the row, for sequences that want logprobs
      if (top_n >= 0) raw.assign(row.begin(), row.end());
      const std::int32_t pick = sample_row(s, row);
      picks_[static_cast<std::size_t>(i)] = pick;
      if (top_n >= 0 && pick != kNoToken) picked_logprobs_[static_cast<std::size_t>(i)] = model::token_logprobs(raw, pick, top_n);
    } catch (...) {
#pragma omp critical(neuron_batcher_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  for (std::size_t i = 0; i < greedy.size(); ++i) accept(*greedy[i], device_picks_[i]);
  for (std::size_t i = 0; i < sampled.size(); ++i) {
    sampled[i]->sampled_logprobs = std::move(picked_logprobs_[i]);
    accept(*sampled[i], picks_[i]);
  }
  stats.sampled = static_cast<std::int32_t>(sampled.size() + greedy.size());
  return stats;
}

}  // namespace neuron::engine
