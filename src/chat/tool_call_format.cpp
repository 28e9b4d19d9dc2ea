#include "chat/tool_call_format.hpp"

namespace neuron::chat {

std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template) {
  if (chat_template.find("<tool_call>") != std::string_view::npos) return ToolCallFormat::hermes;
  // Llama 3.x renders a past call as '{"name": "' + name + '", "parameters": ' + arguments|tojson + '}'
  // and tells the model 'Respond in the format {"name": function name, "parameters": ...}'.
  if (chat_template.find("\"parameters\"") != std::string_view::npos) return ToolCallFormat::llama_json;
  return std::nullopt;
}

std::string_view to_string(ToolCallFormat format) noexcept {
  switch (format) {
    case ToolCallFormat::hermes:
      return "hermes";
    case ToolCallFormat::llama_json:
      return "llama_json";
  }
  return "unknown";
}

}  // namespace neuron::chat
