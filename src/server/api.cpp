#include "server/api.hpp"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <thread>
#include <variant>

#include <spdlog/spdlog.h>

#include "engine/model_assets.hpp"
#include "io/model_resolver.hpp"
#include "server/api_error.hpp"
#include "server/api_helpers.hpp"
#include "server/discovery.hpp"
#include "server/logprobs_json.hpp"
#include "server/model_spec.hpp"
#include "server/openai_request.hpp"
#include "server/openai_response.hpp"
#include "server/tool_calls.hpp"
#include "server/messages_api.hpp"
#include "server/web_ui.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;
using detail::json_response;
using detail::string_field;
using detail::unix_seconds;
using Clock = std::chrono::steady_clock;

constexpr auto kPoll = std::chrono::milliseconds(1000);
// After cancelling, how long to wait for the engine's final event (for usage metrics).
constexpr auto kCancelDrain = std::chrono::seconds(10);
// Logprob entries (tokens times alternatives plus one) a blocking answer may hold.
constexpr std::int64_t kMaxBlockingLogprobEntries = 1'000'000;
// How often a non-streaming request checks that its client is still there.
constexpr auto kProbeEvery = std::chrono::milliseconds(100);

bool constant_time_equals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

// The API key a request presents: "Authorization: Bearer KEY" (the scheme
// in any case, as RFC 9110 has it) or "x-api-key: KEY" (Anthropic's clients).
std::optional<std::string> presented_key(const HttpRequest& request) {
  const std::string header = request.header("Authorization");
  std::string_view auth = header;
  while (!auth.empty() && auth.front() == ' ') auth.remove_prefix(1);
  constexpr std::string_view kScheme = "bearer";
  if (auth.size() > kScheme.size() && auth[kScheme.size()] == ' ' &&
      std::equal(kScheme.begin(), kScheme.end(), auth.begin(),
                 [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); })) {
    auth.remove_prefix(kScheme.size());
    while (!auth.empty() && auth.front() == ' ') auth.remove_prefix(1);
    while (!auth.empty() && auth.back() == ' ') auth.remove_suffix(1);
    if (!auth.empty()) return std::string(auth);
  }
  if (std::string x = request.header("x-api-key"); !x.empty()) return x;
  if (!header.empty()) return std::string();  // some other scheme: presented, and wrong
  return std::nullopt;
}

nlohmann::ordered_json messages_json(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
    if (m.reasoning_content) j["reasoning_content"] = *m.reasoning_content;
    if (m.name) j["name"] = *m.name;
    if (m.tool_call_id) j["tool_call_id"] = *m.tool_call_id;
    if (!m.tool_calls.is_null()) j["tool_calls"] = m.tool_calls;
    out.push_back(std::move(j));
  }
  return out;
}

// The rendered prompt ends inside an opened <think> (templates that start the
// reasoning for the model), so the first generated text is reasoning.
bool ends_inside_think(const std::string& prompt) {
  auto open = prompt.rfind("<think>");
  if (open == std::string::npos) return false;
  auto close = prompt.rfind("</think>");
  return close == std::string::npos || close < open;
}

// A chat request's prompt text: the model's template over its messages and tools.
std::string render_chat(const engine::ModelAssets& assets, const OpenAiRequest& req, const std::string& model, const std::string& param,
                        const decltype(OpenAiRequest::chat_template_kwargs)& template_kwargs, bool add_generation_prompt = true) {
  if (!assets.chat) throw FieldError(param, "model '" + model + "' has no chat template; use /v1/completions");
  return assets.chat->apply(messages_json(req.messages), req.tools, add_generation_prompt, template_kwargs);
}

// How the model writes tool calls: its chat template's format; <tool_call> tags
// (the most common) when the template shows none.
chat::ToolCallFormat tool_call_format(const engine::ModelAssets& assets) {
  const auto format = assets.chat ? assets.chat->tool_call_format() : std::nullopt;
  return format.value_or(chat::ToolCallFormat::hermes);
}

// How a request's tool calls are parsed: the model's format, with the types
// of its tools' parameters; nullopt when it gave no tools.
std::optional<ToolCallSyntax> tool_call_syntax(const engine::ModelAssets& assets, const OpenAiRequest& req) {
  if (!req.tool_calls) return std::nullopt;
  return ToolCallSyntax{tool_call_format(assets), ParameterTypes(req.tools)};
}

model::SamplingParams sampling_for(const model::GenerationDefaults& d, const SamplingOverrides& o) {
  model::SamplingParams p;
  if (d.temperature) p.temperature = *d.temperature;
  if (d.top_p) p.top_p = *d.top_p;
  if (d.top_k) p.top_k = *d.top_k;
  if (d.min_p) p.min_p = *d.min_p;
  if (d.repetition_penalty) p.repetition_penalty = *d.repetition_penalty;
  if (o.temperature) p.temperature = *o.temperature;
  if (o.top_p) p.top_p = *o.top_p;
  if (o.top_k) p.top_k = std::max(0, *o.top_k);  // OpenAI-style -1 means "off", as 0 does here
  if (o.min_p) p.min_p = *o.min_p;
  if (o.repetition_penalty) p.repetition_penalty = *o.repetition_penalty;
  if (o.presence_penalty) p.presence_penalty = *o.presence_penalty;
  if (o.frequency_penalty) p.frequency_penalty = *o.frequency_penalty;
  p.seed = o.seed;
  return p;
}

}  // namespace

std::shared_ptr<const grammar::CompiledGrammar> compile_constraint(const engine::ModelAssets& assets,
                                                                   const grammar::Constraint& constraint,
                                                                   const std::string& param) {
  if (!assets.grammars) throw FieldError(param, "constrained decoding is not available for this model", http_errc::unsupported);
  try {
    grammar::Constraint c = constraint;
    c.tool_format = tool_call_format(assets);  // calls are written the way the model writes calls
    if (c.kind != grammar::Constraint::Kind::tool_call && !c.tools.empty() && c.tool_format == chat::ToolCallFormat::llama_json) {
      // "A tool call or a value of the format" needs tagged calls (hermes, qwen3_coder), so the two
      // cannot be confused; a Llama call is itself a bare JSON object: such a model answers in the format.
      c.tools.clear();
    }
    return assets.grammars->get(c);
  } catch (const FieldError&) {
    throw;
  } catch (const Error& e) {
    if (e.kind() != errc::invalid_argument) throw;
    throw FieldError(param, std::string("cannot constrain the output to this schema: ") + e.what());
  }
}

