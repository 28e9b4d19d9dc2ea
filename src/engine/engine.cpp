#include "engine/engine.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <new>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <spdlog/spdlog.h>

#include "engine/batcher.hpp"
#include "engine/text_stream.hpp"
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

Event error_event(std::string kind, std::string message, std::int32_t choice = 0) {
  Event e;
  e.kind = Event::Kind::error;
  e.choice = choice;
  e.error_kind = std::move(kind);
  e.error_message = std::move(message);
  return e;
}

std::vector<double> batch_size_bounds() { return {1, 2, 4, 8, 16, 32, 64, 128, 256}; }

// A submitted request before the engine thread picks it up.
struct Submission {
  CompletionRequest request;
  std::shared_ptr<Channel> channel;
  Clock::time_point submitted;
};

// Sequences a queue of submissions stands for (each of a request's n choices is one).
std::size_t sequences_in(const std::deque<Submission>& subs) {
  std::size_t n = 0;
  for (const Submission& sub : subs) n += static_cast<std::size_t>(sub.request.n);
  return n;
}

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
  std::unique_ptr<Batcher> batcher;  // engine thread only (created before it starts)

  mutable std::mutex mu;
  std::condition_variable work_cv;  // the engine thread waits for submissions here
  std::deque<Submission> incoming;
  std::size_t waiting = 0;  // in the batcher's queue or held siblings (engine thread writes under mu)
  std::size_t running = 0;  // in the batcher's running set
  bool stopping = false;
  bool failed = false;
  std::string failure;
  // steady_clock nanoseconds when the engine thread last went round its loop
  // (it wakes at least every kHeartbeat while idle): Engine::heartbeat().
  std::atomic<std::int64_t> beat{std::chrono::steady_clock::now().time_since_epoch().count()};
  EngineStats counters;  // the monotonic counters and block gauges; queue/running/failed are filled in by stats()
  Histogram ttft{Histogram::latency_seconds_bounds()};
  Histogram inter_token{Histogram::latency_seconds_bounds()};
  Histogram batch_size{batch_size_bounds()};

  // One request on the engine thread: its sequence and what turns tokens into events.
  struct Job final : SequenceObserver {
    // Choice `choice` of the submission; `lead` is choice 0's job (null for choice 0 itself).
    Job(State& state, const Submission& sub, std::uint64_t id, std::int32_t choice, Job* lead)
        : st(state),
          request(sub.request),
          channel(sub.channel),
          submitted(sub.submitted),
          choice(choice),
          leader(lead),
          held(lead != nullptr),
          decoder(*state.tok, /*skip_special_tokens=*/true),
          text({.stop = request.stop, .split_reasoning = request.split_reasoning,
                .start_in_reasoning = request.prompt_in_reasoning}),
          seq(id,
              SequenceParams{.prompt = request.prompt, .max_tokens = request.max_tokens, .sampling = choice_sampling(request, choice),
                             .stop_ids = state.stop_ids,
                             .ignore_eos = request.ignore_eos,
                             .top_logprobs = request.top_logprobs,
                             .grammar = request.grammar,
                             .output = request.output,
                             .output_ids = request.output_ids,
                             .mean_from = request.mean_from},
              *this) {
      done.kind = Event::Kind::done;
      done.choice = choice;
      done.usage.prompt_tokens = static_cast<std::int32_t>(request.prompt.size());
    }

    std::optional<FinishReason> on_token(std::int32_t token) override;
    void on_finish(FinishReason reason) override;
    // Choice i draws from seed + i, so every choice of a seeded request is reproducible and they differ.
    static model::SamplingParams choice_sampling(const CompletionRequest& r, std::int32_t choice) {
      model::SamplingParams p = r.sampling;
      if (p.seed) *p.seed += static_cast<std::uint64_t>(choice);
      return p;
    }
    // A held sibling may start once choice 0's prompt is computed (its full
    // blocks are then in the prefix cache) or choice 0 is over.
    bool may_start() const { return leader == nullptr || leader->seq.finished || leader->seq.computed >= leader->seq.prompt_len(); }
    void push_delta(TextChunk chunk);

    State& st;
    CompletionRequest request;
    std::shared_ptr<Channel> channel;
    Clock::time_point submitted;
    std::int32_t choice = 0;
    Job* leader = nullptr;  // choice 0's job while it is in the books (retire() clears this when it leaves)
    bool held = false;      // a sibling not yet given to the batcher
    tokenizer::StreamDecoder decoder;
    TextStream text;
    Sequence seq;
    std::vector<std::int32_t> pending;  // generated ids not yet carried by a delta
    std::vector<model::TokenLogprobs> pending_logprobs;  // theirs, when the request asked for logprobs
    Clock::time_point last_token;
    bool first = true;
    Event done;                 // filled as the request goes
    std::optional<Event> last;  // the final event, pushed after the job leaves the engine's books
  };
  std::list<Job> jobs;  // engine thread only
  std::uint64_t next_id = 0;

  std::mutex shutdown_mu;  // serialises shutdown() callers
  std::thread thread;

  void loop();
  void admit(std::deque<Submission>& fresh);
  // Gives held siblings whose choice 0 has its prompt computed to the batcher.
  void start_siblings();
  std::size_t held_siblings() const;
  void run_step();
  // Pushes the final events of finished jobs after dropping them from the books,
  // so a client that saw its last event may unload at once.
  void retire();
  void publish();  // block and queue gauges, under mu
  void fail_jobs(const std::string& kind, const std::string& message, bool only_in_step);
  void fail_incoming(const std::string& kind, const std::string& message);
};

