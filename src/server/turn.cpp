#include "server/turn.hpp"

namespace neuron::server {

std::string WholeToolCalls::feed(std::string_view text) { return extractor_.feed(text); }

ToolCallExtractor::Result WholeToolCalls::finish() { return extractor_.finish(); }

std::string sse_named_event(std::string_view name, const nlohmann::json& payload) {
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  out += dump(payload);
  out += "\n\n";
  return out;
}

}  // namespace neuron::server
