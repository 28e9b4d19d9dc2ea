#include "server/openai_response.hpp"

#include <chrono>
#include <random>

#include "server/api_error.hpp"

namespace neuron::server {

using nlohmann::json;

std::string system_fingerprint() { return std::string("neuron-") + NEURON_VERSION; }

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
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.timing) j["helexa_timing"] = helexa_timing_json(*u.timing);
  return j;
}

json helexa_timing_json(const UsageTiming& t) {
  return {{"prefill_ms", t.prefill_ms}, {"decode_ms", t.decode_ms}, {"prefill_tokens", t.prefill_tokens}};
}

namespace {

json header(const ResponseMeta& meta, bool chunk) {
  const char* object = meta.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}, {"system_fingerprint", system_fingerprint()}};
}

json chunk_with(const ResponseMeta& meta, json choice) {
  json j = header(meta, true);
  j["choices"] = json::array({std::move(choice)});
  return j;
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

void set_reasoning(json& message, const std::string& reasoning) {
  if (reasoning.empty()) return;
  message["reasoning_content"] = reasoning;
  message["reasoning"] = reasoning;
}

}  // namespace

json completion_body(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices, const TokenUsage& usage) {
  json j = header(meta, false);
  json out = json::array();
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    json choice = {{"index", i}, {"finish_reason", c.finish_reason}, {"logprobs", c.logprobs}};
    if (meta.chat) {
      json message = {{"role", "assistant"}, {"content", c.content}, {"refusal", nullptr}};
      if (!c.calls.empty()) {
        if (c.content.find_first_not_of(" \t\r\n") == std::string::npos) message["content"] = nullptr;
        message["tool_calls"] = tool_calls_json(c.calls);
      }
      set_reasoning(message, c.reasoning);
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c.content;
    }
    out.push_back(std::move(choice));
  }
  j["choices"] = std::move(out);
  j["usage"] = usage_json(usage);
  return j;
}

json role_chunk(const ResponseMeta& meta, int index) {
  return chunk_with(meta, {{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
}

json delta_chunk(const ResponseMeta& meta, const std::string& content, const std::string& reasoning, int index, json logprobs) {
  json choice = {{"index", index}, {"logprobs", std::move(logprobs)}, {"finish_reason", nullptr}};
  if (meta.chat) {
    json delta = json::object();
    if (!content.empty()) delta["content"] = content;
    set_reasoning(delta, reasoning);
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = content;
  }
  return chunk_with(meta, std::move(choice));
}

json finish_chunk(const ResponseMeta& meta, const std::string& finish_reason, int index) {
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (meta.chat) choice["delta"] = json::object();
  else choice["text"] = "";
  return chunk_with(meta, std::move(choice));
}

json tool_call_deltas_chunk(const ResponseMeta& meta, const std::vector<ToolCallDelta>& deltas, int index) {
  // One entry per call index, as OpenAI sends them (clients such as LlamaIndex keep only one per index):
  // a call's announcement and the argument pieces after it in this chunk merge into one entry.
  json calls = json::array();
  for (const ToolCallDelta& d : deltas) {
    if (!d.first && !calls.empty() && calls.back()["index"] == d.index) {
      calls.back()["function"]["arguments"] = calls.back()["function"]["arguments"].get<std::string>() + d.arguments;
    } else if (d.first) {
      calls.push_back({{"index", d.index}, {"id", d.id}, {"type", "function"}, {"function", {{"name", d.name}, {"arguments", d.arguments}}}});
    } else {
      calls.push_back({{"index", d.index}, {"function", {{"arguments", d.arguments}}}});
    }
  }
  return chunk_with(meta, {{"index", index}, {"delta", {{"tool_calls", std::move(calls)}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
}

json usage_chunk(const ResponseMeta& meta, const TokenUsage& usage) {
  json j = header(meta, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return j;
}

std::string sse_event(const json& payload) { return "data: " + dump(payload) + "\n\n"; }

}  // namespace neuron::server