std::optional<FinishReason> Engine::State::Job::on_token(std::int32_t token) {
  const auto now = Clock::now();
  if (first) {
    first = false;
    const double ttft_s = seconds_between(submitted, now);
    done.time_to_first_token_ms = ttft_s * 1000.0;
    st.ttft.observe(ttft_s);
  } else {
    st.inter_token.observe(seconds_between(last_token, now));
  }
  last_token = now;
  done.tokens.push_back(token);
  pending.push_back(token);
  if (seq.sampled_logprobs) pending_logprobs.push_back(std::move(*seq.sampled_logprobs));
  // Ids past the tokenizer's vocabulary (the embedding's padding rows) have no text.
  TextChunk chunk = text.push(st.tok->is_known(token) ? decoder.push(token) : std::string());
  if (!chunk.empty()) push_delta(std::move(chunk));
  if (text.stopped()) return FinishReason::stop;
  return std::nullopt;
}

void Engine::State::Job::push_delta(TextChunk chunk) {
  Event delta;
  delta.choice = choice;
  delta.text = std::move(chunk.text);
  delta.reasoning = std::move(chunk.reasoning);
  delta.tokens = std::move(pending);
  delta.logprobs = std::move(pending_logprobs);
  pending.clear();
  pending_logprobs.clear();
  channel->push(std::move(delta));
}

void Engine::State::Job::on_finish(FinishReason reason) {
  const bool prefill_only = request.output != PrefillOutput::none;
  if (prefill_only && reason == FinishReason::stop) done.output = std::move(seq.output);
  if (reason == FinishReason::stop && first && !prefill_only) {
    // An EOS as the very first token: still a first token for the latency books.
    first = false;
    const double ttft_s = seconds_between(submitted, Clock::now());
    done.time_to_first_token_ms = ttft_s * 1000.0;
    st.ttft.observe(ttft_s);
  }
  if (!text.stopped()) {
    TextChunk tail = text.push(decoder.finish());
    TextChunk rest = text.finish();
    tail.text += rest.text;
    tail.reasoning += rest.reasoning;
    if (text.stopped()) reason = FinishReason::stop;
    if (!tail.empty()) push_delta(std::move(tail));
  }
  done.finish_reason = finish_reason_name(reason);
  done.usage.completion_tokens = seq.generated;
  done.usage.cached_tokens = std::max(seq.cached_prompt_tokens, 0);
  {
    std::lock_guard lock(st.mu);
    st.counters.prompt_tokens += static_cast<std::uint64_t>(seq.prompt_len());
    st.counters.generated_tokens += static_cast<std::uint64_t>(seq.generated);
    st.counters.prompt_tokens_cached += static_cast<std::uint64_t>(done.usage.cached_tokens);
    if (reason == FinishReason::cancelled) {
      st.counters.requests_cancelled += 1;
    } else {
      st.counters.requests_done += 1;
    }
  }
  last = std::move(done);
}

