#pragma once
// OpenAI response bodies and server-sent-event chunks, built from plain
// values so both the blocking and the streaming paths (and tests) share them.
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

struct TokenUsage {
  std::int32_t prompt_tokens = 0;
  std::int32_t completion_tokens = 0;
  std::int32_t cached_tokens = 0;  // prompt tokens served from the prefix cache (usage.prompt_tokens_details)
};

// `prefix` and 24 random hex digits ("chatcmpl-...", "call_...").
std::string new_random_id(std::string_view prefix);
// A fresh id with the endpoint's prefix.
std::string new_completion_id(bool chat);
std::int64_t unix_now();

nlohmann::json usage_json(const TokenUsage& u);

// The blocking response: one choice. `reasoning` is omitted when empty; with
// tool calls (chat), message.tool_calls is set and an empty content is null.
nlohmann::json completion_body(const ResponseMeta& meta, const std::string& content, const std::string& reasoning,
                               const std::string& finish_reason, const TokenUsage& usage,
                               const std::vector<ToolCall>& calls = {});

// Streaming chunks. A content chunk carries delta {content} and/or
// {reasoning_content} (chat) or text (completions); the first chat chunk is
// the role chunk; the finish chunk has an empty delta and the finish_reason;
// the usage chunk has no choices.
nlohmann::json role_chunk(const ResponseMeta& meta);
nlohmann::json delta_chunk(const ResponseMeta& meta, const std::string& content, const std::string& reasoning);
nlohmann::json finish_chunk(const ResponseMeta& meta, const std::string& finish_reason);
// Every call whole in one delta (index, id, type, function {name, arguments}).
nlohmann::json tool_calls_chunk(const ResponseMeta& meta, const std::vector<ToolCall>& calls);
nlohmann::json usage_chunk(const ResponseMeta& meta, const TokenUsage& usage);

// "data: <json>\n\n", and the terminator "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& payload);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace neuron::server