// Registers one in-flight generation so shutdown can wait for or cancel it.
class Api::Tracker {
 public:
  Tracker(Api& api, std::shared_ptr<engine::Channel> channel) : api_(api) {
    std::lock_guard lock(api_.mu_);
    id_ = api_.next_tracker_id_++;
    api_.active_.emplace(id_, channel);
  }
  ~Tracker() {
    std::lock_guard lock(api_.mu_);
    api_.active_.erase(id_);
    if (api_.active_.empty()) api_.idle_cv_.notify_all();
  }
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

 private:
  Api& api_;
  std::uint64_t id_ = 0;
};

// One admitted request (n choices over one channel): what the response and
// the metrics need to know about it.
struct Api::Generation {
  Generation(Api& a, std::shared_ptr<engine::Engine> e, std::string m) : api(a), engine(std::move(e)), model(std::move(m)) {}
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  Api& api;
  std::shared_ptr<engine::Engine> engine;  // keeps the model alive while the request runs
  std::shared_ptr<const engine::ModelAssets> assets;  // the tokenizer for logprobs' token texts
  std::shared_ptr<engine::Channel> channel;
  std::unique_ptr<Tracker> tracker;
  std::unique_ptr<Admission::Ticket> ticket;  // its place in the model's capacity, for its principal
  Clock::time_point submitted = Clock::now();  // for usage.helexa_timing
  ResponseMeta meta;
  std::string model;
  std::int32_t choices = 1;
  std::int32_t top_logprobs = -1;  // -1: no logprobs
  std::string echo;                // completions with echo: the prompt text, before each choice's text
  std::optional<ToolCallSyntax> tool_calls;  // how the answer's tool calls are parsed; nullopt: they are not
  TokenUsage usage;                // summed over the choices that ended
  std::vector<std::string> stop;   // the request's stop strings
  std::int32_t prompt_tokens = 0;
  std::int32_t reasoning_tokens = 0;  // tokens of deltas that carried reasoning (TurnEnd::reasoning_tokens)
  Clock::time_point last_delta = Clock::now();
  bool seen_delta = false;
  bool client_gone = false;
  bool cancelled = false;  // some choice ended "cancelled"
  std::int32_t ended_choices = 0;
  bool ended = false;  // every choice has ended

  // A stream whose body never ran (the connection failed first) still must
  // not leave the engine generating for nobody.
  ~Generation() {
    if (!ended && channel) channel->cancel();
  }

  void on_delta(const engine::Event& e) {
    auto now = Clock::now();
    if (seen_delta && !e.tokens.empty()) {
      double per_token = std::chrono::duration<double>(now - last_delta).count() / static_cast<double>(e.tokens.size());
      for (std::size_t i = 0; i < e.tokens.size(); ++i) api.metrics_.observe("neuron_inter_token_latency_seconds", per_token);
    }
    seen_delta = true;
    last_delta = now;
    if (!e.reasoning.empty()) reasoning_tokens += static_cast<std::int32_t>(e.tokens.size());
  }

  // usage.helexa_timing of a done event: submit to first token (the queue
  // wait included) as prefill, the rest as decode; the prompt tokens not
  // served from the prefix cache as prefill_tokens.
  UsageTiming timing_of(const engine::Event& e) const {
    const double total_ms = std::chrono::duration<double, std::milli>(Clock::now() - submitted).count();
    const double prefill_ms = std::min(e.time_to_first_token_ms, total_ms);
    return UsageTiming{static_cast<std::int64_t>(prefill_ms), static_cast<std::int64_t>(total_ms - prefill_ms),
                       std::max(0, e.usage.prompt_tokens - e.usage.cached_tokens)};
  }

  // A one-choice generation's done event as the TurnShapers see it.
  TurnEnd end_of(const engine::Event& e) const {
    TurnEnd end{e.finish_reason, {e.usage.prompt_tokens, e.usage.completion_tokens, e.usage.cached_tokens, timing_of(e)},
                reasoning_tokens, {}};
    if (e.finish_reason == "stop" && !stop.empty()) {
      // The engine stops at the first match and keeps the stop string's tokens
      // in `tokens` (an EOS is left out), so the earliest match in their text is it.
      const std::string raw = assets->tokenizer->decode(e.tokens);
      std::size_t best = std::string::npos;
      for (const auto& s : stop) {
        const std::size_t at = raw.find(s);
        if (at != std::string::npos && (best == std::string::npos || at < best)) {
          best = at;
          end.stop_sequence = s;
        }
      }
    }
    return end;
  }

  // One choice's last event. The prompt counts once (choice 0's), the
  // completion tokens of every choice.
  void on_end(const engine::Event& e) {
    if (ended) return;
    Labels model_label{{"model", model}};
    if (e.kind == engine::Event::Kind::done) {
      if (e.choice == 0) {
        usage.prompt_tokens = e.usage.prompt_tokens;
        usage.cached_tokens = e.usage.cached_tokens;
        usage.timing = timing_of(e);
        api.metrics_.inc("neuron_prompt_tokens_total", model_label, e.usage.prompt_tokens);
        if (e.usage.completion_tokens > 0)
          api.metrics_.observe("neuron_time_to_first_token_seconds", e.time_to_first_token_ms / 1000.0);
      }
      usage.completion_tokens += e.usage.completion_tokens;
      api.metrics_.inc("neuron_generated_tokens_total", model_label, e.usage.completion_tokens);
      if (e.finish_reason == "cancelled") cancelled = true;
    }
    if (++ended_choices < choices) return;
    ended = true;
    if (client_gone || cancelled) api.metrics_.inc("neuron_requests_cancelled_total", model_label);
    // Last: no longer in flight, even while the response object lingers. Once
    // the tracker is gone shutdown may destroy the Api, and this may run on
    // the engine's thread (a cancelled stream), so nothing of it is touched after.
    ticket.reset();
    tracker.reset();
  }

  // Stop the engine at its next step (all choices), then wait (bounded) for
  // the choices' last events so usage and cancellation are counted.
  void drain(bool gone) {
    client_gone = client_gone || gone;
    channel->cancel();
    auto deadline = Clock::now() + kCancelDrain;
    while (!ended && Clock::now() < deadline) {
      auto e = channel->next(kPoll);
      if (e && e->kind != engine::Event::Kind::delta) on_end(*e);
    }
    engine::Event lost;
    lost.kind = engine::Event::Kind::error;
    while (!ended) on_end(lost);
  }
  // The client went away.
  void abandon() { drain(true); }
};

