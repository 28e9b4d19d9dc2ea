#include "server/openai_response.hpp"

#include <chrono>
#include <random>

#include "server/api_error.hpp"

namespace neuron::server {

using nlohmann::json;

std::string new_random_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

std::string new_completion_id(bool chat) { return new_random_id(chat ? "chatcmpl-" : "cmpl-"); }

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json usage_json(const TokenUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {

json header(const ResponseMeta& meta, bool chunk) {
  const char* object = meta.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}, {"system_fingerprint", nullptr}};
}

json chunk_with(const ResponseMeta& meta, json choice) {
  json j = header(meta, true);
  j["choices"] = json::array({std::move(choice)});
  return j;
}

json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  json out = json::array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", calls[i].id}, {"type", "function"}, {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

json completion_body(const ResponseMeta& meta, const std::string& content, const std::string& reasoning,
                     const std::string& finish_reason, const TokenUsage& usage, const std::vector<ToolCall>& calls) {
  json j = header(meta, false);
  json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (meta.chat) {
    json message = {{"role", "assistant"}, {"content", content}};
    if (!calls.empty()) {
      if (content.find_first_not_of(" \t\r\n") == std::string::npos) message["content"] = nullptr;
      message["tool_calls"] = tool_calls_json(calls, false);
    }
    if (!reasoning.empty()) message["reasoning_content"] = reasoning;
    choice["message"] = std::move(message);
  } else {
    choice["text"] = content;
  }
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return j;
}

json role_chunk(const ResponseMeta& meta) {
  return chunk_with(meta, {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
}

json delta_chunk(const ResponseMeta& meta, const std::string& content, const std::string& reasoning) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (meta.chat) {
    json delta = json::object();
    if (!content.empty()) delta["content"] = content;
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = content;
  }
  return chunk_with(meta, std::move(choice));
}

json finish_chunk(const ResponseMeta& meta, const std::string& finish_reason) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (meta.chat) choice["delta"] = json::object();
  else choice["text"] = "";
  return chunk_with(meta, std::move(choice));
}

json tool_calls_chunk(const ResponseMeta& meta, const std::vector<ToolCall>& calls) {
  return chunk_with(meta, {{"index", 0}, {"delta", {{"tool_calls", tool_calls_json(calls, true)}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
}

json usage_chunk(const ResponseMeta& meta, const TokenUsage& usage) {
  json j = header(meta, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return j;
}

std::string sse_event(const json& payload) { return "data: " + dump(payload) + "\n\n"; }

}  // namespace neuron::server