void Engine::State::admit(std::deque<Submission>& fresh) {
  for (Submission& sub : fresh) {
    Job* lead = nullptr;
    for (std::int32_t c = 0; c < sub.request.n; ++c) {
      Job& job = jobs.emplace_back(*this, sub, next_id++, c, lead);
      if (c == 0) lead = &job;
      if (job.channel->cancelled()) {  // gave up while queued
        job.seq.finished = true;
        job.held = false;
        job.on_finish(FinishReason::cancelled);
        continue;
      }
      // Without the prefix cache there is nothing to share: every choice starts at once.
      if (!batcher->prefix_caching()) job.held = false;
      if (!job.held) batcher->add(job.seq);
    }
  }
  fresh.clear();
}

void Engine::State::start_siblings() {
  for (Job& job : jobs) {
    if (!job.held || !job.may_start()) continue;
    job.held = false;
    if (!job.seq.finished) batcher->add(job.seq);
  }
}

std::size_t Engine::State::held_siblings() const {
  std::size_t n = 0;
  for (const Job& job : jobs) n += job.held && !job.seq.finished ? 1 : 0;
  return n;
}

void Engine::State::retire() {
  std::vector<std::pair<std::shared_ptr<Channel>, Event>> out;
  for (auto it = jobs.begin(); it != jobs.end();) {
    if (!(it->seq.finished && it->last)) {
      ++it;
      continue;
    }
    // Choice 0 may leave before its siblings: those still held need it no more.
    if (it->choice == 0)
      for (Job& other : jobs)
        if (other.leader == &*it) other.leader = nullptr;
    out.emplace_back(it->channel, std::move(*it->last));
    it = jobs.erase(it);
  }
  publish();
  for (auto& [channel, event] : out) channel->push(std::move(event));
}

void Engine::State::publish() {
  const BlockStats b = batcher->blocks();
  const std::size_t held = held_siblings();
  std::lock_guard lock(mu);
  waiting = batcher->waiting() + held;
  running = batcher->running();
  counters.kv_blocks_total = b.total;
  counters.kv_blocks_used = b.used;
  counters.kv_blocks_cached = b.cached;
}

void Engine::State::fail_jobs(const std::string& kind, const std::string& message, bool only_in_step) {
  std::uint64_t n = 0;
  for (Job& job : jobs) {
    if (job.seq.finished) continue;
    // The running sequences (those holding blocks) may have been in the failed step; queued ones were not.
    if (only_in_step && job.seq.blocks.empty()) continue;
    batcher->drop(job.seq);
    job.held = false;
    job.last = error_event(kind, message, job.choice);
    ++n;
  }
  std::lock_guard lock(mu);
  counters.requests_failed += n;
}

void Engine::State::fail_incoming(const std::string& kind, const std::string& message) {
  std::deque<Submission> dropped;
  {
    std::lock_guard lock(mu);
    dropped.swap(incoming);
    counters.requests_failed += dropped.size();
  }
  for (auto& sub : dropped)
    for (std::int32_t c = 0; c < sub.request.n; ++c) sub.channel->push(error_event(kind, message, c));
}

void Engine::State::run_step() {
  // Requests whose clients went away end before the step, freeing their blocks.
  for (Job& job : jobs)
    if (!job.seq.finished && job.channel->cancelled()) {
      job.held = false;
      batcher->finish(job.seq, FinishReason::cancelled);
    }
  start_siblings();
  if (batcher->idle()) return;
  try {
    const auto step_started = Clock::now();
    const StepStats s = batcher->step();
    const double step_seconds = std::chrono::duration<double>(Clock::now() - step_started).count();
    if (s.seqs > 0) batch_size.observe(s.seqs);
    if (s.seqs == 0 && !batcher->idle()) {
      // Every admitted sequence fits the pool alone, so an empty plan is a scheduler bug: never spin on it.
      spdlog::error("model {}: the scheduler planned nothing with {} waiting", model_id, batcher->waiting());
      fail_jobs(errc::internal, "internal error: the request could not be scheduled", /*only_in_step=*/false);
    }
    std::lock_guard lock(mu);
    counters.steps += s.seqs > 0 ? 1 : 0;
    counters.step_tokens += static_cast<std::uint64_t>(s.tokens);
    counters.step_seqs += static_cast<std::uint64_t>(s.seqs);
    counters.preemptions += static_cast<std::uint64_t>(s.preempted);
    if (s.seqs > 0 && s.tokens == s.seqs) {
      counters.decode_step_tokens += static_cast<std::uint64_t>(s.tokens);
      counters.decode_seconds += step_seconds;
    } else if (s.seqs > 0) {
      counters.prefill_step_tokens += static_cast<std::uint64_t>(s.tokens);
      counters.prefill_seconds += step_seconds;
    }
  } catch (const Error& e) {
    const bool fatal = poisons_runner(e.kind());
    if (fatal) {
      {
        std::lock_guard lock(mu);
        failed = true;
        failure = std::string(e.kind()) + ": " + e.what();
      }
      spdlog::error("model {}: runner failed ({}: {})", model_id, e.kind(), e.what());
      fail_jobs(e.kind(), e.what(), /*only_in_step=*/false);
      // Requests that never ran get model_failed, as later submits do.
      fail_incoming(errc::model_failed, "model " + model_id + " failed: " + e.what());
      if (options.on_failed) options.on_failed(e.kind(), e.what());
    } else {
      spdlog::warn("model {}: step failed ({}: {})", model_id, e.kind(), e.what());
      fail_jobs(e.kind(), e.what(), /*only_in_step=*/true);
    }
  } catch (const std::bad_alloc&) {
    fail_jobs(errc::out_of_memory, "out of memory while generating", /*only_in_step=*/true);
  } catch (const std::exception& e) {
    spdlog::error("model {}: unexpected error: {}", model_id, e.what());
    fail_jobs(errc::internal, "internal error while generating", /*only_in_step=*/true);
  }
}