// One choice's streamed logprobs: the ids and logprobs of deltas not yet
// sent (a delta whose text is held back still brings its tokens).
struct PendingLogprobs {
  std::vector<std::int32_t> ids;
  std::vector<model::TokenLogprobs> logprobs;
  void add(const engine::Event& e) {
    ids.insert(ids.end(), e.tokens.begin(), e.tokens.end());
    logprobs.insert(logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    ids.resize(logprobs.size());  // the engine sends one per id; never index past them
  }
};

// What every streamed generation shares as the transport's BodyStream: the
// engine's pushes wake the connection (Channel listener); cancel() stops the
// engine's work and leaves the last events' accounting to the engine's thread;
// a stream dropped before its end cancels.
class Api::GenerationStream : public BodyStream {
 public:
  explicit GenerationStream(std::shared_ptr<Generation> gen) : gen_(std::move(gen)) {}
  ~GenerationStream() override {
    if (!finished_ && !cancelled_) cancel();  // dropped before its end: nobody reads it any more
  }
  GenerationStream(const GenerationStream&) = delete;
  GenerationStream& operator=(const GenerationStream&) = delete;

  void start(std::function<void()> wake) override { gen_->channel->set_listener(std::move(wake)); }

  void cancel() override {
    if (cancelled_ || finished_) return;
    cancelled_ = true;
    gen_->client_gone = true;
    stop_rest();
  }

  // Also what keeps a stream visibly alive while it waits in the queue.
  std::string heartbeat() const override { return ": keep-alive\n\n"; }

 protected:
  // Stops the engine's work on every choice. It still sends each choice's
  // last event (it always does); they are counted when they come, on the
  // engine's thread, and then `gen` is let go.
  void stop_rest() {
    std::shared_ptr<Generation> gen = gen_;
    gen->channel->cancel();
    if (gen->ended) {  // nothing more will come (and a listener holding `gen` would never let go)
      gen->channel->set_listener({});
      return;
    }
    gen->channel->set_listener([gen] {
      while (auto e = gen->channel->try_next()) {
        if (e->kind == engine::Event::Kind::delta) continue;
        gen->on_end(*e);
        if (gen->ended) {
          gen->channel->set_listener({});
          return;
        }
      }
    });
  }

  std::shared_ptr<Generation> gen_;
  bool finished_ = false;
  bool cancelled_ = false;
};

// A streaming generation as server-sent events, driven by the transport: the
// engine's pushes wake the connection (Channel listener), pull() turns the
// queued events into SSE bytes on the connection's executor, cancel() stops
// the engine and leaves the last events' accounting to the engine's thread.
// Each of the n choices has its own role chunk, tool call extractor, logprobs
// and finish chunk; usage and [DONE] follow the last choice's end.
class Api::SseStream final : public GenerationStream {
 public:
  SseStream(std::shared_ptr<Generation> gen, bool include_usage)
      : GenerationStream(std::move(gen)), include_usage_(include_usage), choices_(static_cast<std::size_t>(gen_->choices)) {
    for (Choice& c : choices_) {
      if (gen_->tool_calls) c.extractor = std::make_unique<ToolCallExtractor>(*gen_->tool_calls);
      if (!gen_->meta.chat && gen_->top_logprobs >= 0)
        c.completion_logprobs = std::make_unique<CompletionLogprobs>(*gen_->assets->tokenizer, code_points(gen_->echo));
    }
  }

  bool pull(std::string& out) override {
    if (!started_) {
      started_ = true;
      for (std::size_t i = 0; i < choices_.size(); ++i) {
        if (gen_->meta.chat) out += sse_event(role_chunk(gen_->meta, static_cast<int>(i)));
        else if (!gen_->echo.empty()) out += sse_event(delta_chunk(gen_->meta, gen_->echo, {}, static_cast<int>(i)));
      }
    }
    while (auto e = gen_->channel->try_next()) {
      if (e->choice < 0 || static_cast<std::size_t>(e->choice) >= choices_.size()) continue;  // never sent: n choices only
      const int index = e->choice;
      Choice& c = choices_[static_cast<std::size_t>(index)];
      if (e->kind == engine::Event::Kind::delta) {
        gen_->on_delta(*e);
        if (gen_->top_logprobs >= 0) c.pending.add(*e);
        std::string text = e->text;
        std::vector<ToolCallDelta> calls;
        if (c.extractor) {
          ToolCallExtractor::Output o = c.extractor->feed(text);
          text = std::move(o.content);
          calls = std::move(o.deltas);
        }
        if (!text.empty() || !e->reasoning.empty()) out += sse_event(delta_chunk(gen_->meta, text, e->reasoning, index, take_logprobs(c)));
        if (!calls.empty()) out += sse_event(tool_call_deltas_chunk(gen_->meta, calls, index));
        continue;
      }
      gen_->on_end(*e);
      if (e->kind == engine::Event::Kind::error) {
        // One choice failed: the answer is incomplete, so end it here and stop the others.
        out += sse_event(envelope(classify(e->error_kind, e->error_message)));
        out += kSseDone;
        finished_ = true;
        stop_rest();
        return false;
      }
      std::string finish_reason = e->finish_reason;
      if (c.extractor) {
        ToolCallExtractor::Output rest = c.extractor->finish();
        if (!rest.content.empty()) out += sse_event(delta_chunk(gen_->meta, rest.content, {}, index, take_logprobs(c)));
        if (!rest.deltas.empty()) out += sse_event(tool_call_deltas_chunk(gen_->meta, rest.deltas, index));
        finish_reason = c.extractor->finish_reason(finish_reason);
      }
      // Tokens whose text never showed (held, or a stop string's) keep their logprobs.
      if (!c.pending.ids.empty()) out += sse_event(delta_chunk(gen_->meta, {}, {}, index, take_logprobs(c)));
      nlohmann::json finish = finish_chunk(gen_->meta, finish_reason, index);
      // Usage always goes out (the helexa gateway meters what it reads at the
      // stream's end and never asks): on the last finish chunk, as vLLM's
      // forced usage does, unless the client asked for OpenAI's own usage chunk.
      if (gen_->ended && !include_usage_) finish["usage"] = usage_json(gen_->usage);
      out += sse_event(finish);
      if (!gen_->ended) continue;
      if (include_usage_) out += sse_event(usage_chunk(gen_->meta, gen_->usage));
      out += kSseDone;
      finished_ = true;
      gen_->channel->set_listener({});
      return false;
    }
    return true;
  }

 private:
  struct Choice {
    std::unique_ptr<ToolCallExtractor> extractor;
    std::unique_ptr<CompletionLogprobs> completion_logprobs;
    PendingLogprobs pending;
  };

  // The logprobs object for a chunk: null when not asked for, else the pending tokens'.
  nlohmann::json take_logprobs(Choice& c) {
    if (gen_->top_logprobs < 0) return nullptr;
    nlohmann::json j = c.completion_logprobs ? c.completion_logprobs->take(c.pending.ids, c.pending.logprobs)
                                             : chat_logprobs(*gen_->assets->tokenizer, c.pending.ids, c.pending.logprobs);
    c.pending = {};
    return j;
  }


