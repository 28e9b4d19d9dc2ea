#include "server/openai_request.hpp"

#include <cmath>
#include <limits>

#include "engine/request.hpp"
#include "model/logprobs.hpp"
#include "server/api_error.hpp"
#include "server/request_fields.hpp"
#include "util/json_parse.hpp"

namespace neuron::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::int64_t kMaxCompletionLogprobs = 5;  // OpenAI's bound for /v1/completions

std::string parse_model(const ojson& body) {
  const ojson* v = field(body, "model");
  if (!v) return {};
  if (!v->is_string()) throw FieldError("model", "'model' must be a string");
  return v->get<std::string>();
}

std::vector<std::string> parse_stop(const ojson& body) {
  const ojson* v = field(body, "stop");
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > 4) throw FieldError("stop", "'stop' may hold at most 4 sequences, got " + std::to_string(v->size()));
    for (std::size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) throw FieldError("stop[" + std::to_string(i) + "]", "'stop' entries must be strings");
      out.push_back((*v)[i].get<std::string>());
    }
  } else {
    throw FieldError("stop", "'stop' must be a string or an array of strings");
  }
  for (const auto& s : out)
    if (s.empty()) throw FieldError("stop", "'stop' sequences must not be empty");
  return out;
}

// Fields both endpoints share.
void parse_common(const ojson& body, OpenAiRequest& r) {
  r.model = parse_model(body);
  constexpr std::int64_t kMaxTokens = std::numeric_limits<std::int32_t>::max();
  if (auto v = integer_in(body, "max_completion_tokens", 1, kMaxTokens)) r.max_tokens = static_cast<std::int32_t>(*v);
  if (auto v = integer_in(body, "max_tokens", 1, kMaxTokens)) {
    if (r.max_tokens && *r.max_tokens != *v)
      throw FieldError("max_tokens", "'max_tokens' and 'max_completion_tokens' disagree; send one of them");
    r.max_tokens = static_cast<std::int32_t>(*v);
  }
  SamplingOverrides& s = r.sampling;
  s.temperature = number_in(body, "temperature", 0, 2);
  s.top_p = number_in(body, "top_p", 0, 1);
  if (s.top_p && *s.top_p <= 0) throw FieldError("top_p", "'top_p' must be greater than 0");
  s.min_p = number_in(body, "min_p", 0, 1);
  if (auto v = integer_in(body, "top_k", -1, std::numeric_limits<std::int32_t>::max())) s.top_k = static_cast<std::int32_t>(*v);
  s.presence_penalty = number_in(body, "presence_penalty", -2, 2);
  s.frequency_penalty = number_in(body, "frequency_penalty", -2, 2);
  s.repetition_penalty = number_in(body, "repetition_penalty", 0, 10);
  if (s.repetition_penalty && *s.repetition_penalty <= 0)
    throw FieldError("repetition_penalty", "'repetition_penalty' must be greater than 0");
  if (auto v = integer_in(body, "seed", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()))
    s.seed = static_cast<std::uint64_t>(*v);

  if (auto n = integer_in(body, "n", 1, engine::kMaxChoices)) r.n = static_cast<std::int32_t>(*n);
  r.stop = parse_stop(body);
  r.stream = boolean(body, "stream").value_or(false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) throw FieldError("stream_options", "'stream_options' must be an object");
    const ojson* iu = field(*so, "include_usage");
    if (iu && !iu->is_boolean())
      throw FieldError("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
    r.include_usage = iu && iu->get<bool>();
  }
  r.ignore_eos = boolean(body, "ignore_eos").value_or(false);
  if (const ojson* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) throw FieldError("logit_bias", "'logit_bias' must be an object");
    if (!lb->empty()) unsupported("logit_bias", "'logit_bias'");
  }
}