void Engine::State::loop() {
  std::deque<Submission> fresh;
  for (;;) {
    {
      std::unique_lock lock(mu);
      const bool busy = !batcher->idle() || held_siblings() > 0;
      const auto woken = [this] { return stopping || !incoming.empty(); };
      while (!busy && !work_cv.wait_for(lock, kHeartbeat, woken)) beat = std::chrono::steady_clock::now().time_since_epoch().count();
      beat = std::chrono::steady_clock::now().time_since_epoch().count();
      if (stopping) break;
      fresh.swap(incoming);
      waiting += fresh.size();  // still counted until publish() sets the batcher's figures
    }
    admit(fresh);
    run_step();
    retire();
  }
  // Shutting down: every request still here ends with an error event.
  for (Job& job : jobs) {
    if (job.seq.finished && job.last) continue;
    batcher->drop(job.seq);
    job.held = false;
    job.last = error_event(errc::shutting_down, "model " + model_id + " was unloaded during the request", job.choice);
    std::lock_guard lock(mu);
    counters.requests_failed += 1;
  }
  retire();
  fail_incoming(errc::shutting_down, "model " + model_id + " is being unloaded");
}

Engine::Engine(std::string model_id, std::unique_ptr<backend::ModelRunner> runner,
               std::shared_ptr<const tokenizer::Tokenizer> tok, model::ModelConfigs configs, EngineOptions options)
    : state_(std::make_unique<State>()) {
  NEURON_ASSERT(runner != nullptr);
  NEURON_ASSERT(tok != nullptr);
  if (options.max_num_seqs < 1) fail(errc::invalid_argument, "max_num_seqs must be at least 1");
  if (options.max_batch_tokens < 1) fail(errc::invalid_argument, "max_batch_tokens must be at least 1");
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
  s.batcher = std::make_unique<Batcher>(
      *s.runner, BatcherOptions{.scheduler = {.max_num_seqs = options.max_num_seqs, .max_batch_tokens = options.max_batch_tokens},
                                .prefix_caching = options.prefix_caching});
  s.counters.kv_block_size = s.runner->kv_pool().block_size;
  s.publish();
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
    s.batcher.reset();
    s.runner.reset();  // weights, KV cache; a TP runner also shuts down and reaps its workers
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
  const bool prefill_only = request.output != PrefillOutput::none;
  if (prefill_only) {
    // Nothing is sampled: the prompt alone takes positions, one sequence.
    if (request.n != 1) fail(errc::invalid_argument, "n must be 1 for an embedding or score request");
    if (request.output == PrefillOutput::logits && request.output_ids.empty())
      fail(errc::invalid_argument, "a score request names no vocabulary ids to score");
    for (const std::int32_t id : request.output_ids)
      if (id < 0 || id >= s.vocab)
        fail(errc::invalid_argument, "scored token id " + std::to_string(id) + " is outside the vocabulary");
    if (request.mean_from < 0 || static_cast<std::size_t>(request.mean_from) > request.prompt.size() ||
        (request.mean_from > 0 && request.output != PrefillOutput::hidden_mean))
      fail(errc::invalid_argument, "mean_from " + std::to_string(request.mean_from) +
                                       " is not a position of a mean-pooled prompt of " +
                                       std::to_string(request.prompt.size()) + " tokens");
    request.max_tokens = 1;
    request.grammar = nullptr;
    request.top_logprobs = -1;
    request.stop.clear();
    request.sampling = {};
  }
  if (request.max_tokens < 1) {
    fail(errc::invalid_argument, "max_tokens must be at least 1, got " + std::to_string(request.max_tokens));
  }
  const std::int64_t generated = prefill_only ? 0 : request.max_tokens;
  const std::int64_t needed = static_cast<std::int64_t>(request.prompt.size()) + generated;
  if (prefill_only && needed > s.max_context)
    fail(errc::context_length_exceeded, "this model's context is " + std::to_string(s.max_context) +
                                            " tokens, but the input has " + std::to_string(request.prompt.size()));
  if (needed > s.max_context) {
    fail(errc::context_length_exceeded,
         "this model's context is " + std::to_string(s.max_context) + " tokens, but the prompt has " +
             std::to_string(request.prompt.size()) + " tokens and max_tokens is " + std::to_string(request.max_tokens) +
             " (" + std::to_string(needed) + " in total)");
  }
  request.sampling.validate();
  if (request.n < 1 || request.n > kMaxChoices)
    fail(errc::invalid_argument, "n must be between 1 and " + std::to_string(kMaxChoices) + ", got " + std::to_string(request.n));
  if (request.top_logprobs < -1 || request.top_logprobs > model::kMaxTopLogprobs)
    fail(errc::invalid_argument, "top_logprobs must be between 0 and " + std::to_string(model::kMaxTopLogprobs) + ", got " +
                                     std::to_string(request.top_logprobs));
  if (request.grammar && request.grammar->logits_vocab() != s.vocab)
    fail(errc::invalid_argument, "the grammar was compiled for a vocabulary of " +
                                     std::to_string(request.grammar->logits_vocab()) + " tokens; this model has " +
                                     std::to_string(s.vocab));
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
    // The batcher's sizes are fixed after construction and check_fits reads only them.
    if (s.batcher) s.batcher->check_fits(static_cast<std::int64_t>(request.prompt.size()), request.max_tokens);
    // queue_depth requests may wait behind max_num_seqs running ones (counted together, so the
    // answer does not depend on whether the engine thread has admitted the latest arrivals yet).
    const std::size_t in_system = sequences_in(s.incoming) + s.waiting + s.running;
    const std::size_t capacity = s.options.queue_depth + static_cast<std::size_t>(s.options.max_num_seqs);
    if (static_cast<std::size_t>(request.n) > capacity)
      fail(errc::invalid_argument, "n is " + std::to_string(request.n) + " but model " + s.model_id + " holds at most " +
                                       std::to_string(capacity) + " sequences (running and queued)");
    if (in_system + static_cast<std::size_t>(request.n) > capacity) {
      ++s.counters.rejected_queue_full;
      fail(errc::overloaded, "model " + s.model_id + " is busy: " + std::to_string(in_system) + " requests are running or waiting (" +
                                 std::to_string(s.options.max_num_seqs) + " run at once, queue depth " +
                                 std::to_string(s.options.queue_depth) + ")");
    }
    s.incoming.push_back(Submission{std::move(request), channel, Clock::now()});
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
    out.queue_depth = sequences_in(s.incoming) + s.waiting;
    out.running = s.running;
    out.failed = s.failed;
    out.failure = s.failure;
  }
  out.time_to_first_token = s.ttft.snapshot();
  out.inter_token_latency = s.inter_token.snapshot();
  out.batch_size = s.batch_size.snapshot();
  return out;
}

const std::string& Engine::model_id() const noexcept { return state_->model_id; }

std::int32_t Engine::max_context() const noexcept { return state_->max_context; }

backend::MemoryStats Engine::memory() const { return state_->memory; }

const EngineOptions& Engine::options() const noexcept { return state_->options; }

std::chrono::steady_clock::time_point Engine::heartbeat() const {
  return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(state_->beat.load()));
}

bool Engine::idle() const {
  std::lock_guard lock(state_->mu);
  return state_->incoming.empty() && state_->waiting == 0 && state_->running == 0;
}

}  // namespace neuron::engine