  const bool include_usage_;
  std::vector<Choice> choices_;
  bool started_ = false;
};

// A one-choice generation (Responses, Messages) as server-sent events through
// the API's TurnShaper: the same transport contract as SseStream, the bytes
// are the shaper's.
class Api::TurnStream final : public GenerationStream {
 public:
  TurnStream(std::shared_ptr<Generation> gen, std::unique_ptr<TurnShaper> shaper)
      : GenerationStream(std::move(gen)), shaper_(std::move(shaper)) {}

  bool pull(std::string& out) override {
    if (!opened_) {
      opened_ = true;
      out += shaper_->open();
    }
    while (auto e = gen_->channel->try_next()) {
      if (e->choice != 0) continue;  // never sent: one choice only
      if (e->kind == engine::Event::Kind::delta) {
        gen_->on_delta(*e);
        out += shaper_->delta(e->text, e->reasoning);
        continue;
      }
      gen_->on_end(*e);
      if (e->kind == engine::Event::Kind::error) out += shaper_->fail(classify(e->error_kind, e->error_message));
      else out += shaper_->close(gen_->end_of(*e));
      finished_ = true;
      gen_->channel->set_listener({});
      return false;
    }
    return true;
  }

 private:
  std::unique_ptr<TurnShaper> shaper_;
  bool opened_ = false;
};

Api::Api(engine::Registry& registry, ApiOptions options)
    : registry_(registry),
      options_(std::move(options)),
      responses_(std::make_shared<ResponseStore>(options_.stored_responses, options_.stored_response_bytes)),
      admission_(options_.admission) {
  metrics_.declare_counter("neuron_http_requests_total", "HTTP requests by route and status");
  metrics_.declare_counter("neuron_prompt_tokens_total", "Prompt tokens processed");
  metrics_.declare_counter("neuron_generated_tokens_total", "Tokens generated");
  metrics_.declare_counter("neuron_requests_cancelled_total", "Generations stopped before their end: client disconnected, or cancelled at shutdown");
  const std::vector<double> latency = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  metrics_.declare_histogram("neuron_time_to_first_token_seconds", "Submit to first generated token (queue wait included)", latency);
  metrics_.declare_histogram("neuron_inter_token_latency_seconds", "Time between generated tokens", latency);
  metrics_.declare_gauge("neuron_queue_depth", "Requests waiting per model");
  metrics_.declare_gauge("neuron_requests_running", "Requests generating per model");
  metrics_.declare_gauge("neuron_kv_blocks_total", "KV cache blocks per model (each rank holds as many)");
  metrics_.declare_gauge("neuron_kv_blocks_used", "KV cache blocks held by running sequences");
  metrics_.declare_gauge("neuron_kv_blocks_cached", "Full KV blocks kept for prefix reuse");
  metrics_.declare_gauge("neuron_prompt_tokens_cached", "Prompt tokens whose KV came from the prefix cache, since the model loaded");
  metrics_.declare_gauge("neuron_preemptions", "Sequences preempted (blocks taken back, recomputed later), since the model loaded");
  metrics_.declare_gauge("neuron_batch_steps", "Batched steps run since the model loaded");
  metrics_.declare_gauge("neuron_batch_sequences", "Sequences over all batched steps (/ steps = mean batch size)");
  metrics_.declare_gauge("neuron_batch_tokens", "New tokens over all batched steps");
  metrics_.declare_gauge("neuron_models_loaded", "Models loaded and serving");
  metrics_.declare_gauge("neuron_models_loading", "Models still loading");
  metrics_.declare_gauge("neuron_requests_in_flight", "Generations in flight over HTTP");

  auto bind = [this](HttpResponse (Api::*fn)(const HttpRequest&)) {
    return [this, fn](const HttpRequest& r) { return (this->*fn)(r); };
  };
  add_management_routes();  // server/management_api.cpp
  add_web_ui_routes(router_);  // server/web_ui.cpp
  router_.add("GET", "/v1/models", bind(&Api::openai_models));
  router_.add_prefix("GET", "/v1/models/", "/v1/models/{id}", bind(&Api::openai_model));
  router_.add("POST", "/v1/chat/completions", bind(&Api::chat_completions));
  router_.add("POST", "/v1/completions", bind(&Api::completions));
  router_.add("POST", "/v1/responses", bind(&Api::responses));
  router_.add_prefix("GET", "/v1/responses/", "/v1/responses/{id}", bind(&Api::get_response));
  router_.add_prefix("DELETE", "/v1/responses/", "/v1/responses/{id}", bind(&Api::delete_response));
  router_.add("POST", "/v1/messages", bind(&Api::messages));
  router_.add("POST", "/v1/messages/count_tokens", bind(&Api::count_message_tokens));
  router_.add("POST", "/v1/embeddings", bind(&Api::embeddings));
  router_.add("POST", "/v1/rerank", bind(&Api::rerank));
  router_.add("POST", "/rerank", bind(&Api::rerank));
  router_.add("POST", "/v2/rerank", bind(&Api::rerank));
  router_.add("POST", "/v1/score", bind(&Api::score));
  router_.add("POST", "/tokenize", bind(&Api::tokenize));
  router_.add("POST", "/detokenize", bind(&Api::detokenize));
  router_.add("GET", "/metrics", bind(&Api::render_metrics));
  router_.add("GET", "/version", bind(&Api::version));
}

Api::~Api() {
  cancel_all();
  wait_idle(std::chrono::milliseconds(5000));
}

HttpResponse Api::handle(const HttpRequest& request) {
  const bool exempt = request.path == "/health" || is_web_ui_path(request.path);
  // Anthropic's routes answer errors in Anthropic's shape.
  const bool anthropic = request.path == "/v1/messages" || request.path == "/v1/messages/count_tokens";
  auto fail = [anthropic](const ApiError& e) { return anthropic ? anthropic_error_response(e) : error_response(e); };
  if (!options_.api_key.empty() && !exempt) {
    const std::optional<std::string> key = presented_key(request);
    if (!key || !constant_time_equals(*key, options_.api_key)) {
      HttpResponse r = fail(classify(
          http_errc::unauthorized, key ? "invalid API key" : "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"));
      r.set_header("WWW-Authenticate", "Bearer");
      return r;
    }
  }
  if (shutting_down_ && !exempt && request.path != "/metrics") return fail(classify(errc::shutting_down, "the server is shutting down"));
  HttpResponse r = router_.dispatch(request);
  return anthropic ? as_anthropic_error(std::move(r)) : r;
}

void Api::record_exchange(const std::string& method, const std::string& path, int status, double ms) {
  metrics_.inc("neuron_http_requests_total", {{"route", router_.route_label(path)}, {"status", std::to_string(status)}});
  spdlog::info("{} {} {} {:.1f}ms", method, path, status, ms);
}

void Api::begin_shutdown() { shutting_down_ = true; }

bool Api::wait_idle(std::chrono::milliseconds deadline) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_for(lock, deadline, [this] { return active_.empty(); });
}

