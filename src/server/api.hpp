#pragma once
// The daemon's HTTP API (DESIGN.md section 5) over an engine::Registry:
// model management, the OpenAI-compatible endpoints with streaming,
// tokenize/detokenize, metrics, discovery. Socket-free: handle() maps an
// HttpRequest to an HttpResponse, so tests drive it directly and HttpServer
// only moves bytes. Also owns graceful shutdown of in-flight generations.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/model_assets.hpp"
#include "engine/registry.hpp"
#include "server/admission.hpp"
#include "server/http_types.hpp"
#include "server/metrics.hpp"
#include "server/router.hpp"
#include "server/openai_request.hpp"
#include "server/responses_api.hpp"
#include "server/turn.hpp"

namespace neuron::server {

class Activation;

struct ApiOptions {
  std::string api_key;  // empty: no authentication; else every route but /health needs "Authorization: Bearer KEY" or "x-api-key: KEY"
  const Activation* activation = nullptr;  // startup pre-warm for /health (null: nothing to pre-warm); must outlive the Api
  // An OpenAI request for a model that is not loaded loads it when its name is a
  // folder under a model root or a Hugging Face id in the local cache; the request
  // waits up to load_wait, then gets 503 loading with Retry-After.
  bool load_on_request = false;
  std::chrono::milliseconds load_wait{30000};
  // Responses kept for GET /v1/responses/{id} and previous_response_id (least recently used evicted).
  std::size_t stored_responses = 1000;
  std::size_t stored_response_bytes = std::size_t{64} << 20;
  AdmissionOptions admission{};  // per-principal shares of each model's capacity (server/admission.hpp)
};

// The grammar for a request's constraint on this model (grammar/cache.hpp),
// for every endpoint that offers one. A schema neuron cannot compile is a
// FieldError on `param` (400) whose message names the construct.
std::shared_ptr<const grammar::CompiledGrammar> compile_constraint(const engine::ModelAssets& assets,
                                                                   const grammar::Constraint& constraint,
                                                                   const std::string& param);

class Api {
 public:
  // The registry must outlive the Api; the Api must outlive the HttpServer using it.
  Api(engine::Registry& registry, ApiOptions options);
  ~Api();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  HttpResponse handle(const HttpRequest& request);
  // Access log line and request metrics for one finished exchange.
  void record_exchange(const std::string& method, const std::string& path, int status, double ms);

  // Graceful shutdown: new requests get 503 shutting_down (/health reports it);
  // wait_idle() waits for in-flight generations; cancel_all() stops the rest
  // at their next step. Returns whether everything finished by the deadline.
  void begin_shutdown();
  bool wait_idle(std::chrono::milliseconds deadline);
  void cancel_all();
  std::size_t in_flight() const;

  Metrics& metrics() noexcept { return metrics_; }

 private:
  class Tracker;  // one in-flight generation (RAII registration for shutdown)
  struct Generation;
  class GenerationStream;  // what every streamed generation shares (transport wiring, cancel)
  class SseStream;   // a chat/completions generation (n choices) as the transport's BodyStream
  class TurnStream;  // a one-choice generation through a TurnShaper (Responses, Messages)

  // The helexa node contract (server/management_api.cpp, DESIGN.md section 5).
  void add_management_routes();
  HttpResponse health(const HttpRequest&);
  HttpResponse discovery(const HttpRequest&);
  HttpResponse list_models(const HttpRequest&);
  HttpResponse load_model(const HttpRequest&);
  HttpResponse unload_model(const HttpRequest&);
  HttpResponse model_route(const HttpRequest&);  // GET /models/{id}/endpoint, /models/{id}/capabilities
  // `model` (a registry id or a name resolve_model_name left as is) when it is
  // loaded or loading; else, with load_on_request, loads it and waits (see
  // ApiOptions). Returns the registry id to use.
  std::string load_on_request(const std::string& model);
  // How responses and /health name a model: its served name, else its folder
  // name (a directory model) or Hugging Face id; never a file system path.
  std::string display_name(const std::string& model_id) const;
  nlohmann::json model_json(const engine::ModelInfo& m) const;  // one /models entry
  HttpResponse openai_models(const HttpRequest&);
  HttpResponse openai_model(const HttpRequest&);
  HttpResponse chat_completions(const HttpRequest&);
  HttpResponse responses(const HttpRequest&);  // responses_api.hpp
  HttpResponse get_response(const HttpRequest&);
  HttpResponse delete_response(const HttpRequest&);
  HttpResponse messages(const HttpRequest&);  // messages_api.hpp
  HttpResponse count_message_tokens(const HttpRequest&);
  HttpResponse completions(const HttpRequest&);
  HttpResponse tokenize(const HttpRequest&);
  HttpResponse detokenize(const HttpRequest&);
  HttpResponse render_metrics(const HttpRequest&);
  HttpResponse version(const HttpRequest&);

  // Prefill-only routes (server/embeddings_api.cpp): /v1/embeddings, /v1/rerank (also /rerank, /v2/rerank), /v1/score.
  HttpResponse embeddings(const HttpRequest&);
  HttpResponse rerank(const HttpRequest&);
  HttpResponse score(const HttpRequest&);
  struct PrefillResult {
    std::vector<std::vector<float>> outputs;  // [inputs] each input's Event::output, in input order
    std::int64_t prompt_tokens = 0;           // over every input
  };
  // Runs each request (a prefill-only CompletionRequest: engine/prefill_output.hpp) on `model`'s engine,
  // at most max_num_seqs of them in flight, admitted for `request`'s principal and tracked for shutdown like a
  // generation. nullopt: the client left (the rest are cancelled). An engine error is thrown as Error.
  std::optional<PrefillResult> run_prefill(const std::string& model, engine::Engine& engine,
                                           std::vector<engine::CompletionRequest> inputs, const HttpRequest& request);

  HttpResponse generate(const HttpRequest& request, bool chat);
  // The generation core, shared by every generating route.
  // submit: renders (chat) or encodes the prompt, compiles its constraint,
  // checks it against the context, submits it; throws FieldError for what the
  // client must fix; admits it for `request`'s principal (server/admission.hpp:
  // 429 or 503 with Retry-After). Chat and completions then answer through SseStream or
  // their own blocking loop (n choices, logprobs, streamed tool-call deltas);
  // Responses and Messages (one choice) through collect() and stream() (turn.hpp).
  std::shared_ptr<Generation> submit(const OpenAiRequest& req, const HttpRequest& request);
  // Blocks until the turn ends. nullopt: the client left (the generation is
  // cancelled; answer client_gone_response()). An engine error is thrown as Error.
  std::optional<Turn> collect(Generation& gen, const HttpRequest& request);
  // A streaming answer: the shaper's bytes as the engine produces them.
  HttpResponse stream(std::shared_ptr<Generation> gen, std::unique_ptr<TurnShaper> shaper);
  static HttpResponse client_gone_response();
  std::string resolve_model_name(const std::string& requested) const;
  std::shared_ptr<engine::Engine> engine_for(const std::string& model) const;
  std::shared_ptr<const engine::ModelAssets> assets_for(const std::string& model) const;

  engine::Registry& registry_;
  ApiOptions options_;
  Router router_;
  std::shared_ptr<ResponseStore> responses_;  // shared with the streams that store into it
  Metrics metrics_;
  Admission admission_;
  std::atomic<bool> shutting_down_{false};
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::uint64_t next_tracker_id_ = 0;
  std::map<std::uint64_t, std::weak_ptr<engine::Channel>> active_;  // in-flight generations
};

}  // namespace neuron::server
