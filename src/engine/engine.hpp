#pragma once
// One engine per loaded model: a thread that owns the model's runner (and so
// its device state and, for TP, its WorkerPool) and serves requests from a
// bounded FIFO queue, one at a time, one token per step. HTTP threads never
// touch tensors; they submit and read the request's Channel.
//
// Per request: prefill, then sample a token, turn it into text
// (tokenizer::StreamDecoder, then TextStream for stop strings and <think>
// splitting), push a delta when there is text to show, check for EOS, stop
// strings, max_tokens, the context limit and cancellation, and feed the token.
// The KV cache outlives requests: the engine remembers which tokens it holds
// and the next request prefills only past the longest prefix it shares with
// them (multi-turn chats and repeated system prompts skip most of their prefill).
//
// Failures: an error from the runner ends that request with an error event.
// After worker_failed, comm, cuda or timeout the runner's state is unknown:
// the engine is marked failed, queued requests get model_failed, and so does
// every later submit; EngineOptions::on_failed tells the owner (the registry
// reloads the model or leaves it failed).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backend/model_runner.hpp"
#include "engine/histogram.hpp"
#include "engine/request.hpp"
#include "model/config.hpp"
#include "tokenizer/tokenizer.hpp"

namespace neuron::engine {

struct EngineOptions {
  std::size_t queue_depth = 64;  // waiting requests beyond the running one; full -> overloaded
  // Called once, on the engine thread, right after the engine marked itself
  // failed (kind and message of the runner's error). Must not block on the
  // engine (no shutdown() from here).
  std::function<void(const std::string& kind, const std::string& message)> on_failed = nullptr;
};

struct EngineStats {
  std::uint64_t queue_depth = 0;        // waiting now
  std::uint64_t running = 0;            // 0 or 1
  std::uint64_t requests_done = 0;
  std::uint64_t requests_cancelled = 0;
  std::uint64_t requests_failed = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  std::uint64_t prompt_tokens_reused = 0;  // prompt tokens whose KV was kept from the previous request
  bool failed = false;                  // runner in an unknown state (e.g. a TP worker died)
  std::string failure;                  // why
  HistogramSnapshot time_to_first_token;  // seconds, submit to first sampled token
  HistogramSnapshot inter_token_latency;  // seconds between consecutive sampled tokens
};

class Engine {
 public:
  // Takes ownership of the runner; the tokenizer must outlive the engine.
  Engine(std::string model_id, std::unique_ptr<backend::ModelRunner> runner, std::shared_ptr<const tokenizer::Tokenizer> tok,
         model::ModelConfigs configs, EngineOptions options);
  ~Engine();  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; its events arrive on the returned channel. Throws
  // Error{invalid_argument} for an empty prompt, ids outside the vocabulary,
  // max_tokens < 1, bad sampling parameters (naming the field), more than 16
  // stop strings or one over 1024 bytes,
  // Error{context_length_exceeded} when prompt + max_tokens > max_context(),
  // Error{overloaded} when queue_depth requests already wait, Error{model_failed}
  // after a runner failure, Error{shutting_down} after shutdown().
  std::shared_ptr<Channel> submit(CompletionRequest request);

  EngineStats stats() const;
  const std::string& model_id() const noexcept;
  std::int32_t max_context() const noexcept;
  backend::MemoryStats memory() const;
  bool idle() const;  // nothing queued or running (unload may proceed)
  // Ends queued and running requests with an error event (shutting_down), joins the
  // thread and frees the runner (weights, KV cache, TP workers) even while other
  // owners still hold the Engine; later submits throw Error{shutting_down}. Idempotent.
  void shutdown();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace neuron::engine