void Api::cancel_all() {
  std::lock_guard lock(mu_);
  for (auto& [id, weak] : active_)
    if (auto ch = weak.lock()) ch->cancel();
}

std::size_t Api::in_flight() const {
  std::lock_guard lock(mu_);
  return active_.size();
}

namespace {
// What a loaded model serves (engine/model_task.hpp), for /v1/models: `task`, and `pooling` and
// `include_prompt` (an embedder's; else null); nulls while unknown.
json task_json(const engine::Registry& registry, const std::string& model_id) {
  try {
    if (const auto assets = registry.assets(model_id)) {
      const bool embed = assets->task.task == engine::ModelTask::embed;
      return {{"task", engine::task_name(assets->task.task)},
              {"pooling", embed ? json(engine::pooling_name(assets->task.pooling)) : json(nullptr)},
              {"include_prompt", embed ? json(assets->task.include_prompt) : json(nullptr)}};
    }
  } catch (const Error&) {
  }
  return {{"task", nullptr}, {"pooling", nullptr}, {"include_prompt", nullptr}};
}
}  // namespace

HttpResponse Api::openai_models(const HttpRequest&) {
  json data = json::array();
  for (const auto& m : registry_.list()) {
    if (m.status != engine::ModelStatus::loaded) continue;
    // The name clients send (ModelInfo::name: served name, else the id it was loaded by), never a path.
    json entry = {{"id", m.name}, {"object", "model"}, {"created", unix_seconds(m.created)}, {"owned_by", "neuron"},
                  {"max_model_len", m.max_context}};
    entry.update(task_json(registry_, m.model_id));
    data.push_back(std::move(entry));
  }
  return json_response({{"object", "list"}, {"data", data}});
}

HttpResponse Api::openai_model(const HttpRequest& request) {
  const std::string id = resolve_model_name(request.path.substr(std::string("/v1/models/").size()));
  auto info = registry_.info(id);
  if (!info || info->status != engine::ModelStatus::loaded)
    throw FieldError("model", "model '" + id + "' does not exist or is not loaded", http_errc::model_not_found);
  json entry = {{"id", info->name}, {"object", "model"}, {"created", unix_seconds(info->created)}, {"owned_by", "neuron"},
                {"max_model_len", info->max_context}};
  entry.update(task_json(registry_, id));
  return json_response(entry);
}

HttpResponse Api::render_metrics(const HttpRequest&) {
  for (const char* name : {"neuron_queue_depth", "neuron_requests_running", "neuron_kv_blocks_total", "neuron_kv_blocks_used",
                           "neuron_kv_blocks_cached", "neuron_prompt_tokens_cached", "neuron_preemptions",
                           "neuron_batch_steps", "neuron_batch_sequences", "neuron_batch_tokens"})
    metrics_.clear(name);
  int loaded = 0, loading = 0;
  for (const auto& m : registry_.list()) {
    if (m.status == engine::ModelStatus::loading) ++loading;
    if (m.status != engine::ModelStatus::loaded) continue;
    ++loaded;
    try {
      auto engine = registry_.peek(m.model_id);  // reading stats is no use: it keeps no model from idling out
      if (!engine) continue;
      auto stats = engine->stats();
      metrics_.set("neuron_queue_depth", {{"model", m.model_id}}, static_cast<double>(stats.queue_depth));
      metrics_.set("neuron_requests_running", {{"model", m.model_id}}, static_cast<double>(stats.running));
      const Labels label{{"model", m.model_id}};
      metrics_.set("neuron_kv_blocks_total", label, static_cast<double>(stats.kv_blocks_total));
      metrics_.set("neuron_kv_blocks_used", label, static_cast<double>(stats.kv_blocks_used));
      metrics_.set("neuron_kv_blocks_cached", label, static_cast<double>(stats.kv_blocks_cached));
      metrics_.set("neuron_prompt_tokens_cached", label, static_cast<double>(stats.prompt_tokens_cached));
      metrics_.set("neuron_preemptions", label, static_cast<double>(stats.preemptions));
      metrics_.set("neuron_batch_steps", label, static_cast<double>(stats.steps));
      metrics_.set("neuron_batch_sequences", label, static_cast<double>(stats.step_seqs));
      metrics_.set("neuron_batch_tokens", label, static_cast<double>(stats.step_tokens));
    } catch (const Error&) {
      // Gone since list(): nothing to report for it.
    }
  }
  metrics_.set("neuron_models_loaded", {}, loaded);
  metrics_.set("neuron_models_loading", {}, loading);
  metrics_.set("neuron_requests_in_flight", {}, static_cast<double>(in_flight()));
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.render();
  return r;
}

HttpResponse Api::version(const HttpRequest&) { return json_response({{"name", "neuron"}, {"version", NEURON_VERSION}}); }

// ---- models by name ----

std::string Api::resolve_model_name(const std::string& requested) const {
  const auto models = registry_.list();
  if (!requested.empty()) {
    for (const auto& m : models)
      if (m.model_id == requested) return requested;
    for (const auto& m : models)
      if (m.name == requested || (!m.served_name.empty() && m.served_name == requested)) return m.model_id;
    // A directory-loaded model also answers to its folder name ("qwen3-tiny-a"
    // for /srv/models/qwen3-tiny-a), when that name is unambiguous.
    std::string match;
    int n = 0;
    for (const auto& m : models) {
      std::filesystem::path p(m.model_id);
      while (!p.empty() && (p.filename().empty() || p.filename() == ".")) p = p.parent_path();
      if (p.has_parent_path() && p.filename() == requested) {
        match = m.model_id;
        ++n;
      }
    }
    if (n == 1) return match;
    // Another spelling of a loaded directory ("/m/x/", "/m/./x", a symlink to it).
    const std::string canonical = io::canonical_model_ref(requested);
    for (const auto& m : models)
      if (m.model_id == canonical) return canonical;
    return requested;
  }
  // No model named: fine when exactly one is being served, as with `neuron serve` alone.
  if (models.size() == 1) return models.front().model_id;
  throw FieldError("model", models.empty() ? "'model' is required (no model is loaded)" : "'model' is required when several models are loaded");
}

