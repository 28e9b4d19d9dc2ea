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
//   qwen3_coder <tool_call>\n<function=f>\n<parameter=p>\nVALUE\n</parameter>\n
//               ...</function>\n</tool_call> (Qwen3-Coder, Qwen3.5, Qwen3-Next;
//               vLLM's qwen3_coder parser): tagged as hermes, but the call is
//               XML-like and each parameter's value is raw text, read as JSON
//               by the tool's schema type for it (server/xml_tool_call.hpp);
//               a <function=...> call without the <tool_call> tags is read too.
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace neuron::chat {

enum class ToolCallFormat { hermes, llama_json, qwen3_coder };

// The format the template's own tool-call rendering uses: qwen3_coder when
// it writes <tool_call> tags around <function=...> and <parameter=...>
// elements, hermes when it writes <tool_call> tags otherwise, llama_json when
// it writes a "parameters" object without them; nullopt when it shows none
// of these (a template without tools).
std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template);

std::string_view to_string(ToolCallFormat format) noexcept;

// qwen3_coder writes every parameter value as raw text. It stands for a JSON
// value (integer, number, boolean, object, array, null) when the parameter's
// schema declares a "type" (a string or an array of them) that does not
// include "string", and for a string otherwise (no schema, no type, or
// "string" among the types). The parser (server/xml_tool_call.hpp) and the
// forced-call grammar (grammar/json_schema.hpp) both decide by this.
bool qwen3_coder_value_is_json(const nlohmann::ordered_json& parameter_schema);

}  // namespace neuron::chat
