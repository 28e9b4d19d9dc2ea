#pragma once
// The Anthropic Messages API: POST /v1/messages, blocking and streamed, and
// POST /v1/messages/count_tokens (the rendered prompt's length). A
// request becomes the same chat turn /v1/chat/completions generates
// (OpenAiRequest, kind chat; turn.hpp); this module owns the Anthropic shapes:
//   - parse_messages_request: `system` (string or text blocks), `messages`
//     with text, tool_use, tool_result (content a string or text blocks) and
//     thinking blocks, `tools` ({name, description, input_schema}),
//     `tool_choice` auto / none, `max_tokens` (required), `stop_sequences`,
//     `temperature` (0..1), `top_p`, `top_k`, `stream`, `thinking`
//     ({type: enabled | disabled}: Qwen3's enable_thinking; absent: the
//     template's default, thinking on). `metadata` is accepted and ignored.
//   - the message object (content blocks thinking, text, tool_use; stop_reason
//     end_turn | max_tokens | stop_sequence | tool_use) and the stream
//     (message_start, ping, content_block_start / delta (thinking_delta,
//     text_delta, input_json_delta) / stop, message_delta, message_stop).
//   - Anthropic's error body {type: "error", error: {type, message}}.
// Refused with a 400: tool_choice any / tool (they need constrained
// decoding), image and document blocks, tools of other types.
// Usage follows Anthropic: input_tokens are the prompt tokens not read from
// the prefix cache, cache_read_input_tokens those that were.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/openai_request.hpp"
#include "server/turn.hpp"

namespace neuron::server {

// `for_count`: the body of POST /v1/messages/count_tokens, which has no max_tokens.
OpenAiRequest parse_messages_request(const nlohmann::ordered_json& body, bool for_count = false);

// Anthropic's error type for a status (invalid_request_error, authentication_error,
// not_found_error, request_too_large, overloaded_error, api_error, ...).
std::string anthropic_error_type(int status);
nlohmann::json anthropic_error_body(const ApiError& e);  // {type: "error", error: {type, message}}
HttpResponse anthropic_error_response(const ApiError& e);
// The route's boundary: an error answer in the OpenAI envelope (what the
// router and the handlers produce) rewritten in Anthropic's shape, status and
// headers kept; any other response as it is.
HttpResponse as_anthropic_error(HttpResponse r);

nlohmann::ordered_json anthropic_usage(const TurnEnd& end);
// "end_turn", "max_tokens", "stop_sequence", "tool_use".
std::string anthropic_stop_reason(const TurnEnd& end, bool tool_use);
// The blocking answer. `id` is "msg_...".
nlohmann::ordered_json message_body(const std::string& id, const std::string& model, const Turn& turn);

class MessagesTurnShaper final : public TurnShaper {
 public:
  // tool_calls: the format the model's calls are parsed in; nullopt: they are not.
  MessagesTurnShaper(std::string id, std::string model, std::int32_t prompt_tokens, std::optional<ToolCallSyntax> tool_calls);

  std::string open() override;
  std::string delta(std::string_view text, std::string_view reasoning) override;
  std::string close(const TurnEnd& end) override;
  std::string fail(const ApiError& error) override;

 private:
  enum class Block { none, thinking, text };
  std::string open_block(Block kind);
  std::string close_block();
  std::string text_delta(std::string text);

  std::string id_, model_;
  std::int32_t prompt_tokens_;
  std::unique_ptr<WholeToolCalls> extractor_;  // null: tool calls are not parsed
  int index_ = -1;  // the current content block's index
  Block open_ = Block::none;
  bool had_text_ = false;
  std::string pending_blank_;  // leading blank text, held until a text block opens
};

}  // namespace neuron::server