std::shared_ptr<engine::Engine> Api::engine_for(const std::string& model) const {
  try {
    return registry_.engine(model);
  } catch (const Error& e) {
    if (e.kind() == errc::not_found)
      throw FieldError("model", "model '" + model + "' does not exist or is not loaded", http_errc::model_not_found);
    throw;
  }
}

std::shared_ptr<const engine::ModelAssets> Api::assets_for(const std::string& model) const {
  try {
    auto assets = registry_.assets(model);
    if (!assets) throw FieldError("model", "model '" + model + "' does not exist or is not loaded", http_errc::model_not_found);
    return assets;
  } catch (const FieldError&) {
    throw;
  } catch (const Error& e) {
    if (e.kind() == errc::not_found)
      throw FieldError("model", "model '" + model + "' does not exist or is not loaded", http_errc::model_not_found);
    throw;
  }
}

// ---- tokenize ----

HttpResponse Api::tokenize(const HttpRequest& request) {
  const nlohmann::ordered_json body = parse_body(request.body);
  std::string model = resolve_model_name(string_field(body, "model", false));
  auto assets = assets_for(model);
  std::vector<std::int32_t> ids;
  if (body.contains("messages") && !body["messages"].is_null()) {
    OpenAiRequest chat = parse_chat_request(body);
    if (!assets->chat) throw FieldError("messages", "model '" + model + "' has no chat template; send 'prompt' instead");
    bool add_generation_prompt = true;
    if (auto it = body.find("add_generation_prompt"); it != body.end() && !it->is_null()) {
      if (!it->is_boolean()) throw FieldError("add_generation_prompt", "'add_generation_prompt' must be a boolean");
      add_generation_prompt = it->get<bool>();
    }
    std::string text = assets->chat->apply(messages_json(chat.messages), chat.tools, add_generation_prompt, chat.chat_template_kwargs);
    ids = assets->tokenizer->encode(text);
  } else {
    ids = assets->tokenizer->encode_with_special_tokens(string_field(body, "prompt", true));  // as completions sends it
  }
  json out = {{"tokens", ids}, {"count", ids.size()}};
  if (auto info = registry_.info(model)) out["max_model_len"] = info->max_context;
  return json_response(out);
}

HttpResponse Api::detokenize(const HttpRequest& request) {
  json body = parse_body(request.body);
  std::string model = resolve_model_name(string_field(body, "model", false));
  auto assets = assets_for(model);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) throw FieldError("tokens", "'tokens' must be an array of token ids");
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    std::string where = "tokens[" + std::to_string(i) + "]";
    if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<std::uint64_t>() > 0x7fffffffu) || t.get<std::int64_t>() < 0 ||
        !assets->tokenizer->is_known(static_cast<std::int32_t>(t.get<std::int64_t>())))
      throw FieldError(where, "'" + where + "' is not a token id of model '" + model + "'");
    ids.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
  }
  return json_response({{"prompt", assets->tokenizer->decode(ids)}});
}

// ---- generation ----

HttpResponse Api::chat_completions(const HttpRequest& request) { return generate(request, true); }
HttpResponse Api::completions(const HttpRequest& request) { return generate(request, false); }

HttpResponse Api::generate(const HttpRequest& request, bool chat) {
  const nlohmann::ordered_json body = parse_body(request.body);
  const OpenAiRequest req = chat ? parse_chat_request(body) : parse_completion_request(body);
  auto gen = submit(req, request);
  const auto& assets = gen->assets;
  if (!req.stream) {
    struct Acc {
      std::string content, reasoning, finish_reason;
      PendingLogprobs logprobs;
    };
    std::vector<Acc> acc(static_cast<std::size_t>(req.n));
    auto next_probe = Clock::now() + kProbeEvery;
    for (;;) {
      auto e = gen->channel->next(kProbeEvery);
      if (e && (e->choice < 0 || e->choice >= req.n)) continue;  // never sent: n choices only
      if (e && e->kind != engine::Event::Kind::delta) {
        if (e->kind == engine::Event::Kind::error) {
          gen->on_end(*e);
          gen->drain(false);  // the other choices are of no use now
          return error_response(classify(e->error_kind, e->error_message));
        }
        acc[static_cast<std::size_t>(e->choice)].finish_reason = e->finish_reason;
        gen->on_end(*e);
        if (!gen->ended) continue;
        std::vector<ChoiceOutput> choices;
        for (Acc& a : acc) {
          ChoiceOutput c;
          c.content = gen->echo + a.content;
          c.reasoning = std::move(a.reasoning);
          c.finish_reason = a.finish_reason;
          if (gen->tool_calls) {
            ToolCallExtractor::Result split = ToolCallExtractor::split(a.content, *gen->tool_calls);
            c.content = std::move(split.content);
            c.finish_reason = split.finish_reason(a.finish_reason);
            c.calls = std::move(split.calls);
          }
          if (req.top_logprobs >= 0)
            c.logprobs = chat ? chat_logprobs(*assets->tokenizer, a.logprobs.ids, a.logprobs.logprobs)
                              : CompletionLogprobs(*assets->tokenizer, code_points(gen->echo)).take(a.logprobs.ids, a.logprobs.logprobs);
          choices.push_back(std::move(c));
        }
        return json_response(completion_body(gen->meta, choices, gen->usage));
      }
      if (e) {
        gen->on_delta(*e);
        Acc& a = acc[static_cast<std::size_t>(e->choice)];
        a.content += e->text;
        a.reasoning += e->reasoning;
        if (req.top_logprobs >= 0) a.logprobs.add(*e);
      }
      if (request.client_gone && Clock::now() >= next_probe) {
        if (request.client_gone()) {
          gen->abandon();
          ApiError gone = classify(errc::cancelled, "the client closed the connection");
          gone.status = 499;  // nginx's "client closed request": for the access log and metrics, nobody reads it
          return error_response(gone);
        }
        next_probe = Clock::now() + kProbeEvery;
      }
    }
  }

  HttpResponse r;
  r.content_type = "text/event-stream";
  r.stream = std::make_shared<SseStream>(std::move(gen), req.include_usage);
  return r;
}

// ---- the Responses API (responses_api.hpp) ----