std::string part_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw FieldError(where, "'" + where + "' must be a string or an array of text parts");
  std::string text;
  for (std::size_t j = 0; j < content.size(); ++j) {
    const ojson& part = content[j];
    std::string pw = where + "[" + std::to_string(j) + "]";
    if (!part.is_object()) throw FieldError(pw, "'" + pw + "' must be an object");
    const ojson* type = field(part, "type");
    if (!type || !type->is_string()) throw FieldError(pw + ".type", "'" + pw + ".type' must be a string");
    if (*type != "text") non_text_content(pw + ".type", type->get<std::string>());
    const ojson* t = field(part, "text");
    if (!t || !t->is_string()) throw FieldError(pw + ".text", "'" + pw + ".text' must be a string");
    if (j > 0) text += "\n";  // as the chat formatter joins text parts
    text += t->get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> parse_messages(const ojson& body) {
  const ojson* v = field(body, "messages");
  if (!v) throw FieldError("messages", "'messages' is required");
  if (!v->is_array()) throw FieldError("messages", "'messages' must be an array");
  if (v->empty()) throw FieldError("messages", "'messages' must hold at least one message");
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const ojson& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw FieldError(where, "'" + where + "' must be an object");
    ChatMessage msg;
    const ojson* role = field(m, "role");
    if (!role || !role->is_string()) throw FieldError(where + ".role", "'" + where + ".role' must be a string");
    msg.role = role->get<std::string>();
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for the system prompt
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      throw FieldError(where + ".role", "'" + where + ".role' must be one of system, developer, user, assistant, tool; got '" +
                                            msg.role + "'");
    if (const ojson* c = field(m, "content")) msg.content = part_text(*c, where + ".content");
    else if (msg.role != "assistant") throw FieldError(where + ".content", "'" + where + ".content' is required");
    // Both names clients use for an earlier turn's thinking (the answers carry both).
    for (const char* key : {"reasoning_content", "reasoning"}) {
      const ojson* rc = field(m, key);
      if (!rc) continue;
      const std::string w = where + "." + key;
      if (!rc->is_string()) throw FieldError(w, "'" + w + "' must be a string");
      if (!msg.reasoning_content) msg.reasoning_content = rc->get<std::string>();
    }
    if (const ojson* n = field(m, "name")) {
      if (!n->is_string()) throw FieldError(where + ".name", "'" + where + ".name' must be a string");
      msg.name = n->get<std::string>();
    }
    if (const ojson* id = field(m, "tool_call_id")) {
      if (!id->is_string()) throw FieldError(where + ".tool_call_id", "'" + where + ".tool_call_id' must be a string");
      msg.tool_call_id = id->get<std::string>();
    }
    if (const ojson* tc = field(m, "tool_calls")) {
      if (!tc->is_array()) throw FieldError(where + ".tool_calls", "'" + where + ".tool_calls' must be an array");
      msg.tool_calls = *tc;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::vector<std::int32_t> token_ids(const ojson& arr, const std::string& where) {
  std::vector<std::int32_t> ids;
  ids.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const ojson& t = arr[i];
    if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<std::uint64_t>() > 0x7fffffffu) || t.get<std::int64_t>() < 0 ||
        t.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max())
      throw FieldError(where + "[" + std::to_string(i) + "]", "token ids must be non-negative integers");
    ids.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
  }
  return ids;
}

std::variant<std::string, std::vector<std::int32_t>> parse_prompt(const ojson& body) {
  const ojson* v = field(body, "prompt");
  if (!v) throw FieldError("prompt", "'prompt' is required");
  if (v->is_string()) return v->get<std::string>();
  if (!v->is_array()) throw FieldError("prompt", "'prompt' must be a string, an array of token ids, or an array of one string");
  if (v->empty()) throw FieldError("prompt", "'prompt' must not be empty");
  const ojson& first = v->front();
  if (first.is_number()) return token_ids(*v, "prompt");
  if (v->size() != 1)
    throw FieldError("prompt", "batched prompts are not supported: send one prompt per request (got " + std::to_string(v->size()) + ")");
  if (first.is_string()) return first.get<std::string>();
  if (first.is_array()) {
    if (first.empty()) throw FieldError("prompt[0]", "'prompt[0]' must not be empty");
    return token_ids(first, "prompt[0]");
  }
  throw FieldError("prompt[0]", "'prompt[0]' must be a string or an array of token ids");
}

