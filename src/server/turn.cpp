#include "server/turn.hpp"

namespace neuron::server {

std::string WholeToolCalls::feed(std::string_view text) {
  ToolCallExtractor::Output out = extractor_.feed(text);
  join(out.deltas);
  return std::move(out.content);
}

ToolCallExtractor::Result WholeToolCalls::finish() {
  ToolCallExtractor::Output rest = extractor_.finish();
  join(rest.deltas);
  return {std::move(rest.content), std::move(calls_)};
}

void WholeToolCalls::join(const std::vector<ToolCallDelta>& deltas) {
  for (const ToolCallDelta& d : deltas) {
    if (d.first) calls_.push_back(ToolCall{d.id, d.name, {}});
    if (d.index < calls_.size()) calls_[d.index].arguments += d.arguments;  // announced before its arguments
  }
}

std::string sse_named_event(std::string_view name, const nlohmann::json& payload) {
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  out += dump(payload);
  out += "\n\n";
  return out;
}

}  // namespace neuron::server
