#pragma once
// One request on one runner, without HTTP, queues or threads: the Engine's
// step loop (engine/batcher.hpp) with a single sequence, prefilling its
// prompt in one step and then decoding a token per step. `neuron generate`
// and the benchmarks drive it directly.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/model_runner.hpp"
#include "grammar/matcher.hpp"
#include "model/sampler.hpp"

namespace neuron::engine {

struct GenerateRequest {
  std::vector<std::int32_t> prompt;
  std::int32_t max_tokens = 16;  // > 0
  model::SamplingParams sampling;
  std::vector<std::int32_t> stop_ids;  // EOS ids: end with "stop", never emitted
  bool ignore_eos = false;             // keep going through stop_ids
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // constrained decoding; null: none
};

struct GenerateTimings {
  double prefill_ms = 0;     // the prompt's forward (time to first token, sampling included)
  double decode_ms = 0;      // every later step: one-token forward plus sampling
  double decode_tok_s = 0;   // later steps per second (0 when there were none)
  double prefill_tok_s = 0;  // prompt tokens per second
};

struct GenerateResult {
  std::vector<std::int32_t> tokens;  // generated, without the prompt or a stop id
  std::string finish_reason;         // "stop" | "length" | "cancelled"
  GenerateTimings timings;
};

// Uses the runner's KV pool from scratch (nothing else may use the runner meanwhile).
// `on_token` sees every emitted token as soon as it is sampled; returning
// false ends the request with "cancelled" (that token is kept). Running out
// of max_tokens or of the runner's context ends it with "length".
// Throws Error{invalid_argument} for an empty prompt, max_tokens < 1 or bad
// sampling params, Error{context_length_exceeded} for a prompt longer than
// the context, and whatever the runner throws.
GenerateResult generate(backend::ModelRunner& runner, const GenerateRequest& req,
                        const std::function<bool(std::int32_t token)>& on_token = {});

}  // namespace neuron::engine
