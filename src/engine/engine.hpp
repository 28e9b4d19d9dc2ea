#pragma once
// One engine per loaded model: a thread that owns the model's runner (and so
// its device state and, for TP, its WorkerPool) and serves every request
// through continuous batching (engine/batcher.hpp): each step runs the
// decoding sequences and chunks of new prompts together, over a paged KV
// cache whose full blocks are shared between requests with the same prefix
// (system prompts, multi-turn chats) and kept after a request ends until the
// memory is needed. HTTP threads never touch tensors; they submit and read
// the request's Channel.
//
// Per request, on every sampled token: turn it into text
// (tokenizer::StreamDecoder, then TextStream for stop strings and <think>
// splitting), push a delta when there is text to show; EOS, stop strings,
// max_tokens, the context limit and cancellation end it. Each request keeps
// its own sampling parameters, seed, penalties and stop strings.
//
// Failures: an error from a step ends the requests of that step with an
// error event. After worker_failed, comm, cuda or timeout the runner's state
// is unknown: the engine is marked failed, every request gets model_failed,
// and so does every later submit; EngineOptions::on_failed tells the owner
// (the registry reloads the model or leaves it failed).
#include <atomic>
#include <chrono>
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
  std::size_t queue_depth = 64;         // requests waiting beyond the running ones; full -> overloaded
  std::int32_t max_num_seqs = 64;       // sequences running (batched) at once
  std::int32_t max_batch_tokens = 2048; // new tokens per step (decodes plus prefill chunks)
  bool prefix_caching = true;           // reuse full KV blocks of earlier requests' prefixes
  // Called once, on the engine thread, right after the engine marked itself
  // failed (kind and message of the runner's error). Must not block on the
  // engine (no shutdown() from here).
  std::function<void(const std::string& kind, const std::string& message)> on_failed = nullptr;
};

struct EngineStats {
  std::uint64_t queue_depth = 0;        // waiting now
  std::uint64_t running = 0;            // sequences in the running batch now
  std::uint64_t requests_done = 0;
  std::uint64_t requests_cancelled = 0;
  std::uint64_t requests_failed = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  std::uint64_t prompt_tokens_cached = 0;  // prompt tokens whose KV came from the prefix cache
  std::uint64_t steps = 0;                 // batched steps run
  std::uint64_t step_tokens = 0;           // new tokens over all steps
  std::uint64_t step_seqs = 0;             // sequences over all steps (step_seqs / steps = mean batch)
  std::uint64_t preemptions = 0;           // sequences whose blocks were taken back and recomputed later
  std::uint64_t rejected_queue_full = 0;   // submits refused with overloaded (queue full)
  // Throughput since load: a step whose new tokens are all decodes (one per
  // sequence) counts as decode, any other (it carries prompt chunks) as prefill.
  std::uint64_t prefill_step_tokens = 0, decode_step_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  std::int64_t kv_blocks_total = 0;        // the pool
  std::int64_t kv_blocks_used = 0;         // held by running sequences now
  std::int64_t kv_blocks_cached = 0;       // full blocks kept for prefix reuse (held or not)
  std::int32_t kv_block_size = 0;          // positions per block
  bool failed = false;                  // runner in an unknown state (e.g. a TP worker died)
  std::string failure;                  // why
  HistogramSnapshot time_to_first_token;  // seconds, submit to first sampled token
  HistogramSnapshot inter_token_latency;  // seconds between consecutive sampled tokens
  HistogramSnapshot batch_size;           // sequences per step
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
  // stop strings or one over 1024 bytes, n outside 1..kMaxChoices,
  // top_logprobs outside -1..kMaxTopLogprobs,
  // Error{context_length_exceeded} when prompt + max_tokens > max_context()
  // or needs more KV blocks than the whole cache,
  // Error{overloaded} when queue_depth sequences already wait (a request of n
  // choices counts n), Error{model_failed}
  // after a runner failure, Error{shutting_down} after shutdown().
  std::shared_ptr<Channel> submit(CompletionRequest request);

  EngineStats stats() const;
  const std::string& model_id() const noexcept;
  std::int32_t max_context() const noexcept;
  backend::MemoryStats memory() const;
  bool idle() const;  // nothing queued or running (unload may proceed)
  // When the engine thread last went round its loop: between steps, and at
  // least every kHeartbeat while idle. Old: stuck in a step (the service watchdog).
  std::chrono::steady_clock::time_point heartbeat() const;
  static constexpr std::chrono::seconds kHeartbeat{1};
  const EngineOptions& options() const noexcept;
  // Ends queued and running requests with an error event (shutting_down), joins the
  // thread and frees the runner (weights, KV cache, TP workers) even while other
  // owners still hold the Engine; later submits throw Error{shutting_down}. Idempotent.
  void shutdown();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace neuron::engine
