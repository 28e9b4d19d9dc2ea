#include "engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <spdlog/spdlog.h>

#include "engine/text_stream.hpp"
#include "model/sampler.hpp"
#include "util/error.hpp"

namespace neuron::engine {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxStopStrings = 16;
constexpr std::size_t kMaxStopBytes = 1024;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Errors after which the runner's state (KV caches on other ranks, a
// communicator mid-collective, a CUDA context) cannot be trusted any more.
bool poisons_runner(const std::string& kind) {
  return kind == errc::worker_failed || kind == errc::comm || kind == errc::cuda || kind == errc::timeout;
}

Event error_event(std::string kind, std::string message) {
  Event e;
  e.kind = Event::Kind::error;
  e.error_kind = std::move(kind);
  e.error_message = std::move(message);
  return e;
}

struct Job {
  CompletionRequest request;
  std::shared_ptr<Channel> channel;
  Clock::time_point submitted;
};

// Thrown inside a step loop when shutdown() asks the thread to stop.
struct ShuttingDown {};

}  // namespace

struct Engine::State {
  std::string model_id;
  std::unique_ptr<backend::ModelRunner> runner;
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  model::ModelConfigs configs;
  EngineOptions options;
  std::vector<std::int32_t> stop_ids;
  std::int32_t max_context = 0;
  std::int64_t vocab = 0;
  backend::MemoryStats memory;  // taken at construction: a TP runner may not be queried off its thread

  mutable std::mutex mu;
  std::condition_variable work_cv;  // the engine thread waits for jobs here
  std::deque<Job> queue;
  bool running = false;
  bool stopping = false;
  bool failed = false;
  std::string failure;
  EngineStats counters;  // the monotonic counters; queue/running/failed are filled in by stats()
  Histogram ttft{Histogram::latency_seconds_bounds()};
  Histogram inter_token{Histogram::latency_seconds_bounds()};

  // Engine thread only: the tokens whose keys and values the runner's cache
  // holds, position by position, so the next request can resume from the
  // longest shared prefix instead of prefilling from zero.
  std::vector<std::int32_t> cached;

  std::mutex shutdown_mu;  // serialises shutdown() callers
  std::thread thread;

  void loop();
  // Both return the request's last event (done or error); loop() pushes it only
  // after marking the engine idle, so a client that saw it may unload at once.
  Event serve(Job& job);
  Event generate(Job& job);
  bool stop_requested() {
    std::lock_guard lock(mu);
    return stopping;
  }
  void fail_queued(const std::string& kind, const std::string& message);
};

void Engine::State::fail_queued(const std::string& kind, const std::string& message) {
  std::deque<Job> dropped;
  {
    std::lock_guard lock(mu);
    dropped.swap(queue);
    counters.requests_failed += dropped.size();
  }
  for (auto& job : dropped) job.channel->push(error_event(kind, message));
}

void Engine::State::loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu);
      work_cv.wait(lock, [this] { return stopping || !queue.empty(); });
      if (stopping) break;
      job = std::move(queue.front());
      queue.pop_front();
      running = true;
    }
    Event last = serve(job);
    {
      std::lock_guard lock(mu);
      running = false;
    }
    job.channel->push(std::move(last));
  }
  fail_queued(errc::shutting_down, "model " + model_id + " is being unloaded");
}

Event Engine::State::serve(Job& job) {
  try {
    return generate(job);
  } catch (const ShuttingDown&) {
    std::lock_guard lock(mu);
    counters.requests_failed += 1;
    return error_event(errc::shutting_down, "model " + model_id + " was unloaded during the request");
  } catch (const Error& e) {
    // A step that threw may have written part of the cache: forget what it holds.
    cached.clear();
    const bool fatal = poisons_runner(e.kind());
    {
      std::lock_guard lock(mu);
      counters.requests_failed += 1;
      if (fatal) {
        failed = true;
        failure = std::string(e.kind()) + ": " + e.what();
      }
    }
    if (fatal) {
      spdlog::error("model {}: runner failed ({}: {})", model_id, e.kind(), e.what());
      fail_queued(errc::model_failed, "model " + model_id + " failed: " + e.what());
      if (options.on_failed) options.on_failed(e.kind(), e.what());
    } else {
      spdlog::warn("model {}: request failed ({}: {})", model_id, e.kind(), e.what());
    }
    return error_event(e.kind(), e.what());
  } catch (const std::bad_alloc&) {
    cached.clear();
    std::lock_guard lock(mu);
    counters.requests_failed += 1;
    return error_event(errc::out_of_memory, "out of memory while generating");
  } catch (const std::exception& e) {
    cached.clear();
    spdlog::error("model {}: unexpected error: {}", model_id, e.what());
    std::lock_guard lock(mu);
    counters.requests_failed += 1;
    return error_event(errc::internal, "internal error while generating");
  }
}

