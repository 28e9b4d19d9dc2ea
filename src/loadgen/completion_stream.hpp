#pragma once
// One streamed OpenAI completion as a client sees it: the SSE body of
// /v1/completions (or /v1/chat/completions) fed in as it arrives, each piece
// with its arrival time, judged at the end into a RequestRecord.
//
// Content is choices[0].text (completions) or choices[0].delta.content /
// reasoning_content (chat). The token count is usage.completion_tokens when
// the server reports it (stream_options.include_usage), else the number of
// chunks that carried content (one per token on servers that do not hold
// back partial UTF-8). A request is an error, with the reason, when:
//   - a chunk is an error object ({"error": ...}) or not JSON,
//   - the stream ends before "data: [DONE]" or without a finish_reason
//     (truncated: the server died or closed the connection),
//   - no chunk carried content, or
//   - the token count differs from the number the request asked for.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loadgen/sse.hpp"

namespace neuron::loadgen {

using Clock = std::chrono::steady_clock;

struct RequestRecord {
  bool ok = false;
  std::string error;           // why not ok
  double ttft_ms = 0;          // request sent -> first chunk with content
  double tpot_ms = 0;          // (last content chunk - first) / (tokens - 1); valid when output_tokens >= 2
  double latency_ms = 0;       // request sent -> end of the response
  std::int64_t output_tokens = 0;
  std::int64_t prompt_tokens = -1;  // usage.prompt_tokens; -1 when not reported
  std::int64_t content_chunks = 0;
  bool tokens_from_usage = false;
  bool reconnected = false;  // sent again on a new connection after the kept-alive one had closed
};

class CompletionStream {
 public:
  explicit CompletionStream(Clock::time_point sent) : sent_(sent) {}

  // Bytes of the response body that arrived at `now`.
  void on_bytes(std::string_view bytes, Clock::time_point now);

  // True once the stream has failed (error event, malformed chunk): reading on is pointless.
  bool failed() const noexcept { return !error_.empty(); }

  // The response ended at `now` (connection closed or body complete).
  // expected_tokens > 0: any other count is an error.
  RequestRecord finish(Clock::time_point now, std::int64_t expected_tokens) const;

 private:
  void on_event(const SseEvent& e, Clock::time_point now);

  Clock::time_point sent_;
  SseParser parser_;
  std::vector<SseEvent> events_;  // scratch
  std::optional<Clock::time_point> first_content_, last_content_;
  std::int64_t chunks_ = 0;
  std::optional<std::int64_t> usage_completion_, usage_prompt_;
  bool finish_reason_ = false;
  bool done_ = false;
  std::string error_;
};

}  // namespace neuron::loadgen
