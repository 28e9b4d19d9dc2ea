#include "chat/tool_call_format.hpp"

#include <string>

namespace neuron::chat {

std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template) {
  const auto has = [&](std::string_view s) { return chat_template.find(s) != std::string_view::npos; };
  if (has("<tool_call>")) {
    // Qwen3-Coder / Qwen3.5 render a past call as '<tool_call>\n<function=' + name + '>\n' and each
    // argument as '<parameter=' + name + '>\n' + value + '\n</parameter>\n'.
    if (has("<function=") && has("<parameter=")) return ToolCallFormat::qwen3_coder;
    return ToolCallFormat::hermes;
  }
  // Llama 3.x renders a past call as '{"name": "' + name + '", "parameters": ' + arguments|tojson + '}'
  // and tells the model 'Respond in the format {"name": function name, "parameters": ...}'.
  if (has("\"parameters\"")) return ToolCallFormat::llama_json;
  return std::nullopt;
}

std::string_view to_string(ToolCallFormat format) noexcept {
  switch (format) {
    case ToolCallFormat::hermes:
      return "hermes";
    case ToolCallFormat::llama_json:
      return "llama_json";
    case ToolCallFormat::qwen3_coder:
      return "qwen3_coder";
  }
  return "unknown";
}

bool qwen3_coder_value_is_json(const nlohmann::ordered_json& parameter_schema) {
  if (!parameter_schema.is_object()) return false;
  const auto type = parameter_schema.find("type");
  if (type == parameter_schema.end()) return false;
  if (type->is_string()) return type->get<std::string>() != "string";
  if (!type->is_array() || type->empty()) return false;
  for (const auto& t : *type)
    if (!t.is_string() || t.get<std::string>() == "string") return false;
  return true;
}

}  // namespace neuron::chat
