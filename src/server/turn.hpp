#pragma once
// One generated assistant turn, independent of the API that asked for it.
// The Api's generation core (api.cpp: render the chat template, submit to the
// engine, read the Channel, cancel on disconnect) is shared by
// /v1/chat/completions, /v1/responses and /v1/messages; what differs is only
// the shape of the answer:
//   - blocking: the core collects a Turn and the route shapes its body;
//   - streaming: the core drives a TurnShaper, which turns deltas and the end
//     into that API's server-sent events.
// Shapers are plain objects (text in, SSE bytes out), so tests feed them a
// scripted stream of deltas, tool calls included, without a model.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.hpp"
#include "server/openai_response.hpp"
#include "server/tool_calls.hpp"

namespace neuron::server {

// How a generation ended (the engine's done event, plus what the core derives).
struct TurnEnd {
  std::string finish_reason;  // the engine's: "stop" | "length" | "cancelled"
  TokenUsage usage;
  // Generated tokens whose deltas carried reasoning text (<think> body); an
  // approximation at a delta's granularity (a delta that ends the reasoning
  // and starts the answer counts as reasoning).
  std::int32_t reasoning_tokens = 0;
  // The request's stop string that ended the generation, if one did (finish "stop").
  std::optional<std::string> stop_sequence;
};

// A whole turn, for blocking answers. With tool parsing on, `content` is the
// text outside the calls (ToolCallExtractor::split) and `calls` the calls.
struct Turn {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> calls;
  TurnEnd end;
};

// A streaming answer's bytes. The core calls open() once, delta() for every
// engine delta (in order), then exactly one of close() or fail(); each returns
// the SSE bytes to send (possibly none).
class TurnShaper {
 public:
  virtual ~TurnShaper() = default;
  virtual std::string open() = 0;
  virtual std::string delta(std::string_view text, std::string_view reasoning) = 0;
  virtual std::string close(const TurnEnd& end) = 0;
  virtual std::string fail(const ApiError& error) = 0;
};

// Tool calls out of a streamed turn, for shapers that send each call whole
// once the turn ends (Responses' function_call items, Messages' tool_use
// blocks): content goes out as it arrives, the calls come at finish(), their
// streamed pieces (ToolCallDelta) joined. The one place those shapers meet
// ToolCallExtractor's streaming interface.
class WholeToolCalls {
 public:
  explicit WholeToolCalls(const ToolCallSyntax& syntax) : extractor_(syntax) {}
  std::string feed(std::string_view text);  // content to send now
  ToolCallExtractor::Result finish();       // the rest of the content, and the calls

 private:
  void join(const std::vector<ToolCallDelta>& deltas);

  ToolCallExtractor extractor_;
  std::vector<ToolCall> calls_;  // announced so far, arguments as read
};

// "event: <name>\ndata: <json>\n\n" (the Responses and Messages APIs name their events).
std::string sse_named_event(std::string_view name, const nlohmann::json& payload);

}  // namespace neuron::server