Event Engine::State::generate(Job& job) {
  const CompletionRequest& req = job.request;
  Channel& channel = *job.channel;
  const auto prompt_len = static_cast<std::int32_t>(req.prompt.size());

  Event done;
  done.kind = Event::Kind::done;
  done.usage.prompt_tokens = prompt_len;

  if (channel.cancelled()) {  // gave up while queued
    done.finish_reason = "cancelled";
    std::lock_guard lock(mu);
    counters.requests_cancelled += 1;
    return done;
  }

  model::Sampler sampler(req.sampling);
  tokenizer::StreamDecoder decoder(*tok, /*skip_special_tokens=*/true);
  TextStream text({.stop = req.stop, .split_reasoning = req.split_reasoning, .start_in_reasoning = req.prompt_in_reasoning});
  std::vector<float> logits(static_cast<std::size_t>(vocab));  // [vocab] f32, last position
  std::vector<std::int32_t> history = req.prompt;               // prompt then generated ids
  history.reserve(req.prompt.size() + static_cast<std::size_t>(req.max_tokens));

  // Prefill from the longest prefix the cache already holds; at least the last
  // prompt token is fed, since its logits pick the first new token.
  const auto common = static_cast<std::size_t>(
      std::mismatch(cached.begin(), cached.end(), req.prompt.begin(), req.prompt.end()).first - cached.begin());
  const std::size_t start = std::min(common, req.prompt.size() - 1);
  cached.resize(start);
  runner->forward(std::span(req.prompt).subspan(start), static_cast<std::int32_t>(start), logits);
  cached.insert(cached.end(), req.prompt.begin() + static_cast<std::ptrdiff_t>(start), req.prompt.end());
  {
    std::lock_guard lock(mu);
    counters.prompt_tokens_reused += start;
  }

  std::vector<std::int32_t> pending;  // generated ids not yet carried by a delta
  std::int32_t generated = 0;
  Clock::time_point last_token;
  bool first = true;
  std::string finish_reason;

  for (;;) {
    const std::int32_t token = sampler.sample(logits, history, req.prompt.size());
    const auto now = Clock::now();
    if (first) {
      first = false;
      const double ttft_s = seconds_between(job.submitted, now);
      done.time_to_first_token_ms = ttft_s * 1000.0;
      ttft.observe(ttft_s);
    } else {
      inter_token.observe(seconds_between(last_token, now));
    }
    last_token = now;

    if (!req.ignore_eos && std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
      finish_reason = "stop";
      break;
    }
    history.push_back(token);
    done.tokens.push_back(token);
    pending.push_back(token);
    generated += 1;

    // Ids past the tokenizer's vocabulary (the embedding's padding rows) have no text.
    TextChunk chunk = text.push(tok->is_known(token) ? decoder.push(token) : std::string());
    if (!chunk.empty()) {
      Event delta;
      delta.text = std::move(chunk.text);
      delta.reasoning = std::move(chunk.reasoning);
      delta.tokens = std::move(pending);
      pending.clear();
      channel.push(std::move(delta));
    }
    if (text.stopped()) {
      finish_reason = "stop";
      break;
    }
    // The next step writes position history.size() - 1 of the cache.
    if (generated >= req.max_tokens || history.size() > static_cast<std::size_t>(max_context)) {
      finish_reason = "length";
      break;
    }
    if (channel.cancelled()) {
      finish_reason = "cancelled";
      break;
    }
    if (stop_requested()) throw ShuttingDown{};

    runner->forward(std::span(&history.back(), 1), static_cast<std::int32_t>(history.size()) - 1, logits);
    cached.push_back(token);
  }

  if (!text.stopped()) {
    TextChunk tail = text.push(decoder.finish());
    TextChunk rest = text.finish();
    tail.text += rest.text;
    tail.reasoning += rest.reasoning;
    if (text.stopped()) finish_reason = "stop";
    if (!tail.empty()) {
      Event delta;
      delta.text = std::move(tail.text);
      delta.reasoning = std::move(tail.reasoning);
      delta.tokens = std::move(pending);
      channel.push(std::move(delta));
    }
  }

  done.finish_reason = finish_reason;
  done.usage.completion_tokens = generated;
  {
    std::lock_guard lock(mu);
    counters.prompt_tokens += static_cast<std::uint64_t>(prompt_len);
    counters.generated_tokens += static_cast<std::uint64_t>(generated);
    if (finish_reason == "cancelled") {
      counters.requests_cancelled += 1;
    } else {
      counters.requests_done += 1;
    }
  }
  return done;
}

