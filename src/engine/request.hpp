#pragma once
// What the HTTP layer hands an engine, and what comes back. A request's
// results flow through its own Channel, so streaming and non-streaming
// responses share one path, and the HTTP side can cancel between steps.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/prefill_output.hpp"
#include "model/logprobs.hpp"
#include "grammar/matcher.hpp"
#include "model/sampler.hpp"

namespace neuron::engine {

struct CompletionRequest {
  std::vector<std::int32_t> prompt;   // token ids, already templated and encoded
  std::int32_t max_tokens = 0;        // > 0; the engine clamps to the context and reports "length"
  model::SamplingParams sampling;
  std::vector<std::string> stop;      // stop strings: matched across token boundaries, never emitted
  bool ignore_eos = false;
  bool split_reasoning = false;       // route <think>...</think> text to reasoning deltas (Qwen3 chat)
  bool prompt_in_reasoning = false;   // the prompt already opened <think> (template ended inside it)
  // Choices (1..kMaxChoices): n sequences over one prompt. The prompt is
  // prefilled once: choices 1..n-1 start when choice 0's prompt is computed
  // and take its full KV blocks from the prefix cache. Choice i samples with
  // seed + i when a seed is given.
  std::int32_t n = 1;
  std::int32_t top_logprobs = -1;     // -1: none; 0..model::kMaxTopLogprobs: per token (Event::logprobs)
  // Constrained decoding (response_format, tool_choice): compiled for this
  // model's vocabulary (grammar/cache.hpp); null: unconstrained.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // A prefill-only request (embeddings, scores: engine/prefill_output.hpp):
  // not none means nothing is sampled (max_tokens, sampling, stop, n, grammar
  // and logprobs are ignored; n must be 1) and the done event carries
  // `output`. output_ids: the vocabulary ids whose logits `logits` returns.
  // mean_from (hidden_mean, in [0, prompt size]): the mean leaves out the
  // prompt's first mean_from tokens (sentence-transformers' include_prompt
  // false: its prompt's); a mean over no token is a zero vector.
  PrefillOutput output = PrefillOutput::none;
  std::vector<std::int32_t> output_ids;
  std::int32_t mean_from = 0;
};

inline constexpr std::int32_t kMaxChoices = 16;

struct Usage {
  std::int32_t prompt_tokens = 0;
  std::int32_t completion_tokens = 0;
  std::int32_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
};

// One step's output, or the end of one choice. Each choice of a request gets
// deltas (only ones with non-empty text or reasoning), then exactly one done
// or one error event, which is its last; the request is over when all n
// choices have ended. A request of n = 1 has only choice 0.
struct Event {
  enum class Kind { delta, done, error };
  Kind kind = Kind::delta;
  std::int32_t choice = 0;      // which of the request's n choices
  std::string text;             // delta: visible content (complete UTF-8, stop strings held back)
  std::string reasoning;        // delta: reasoning content (<think> body) when split_reasoning
  // delta: the ids generated since the previous delta (a token whose text is held back,
  // or decodes to nothing, rides with the next delta); done: every generated id, in order
  // (an EOS that ended the request excluded, tokens of a matched stop string included).
  std::vector<std::int32_t> tokens;
  // delta, with top_logprobs >= 0: one entry per id in `tokens`, in order.
  std::vector<model::TokenLogprobs> logprobs;
  std::string finish_reason;    // done: "stop" | "length" | "cancelled"
  Usage usage;                  // done: final counts
  std::string error_kind;       // error: an errc kind
  std::string error_message;    // error
  double time_to_first_token_ms = 0;  // done: from submit to the first sampled token (queue wait included)
  std::vector<float> output;    // done, prefill-only request: its result (PrefillOutput's shape)
};

// Single-producer (engine thread) / single-consumer (HTTP side) queue of events.
// A consumer either blocks in next() or, event-driven, sets a listener and
// drains with try_next() whenever it is called.
class Channel {
 public:
  void push(Event e);
  // Waits up to `timeout` for the next event; nullopt on timeout.
  std::optional<Event> next(std::chrono::milliseconds timeout);
  // The next event if one is queued, without waiting.
  std::optional<Event> try_next();
  // Called after every later push, on the pushing thread and outside the
  // channel's lock (so it may call try_next()); it must be quick and must not
  // throw (post the work elsewhere). Called once at once if events already
  // wait. Replaces an earlier listener; an empty function removes it.
  void set_listener(std::function<void()> on_event);
  // Asks the engine to stop this request (all of its choices) at its next step (client went away).
  void cancel() noexcept;
  bool cancelled() const noexcept;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::function<void()> listener_;  // guarded by mu_; copied out before the call
  bool cancelled_ = false;
};

}  // namespace neuron::engine
