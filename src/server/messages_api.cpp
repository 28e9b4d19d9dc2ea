#include "server/messages_api.hpp"

#include <limits>
#include <utility>

#include "server/request_fields.hpp"
#include "util/json_parse.hpp"
#include "util/text.hpp"

namespace neuron::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::size_t kMaxStopSequences = 16;




[[noreturn]] void unknown_block(const std::string& where, const std::string& type, const char* expected) {
  if (type == "image" || type == "document" || type == "search_result" || type == "container_upload")
    non_text_content(where + ".type", type);
  throw FieldError(where + ".type", "'" + where + ".type' must be one of " + expected + "; got '" + type + "'");
}

// A string, or text blocks joined by newlines.
std::string text_blocks(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw FieldError(where, "'" + where + "' must be a string or an array of text blocks");
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const std::string bw = indexed(where, i);
    if (!content[i].is_object()) throw FieldError(bw, "'" + bw + "' must be an object");
    const std::string type = required_string(content[i], "type", bw);
    if (type != "text") unknown_block(bw, type, "text");
    if (i > 0) text += "\n";
    text += required_string(content[i], "text", bw);
  }
  return text;
}

// One Anthropic message -> chat messages: a user turn's tool_result blocks
// become tool messages (before its text, as the results answer the calls of
// the turn before); an assistant turn is one message with its thinking as
// reasoning_content and its tool_use blocks as tool_calls.
void append_message(const ojson& m, const std::string& where, std::vector<ChatMessage>& out) {
  if (!m.is_object()) throw FieldError(where, "'" + where + "' must be an object");
  const std::string role = required_string(m, "role", where);
  if (role != "user" && role != "assistant")
    throw FieldError(where + ".role", "'" + where + ".role' must be \"user\" or \"assistant\"; got '" + role + "'");
  const ojson* content = field(m, "content");
  if (!content) throw FieldError(where + ".content", "'" + where + ".content' is required");
  const std::string cw = where + ".content";
  if (content->is_string()) {
    out.push_back(ChatMessage{role, content->get<std::string>(), {}, {}, {}, nullptr});
    return;
  }
  if (!content->is_array()) throw FieldError(cw, "'" + cw + "' must be a string or an array of content blocks");
  ChatMessage msg{role, {}, {}, {}, {}, nullptr};
  bool has_text = false;
  for (std::size_t i = 0; i < content->size(); ++i) {
    const ojson& b = (*content)[i];
    const std::string bw = indexed(cw, i);
    if (!b.is_object()) throw FieldError(bw, "'" + bw + "' must be an object");
    const std::string type = required_string(b, "type", bw);
    if (type == "text") {
      if (has_text) msg.content += "\n";
      msg.content += required_string(b, "text", bw);
      has_text = true;
    } else if (role == "user" && type == "tool_result") {
      const std::string id = required_string(b, "tool_use_id", bw);
      const ojson* c = field(b, "content");
      std::string text = c ? text_blocks(*c, bw + ".content") : std::string();
      if (auto e = boolean(b, "is_error"); e && *e) text = "Error: " + text;
      out.push_back(ChatMessage{"tool", std::move(text), {}, {}, id, nullptr});
    } else if (role == "assistant" && type == "tool_use") {
      const std::string id = required_string(b, "id", bw);
      const std::string name = required_string(b, "name", bw);
      const ojson* input = field(b, "input");
      if (input && !input->is_object()) throw FieldError(bw + ".input", "'" + bw + ".input' must be an object");
      if (msg.tool_calls.is_null()) msg.tool_calls = ojson::array();
      msg.tool_calls.push_back({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", input ? *input : ojson::object()}}}});
    } else if (role == "assistant" && type == "thinking") {
      const std::string thinking = required_string(b, "thinking", bw);
      msg.reasoning_content = msg.reasoning_content ? *msg.reasoning_content + "\n" + thinking : thinking;
    } else if (role == "assistant" && type == "redacted_thinking") {
      // Opaque to us: nothing to render.
    } else {
      unknown_block(bw, type, role == "user" ? "text, tool_result" : "text, tool_use, thinking, redacted_thinking");
    }
  }
  if (role == "assistant" || has_text) out.push_back(std::move(msg));
}

ojson parse_messages_tools(const ojson& body) {
  const ojson* tools = field(body, "tools");
  if (!tools) return nullptr;
  if (!tools->is_array()) throw FieldError("tools", "'tools' must be an array");
  ojson out = ojson::array();
  for (std::size_t i = 0; i < tools->size(); ++i) {
    const ojson& t = (*tools)[i];
    const std::string where = indexed("tools", i);
    if (!t.is_object()) throw FieldError(where, "'" + where + "' must be an object");
    if (auto type = string_in(t, "type", where + ".type"); type && *type != "custom")
      unsupported(where + ".type", "tool type '" + *type + "'");
    ojson fn = {{"name", required_string(t, "name", where)}};
    if (auto d = string_in(t, "description", where + ".description")) fn["description"] = *d;
    const ojson* schema = field(t, "input_schema");
    if (!schema) throw FieldError(where + ".input_schema", "'" + where + ".input_schema' is required");
    if (!schema->is_object()) throw FieldError(where + ".input_schema", "'" + where + ".input_schema' must be an object");
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// A tool call's arguments as the tool_use block's input object.
ojson tool_input(const ToolCall& call) {
  try {
    ojson v = parse_json<ojson>(call.arguments, "tool call arguments");
    if (v.is_object()) return v;
  } catch (const Error&) {  // not JSON: the model's text is kept under one key below
  }
  return {{"arguments", call.arguments}};
}

ojson tool_use_block(const ToolCall& call, ojson input) {
  // Anthropic's ids start "toolu_"; the call's own id keeps its random part.
  std::string id = call.id.starts_with("call_") ? "toolu_" + call.id.substr(5) : call.id;
  return {{"type", "tool_use"}, {"id", std::move(id)}, {"name", call.name}, {"input", std::move(input)}};
}

std::string event(const char* type, ojson payload) {
  ojson e = {{"type", type}};
  for (auto& [k, v] : payload.items()) e[k] = std::move(v);
  return sse_named_event(type, e);
}

}  // namespace

OpenAiRequest parse_messages_request(const ojson& body, bool for_count) {
  OpenAiRequest r;
  r.kind = OpenAiRequest::Kind::chat;
  r.model = string_in(body, "model").value_or("");
  auto max_tokens = integer_in(body, "max_tokens", 1, std::numeric_limits<std::int32_t>::max());
  if (!max_tokens && !for_count) throw FieldError("max_tokens", "'max_tokens' is required");
  if (max_tokens) r.max_tokens = static_cast<std::int32_t>(*max_tokens);
  r.stream = boolean(body, "stream").value_or(false);
  r.sampling.temperature = number_in(body, "temperature", 0, 1);
  r.sampling.top_p = number_in(body, "top_p", 0, 1);
  if (r.sampling.top_p && *r.sampling.top_p <= 0) throw FieldError("top_p", "'top_p' must be greater than 0");
  if (auto k = integer_in(body, "top_k", 0, std::numeric_limits<std::int32_t>::max())) r.sampling.top_k = static_cast<std::int32_t>(*k);

  if (const ojson* stops = field(body, "stop_sequences")) {
    if (!stops->is_array()) throw FieldError("stop_sequences", "'stop_sequences' must be an array of strings");
    if (stops->size() > kMaxStopSequences)
      throw FieldError("stop_sequences", "'stop_sequences' may hold at most " + std::to_string(kMaxStopSequences) + " strings");
    for (std::size_t i = 0; i < stops->size(); ++i) {
      const ojson& s = (*stops)[i];
      if (!s.is_string() || s.get_ref<const std::string&>().empty())
        throw FieldError(indexed("stop_sequences", i), "'stop_sequences' entries must be non-empty strings");
      r.stop.push_back(s.get<std::string>());
    }
  }

  if (const ojson* system = field(body, "system")) r.messages.push_back(ChatMessage{"system", text_blocks(*system, "system"), {}, {}, {}, nullptr});
  const ojson* messages = field(body, "messages");
  if (!messages) throw FieldError("messages", "'messages' is required");
  if (!messages->is_array()) throw FieldError("messages", "'messages' must be an array");
  if (messages->empty()) throw FieldError("messages", "'messages' must hold at least one message");
  for (std::size_t i = 0; i < messages->size(); ++i) append_message((*messages)[i], indexed("messages", i), r.messages);

  r.tools = parse_messages_tools(body);
  r.tool_calls = !r.tools.is_null() && !r.tools.empty();
  if (const ojson* tc = field(body, "tool_choice")) {
    if (!tc->is_object()) throw FieldError("tool_choice", "'tool_choice' must be an object");
    const std::string type = required_string(*tc, "type", "tool_choice");
    if (type == "none") {
      r.tool_calls = false;
    } else if (type == "any" || type == "tool") {
      // One call is forced (constrained decoding): any tool, or the named one.
      if (!r.tool_calls) throw FieldError("tool_choice", "tool_choice '" + type + "' needs 'tools'");
      std::string name;
      if (type == "tool") name = required_string(*tc, "name", "tool_choice");
      r.constraint = tool_call_constraint(r.tools, type == "tool" ? &name : nullptr, type == "tool" ? "tool_choice.name" : "tool_choice");
      r.constraint_param = "tool_choice";
    } else if (type != "auto") throw FieldError("tool_choice.type", "'tool_choice.type' must be one of auto, any, tool, none; got '" + type + "'");
    if (const ojson* p = field(*tc, "disable_parallel_tool_use"); p && !p->is_boolean())
      throw FieldError("tool_choice.disable_parallel_tool_use", "'tool_choice.disable_parallel_tool_use' must be a boolean");
  }

  if (const ojson* thinking = field(body, "thinking")) {
    if (!thinking->is_object()) throw FieldError("thinking", "'thinking' must be an object");
    const std::string type = required_string(*thinking, "type", "thinking");
    if (type == "disabled") r.chat_template_kwargs["enable_thinking"] = false;
    else if (type == "enabled") r.chat_template_kwargs["enable_thinking"] = true;
    else throw FieldError("thinking.type", "'thinking.type' must be \"enabled\" or \"disabled\"; got '" + type + "'");
    if (auto b = integer_in(*thinking, "budget_tokens", 0, std::numeric_limits<std::int32_t>::max()); b && type == "enabled" && max_tokens && *b >= *max_tokens)
      throw FieldError("thinking.budget_tokens", "'thinking.budget_tokens' must be less than 'max_tokens'");
  }
  if (const ojson* md = field(body, "metadata"); md && !md->is_object()) throw FieldError("metadata", "'metadata' must be an object");
  return r;
}

std::string anthropic_error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
  }
}

nlohmann::json anthropic_error_body(const ApiError& e) {
  return {{"type", "error"}, {"error", {{"type", anthropic_error_type(e.status)}, {"message", e.message}}}};
}

HttpResponse anthropic_error_response(const ApiError& e) {
  HttpResponse r = error_response(e);  // status and Retry-After
  r.body = dump(anthropic_error_body(e));
  return r;
}

HttpResponse as_anthropic_error(HttpResponse r) {
  if (r.status < 400 || r.stream) return r;
  std::string message;
  try {
    const auto body = parse_json<nlohmann::json>(r.body, "error body");
    if (const auto it = body.find("error"); it != body.end() && it->is_object() && it->contains("message") && (*it)["message"].is_string())
      message = (*it)["message"].get<std::string>();
  } catch (const Error&) {  // not the envelope: the status alone says it
  }
  ApiError e;
  e.status = r.status;
  e.message = std::move(message);
  r.body = dump(anthropic_error_body(e));
  return r;
}

ojson anthropic_usage(const TurnEnd& end) {
  return {{"input_tokens", end.usage.prompt_tokens - end.usage.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", end.usage.cached_tokens},
          {"output_tokens", end.usage.completion_tokens}};
}

std::string anthropic_stop_reason(const TurnEnd& end, bool tool_use) {
  if (end.finish_reason == "length") return "max_tokens";
  if (end.stop_sequence) return "stop_sequence";
  if (tool_use) return "tool_use";
  return "end_turn";
}

ojson message_body(const std::string& id, const std::string& model, const Turn& turn) {
  ojson content = ojson::array();
  if (!turn.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", turn.reasoning}, {"signature", ""}});
  if (turn.calls.empty() ? !turn.content.empty() : !util::is_blank(turn.content)) content.push_back({{"type", "text"}, {"text", turn.content}});
  for (const auto& call : turn.calls) content.push_back(tool_use_block(call, tool_input(call)));
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", std::move(content)},
          {"stop_reason", anthropic_stop_reason(turn.end, !turn.calls.empty())},
          {"stop_sequence", turn.end.stop_sequence ? ojson(*turn.end.stop_sequence) : ojson(nullptr)},
          {"usage", anthropic_usage(turn.end)}};
}

// ---- streaming ----

MessagesTurnShaper::MessagesTurnShaper(std::string id, std::string model, std::int32_t prompt_tokens,
                                       std::optional<ToolCallSyntax> tool_calls)
    : id_(std::move(id)),
      model_(std::move(model)),
      prompt_tokens_(prompt_tokens),
      extractor_(tool_calls ? std::make_unique<WholeToolCalls>(*tool_calls) : nullptr) {}

std::string MessagesTurnShaper::open() {
  ojson message = {{"id", id_},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", model_},
                  {"content", ojson::array()},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage", {{"input_tokens", prompt_tokens_}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0}, {"output_tokens", 0}}}};
  std::string out = event("message_start", {{"message", std::move(message)}});
  out += event("ping", ojson::object());
  return out;
}

std::string MessagesTurnShaper::open_block(Block kind) {
  open_ = kind;
  ++index_;
  ojson block = kind == Block::thinking ? ojson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}} : ojson{{"type", "text"}, {"text", ""}};
  return event("content_block_start", {{"index", index_}, {"content_block", std::move(block)}});
}

std::string MessagesTurnShaper::close_block() {
  if (open_ == Block::none) return {};
  open_ = Block::none;
  return event("content_block_stop", {{"index", index_}});
}

std::string MessagesTurnShaper::delta(std::string_view text, std::string_view reasoning) {
  std::string out;
  if (!reasoning.empty()) {
    if (open_ != Block::thinking) {
      out += close_block();  // before open_block: it moves to the next index
      out += open_block(Block::thinking);
    }
    out += event("content_block_delta", {{"index", index_}, {"delta", {{"type", "thinking_delta"}, {"thinking", reasoning}}}});
  }
  out += text_delta(extractor_ ? extractor_->feed(text) : std::string(text));
  return out;
}

std::string MessagesTurnShaper::text_delta(std::string text) {
  if (text.empty()) return {};
  std::string out;
  if (open_ != Block::text) {
    if (extractor_ && !had_text_ && util::is_blank(text)) {  // blank text before tool calls is no block
      pending_blank_ += text;
      return out;
    }
    out += close_block();
    out += open_block(Block::text);
    text.insert(0, pending_blank_);
    pending_blank_.clear();
    had_text_ = true;
  }
  out += event("content_block_delta", {{"index", index_}, {"delta", {{"type", "text_delta"}, {"text", std::move(text)}}}});
  return out;
}

std::string MessagesTurnShaper::close(const TurnEnd& end) {
  std::string out;
  std::vector<ToolCall> calls;
  if (extractor_) {
    ToolCallExtractor::Result rest = extractor_->finish();
    calls = std::move(rest.calls);
    out += text_delta(std::move(rest.content));
    if (calls.empty() && !pending_blank_.empty()) {  // it was not before calls after all
      had_text_ = false;
      extractor_.reset();
      out += text_delta(std::exchange(pending_blank_, {}));
    }
  }
  out += close_block();
  for (const auto& call : calls) {
    ojson block = tool_use_block(call, ojson::object());
    const std::string input = dump(tool_input(call));
    out += event("content_block_start", {{"index", ++index_}, {"content_block", std::move(block)}});
    out += event("content_block_delta", {{"index", index_}, {"delta", {{"type", "input_json_delta"}, {"partial_json", input}}}});
    out += event("content_block_stop", {{"index", index_}});
  }
  ojson usage = anthropic_usage(end);
  out += event("message_delta", {{"delta", {{"stop_reason", anthropic_stop_reason(end, !calls.empty())},
                                            {"stop_sequence", end.stop_sequence ? ojson(*end.stop_sequence) : ojson(nullptr)}}},
                                 {"usage", std::move(usage)}});
  out += event("message_stop", ojson::object());
  return out;
}

std::string MessagesTurnShaper::fail(const ApiError& error) { return sse_named_event("error", anthropic_error_body(error)); }

}  // namespace neuron::server
