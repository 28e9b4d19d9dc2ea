#pragma once
// A model's chat format: its chat template plus the special tokens the
// template refers to, as transformers' tokenizer.apply_chat_template renders
// it (variables: messages, tools, documents, add_generation_prompt,
// bos_token, eos_token, pad_token, unk_token, additional_special_tokens,
// and the caller's extra keyword arguments).
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/template.hpp"
#include "chat/tool_call_format.hpp"

namespace neuron::chat {

class ChatFormatter {
 public:
  // Reads `chat_template` from tokenizer_config.json: a string, or a list of
  // {name, template} (the "default" entry); when absent, a sibling
  // chat_template.jinja or chat_template.json (newer transformers save it
  // there). Special tokens are strings or {content: ...} objects.
  // Throws Error{not_found|io} for an unreadable file, Error{bad_model} for a
  // malformed config, Error{template_error} for a template that does not parse.
  static ChatFormatter from_tokenizer_config(const std::filesystem::path& tokenizer_config_json);

  // A formatter for a template given directly (tests, a --chat-template flag);
  // `special_tokens` is an object like {"bos_token": "<s>", "eos_token": "</s>"}.
  static ChatFormatter from_template(std::string source, const nlohmann::json& special_tokens = nlohmann::json::object());

  // messages: array of {role, content: string | [{type: "text", text}], ...};
  // text-part lists are joined with "\n" unless the template iterates over
  // message content itself; a null content beside tool_calls becomes "", and a
  // past call's function.arguments sent as JSON text (OpenAI's shape) is parsed
  // into the mapping templates expect ("" is {}; text that is not JSON is
  // Error{invalid_argument}). tools: null or an array. extra: an object (or
  // null) of further template variables, e.g. {"enable_thinking": false}.
  // Throws Error{invalid_argument} for malformed messages or a non-text
  // content part, Error{template_error} when the template fails (including
  // its own raise_exception), Error{not_found} when the model has no template.
  // Objects keep the order they have (as Python dicts do), so ordered_json
  // inputs render tools and arguments exactly as transformers would.
  std::string apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                    bool add_generation_prompt, const nlohmann::ordered_json& extra) const;

  bool has_template() const { return template_.has_value(); }
  // How the template teaches the model to write tool calls
  // (detect_tool_call_format); nullopt when it shows no call syntax.
  std::optional<ToolCallFormat> tool_call_format() const noexcept { return tool_call_format_; }

 private:
  std::optional<ChatTemplate> template_;
  nlohmann::ordered_json special_tokens_;  // bos_token, eos_token, ... present in the config
  bool template_reads_content_parts_ = false;
  std::optional<ToolCallFormat> tool_call_format_;
};

}  // namespace neuron::chat
