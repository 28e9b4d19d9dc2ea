#include "loadgen/completion_stream.hpp"

#include <nlohmann/json.hpp>

namespace neuron::loadgen {
namespace {

using nlohmann::json;

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string clip(std::string_view s, std::size_t n = 300) {
  return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

bool non_empty_string(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

}  // namespace

void CompletionStream::on_bytes(std::string_view bytes, Clock::time_point now) {
  events_.clear();
  parser_.feed(bytes, events_);
  for (const auto& e : events_) on_event(e, now);
}

void CompletionStream::on_event(const SseEvent& e, Clock::time_point now) {
  if (!error_.empty()) return;
  if (done_) {
    error_ = "data after [DONE]: " + clip(e.data);
    return;
  }
  if (e.data == "[DONE]") {
    done_ = true;
    return;
  }
  json chunk = json::parse(e.data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    error_ = "malformed chunk: " + clip(e.data);
    return;
  }
  if (e.event == "error" || chunk.contains("error")) {
    const json& err = chunk.contains("error") ? chunk["error"] : chunk;
    const json* message = err.is_object() && err.contains("message") ? &err["message"] : nullptr;
    error_ = "error event: " + (message && message->is_string() ? message->get<std::string>() : clip(err.dump()));
    return;
  }
  if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
    if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer()) usage_completion_ = c->get<std::int64_t>();
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer()) usage_prompt_ = p->get<std::int64_t>();
  }
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;  // e.g. the usage chunk
  const json& choice = (*choices)[0];
  if (!choice.is_object()) return;
  bool content = non_empty_string(choice, "text");
  if (auto d = choice.find("delta"); d != choice.end() && d->is_object())
    content = content || non_empty_string(*d, "content") || non_empty_string(*d, "reasoning_content");
  if (content) {
    ++chunks_;
    if (!first_content_) first_content_ = now;
    last_content_ = now;
  }
  if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) finish_reason_ = true;
}

RequestRecord CompletionStream::finish(Clock::time_point now, std::int64_t expected_tokens) const {
  RequestRecord r;
  r.latency_ms = ms(now - sent_);
  r.content_chunks = chunks_;
  r.tokens_from_usage = usage_completion_.has_value();
  r.output_tokens = usage_completion_.value_or(chunks_);
  r.prompt_tokens = usage_prompt_.value_or(-1);
  if (first_content_) {
    r.ttft_ms = ms(*first_content_ - sent_);
    if (r.output_tokens >= 2) r.tpot_ms = ms(*last_content_ - *first_content_) / static_cast<double>(r.output_tokens - 1);
  }
  if (!error_.empty()) r.error = error_;
  else if (!done_ && parser_.has_partial()) r.error = "truncated stream: ended inside an event";
  else if (!done_) r.error = "truncated stream: no data: [DONE]";
  else if (!finish_reason_) r.error = "no chunk carried a finish_reason";
  else if (chunks_ == 0) r.error = "no chunk carried content";
  else if (expected_tokens > 0 && r.output_tokens != expected_tokens)
    r.error = "generated " + std::to_string(r.output_tokens) + " tokens, asked for " + std::to_string(expected_tokens) +
              (r.tokens_from_usage ? " (usage)" : " (content chunks)");
  r.ok = r.error.empty();
  return r;
}

}  // namespace neuron::loadgen
