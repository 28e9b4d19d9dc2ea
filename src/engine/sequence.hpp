#pragma once
// One sequence in continuous batching: the tokens whose keys and values it
// needs, the KV blocks it holds and how far they are computed, its sampling
// state, and whom to tell about its tokens. The engine thread owns every
// Sequence; the Scheduler and the BlockManager only point at them.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/prefill_output.hpp"
#include "model/logprobs.hpp"
#include "grammar/matcher.hpp"
#include "model/sampler.hpp"

namespace neuron::engine {

enum class FinishReason { stop, length, cancelled };
const char* finish_reason_name(FinishReason r) noexcept;  // "stop" | "length" | "cancelled"

struct SequenceParams {
  std::vector<std::int32_t> prompt{};     // non-empty, ids inside the vocabulary
  std::int32_t max_tokens = 16;           // > 0: generated tokens at most
  model::SamplingParams sampling{};       // validated by the Sampler
  std::vector<std::int32_t> stop_ids{};   // EOS ids: end with "stop", never emitted
  bool ignore_eos = false;                // keep going through stop_ids
  // -1: no logprobs; 0..kMaxTopLogprobs: each sampled token's logprob and this
  // many most likely alternatives (Sequence::sampled_logprobs).
  std::int32_t top_logprobs = -1;
  // Constrained decoding: only tokens that keep the output a valid prefix of
  // this grammar are sampled; EOS only once it is complete, and the sequence
  // ends ("stop") as soon as nothing may follow. Null: unconstrained.
  std::shared_ptr<const grammar::CompiledGrammar> grammar{};
  // Not none: a prefill-only sequence (engine/prefill_output.hpp); the
  // Batcher fills Sequence::output and finishes it ("stop") once its prompt is
  // computed. output_ids: the ids whose logits `logits` keeps. mean_from
  // (hidden_mean): the positions before it are left out of the mean.
  PrefillOutput output = PrefillOutput::none;
  std::vector<std::int32_t> output_ids{};
  std::int32_t mean_from = 0;
};

// What a sequence's owner hears, on the engine thread, in order: on_token for
// every emitted token, then on_finish once.
class SequenceObserver {
 public:
  virtual ~SequenceObserver() = default;
  // A sampled token that is not an EOS ending the sequence. Returning a reason
  // ends the sequence with it (a stop string matched, the client went away).
  virtual std::optional<FinishReason> on_token(std::int32_t token) = 0;
  virtual void on_finish(FinishReason reason) = 0;
};

class Sequence {
 public:
  Sequence(std::uint64_t id, SequenceParams params, SequenceObserver& observer);

  std::uint64_t id() const noexcept { return id_; }
  const SequenceParams& params() const noexcept { return params_; }
  SequenceObserver& observer() noexcept { return observer_; }
  model::Sampler& sampler() noexcept { return sampler_; }
  grammar::Matcher* matcher() noexcept { return matcher_.get(); }  // null when unconstrained

  std::vector<std::int32_t> tokens;  // [prompt + generated] position p's KV comes from tokens[p]
  std::vector<std::int32_t> blocks;  // its block table; covers at least `computed` positions
  std::int32_t computed = 0;         // positions whose keys and values are in `blocks`
  std::int32_t registered = 0;       // leading blocks registered for prefix reuse
  std::int32_t state_slot = -1;      // the runner's recurrent-state slot it holds while running (hybrids), else -1
  std::int32_t snapshot_block = -1;  // hybrids: the block of its latest state snapshot past its prompt (its next replaces it)
  std::int32_t generated = 0;        // tokens emitted so far
  std::int32_t cached_prompt_tokens = -1;  // prompt tokens found in the prefix cache at first admission; -1 before
  std::int32_t preemptions = 0;      // times its blocks were taken back to make room
  bool finished = false;
  // The token being accepted's logprobs (model/logprobs.hpp), set by the
  // Batcher before the observer hears on_token when params().top_logprobs >= 0.
  std::optional<model::TokenLogprobs> sampled_logprobs;
  // A prefill-only sequence's result, set before its observer hears on_finish(stop).
  std::vector<float> output;
  std::vector<double> hidden_sum;  // hidden_mean: [hidden] the sum of the rows from mean_from computed so far (restarts at position 0)

  std::int32_t prompt_len() const noexcept { return static_cast<std::int32_t>(params_.prompt.size()); }
  std::int32_t len() const noexcept { return static_cast<std::int32_t>(tokens.size()); }

 private:
  std::uint64_t id_;
  SequenceParams params_;
  SequenceObserver& observer_;
  model::Sampler sampler_;
  std::unique_ptr<grammar::Matcher> matcher_;
};

}  // namespace neuron::engine
