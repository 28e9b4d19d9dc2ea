#pragma once
// Parsing and validation of OpenAI request bodies (/v1/chat/completions,
// /v1/completions), before any model is involved. Every field is checked for
// type and range and a failure names it in FieldError::param, so a client
// sees exactly which field to fix. Unknown fields are ignored (as vLLM does);
// features neuron does not have (best_of, suffix, echo with logprobs, ...)
// are refused, never silently dropped.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/cache.hpp"

namespace neuron::server {

struct ChatMessage {
  std::string role;     // system | developer | user | assistant | tool
  std::string content;  // text parts joined
  std::optional<std::string> reasoning_content;  // an earlier assistant turn's thinking ("reasoning_content" or "reasoning")
  std::optional<std::string> name, tool_call_id;
  nlohmann::ordered_json tool_calls;  // assistant turns: passed through to the template (null when absent)
};

// Request fields that override the model's generation_config.json defaults.
struct SamplingOverrides {
  std::optional<float> temperature, top_p, min_p;
  std::optional<std::int32_t> top_k;
  std::optional<float> presence_penalty, frequency_penalty, repetition_penalty;
  std::optional<std::uint64_t> seed;
};

struct OpenAiRequest {
  enum class Kind { chat, completion };
  Kind kind = Kind::chat;
  std::string model;  // empty: the client named none
  std::vector<ChatMessage> messages;                                    // chat
  std::variant<std::string, std::vector<std::int32_t>> prompt;          // completion: text or token ids
  std::optional<std::int32_t> max_tokens;  // max_tokens or max_completion_tokens; absent: up to the context
  std::string max_tokens_param;             // the field errors about max_tokens name (empty: "max_tokens")
  std::string prompt_param;                 // the field errors about the prompt name (empty: "messages" / "prompt")
  SamplingOverrides sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool ignore_eos = false;     // vLLM extension, used by benchmarks
  // Passed to the chat template in the client's key order, as transformers renders them.
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  nlohmann::ordered_json tools;  // null or array
  bool tool_calls = false;       // tools given and tool_choice not "none": parse <tool_call> blocks out of the answer
  std::int32_t n = 1;            // choices, 1..kMaxChoices
  // -1: no logprobs. Chat: logprobs true gives 0 and top_logprobs (0..20) sets
  // it; completions: logprobs N (0..5) is N.
  std::int32_t top_logprobs = -1;
  bool echo = false;             // completions: the prompt text before the answer (no prompt logprobs)
  // Constrained decoding: response_format json_object / json_schema, vLLM's
  // guided_json, or tool_choice "required" / a named function (one tool call
  // is forced; a response format then waits for a later turn's text). With
  // tool_choice "auto" and tools, a response format admits a tool call too.
  // Compiled per model by the handler (grammar/cache.hpp); a schema it
  // cannot compile is a 400 on `constraint_param`.
  std::optional<grammar::Constraint> constraint;
  std::string constraint_param;
};

// The pieces, for other endpoints that take the same fields (/v1/responses,
// /v1/messages). Throw FieldError naming the field.
// response_format: {"type": "text"} -> nullopt; {"type": "json_object"};
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}.
std::optional<grammar::Constraint> parse_response_format(const nlohmann::ordered_json& rf, const std::string& param);
// vLLM's guided_json: a schema object, or its JSON text.
grammar::Constraint parse_guided_json(const nlohmann::ordered_json& v, const std::string& param);
// The tools one forced call may use: all of `tools` (OpenAI chat format:
// [{"type": "function", "function": {"name", "parameters"}}]), or only the
// one named `only` (FieldError on `param` when no tool has that name).
grammar::Constraint tool_call_constraint(const nlohmann::ordered_json& tools, const std::string* only, const std::string& param);
// A response format (`param`: response_format, guided_json, text.format) on
// a request whose tool_choice is parsed: a forced call keeps its constraint
// (this turn is the call; the format is for the text of a later turn);
// with tool calls allowed ("auto"), the format also admits one tool call.
void add_format_constraint(OpenAiRequest& r, grammar::Constraint format, const std::string& param);

// Body text -> JSON object. Throws FieldError{invalid_json} for malformed
// JSON (nlohmann also rejects invalid UTF-8 and lone surrogates in strings),
// for nesting past kMaxJsonDepth (util/json_parse.hpp; the message names the
// limit) and for a body that is not an object.
// Keys keep the client's order (tool schemas are rendered into the prompt).
nlohmann::ordered_json parse_body(std::string_view body);

OpenAiRequest parse_chat_request(const nlohmann::ordered_json& body);
OpenAiRequest parse_completion_request(const nlohmann::ordered_json& body);

}  // namespace neuron::server