// response_format, guided_json: shared by both endpoints; a tool_choice constraint is set before this runs.
void parse_constraint(const ojson& body, OpenAiRequest& r) {
  std::optional<grammar::Constraint> c;
  std::string param;
  if (const ojson* rf = field(body, "response_format")) {
    c = parse_response_format(*rf, "response_format");
    param = "response_format";
  }
  if (const ojson* gj = field(body, "guided_json")) {
    if (c) throw FieldError("guided_json", "'guided_json' and 'response_format' both constrain the output; send one");
    c = parse_guided_json(*gj, "guided_json");
    param = "guided_json";
  }
  if (c) add_format_constraint(r, std::move(*c), param);
}

}  // namespace

std::optional<grammar::Constraint> parse_response_format(const ojson& rf, const std::string& param) {
  if (!rf.is_object()) throw FieldError(param, "'" + param + "' must be an object");
  const ojson* type = field(rf, "type");
  if (!type || !type->is_string()) throw FieldError(param + ".type", "'" + param + ".type' must be a string");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") return grammar::Constraint::json_object();
  if (t != "json_schema")
    throw FieldError(param + ".type", "'" + param + ".type' must be \"text\", \"json_object\" or \"json_schema\"; got '" + t + "'");
  const std::string where = param + ".json_schema";
  const ojson* js = field(rf, "json_schema");
  if (!js || !js->is_object()) throw FieldError(where, "'" + where + "' must be an object with a 'schema'");
  if (const ojson* n = field(*js, "name"); n && !n->is_string()) throw FieldError(where + ".name", "'" + where + ".name' must be a string");
  if (const ojson* st = field(*js, "strict"); st && !st->is_boolean())
    throw FieldError(where + ".strict", "'" + where + ".strict' must be a boolean");
  const ojson* schema = field(*js, "schema");
  if (!schema) throw FieldError(where + ".schema", "'" + where + ".schema' is required");
  if (!schema->is_object() && !schema->is_boolean())
    throw FieldError(where + ".schema", "'" + where + ".schema' must be a JSON Schema object");
  return grammar::Constraint::json_schema(*schema);
}

grammar::Constraint parse_guided_json(const ojson& v, const std::string& param) {
  if (v.is_object()) return grammar::Constraint::json_schema(v);
  if (!v.is_string()) throw FieldError(param, "'" + param + "' must be a JSON Schema (an object or its JSON text)");
  ojson schema;
  try {
    schema = parse_json<ojson>(v.get<std::string>(), "'" + param + "'");
  } catch (const Error& e) {
    throw FieldError(param, e.what());
  }
  if (!schema.is_object()) throw FieldError(param, "'" + param + "' must be a JSON Schema object");
  return grammar::Constraint::json_schema(std::move(schema));
}

grammar::Constraint tool_call_constraint(const ojson& tools, const std::string* only, const std::string& param) {
  std::vector<grammar::ToolSpec> specs;
  if (tools.is_array()) {
    for (std::size_t i = 0; i < tools.size(); ++i) {
      const std::string where = "tools[" + std::to_string(i) + "]";
      const ojson& t = tools[i];
      const ojson* fn = t.is_object() ? field(t, "function") : nullptr;
      if (!fn || !fn->is_object()) throw FieldError(where + ".function", "'" + where + ".function' must be an object");
      const ojson* name = field(*fn, "name");
      if (!name || !name->is_string() || name->get<std::string>().empty())
        throw FieldError(where + ".function.name", "'" + where + ".function.name' must be a non-empty string");
      if (only && name->get<std::string>() != *only) continue;
      const ojson* params = field(*fn, "parameters");
      if (params && !params->is_object())
        throw FieldError(where + ".function.parameters", "'" + where + ".function.parameters' must be a JSON Schema object");
      specs.push_back({name->get<std::string>(), params ? *params : ojson()});
    }
  }
  if (specs.empty()) {
    if (only) throw FieldError(param, "'" + param + "' names the function '" + *only + "', which is not among 'tools'");
    throw FieldError(param, "'" + param + "' requires a tool call, but 'tools' is empty");
  }
  return grammar::Constraint::tool_call(std::move(specs));
}

void add_format_constraint(OpenAiRequest& r, grammar::Constraint format, const std::string& param) {
  if (r.constraint) return;  // a forced tool call: the format applies to a later turn's text
  if (r.tool_calls) format.tools = tool_call_constraint(r.tools, nullptr, "tools").tools;
  r.constraint = std::move(format);
  r.constraint_param = param;
}

