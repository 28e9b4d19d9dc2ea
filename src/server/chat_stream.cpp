#include "server/chat_stream.hpp"

namespace neuron::server {

ChatTurnShaper::ChatTurnShaper(ResponseMeta meta, bool include_usage, bool tool_calls)
    : meta_(std::move(meta)), include_usage_(include_usage), extractor_(tool_calls ? std::make_unique<ToolCallExtractor>() : nullptr) {}

std::string ChatTurnShaper::open() { return meta_.chat ? sse_event(role_chunk(meta_)) : std::string(); }

std::string ChatTurnShaper::delta(std::string_view text_in, std::string_view reasoning) {
  const std::string text = extractor_ ? extractor_->feed(text_in) : std::string(text_in);
  if (text.empty() && reasoning.empty()) return {};  // held: may be a tool call
  return sse_event(delta_chunk(meta_, text, std::string(reasoning)));
}

std::string ChatTurnShaper::close(const TurnEnd& end) {
  std::string out;
  std::string finish_reason = end.finish_reason;
  if (extractor_) {
    const ToolCallExtractor::Result rest = extractor_->finish();
    if (!rest.content.empty()) out += sse_event(delta_chunk(meta_, rest.content, {}));
    if (!rest.calls.empty()) out += sse_event(tool_calls_chunk(meta_, rest.calls));
    finish_reason = rest.finish_reason(finish_reason);
  }
  out += sse_event(finish_chunk(meta_, finish_reason));
  if (include_usage_) out += sse_event(usage_chunk(meta_, end.usage));
  out += kSseDone;
  return out;
}

std::string ChatTurnShaper::fail(const ApiError& error) { return sse_event(envelope(error)) + kSseDone; }

}  // namespace neuron::server
