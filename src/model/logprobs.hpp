#pragma once
// Log-probabilities of a sampled token, as OpenAI's `logprobs` report them.
//
// They are the model's own distribution: the log-softmax of the raw logits of
// the position, before repetition / presence / frequency penalties,
// temperature, top_k, top_p and min_p (OpenAI reports the model's
// distribution; vLLM does the same by default). So a token drawn at
// temperature 1.5 has the logprob the model gave it, and a greedy pick is
// always the first of `top`.
#include <cstdint>
#include <span>
#include <vector>

namespace neuron::model {

// OpenAI's bound on top_logprobs (chat); completions' `logprobs` is at most 5.
inline constexpr int kMaxTopLogprobs = 20;

struct TopLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  float logprob = 0.0f;         // of the sampled token
  std::vector<TopLogprob> top;  // the most likely tokens, most likely first (ties: lower id first); at most top_n
};

// log_softmax(logits)[token] and the top_n most likely tokens (0 <= top_n <=
// kMaxTopLogprobs, fewer when the vocabulary is smaller). One pass for the
// normaliser and one for the top entries; the logits are not modified.
// Throws Error{invalid_argument} for empty logits, a token outside them or
// top_n out of range.
TokenLogprobs token_logprobs(std::span<const float> logits, std::int32_t token, int top_n);

}  // namespace neuron::model