ojson parse_body(std::string_view body) {
  ojson j;
  try {
    j = parse_json<ojson>(body, "request body", http_errc::invalid_json);
  } catch (const Error& e) {  // a FieldError, as every other body problem is
    throw FieldError({}, e.what(), e.kind());
  }
  if (!j.is_object()) throw FieldError({}, "request body must be a JSON object", http_errc::invalid_json);
  return j;
}

OpenAiRequest parse_chat_request(const ojson& body) {
  OpenAiRequest r;
  r.kind = OpenAiRequest::Kind::chat;
  parse_common(body, r);
  r.messages = parse_messages(body);
  const bool logprobs = boolean(body, "logprobs").value_or(false);
  if (auto top = integer_in(body, "top_logprobs", 0, model::kMaxTopLogprobs)) {
    if (!logprobs) throw FieldError("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.top_logprobs = static_cast<std::int32_t>(*top);
  } else if (logprobs) {
    r.top_logprobs = 0;
  }
  if (const ojson* k = field(body, "chat_template_kwargs")) {
    if (!k->is_object()) throw FieldError("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.chat_template_kwargs = *k;
  }
  if (const ojson* t = field(body, "tools")) {
    if (!t->is_array()) throw FieldError("tools", "'tools' must be an array");
    for (std::size_t i = 0; i < t->size(); ++i)
      if (!(*t)[i].is_object()) throw FieldError("tools[" + std::to_string(i) + "]", "'tools' entries must be objects");
    r.tools = *t;
  }
  r.tool_calls = !r.tools.is_null() && !r.tools.empty();
  if (const ojson* tc = field(body, "tool_choice")) {
    // "required" and a named function force one call through constrained decoding.
    if (tc->is_object()) {
      const ojson* type = field(*tc, "type");
      const ojson* fn = field(*tc, "function");
      const ojson* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
      if (!type || *type != "function" || !name || !name->is_string())
        throw FieldError("tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      const std::string wanted = name->get<std::string>();
      r.constraint = tool_call_constraint(r.tools, &wanted, "tool_choice");
      r.constraint_param = "tool_choice";
      r.tool_calls = true;
    } else if (!tc->is_string()) {
      throw FieldError("tool_choice", "'tool_choice' must be a string or an object naming a function");
    } else {
      const std::string choice = tc->get<std::string>();
      if (choice == "none") {
        r.tool_calls = false;
      } else if (choice == "required") {
        r.constraint = tool_call_constraint(r.tools, nullptr, "tool_choice");
        r.constraint_param = "tool_choice";
        r.tool_calls = true;
      } else if (choice != "auto") {
        throw FieldError("tool_choice", "'tool_choice' must be \"none\", \"auto\" or \"required\"; got '" + choice + "'");
      }
    }
  }
  parse_constraint(body, r);
  return r;
}

OpenAiRequest parse_completion_request(const ojson& body) {
  OpenAiRequest r;
  r.kind = OpenAiRequest::Kind::completion;
  parse_common(body, r);
  r.prompt = parse_prompt(body);
  // OpenAI's legacy endpoint: logprobs N (at most 5) gives the sampled token and N alternatives.
  if (auto lp = integer_in(body, "logprobs", 0, kMaxCompletionLogprobs)) r.top_logprobs = static_cast<std::int32_t>(*lp);
  r.echo = boolean(body, "echo").value_or(false);
  // The prompt's logprobs would need logits at every prompt position, which
  // the prefix cache and chunked prefill do not keep.
  if (r.echo && r.top_logprobs >= 0) unsupported("echo", "'echo' together with 'logprobs' (prompt logprobs)");
  if (auto b = integer_in(body, "best_of", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
      b && *b != 1)
    unsupported("best_of", "'best_of' other than 1");
  if (const ojson* s = field(body, "suffix")) {
    if (!s->is_string()) throw FieldError("suffix", "'suffix' must be a string");
    if (!s->get<std::string>().empty()) unsupported("suffix", "'suffix'");
  }
  parse_constraint(body, r);
  return r;
}

}  // namespace neuron::server
