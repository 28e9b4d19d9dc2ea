#pragma once
// OpenAI response bodies and server-sent-event chunks, built from plain
// values so both the blocking and the streaming paths (and tests) share them.
//
// Every body and chunk carries system_fingerprint "neuron-<version>". The
// reasoning text (Qwen3's <think> body) goes out twice, as
// `reasoning_content` (vLLM, DeepSeek) and `reasoning` (OpenRouter, newer
// vLLM), in messages and deltas alike, so clients of either kind find it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/tool_calls.hpp"

namespace neuron::server {

struct ResponseMeta {
  bool chat = true;      // chat.completion(.chunk) vs text_completion
  std::string id;        // "chatcmpl-..." / "cmpl-..."
  std::int64_t created = 0;  // unix seconds
  std::string model;
};

// usage.helexa_timing, the helexa gateway's extension: server-measured milliseconds.
struct UsageTiming {
  std::int64_t prefill_ms = 0;      // submit to the first token (queue wait included)
  std::int64_t decode_ms = 0;       // the first token to the end
  std::int32_t prefill_tokens = 0;  // prompt tokens computed (not from the prefix cache)
};

struct TokenUsage {
  std::int32_t prompt_tokens = 0;
  std::int32_t completion_tokens = 0;
  std::int32_t cached_tokens = 0;  // prompt tokens served from the prefix cache (usage.prompt_tokens_details)
  std::optional<UsageTiming> timing{};  // set: usage carries helexa_timing
};

// One choice of a blocking answer.
struct ChoiceOutput {
  std::string content;    // chat: message.content; completions: text
  std::string reasoning;  // chat; omitted when empty
  std::string finish_reason;
  std::vector<ToolCall> calls;  // chat: message.tool_calls; then a blank content is null
  nlohmann::json logprobs;      // null, or the choice's logprobs object (server/logprobs_json.hpp)
};

// "neuron-<version>".
std::string system_fingerprint();
// `prefix` and 24 random hex digits ("chatcmpl-...", "call_...").
std::string new_random_id(std::string_view prefix);
// A fresh id with the endpoint's prefix.
std::string new_completion_id(bool chat);
std::int64_t unix_now();

// OpenAI's usage object, with helexa_timing when the usage has a timing.
nlohmann::json usage_json(const TokenUsage& u);
nlohmann::json helexa_timing_json(const UsageTiming& t);  // {prefill_ms, decode_ms, prefill_tokens}

// The blocking response: choices[i] gets index i. Chat messages carry
// refusal: null.
nlohmann::json completion_body(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices, const TokenUsage& usage);

// Streaming chunks, each with one choice of the given index. The first chat
// chunk of a choice is its role chunk; a content chunk carries delta
// {content} and/or {reasoning_content, reasoning} (chat) or text
// (completions), and `logprobs` (null when not asked for); the finish chunk
// has an empty delta and the finish_reason; the usage chunk has no choices.
nlohmann::json role_chunk(const ResponseMeta& meta, int index = 0);
nlohmann::json delta_chunk(const ResponseMeta& meta, const std::string& content, const std::string& reasoning, int index = 0,
                           nlohmann::json logprobs = nullptr);
nlohmann::json finish_chunk(const ResponseMeta& meta, const std::string& finish_reason, int index = 0);
// Tool call deltas as OpenAI streams them: a call's first delta {index, id,
// type, function {name, arguments: ""}}, later ones {index, function {arguments}}.
nlohmann::json tool_call_deltas_chunk(const ResponseMeta& meta, const std::vector<ToolCallDelta>& deltas, int index = 0);
nlohmann::json usage_chunk(const ResponseMeta& meta, const TokenUsage& usage);

// "data: <json>\n\n", and the terminator "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& payload);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace neuron::server