HttpResponse Api::responses(const HttpRequest& request) {
  ResponsesRequest req = parse_responses_request(parse_body(request.body));
  std::optional<StoredResponse> previous;
  if (req.previous_response_id) {
    previous = responses_->get(*req.previous_response_id);
    if (!previous)
      throw FieldError("previous_response_id", "Previous response with id '" + *req.previous_response_id + "' not found.", errc::not_found);
  }
  std::vector<ChatMessage> input = req.chat.messages;  // this request's own; a stored response remembers them after `previous`'s
  req.chat.messages = conversation(req, previous ? &previous->conversation : nullptr);
  auto gen = submit(req.chat, request);
  const std::string model = gen->meta.model;  // as the client named it

  const std::string id = new_random_id("resp_");
  const std::int64_t created_at = unix_now();
  // Keeps a finished response for GET and for chaining: the conversation so far, this input and the answer.
  auto keep = [store = req.store ? responses_ : nullptr, id, input = std::move(input),
               before = previous ? std::move(previous->conversation) : std::vector<ChatMessage>{}](
                  const nlohmann::ordered_json& response, const Turn& turn) mutable {
    if (!store) return;
    std::vector<ChatMessage> conversation = std::move(before);
    conversation.insert(conversation.end(), std::make_move_iterator(input.begin()), std::make_move_iterator(input.end()));
    conversation.push_back(assistant_message(turn));
    store->put(id, StoredResponse{response, std::move(conversation)});
  };
  if (req.chat.stream) {
    // Read from gen before it is moved: the order the arguments of one call are evaluated in is unspecified.
    auto format = gen->tool_calls;
    auto shaper = std::make_unique<ResponsesTurnShaper>(id, created_at, model, req.echo, std::move(format), std::move(keep));
    return stream(std::move(gen), std::move(shaper));
  }
  std::optional<Turn> turn = collect(*gen, request);
  if (!turn) return client_gone_response();
  const auto response = response_object(id, created_at, model, req.echo, response_status(turn->end), output_items(*turn), &turn->end);
  keep(response, *turn);
  HttpResponse r;
  r.body = dump(response);
  return r;
}

HttpResponse Api::get_response(const HttpRequest& request) {
  const std::string id = request.path.substr(std::string("/v1/responses/").size());
  auto stored = responses_->get(id);
  if (!stored) throw FieldError("response_id", "Response with id '" + id + "' not found.", errc::not_found);
  HttpResponse r;
  r.body = dump(stored->response);
  return r;
}

