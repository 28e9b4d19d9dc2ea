#include "engine/generator.hpp"

#include <algorithm>
#include <array>
#include <chrono>

#include "util/error.hpp"

namespace neuron::engine {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
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
  model::Sampler sampler(req.sampling);
  const auto vocab = static_cast<std::size_t>(runner.config().vocab_size);
  std::vector<float> logits(vocab);
  std::vector<std::int32_t> history = req.prompt;
  history.reserve(req.prompt.size() + static_cast<std::size_t>(req.max_tokens));

  GenerateResult result;
  auto t = Clock::now();
  runner.forward(req.prompt, 0, logits);
  std::int32_t token = sampler.sample(logits, history, req.prompt.size());
  result.timings.prefill_ms = ms_since(t);

  int decode_steps = 0;
  double decode_ms = 0;
  for (;;) {
    if (!req.ignore_eos && std::find(req.stop_ids.begin(), req.stop_ids.end(), token) != req.stop_ids.end()) {
      result.finish_reason = "stop";
      break;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    if (on_token && !on_token(token)) {
      result.finish_reason = "cancelled";
      break;
    }
    const auto pos = static_cast<std::int64_t>(history.size()) - 1;  // where `token` goes
    if (static_cast<std::int32_t>(result.tokens.size()) >= req.max_tokens || pos >= context) {
      result.finish_reason = "length";
      break;
    }
    t = Clock::now();
    const std::array<std::int32_t, 1> step{token};
    runner.forward(step, static_cast<std::int32_t>(pos), logits);
    token = sampler.sample(logits, history, req.prompt.size());
    decode_ms += ms_since(t);
    ++decode_steps;
  }
  result.timings.decode_ms = decode_ms;
  result.timings.decode_tok_s = decode_ms > 0 ? decode_steps * 1000.0 / decode_ms : 0.0;
  result.timings.prefill_tok_s = result.timings.prefill_ms > 0 ? prompt_len * 1000.0 / result.timings.prefill_ms : 0.0;
  return result;
}

}  // namespace neuron::engine
