#pragma once
// Load generation against a running OpenAI-compatible server (neuron,
// llama.cpp's llama-server, vLLM, ...): N clients, each one thread with its
// own keep-alive connection, sending streamed /v1/completions back to back.
//
// Every request is a fresh random prompt of exactly `prompt_len` token ids
// (sent as a list of ids, so no tokenizer decides the length, and no two
// requests share a prefix a server could cache) with max_tokens = gen,
// ignore_eos (every request generates exactly `gen` tokens) and
// stream_options.include_usage (the server's own token count).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/completion_stream.hpp"

namespace neuron::loadgen {

struct Endpoint {
  std::string host;
  int port = 80;
  std::string base_path;  // "" or "/prefix" (no trailing '/'): routes are base_path + "/v1/..."
};

// "http://host[:port][/prefix]". Throws Error{invalid_argument} for another
// scheme (https is not supported), a missing host or a bad port.
Endpoint parse_url(std::string_view url);

struct Target {
  Endpoint endpoint;
  std::string model;    // the request's "model"; empty: not sent
  std::string api_key;  // empty: no Authorization header
  std::chrono::seconds timeout{600};  // longest wait for the next bytes of a response
};

struct Workload {
  std::int32_t prompt_len = 128;
  std::int32_t gen = 128;
  std::int32_t vocab = 151643;  // prompt ids are uniform in [0, vocab): Qwen3's ordinary (non-special) tokens
  std::optional<double> temperature = 0.0;  // unset: the server's default sampling
  std::uint64_t seed = 0;
};

// The prompt of request `request` of client `client` at level `level`: the
// same arguments give the same ids.
std::vector<std::int32_t> random_prompt(const Workload& w, std::uint64_t level, std::uint64_t client, std::uint64_t request);

// The /v1/completions body for one streamed request.
nlohmann::json completion_body(const Target& t, const Workload& w, const std::vector<std::int32_t>& prompt);

// One client: a connection reused for every request it sends.
class Client {
 public:
  explicit Client(Target target);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // POSTs `body` to /v1/completions and reads the stream to its end. Never
  // throws for what the server does: a refused connection, a non-200 status,
  // a truncated or malformed stream are errors in the record. A request that
  // failed at once (under 1 s) with no response on a reused (kept-alive)
  // connection is sent once more on a new one (record.reconnected), as HTTP
  // clients do: servers may close kept-alive connections between requests.
  RequestRecord complete(const std::string& body, std::int64_t expected_tokens);

 private:
  RequestRecord attempt(const std::string& body, std::int64_t expected_tokens, bool* answered);
  struct Impl;
  Target target_;
  std::unique_ptr<Impl> impl_;
};

struct LevelOptions {
  int concurrency = 1;
  int requests_per_client = 4;              // used when duration is zero
  std::chrono::duration<double> duration{0};  // > 0: each client starts requests until this much time has passed
};

struct LevelRun {
  double wall_s = 0;  // all clients released -> the last response ended
  std::vector<RequestRecord> records;
};

// Runs one level: `concurrency` client threads, released together. `level`
// seeds the prompts (levels get different prompts). Throws
// Error{invalid_argument} for concurrency < 1, or for requests_per_client < 1
// when no duration is given.
LevelRun run_level(const Target& t, const Workload& w, const LevelOptions& o, std::uint64_t level);

}  // namespace neuron::loadgen