Engine::Engine(std::string model_id, std::unique_ptr<backend::ModelRunner> runner,
               std::shared_ptr<const tokenizer::Tokenizer> tok, model::ModelConfigs configs, EngineOptions options)
    : state_(std::make_unique<State>()) {
  NEURON_ASSERT(runner != nullptr);
  NEURON_ASSERT(tok != nullptr);
  State& s = *state_;
  s.model_id = std::move(model_id);
  s.max_context = runner->max_context();
  s.vocab = runner->config().vocab_size;
  s.memory = runner->memory();
  s.runner = std::move(runner);
  s.tok = std::move(tok);
  s.stop_ids = configs.stop_ids();
  s.configs = std::move(configs);
  s.options = options;
  s.thread = std::thread([&s] { s.loop(); });
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  State& s = *state_;
  std::lock_guard serial(s.shutdown_mu);
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
  }
  s.work_cv.notify_all();
  if (s.thread.joinable()) s.thread.join();
  if (s.runner) {
    s.runner.reset();  // weights, KV cache; a TP runner also shuts down and reaps its workers
    s.cached.clear();
    s.cached.shrink_to_fit();
#if defined(__GLIBC__)
    // Freed weights sit in glibc's arenas until trimmed; unload promises the memory back.
    malloc_trim(0);
#endif
  }
}

std::shared_ptr<Channel> Engine::submit(CompletionRequest request) {
  State& s = *state_;
  if (request.prompt.empty()) fail(errc::invalid_argument, "prompt is empty: at least one token is needed");
  for (std::size_t i = 0; i < request.prompt.size(); ++i) {
    const std::int32_t id = request.prompt[i];
    if (id < 0 || id >= s.vocab) {
      fail(errc::invalid_argument, "prompt token " + std::to_string(i) + " is " + std::to_string(id) +
                                       ", outside the vocabulary [0, " + std::to_string(s.vocab) + ")");
    }
  }
  if (request.max_tokens < 1) {
    fail(errc::invalid_argument, "max_tokens must be at least 1, got " + std::to_string(request.max_tokens));
  }
  const std::int64_t needed = static_cast<std::int64_t>(request.prompt.size()) + request.max_tokens;
  if (needed > s.max_context) {
    fail(errc::context_length_exceeded,
         "this model's context is " + std::to_string(s.max_context) + " tokens, but the prompt has " +
             std::to_string(request.prompt.size()) + " tokens and max_tokens is " + std::to_string(request.max_tokens) +
             " (" + std::to_string(needed) + " in total)");
  }
  request.sampling.validate();
  // Stop matching re-scans the held-back text each token, so bound its size.
  if (request.stop.size() > kMaxStopStrings) {
    fail(errc::invalid_argument, "stop has " + std::to_string(request.stop.size()) + " strings; at most " +
                                     std::to_string(kMaxStopStrings) + " are allowed");
  }
  for (const auto& stop : request.stop) {
    if (stop.size() > kMaxStopBytes) {
      fail(errc::invalid_argument, "a stop string is " + std::to_string(stop.size()) + " bytes; at most " +
                                       std::to_string(kMaxStopBytes) + " are allowed");
    }
  }

  auto channel = std::make_shared<Channel>();
  {
    std::lock_guard lock(s.mu);
    if (s.stopping) fail(errc::shutting_down, "model " + s.model_id + " is being unloaded");
    if (s.failed) fail(errc::model_failed, "model " + s.model_id + " failed (" + s.failure + "); unload and load it again");
    // queue_depth requests may wait behind the running one.
    const std::size_t in_system = s.queue.size() + (s.running ? 1 : 0);
    if (in_system > s.options.queue_depth) {
      fail(errc::overloaded, "model " + s.model_id + " is busy: " + std::to_string(s.queue.size()) +
                                 " requests are waiting (queue depth " + std::to_string(s.options.queue_depth) + ")");
    }
    s.queue.push_back(Job{std::move(request), channel, Clock::now()});
  }
  s.work_cv.notify_one();
  return channel;
}

EngineStats Engine::stats() const {
  const State& s = *state_;
  EngineStats out;
  {
    std::lock_guard lock(s.mu);
    out = s.counters;
    out.queue_depth = s.queue.size();
    out.running = s.running ? 1 : 0;
    out.failed = s.failed;
    out.failure = s.failure;
  }
  out.time_to_first_token = s.ttft.snapshot();
  out.inter_token_latency = s.inter_token.snapshot();
  return out;
}

const std::string& Engine::model_id() const noexcept { return state_->model_id; }

std::int32_t Engine::max_context() const noexcept { return state_->max_context; }

backend::MemoryStats Engine::memory() const { return state_->memory; }

bool Engine::idle() const {
  std::lock_guard lock(state_->mu);
  return state_->queue.empty() && !state_->running;
}

}  // namespace neuron::engine
