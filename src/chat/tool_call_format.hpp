#pragma once
// How a model writes tool calls into its answer, read from its chat template
// (the template that shows the model its tools also shows it how to call
// them), so the server parses calls by data, never by a model family's name.
//
//   hermes      <tool_call>{"name": "f", "arguments": {...}}</tool_call>, as
//               many as the model likes, anywhere in the answer, text around
//               them is content (Qwen2.5/Qwen3, Hermes 2/3). What the server
//               parses when the template shows no call syntax.
//   llama_json  the whole answer is the call: {"name": "f", "parameters":
//               {...}} (Llama 3.1/3.2/3.3; the model may write the special
//               token <|python_tag|> first, which decoded text never shows,
//               and ends with <|eom_id|> or <|eot_id|>, both stop tokens).
//               Several calls are separated by ';'. "arguments" is read as
//               well as "parameters". An answer that does not begin with '{'
//               is all content.
#include <optional>
#include <string_view>

namespace neuron::chat {

enum class ToolCallFormat { hermes, llama_json };

// The format the template's own tool-call rendering uses: hermes when it
// writes <tool_call> tags, llama_json when it writes a "parameters" object
// without them; nullopt when it shows neither (a template without tools).
std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template);

std::string_view to_string(ToolCallFormat format) noexcept;

}  // namespace neuron::chat
