#include "server/responses_api.hpp"

#include <algorithm>
#include <limits>

#include "server/request_fields.hpp"
#include "util/text.hpp"

namespace neuron::server {
namespace {

using ojson = nlohmann::ordered_json;




// Content as a string or a list of text parts of the given types, joined by newlines.
std::string text_of(const ojson& content, const std::string& where, std::initializer_list<std::string_view> types) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw FieldError(where, "'" + where + "' must be a string or an array of content parts");
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string pw = indexed(where, i);
    if (!part.is_object()) throw FieldError(pw, "'" + pw + "' must be an object");
    const std::string type = required_string(part, "type", pw);
    bool known = false;
    for (auto t : types) known = known || type == t;
    if (!known) {
      if (type == "input_image" || type == "input_file" || type == "input_audio")
        non_text_content(pw + ".type", type);
      std::string expected;
      for (auto t : types) expected += (expected.empty() ? "" : ", ") + std::string(t);
      throw FieldError(pw + ".type", "'" + pw + ".type' must be one of " + expected + "; got '" + type + "'");
    }
    if (i > 0) text += "\n";
    text += required_string(part, "text", pw);
  }
  return text;
}

// The turn's messages from `input`. A reasoning item's text goes to the next
// assistant message; function_call items join the assistant message before
// them (or start one); function_call_output items are tool messages.
std::vector<ChatMessage> parse_input(const ojson& body) {
  const ojson* input = field(body, "input");
  if (!input) throw FieldError("input", "'input' is required");
  std::vector<ChatMessage> out;
  if (input->is_string()) {
    out.push_back(ChatMessage{"user", input->get<std::string>(), {}, {}, {}, nullptr});
    return out;
  }
  if (!input->is_array()) throw FieldError("input", "'input' must be a string or an array of items");
  if (input->empty()) throw FieldError("input", "'input' must hold at least one item");
  std::optional<std::string> reasoning;  // waiting for the next assistant message
  auto assistant = [&](std::string content) -> ChatMessage& {
    out.push_back(ChatMessage{"assistant", std::move(content), std::move(reasoning), {}, {}, nullptr});
    reasoning.reset();
    return out.back();
  };
  for (std::size_t i = 0; i < input->size(); ++i) {
    const ojson& item = (*input)[i];
    const std::string where = indexed("input", i);
    if (!item.is_object()) throw FieldError(where, "'" + where + "' must be an object");
    std::string type = string_in(item, "type", where + ".type").value_or("message");
    if (type == "message") {
      std::string role = required_string(item, "role", where);
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        throw FieldError(where + ".role", "'" + where + ".role' must be one of user, assistant, system, developer; got '" + role + "'");
      const ojson* content = field(item, "content");
      if (!content) throw FieldError(where + ".content", "'" + where + ".content' is required");
      std::string text = text_of(*content, where + ".content", {"input_text", "output_text", "text"});
      if (role == "assistant") assistant(std::move(text));
      else out.push_back(ChatMessage{role, std::move(text), {}, {}, {}, nullptr});
    } else if (type == "function_call") {
      const std::string call_id = required_string(item, "call_id", where);
      const std::string name = required_string(item, "name", where);
      const std::string arguments = required_string(item, "arguments", where);
      ojson call = {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
      // Calls of one turn follow its message (or each other): one assistant message.
      if (out.empty() || out.back().role != "assistant" || reasoning) assistant({});
      ChatMessage& m = out.back();
      if (m.tool_calls.is_null()) m.tool_calls = ojson::array();
      m.tool_calls.push_back(std::move(call));
    } else if (type == "function_call_output") {
      const std::string call_id = required_string(item, "call_id", where);
      const ojson* output = field(item, "output");
      if (!output) throw FieldError(where + ".output", "'" + where + ".output' is required");
      std::string text = text_of(*output, where + ".output", {"input_text", "output_text", "text"});
      out.push_back(ChatMessage{"tool", std::move(text), {}, {}, call_id, nullptr});
    } else if (type == "reasoning") {
      std::string text;
      const ojson* content = field(item, "content");
      const ojson* summary = field(item, "summary");
      if (content) text = text_of(*content, where + ".content", {"reasoning_text"});
      else if (summary) text = text_of(*summary, where + ".summary", {"summary_text"});
      reasoning = reasoning ? *reasoning + "\n" + text : text;
    } else if (type == "item_reference") {
      unsupported(where + ".type", "input item type 'item_reference'");
    } else {
      throw FieldError(where + ".type", "'" + where +
                                            ".type' must be one of message, function_call, function_call_output, reasoning; got '" +
                                            type + "'");
    }
  }
  return out;
}

// Flat function tools -> the chat template's {type, function: {...}}.
ojson parse_responses_tools(const ojson& body) {
  const ojson* tools = field(body, "tools");
  if (!tools) return nullptr;
  if (!tools->is_array()) throw FieldError("tools", "'tools' must be an array");
  ojson out = ojson::array();
  for (std::size_t i = 0; i < tools->size(); ++i) {
    const ojson& t = (*tools)[i];
    const std::string where = indexed("tools", i);
    if (!t.is_object()) throw FieldError(where, "'" + where + "' must be an object");
    const std::string type = required_string(t, "type", where);
    if (type != "function") unsupported(where + ".type", "tool type '" + type + "'");
    ojson fn = {{"name", required_string(t, "name", where)}};
    if (auto d = string_in(t, "description", where + ".description")) fn["description"] = *d;
    if (const ojson* p = field(t, "parameters")) {
      if (!p->is_object()) throw FieldError(where + ".parameters", "'" + where + ".parameters' must be an object");
      fn["parameters"] = *p;
    }
    if (const ojson* s = field(t, "strict"); s && !s->is_boolean())
      throw FieldError(where + ".strict", "'" + where + ".strict' must be a boolean");
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

ojson item_json(const char* type, const std::string& id, const char* status) {
  return {{"id", id}, {"type", type}, {"status", status}};
}

ojson message_item(const std::string& id, const std::string& text, const char* status) {
  ojson item = item_json("message", id, status);
  item["role"] = "assistant";
  item["content"] = ojson::array({{{"type", "output_text"}, {"text", text}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}}});
  return item;
}

ojson reasoning_item(const std::string& id, const std::string& text, const char* status) {
  ojson item = item_json("reasoning", id, status);
  item["summary"] = ojson::array();
  item["content"] = ojson::array({{{"type", "reasoning_text"}, {"text", text}}});
  return item;
}

ojson function_call_item(const std::string& id, const ToolCall& call) {
  ojson item = item_json("function_call", id, "completed");
  item["call_id"] = call.id;
  item["name"] = call.name;
  item["arguments"] = call.arguments;
  return item;
}

}  // namespace

ResponsesRequest parse_responses_request(const ojson& body) {
  ResponsesRequest r;
  OpenAiRequest& c = r.chat;
  c.kind = OpenAiRequest::Kind::chat;
  c.model = string_in(body, "model").value_or("");
  c.messages = parse_input(body);
  c.prompt_param = "input";
  r.instructions = string_in(body, "instructions");
  r.previous_response_id = string_in(body, "previous_response_id");
  if (r.previous_response_id && r.previous_response_id->empty())
    throw FieldError("previous_response_id", "'previous_response_id' must not be empty");
  r.store = boolean(body, "store").value_or(true);
  c.stream = boolean(body, "stream").value_or(false);
  if (auto v = integer_in(body, "max_output_tokens", 1, std::numeric_limits<std::int32_t>::max())) {
    c.max_tokens = static_cast<std::int32_t>(*v);
    c.max_tokens_param = "max_output_tokens";
  }
  c.sampling.temperature = number_in(body, "temperature", 0, 2);
  c.sampling.top_p = number_in(body, "top_p", 0, 1);
  if (c.sampling.top_p && *c.sampling.top_p <= 0) throw FieldError("top_p", "'top_p' must be greater than 0");
  if (auto v = integer_in(body, "top_logprobs", 0, 20); v && *v > 0) unsupported("top_logprobs", "'top_logprobs'");
  if (auto b = boolean(body, "background"); b && *b) unsupported("background", "'background' mode");
  const std::optional<bool> parallel = boolean(body, "parallel_tool_calls");
  std::optional<std::string> user = string_in(body, "user");
  std::optional<std::string> truncation = string_in(body, "truncation");
  if (truncation && *truncation != "disabled" && *truncation != "auto")
    throw FieldError("truncation", "'truncation' must be \"disabled\" or \"auto\"; got '" + *truncation + "'");

  const ojson* metadata = field(body, "metadata");
  if (metadata) {
    if (!metadata->is_object()) throw FieldError("metadata", "'metadata' must be an object");
    if (metadata->size() > 16) throw FieldError("metadata", "'metadata' may hold at most 16 keys");
    for (const auto& [k, v] : metadata->items()) {
      if (k.size() > 64) throw FieldError("metadata", "'metadata' keys must be at most 64 characters");
      if (!v.is_string() || v.get_ref<const std::string&>().size() > 512)
        throw FieldError("metadata." + k, "'metadata' values must be strings of at most 512 characters");
    }
  }

  c.tools = parse_responses_tools(body);
  c.tool_calls = !c.tools.is_null() && !c.tools.empty();
  ojson tool_choice = "auto";
  if (const ojson* tc = field(body, "tool_choice")) {
    // "required" and a named function force one call (constrained decoding, as in chat).
    if (tc->is_object()) {
      const std::string type = required_string(*tc, "type", "tool_choice");
      if (type != "function") unsupported("tool_choice.type", "tool_choice type '" + type + "'");
      const std::string name = required_string(*tc, "name", "tool_choice");
      c.constraint = tool_call_constraint(c.tools, &name, "tool_choice.name");
      c.constraint_param = "tool_choice";
      tool_choice = ojson{{"type", "function"}, {"name", name}};
    } else {
      if (!tc->is_string()) throw FieldError("tool_choice", "'tool_choice' must be a string or an object naming a function");
      const std::string choice = tc->get<std::string>();
      if (choice == "none") c.tool_calls = false;
      else if (choice == "required") {
        if (!c.tool_calls) throw FieldError("tool_choice", "tool_choice 'required' needs 'tools'");
        c.constraint = tool_call_constraint(c.tools, nullptr, "tool_choice");
        c.constraint_param = "tool_choice";
      } else if (choice != "auto") throw FieldError("tool_choice", "'tool_choice' must be \"none\", \"auto\" or \"required\"; got '" + choice + "'");
      tool_choice = choice;
    }
  }

  ojson text = {{"format", {{"type", "text"}}}};
  if (const ojson* t = field(body, "text")) {
    if (!t->is_object()) throw FieldError("text", "'text' must be an object");
    if (const ojson* f = field(*t, "format")) {
      if (!f->is_object()) throw FieldError("text.format", "'text.format' must be an object");
      const std::string type = required_string(*f, "type", "text.format");
      std::optional<grammar::Constraint> constraint;
      if (type == "json_object") {
        constraint = grammar::Constraint::json_object();
      } else if (type == "json_schema") {
        // Responses spells chat's response_format.json_schema flat: {type, name, schema, strict}.
        if (const ojson* n = field(*f, "name"); n && !n->is_string()) throw FieldError("text.format.name", "'text.format.name' must be a string");
        if (const ojson* st = field(*f, "strict"); st && !st->is_boolean())
          throw FieldError("text.format.strict", "'text.format.strict' must be a boolean");
        const ojson* schema = field(*f, "schema");
        if (!schema) throw FieldError("text.format.schema", "'text.format.schema' is required");
        if (!schema->is_object() && !schema->is_boolean())
          throw FieldError("text.format.schema", "'text.format.schema' must be a JSON Schema object");
        constraint = grammar::Constraint::json_schema(*schema);
      } else if (type != "text") {
        throw FieldError("text.format.type", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"; got '" + type + "'");
      }
      if (constraint) add_format_constraint(c, std::move(*constraint), "text.format");
      text["format"] = *f;
    }
    if (auto v = string_in(*t, "verbosity", "text.verbosity")) text["verbosity"] = *v;
  }

  ojson reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  if (const ojson* rs = field(body, "reasoning")) {
    if (!rs->is_object()) throw FieldError("reasoning", "'reasoning' must be an object");
    if (auto effort = string_in(*rs, "effort", "reasoning.effort")) {
      if (*effort != "none" && *effort != "minimal" && *effort != "low" && *effort != "medium" && *effort != "high")
        throw FieldError("reasoning.effort", "'reasoning.effort' must be one of none, minimal, low, medium, high; got '" + *effort + "'");
      if (*effort == "none" || *effort == "minimal") c.chat_template_kwargs["enable_thinking"] = false;
      reasoning["effort"] = *effort;
    }
    if (auto summary = string_in(*rs, "summary", "reasoning.summary")) reasoning["summary"] = *summary;
  }

  ojson& e = r.echo;
  e["instructions"] = r.instructions ? ojson(*r.instructions) : ojson(nullptr);
  e["max_output_tokens"] = c.max_tokens ? ojson(*c.max_tokens) : ojson(nullptr);
  e["metadata"] = metadata ? *metadata : ojson::object();
  e["parallel_tool_calls"] = parallel.value_or(true);
  e["previous_response_id"] = r.previous_response_id ? ojson(*r.previous_response_id) : ojson(nullptr);
  e["reasoning"] = std::move(reasoning);
  e["store"] = r.store;
  e["temperature"] = c.sampling.temperature ? body["temperature"] : ojson(nullptr);  // as sent (the float would print 0.2 as 0.200000003)
  e["text"] = std::move(text);
  e["tool_choice"] = std::move(tool_choice);
  e["tools"] = field(body, "tools") ? body["tools"] : ojson::array();
  e["top_p"] = c.sampling.top_p ? body["top_p"] : ojson(nullptr);
  e["truncation"] = truncation.value_or("disabled");
  if (user) e["user"] = *user;  // omitted when not sent (OpenAI's current schema)
  return r;
}

std::vector<ChatMessage> conversation(const ResponsesRequest& req, const std::vector<ChatMessage>* previous) {
  std::vector<ChatMessage> out;
  if (req.instructions) out.push_back(ChatMessage{"system", *req.instructions, {}, {}, {}, nullptr});
  if (previous) out.insert(out.end(), previous->begin(), previous->end());
  out.insert(out.end(), req.chat.messages.begin(), req.chat.messages.end());
  return out;
}

std::string response_status(const TurnEnd& end) {
  if (end.finish_reason == "length") return "incomplete";
  if (end.finish_reason == "cancelled") return "failed";
  return "completed";
}

ojson response_usage(const TurnEnd& end) {
  const TokenUsage& u = end.usage;
  ojson j = {{"input_tokens", u.prompt_tokens},
            // cache_write_tokens: the prompt tokens prefilled here (not read from the prefix cache), whose
            // full KV blocks the cache keeps for later requests.
            {"input_tokens_details", {{"cached_tokens", u.cached_tokens}, {"cache_write_tokens", u.prompt_tokens - u.cached_tokens}}},
            {"output_tokens", u.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", end.reasoning_tokens}}},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            // Extra fields for the helexa gateway, which meters every response by
            // the last "prompt_tokens" and "completion_tokens" it reads in the body.
            {"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens}};
  if (u.timing) j["helexa_timing"] = helexa_timing_json(*u.timing);
  return j;
}

ojson response_object(const std::string& id, std::int64_t created_at, const std::string& model, const ojson& echo,
                     const std::string& status, const ojson& output, const TurnEnd* end, const ojson& error) {
  ojson r = {{"id", id}, {"object", "response"}, {"created_at", created_at}, {"status", status}, {"error", error}};
  r["incomplete_details"] = status == "incomplete" ? ojson{{"reason", "max_output_tokens"}} : ojson(nullptr);
  r["model"] = model;
  r["output"] = output;
  for (const auto& [k, v] : echo.items()) r[k] = v;
  r["usage"] = end ? response_usage(*end) : ojson(nullptr);
  return r;
}

ojson output_items(const Turn& turn) {
  ojson items = ojson::array();
  const char* status = turn.end.finish_reason == "length" ? "incomplete" : "completed";
  if (!turn.reasoning.empty()) items.push_back(reasoning_item(new_random_id("rs_"), turn.reasoning, "completed"));
  if (turn.calls.empty() || !util::is_blank(turn.content)) items.push_back(message_item(new_random_id("msg_"), turn.content, status));
  for (const auto& call : turn.calls) items.push_back(function_call_item(new_random_id("fc_"), call));
  return items;
}

ChatMessage assistant_message(const Turn& turn) {
  ChatMessage m{"assistant", turn.content, {}, {}, {}, nullptr};
  if (!turn.reasoning.empty()) m.reasoning_content = turn.reasoning;
  if (!turn.calls.empty()) {
    m.tool_calls = ojson::array();
    for (const auto& c : turn.calls)
      m.tool_calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return m;
}

// ---- streaming ----

ResponsesTurnShaper::ResponsesTurnShaper(std::string id, std::int64_t created_at, std::string model, ojson echo,
                                         std::optional<ToolCallSyntax> tool_calls, OnDone on_done)
    : id_(std::move(id)),
      model_(std::move(model)),
      created_at_(created_at),
      echo_(std::move(echo)),
      extractor_(tool_calls ? std::make_unique<WholeToolCalls>(*tool_calls) : nullptr),
      on_done_(std::move(on_done)) {}

std::string ResponsesTurnShaper::event(const char* type, ojson payload) {
  ojson e = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [k, v] : payload.items()) e[k] = std::move(v);
  return sse_named_event(type, e);
}

std::string ResponsesTurnShaper::open() {
  const ojson r = response_object(id_, created_at_, model_, echo_, "in_progress", ojson::array(), nullptr);
  std::string out = event("response.created", {{"response", r}});  // one statement each: sequence numbers in order
  out += event("response.in_progress", {{"response", r}});
  return out;
}

std::string ResponsesTurnShaper::open_item(Open kind) {
  open_ = kind;
  item_text_.clear();
  const std::size_t index = items_.size();
  ojson item, part;
  if (kind == Open::reasoning) {
    item_id_ = new_random_id("rs_");
    item = reasoning_item(item_id_, "", "in_progress");
    item["content"] = ojson::array();
    part = {{"type", "reasoning_text"}, {"text", ""}};
  } else {
    item_id_ = new_random_id("msg_");
    item = message_item(item_id_, "", "in_progress");
    item["content"] = ojson::array();
    part = {{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}};
  }
  std::string out = event("response.output_item.added", {{"output_index", index}, {"item", item}});
  out += event("response.content_part.added", {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  return out;
}

std::string ResponsesTurnShaper::close_item(const char* status) {
  if (open_ == Open::none) return {};
  const std::size_t index = items_.size();
  const bool reasoning = open_ == Open::reasoning;
  ojson item = reasoning ? reasoning_item(item_id_, item_text_, "completed") : message_item(item_id_, item_text_, status);
  std::string out = event(reasoning ? "response.reasoning_text.done" : "response.output_text.done",
                          reasoning ? ojson{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", item_text_}}
                                    : ojson{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", item_text_},
                                           {"logprobs", ojson::array()}});
  out += event("response.content_part.done",
               {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"part", item["content"][0]}});
  out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
  items_.push_back(std::move(item));
  open_ = Open::none;
  return out;
}

std::string ResponsesTurnShaper::delta(std::string_view text, std::string_view reasoning) {
  std::string out;
  if (!reasoning.empty()) {
    turn_.reasoning += reasoning;
    if (open_ != Open::reasoning) {
      out += close_item("completed");
      out += open_item(Open::reasoning);
    }
    item_text_ += reasoning;
    out += event("response.reasoning_text.delta",
                 {{"item_id", item_id_}, {"output_index", items_.size()}, {"content_index", 0}, {"delta", reasoning}});
  }
  out += text_delta(extractor_ ? extractor_->feed(text) : std::string(text));
  return out;
}

std::string ResponsesTurnShaper::text_delta(std::string text) {
  if (text.empty()) return {};
  turn_.content += text;
  std::string out;
  if (open_ != Open::message) {
    // Blank text before tool calls is no message: hold it until something else comes.
    if (util::is_blank(text)) {
      pending_blank_ += text;
      return out;
    }
    out += close_item("completed");
    out += open_item(Open::message);
    text.insert(0, pending_blank_);
    pending_blank_.clear();
  }
  item_text_ += text;
  out += event("response.output_text.delta",
               {{"item_id", item_id_}, {"output_index", items_.size()}, {"content_index", 0}, {"delta", text}, {"logprobs", ojson::array()}});
  return out;
}

std::string ResponsesTurnShaper::close(const TurnEnd& end) {
  std::string out;
  std::vector<ToolCall> calls;
  if (extractor_) {
    ToolCallExtractor::Result rest = extractor_->finish();
    calls = std::move(rest.calls);
    out += text_delta(std::move(rest.content));  // held text that is content after all
  }
  // A turn without calls always has its message, blank or empty as it may be.
  const bool has_message = open_ == Open::message ||
                           std::any_of(items_.begin(), items_.end(), [](const ojson& i) { return i["type"] == "message"; });
  if (calls.empty() && !has_message) {
    out += close_item("completed");
    out += open_item(Open::message);
    if (!pending_blank_.empty()) {
      item_text_ = pending_blank_;
      out += event("response.output_text.delta", {{"item_id", item_id_}, {"output_index", items_.size()}, {"content_index", 0},
                                                   {"delta", pending_blank_}, {"logprobs", ojson::array()}});
      pending_blank_.clear();
    }
  }
  const std::string status = response_status(end);
  out += close_item(status == "incomplete" ? "incomplete" : "completed");
  for (const auto& call : calls) {
    const std::size_t index = items_.size();
    const std::string fc_id = new_random_id("fc_");
    ojson item = function_call_item(fc_id, call);
    ojson added = item;
    added["status"] = "in_progress";
    added["arguments"] = "";
    out += event("response.output_item.added", {{"output_index", index}, {"item", added}});
    out += event("response.function_call_arguments.delta", {{"item_id", fc_id}, {"output_index", index}, {"delta", call.arguments}});
    out += event("response.function_call_arguments.done",
                 {{"item_id", fc_id}, {"output_index", index}, {"name", call.name}, {"arguments", call.arguments}});
    out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
    items_.push_back(std::move(item));
  }
  turn_.calls = std::move(calls);
  turn_.end = end;
  const ojson error = status == "failed" ? ojson{{"code", "cancelled"}, {"message", "the generation was cancelled"}} : ojson(nullptr);
  const ojson response = response_object(id_, created_at_, model_, echo_, status, items_, &end, error);
  if (status != "failed" && on_done_) on_done_(response, turn_);
  const char* type = status == "completed" ? "response.completed" : status == "incomplete" ? "response.incomplete" : "response.failed";
  out += event(type, {{"response", response}});
  return out;
}

std::string ResponsesTurnShaper::fail(const ApiError& error) {
  std::string out = close_item("incomplete");
  const ojson response =
      response_object(id_, created_at_, model_, echo_, "failed", items_, nullptr, ojson{{"code", error.code}, {"message", error.message}});
  out += event("response.failed", {{"response", response}});
  return out;
}

// ---- store ----

ResponseStore::ResponseStore(std::size_t max_count, std::size_t max_bytes) : max_count_(max_count), max_bytes_(max_bytes) {}

void ResponseStore::put(const std::string& id, StoredResponse response) {
  std::size_t size = id.size() + dump(response.response).size();
  for (const auto& m : response.conversation)
    size += m.content.size() + (m.reasoning_content ? m.reasoning_content->size() : 0) + (m.tool_calls.is_null() ? 0 : dump(m.tool_calls).size());
  std::lock_guard lock(mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    by_id_.erase(it);
  }
  if (size > max_bytes_ || max_count_ == 0) return;
  while (!lru_.empty() && (lru_.size() >= max_count_ || bytes_ + size > max_bytes_)) {
    bytes_ -= lru_.back().bytes;
    by_id_.erase(lru_.back().id);
    lru_.pop_back();
  }
  lru_.push_front(Entry{id, std::move(response), size});
  by_id_[id] = lru_.begin();
  bytes_ += size;
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  by_id_.erase(it);
  return true;
}

std::size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

std::size_t ResponseStore::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace neuron::server