HttpResponse Api::delete_response(const HttpRequest& request) {
  const std::string id = request.path.substr(std::string("/v1/responses/").size());
  if (!responses_->erase(id)) throw FieldError("response_id", "Response with id '" + id + "' not found.", errc::not_found);
  return json_response({{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
}

// ---- the Anthropic Messages API (messages_api.hpp) ----

// Errors thrown here reach the client in Anthropic's shape (handle()).
HttpResponse Api::messages(const HttpRequest& request) {
  const OpenAiRequest req = parse_messages_request(parse_body(request.body));
  auto gen = submit(req, request);
  const std::string id = new_random_id("msg_");
  const std::string model = gen->meta.model;  // as the client named it
  if (req.stream) return stream(gen, std::make_unique<MessagesTurnShaper>(id, model, gen->prompt_tokens,
                                                                        gen->tool_calls));
  std::optional<Turn> turn = collect(*gen, request);
  if (!turn) return client_gone_response();
  HttpResponse r;
  r.body = dump(message_body(id, model, *turn));
  return r;
}

HttpResponse Api::count_message_tokens(const HttpRequest& request) {
  const OpenAiRequest req = parse_messages_request(parse_body(request.body), true);
  const std::string model = resolve_model_name(req.model);
  auto assets = assets_for(model);
  const std::size_t n = assets->tokenizer->encode(render_chat(*assets, req, model, "messages", req.chat_template_kwargs)).size();
  return json_response({{"input_tokens", n}});
}

// ---- the generation core, shared by every generating route ----

std::shared_ptr<Api::Generation> Api::submit(const OpenAiRequest& req, const HttpRequest& request) {
  const bool chat = req.kind == OpenAiRequest::Kind::chat;
  // Only chat and completions ask for several choices, logprobs or echo; the one-choice routes leave them off.
  const std::string model = load_on_request(resolve_model_name(req.model));
  auto engine = engine_for(model);
  auto assets = assets_for(model);
  if (assets->task.task != engine::ModelTask::generate)
    throw FieldError("model", "model '" + display_name(model) + "' serves task " + std::string(engine::task_name(assets->task.task)) +
                                  ", not generation: use " +
                                  (assets->task.task == engine::ModelTask::embed ? "/v1/embeddings" : "/v1/rerank or /v1/score") +
                                  ", or load a generative model (task generate)");

  engine::CompletionRequest cr;
  const std::string prompt_param = !req.prompt_param.empty() ? req.prompt_param : chat ? "messages" : "prompt";
  if (req.constraint) cr.grammar = compile_constraint(*assets, *req.constraint, req.constraint_param);
  if (chat) {
    // A constrained answer starts at once: Qwen3's thinking is switched off
    // (the template writes an empty <think></think>), and the content is
    // passed on verbatim, never split at a "<think>" inside a JSON string.
    auto kwargs = req.chat_template_kwargs;
    if (cr.grammar) kwargs["enable_thinking"] = false;
    std::string text = render_chat(*assets, req, model, prompt_param, kwargs);
    cr.prompt = assets->tokenizer->encode(text);
    cr.split_reasoning = !cr.grammar && assets->tokenizer->token_to_id("<think>").has_value();
    cr.prompt_in_reasoning = cr.split_reasoning && ends_inside_think(text);
  } else if (const auto* text = std::get_if<std::string>(&req.prompt)) {
    cr.prompt = assets->tokenizer->encode_with_special_tokens(*text);  // a raw prompt gets the model's BOS, as transformers and vLLM give it
  } else {
    cr.prompt = std::get<std::vector<std::int32_t>>(req.prompt);
    for (std::size_t i = 0; i < cr.prompt.size(); ++i)
      if (!assets->tokenizer->is_known(cr.prompt[i]))
        throw FieldError("prompt[" + std::to_string(i) + "]", "token id " + std::to_string(cr.prompt[i]) + " is not in the vocabulary");
  }
  if (cr.prompt.empty()) throw FieldError(prompt_param, std::string("'") + prompt_param + "' encodes to no tokens");

  const std::int64_t context = engine->max_context();
  const std::int64_t prompt_len = static_cast<std::int64_t>(cr.prompt.size());
  if (prompt_len >= context)
    throw FieldError(prompt_param,
                     "the prompt is " + std::to_string(prompt_len) + " tokens; the model's context is " + std::to_string(context),
                     errc::context_length_exceeded);
  const std::string max_param = req.max_tokens_param.empty() ? "max_tokens" : req.max_tokens_param;
  if (req.max_tokens && prompt_len + *req.max_tokens > context)
    throw FieldError(max_param,
                     "prompt (" + std::to_string(prompt_len) + " tokens) plus " + max_param + " (" + std::to_string(*req.max_tokens) +
                         ") exceeds the model's context of " + std::to_string(context) + " tokens",
                     errc::context_length_exceeded);
  cr.max_tokens = static_cast<std::int32_t>(req.max_tokens ? *req.max_tokens : context - prompt_len);
  // A blocking answer holds every choice's logprobs until its end (a few
  // hundred bytes of JSON per entry); a stream lets them go as it goes.
  if (!req.stream && req.top_logprobs >= 0) {
    const std::int64_t entries = static_cast<std::int64_t>(req.n) * cr.max_tokens * (req.top_logprobs + 1);
    if (entries > kMaxBlockingLogprobEntries)
      throw FieldError(chat ? "top_logprobs" : "logprobs",
                       "n * max_tokens * (top_logprobs + 1) is " + std::to_string(entries) + " logprob entries; a blocking answer holds at most " +
                           std::to_string(kMaxBlockingLogprobEntries) + ": stream it, or lower n, max_tokens or top_logprobs");
  }
  cr.sampling = sampling_for(assets->configs.generation, req.sampling);
  cr.stop = req.stop;
  cr.ignore_eos = req.ignore_eos;
  cr.n = req.n;
  cr.top_logprobs = req.top_logprobs;

  auto gen = std::make_shared<Generation>(*this, engine, model);
  // Responses name the model as the client did (else by its served or folder name), never by its path.
  gen->meta = ResponseMeta{chat, new_completion_id(chat), unix_now(), req.model.empty() ? display_name(model) : req.model};
  gen->assets = assets;
  gen->choices = req.n;
  gen->top_logprobs = req.top_logprobs;
  gen->tool_calls = tool_call_syntax(*assets, req);
  gen->stop = req.stop;
  gen->prompt_tokens = static_cast<std::int32_t>(prompt_len);
  if (req.echo) {
    const auto* text = std::get_if<std::string>(&req.prompt);
    gen->echo = text ? *text : assets->tokenizer->decode(cr.prompt);
  }
  const std::size_t capacity = engine->options().queue_depth + static_cast<std::size_t>(engine->options().max_num_seqs);
  gen->ticket = admission_.enter(display_name(model),
                                 principal_of(request.header("x-helexa-account-id"), request.header("x-helexa-key-id")),
                                 static_cast<std::size_t>(req.n), capacity);
  gen->channel = engine->submit(std::move(cr));
  gen->tracker = std::make_unique<Tracker>(*this, gen->channel);
  return gen;
}

std::optional<Turn> Api::collect(Generation& gen, const HttpRequest& request) {
  Turn turn;
  auto next_probe = Clock::now() + kProbeEvery;
  for (;;) {
    auto e = gen.channel->next(kProbeEvery);
    if (e && e->choice != 0) continue;  // never sent: one choice only
    if (e && e->kind != engine::Event::Kind::delta) {
      gen.on_end(*e);
      if (e->kind == engine::Event::Kind::error) throw Error(e->error_kind, e->error_message);
      turn.end = gen.end_of(*e);
      if (gen.tool_calls) {
        ToolCallExtractor::Result split = ToolCallExtractor::split(turn.content, *gen.tool_calls);
        turn.content = std::move(split.content);
        turn.calls = std::move(split.calls);
      }
      return turn;
    }
    if (e) {
      gen.on_delta(*e);
      turn.content += e->text;
      turn.reasoning += e->reasoning;
    }
    if (request.client_gone && Clock::now() >= next_probe) {
      if (request.client_gone()) {
        gen.abandon();
        return std::nullopt;
      }
      next_probe = Clock::now() + kProbeEvery;
    }
  }
}

std::optional<Api::PrefillResult> Api::run_prefill(const std::string& model, engine::Engine& engine,
                                                   std::vector<engine::CompletionRequest> inputs, const HttpRequest& request) {
  const std::size_t window =
      std::min(inputs.size(), static_cast<std::size_t>(std::max<std::int32_t>(1, engine.options().max_num_seqs)));
  const std::size_t capacity = engine.options().queue_depth + static_cast<std::size_t>(engine.options().max_num_seqs);
  const auto ticket = admission_.enter(display_name(model),
                                       principal_of(request.header("x-helexa-account-id"), request.header("x-helexa-key-id")),
                                       window, capacity);
  struct InFlight {
    std::size_t index;
    std::shared_ptr<engine::Channel> channel;
    std::unique_ptr<Tracker> tracker;
  };
  // Whatever ends this call early (an error, the client leaving) stops the inputs still in the engine.
  struct CancelRest {
    std::deque<InFlight> flying;
    ~CancelRest() {
      for (InFlight& f : flying) f.channel->cancel();
    }
  } rest;
  const Labels model_label{{"model", model}};
  PrefillResult out;
  out.outputs.resize(inputs.size());
  std::size_t next = 0;
  auto next_probe = Clock::now() + kProbeEvery;
  while (next < inputs.size() || !rest.flying.empty()) {
    for (; next < inputs.size() && rest.flying.size() < window; ++next) {
      auto channel = engine.submit(std::move(inputs[next]));
      rest.flying.push_back({next, channel, std::make_unique<Tracker>(*this, channel)});
    }
    InFlight& oldest = rest.flying.front();
    if (auto e = oldest.channel->next(kProbeEvery); e && e->kind != engine::Event::Kind::delta) {
      if (e->kind == engine::Event::Kind::error) throw Error(e->error_kind, e->error_message);
      if (e->finish_reason != "stop") throw Error(errc::cancelled, "the request was cancelled (" + e->finish_reason + ")");
      if (e->output.empty()) throw Error(errc::internal, "internal error: a prefill-only request ended without its output");
      out.outputs[oldest.index] = std::move(e->output);
      out.prompt_tokens += e->usage.prompt_tokens;
      metrics_.inc("neuron_prompt_tokens_total", model_label, e->usage.prompt_tokens);
      rest.flying.pop_front();
    }
    // Checked between inputs too, so a request of many quick inputs still sees its client leave.
    if (request.client_gone && Clock::now() >= next_probe) {
      if (request.client_gone()) {
        metrics_.inc("neuron_requests_cancelled_total", model_label);
        return std::nullopt;
      }
      next_probe = Clock::now() + kProbeEvery;
    }
  }
  return out;
}

HttpResponse Api::stream(std::shared_ptr<Generation> gen, std::unique_ptr<TurnShaper> shaper) {
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.stream = std::make_shared<TurnStream>(std::move(gen), std::move(shaper));
  return r;
}

HttpResponse Api::client_gone_response() {
  ApiError gone = classify(errc::cancelled, "the client closed the connection");
  gone.status = 499;  // nginx's "client closed request": for the access log and metrics, nobody reads it
  return error_response(gone);
}


}  // namespace neuron::server
