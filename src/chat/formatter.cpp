#include "chat/formatter.hpp"

#include <fstream>
#include <regex>
#include <sstream>

#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace neuron::chat {

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  // A directory, /dev/zero or a FIFO in a model folder must not hang or exhaust the load.
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw Error(errc::bad_model, path.string() + " is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!std::filesystem::exists(path)) throw Error(errc::not_found, "no such file: " + path.string());
    throw Error(errc::io, "cannot read " + path.string());
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::filesystem::path& path) {
  return parse_json(read_file(path), path.string(), errc::bad_model);
}

// chat_template as a string, or transformers' list of named templates.
std::optional<std::string> template_from_field(const nlohmann::json& field, const std::filesystem::path& path) {
  if (field.is_null()) return std::nullopt;
  if (field.is_string()) return field.get<std::string>();
  if (!field.is_array()) {
    throw Error(errc::bad_model, path.string() + ": chat_template must be a string or a list of {name, template}");
  }
  for (const auto& entry : field) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
        !entry["template"].is_string()) {
      throw Error(errc::bad_model, path.string() + ": each chat_template entry must be {name: string, template: string}");
    }
    if (entry["name"] == "default") return entry["template"].get<std::string>();
  }
  throw Error(errc::bad_model, path.string() + ": chat_template list has no entry named \"default\"");
}

// A special token is "text", {"content": "text", ...} (AddedToken), or null.
std::optional<std::string> token_text(const nlohmann::json& config, const char* key, const std::filesystem::path& path) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw Error(errc::bad_model, path.string() + ": " + key + " must be a string or an object with a string \"content\"");
}

// Templates written for multimodal chat iterate over content parts themselves
// (`for part in message.content`, or, in a macro the content is passed to,
// `for item in content`: Qwen3.5, Kimi, Hunyuan, StepFun); the rest expect a string.
bool iterates_content_parts(const std::string& source) {
  static const std::regex pattern(R"(for\s+\w+\s+in\s+(\w+\s*(\.\s*content\b|\[\s*['"]content['"]\s*\])|content\b))");
  return std::regex_search(source, pattern);
}

// OpenAI clients send a past call's function.arguments as JSON text; templates
// written for transformers expect a mapping (Llama 3.x prints it with tojson,
// which would quote the text), so it is parsed, as vLLM does; "" is {}.
void parse_call_arguments(nlohmann::ordered_json& calls, const std::string& where) {
  for (std::size_t k = 0; k < calls.size(); ++k) {
    auto& call = calls[k];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    auto& function = call["function"];
    if (!function.contains("arguments") || !function["arguments"].is_string()) continue;
    const std::string text = function["arguments"].get<std::string>();
    const std::string field = where + ".tool_calls[" + std::to_string(k) + "].function.arguments";
    function["arguments"] = text.empty() ? nlohmann::ordered_json::object() : parse_json<nlohmann::ordered_json>(text, field);
  }
}

nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages, bool keep_parts) {
  if (!messages.is_array()) throw Error(errc::invalid_argument, "messages must be an array");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw Error(errc::invalid_argument, where + " must be an object");
    if (!m.contains("role") || !m["role"].is_string()) throw Error(errc::invalid_argument, where + ".role must be a string");
    nlohmann::ordered_json msg = m;
    // OpenAI clients send content: null on assistant tool-call turns; templates
    // written for transformers (Qwen3's `'</think>' in message.content`) expect a string.
    if (m.contains("tool_calls") && m.contains("content") && m["content"].is_null()) msg["content"] = "";
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) parse_call_arguments(msg["tool_calls"], where);
    if (m.contains("content") && m["content"].is_array() && !keep_parts) {
      std::string text;
      const auto& parts = m["content"];
      for (std::size_t k = 0; k < parts.size(); ++k) {
        const auto& part = parts[k];
        const std::string part_where = where + ".content[" + std::to_string(k) + "]";
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
          throw Error(errc::invalid_argument, part_where + " must be {\"type\": \"text\", \"text\": string}");
        }
        if (k) text += "\n";
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

ChatFormatter ChatFormatter::from_tokenizer_config(const std::filesystem::path& tokenizer_config_json) {
  const nlohmann::json config = read_json(tokenizer_config_json);
  if (!config.is_object()) throw Error(errc::bad_model, tokenizer_config_json.string() + " must hold a JSON object");

  std::optional<std::string> source;
  if (config.contains("chat_template")) source = template_from_field(config["chat_template"], tokenizer_config_json);
  const auto dir = tokenizer_config_json.parent_path();
  if (!source && std::filesystem::exists(dir / "chat_template.jinja")) source = read_file(dir / "chat_template.jinja");
  if (!source && std::filesystem::exists(dir / "chat_template.json")) {
    const auto path = dir / "chat_template.json";
    const nlohmann::json side = read_json(path);
    if (!side.is_object() || !side.contains("chat_template")) {
      throw Error(errc::bad_model, path.string() + " has no \"chat_template\" field");
    }
    source = template_from_field(side["chat_template"], path);
  }

  nlohmann::json special = nlohmann::json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (auto text = token_text(config, key, tokenizer_config_json)) special[key] = *text;
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    nlohmann::json extra = nlohmann::json::array();
    for (const auto& t : config["additional_special_tokens"]) {
      if (t.is_string()) extra.push_back(t);
      else if (t.is_object() && t.contains("content") && t["content"].is_string()) extra.push_back(t["content"]);
    }
    special["additional_special_tokens"] = extra;
  }

  ChatFormatter f;
  f.special_tokens_ = special;
  if (source) {
    try {
      f.template_ = ChatTemplate::parse(*source);
    } catch (const Error& e) {
      throw Error(errc::template_error, tokenizer_config_json.string() + ": chat_template: " + e.what());
    }
    f.template_reads_content_parts_ = iterates_content_parts(*source);
    f.tool_call_format_ = detect_tool_call_format(*source);
  }
  return f;
}

ChatFormatter ChatFormatter::from_template(std::string source, const nlohmann::json& special_tokens) {
  if (!special_tokens.is_object()) throw Error(errc::invalid_argument, "special_tokens must be a JSON object");
  ChatFormatter f;
  f.template_reads_content_parts_ = iterates_content_parts(source);
  f.tool_call_format_ = detect_tool_call_format(source);
  f.template_ = ChatTemplate::parse(std::move(source));
  f.special_tokens_ = special_tokens;
  return f;
}

std::string ChatFormatter::apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra) const {
  if (!template_) throw Error(errc::not_found, "the model has no chat template (chat_template in tokenizer_config.json)");
  if (!tools.is_null() && !tools.is_array()) throw Error(errc::invalid_argument, "tools must be null or an array");
  if (!extra.is_null() && !extra.is_object()) throw Error(errc::invalid_argument, "extra template variables must be an object");

  nlohmann::ordered_json context = special_tokens_;
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items()) {
      if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt") {
        throw Error(errc::invalid_argument, "extra template variable '" + key + "' clashes with a chat input");
      }
      context[key] = value;
    }
  }
  context["messages"] = normalize_messages(messages, template_reads_content_parts_);
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  return template_->render(context);
}

}  // namespace neuron::chat
