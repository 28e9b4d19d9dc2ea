#include "engine/generator.hpp"

#include <chrono>
#include <limits>

#include "engine/batcher.hpp"
#include "util/error.hpp"

namespace neuron::engine {

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

class Collector final : public SequenceObserver {
 public:
  Collector(GenerateResult& result, const std::function<bool(std::int32_t)>& on_token)
      : result_(result), on_token_(on_token) {}
  std::optional<FinishReason> on_token(std::int32_t token) override {
    result_.tokens.push_back(token);
    if (on_token_ && !on_token_(token)) return FinishReason::cancelled;
    return std::nullopt;
  }
  void on_finish(FinishReason reason) override { result_.finish_reason = finish_reason_name(reason); }

 private:
  GenerateResult& result_;
  const std::function<bool(std::int32_t)>& on_token_;
};

}  // namespace

GenerateResult generate(backend::ModelRunner& runner, const GenerateRequest& req,
                        const std::function<bool(std::int32_t)>& on_token) {
  if (req.prompt.empty()) fail(errc::invalid_argument, "prompt is empty: give at least one token");
  if (req.max_tokens < 1)
    fail(errc::invalid_argument, "max_tokens must be at least 1 (got " + std::to_string(req.max_tokens) + ")");
  const auto prompt_len = static_cast<std::int64_t>(req.prompt.size());
  const std::int64_t context = runner.max_context();
  if (prompt_len > context)
    fail(errc::context_length_exceeded, "prompt of " + std::to_string(prompt_len) +
                                            " tokens exceeds the context of " + std::to_string(context) + " tokens");
  // Running out of context ends the request with "length", as max_tokens does.
  const auto max_tokens = static_cast<std::int32_t>(std::min<std::int64_t>(req.max_tokens, context - prompt_len + 1));

  // The whole prompt in one step, then one token a step.
  Batcher batcher(runner, BatcherOptions{.scheduler = {.max_num_seqs = 1,
                                                       .max_batch_tokens = std::numeric_limits<std::int32_t>::max()},
                                         .prefix_caching = false});
  GenerateResult result;
  Collector collector(result, on_token);
  Sequence seq(0,
               SequenceParams{.prompt = req.prompt, .max_tokens = max_tokens, .sampling = req.sampling,
                              .stop_ids = req.stop_ids, .ignore_eos = req.ignore_eos, .grammar = req.grammar},
               collector);
  batcher.check_fits(prompt_len, max_tokens);
  batcher.add(seq);

  auto t = Clock::now();
  batcher.step();
  const auto first = Clock::now();
  result.timings.prefill_ms = ms_between(t, first);
  int decode_steps = 0;
  while (!seq.finished) {
    batcher.step();
    ++decode_steps;
  }
  result.timings.decode_ms = ms_between(first, Clock::now());
  const double decode_ms = result.timings.decode_ms;
  result.timings.decode_tok_s = decode_ms > 0 && decode_steps > 0 ? decode_steps * 1000.0 / decode_ms : 0.0;
  result.timings.prefill_tok_s = result.timings.prefill_ms > 0 ? prompt_len * 1000.0 / result.timings.prefill_ms : 0.0;
  return result;
}

}  // namespace neuron::engine
