#pragma once
// Tool calls in a Qwen3 answer. Given `tools`, Qwen3 (like other Hermes-style
// templates) writes each call into its content as
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
// and OpenAI clients expect them as message.tool_calls with finish_reason
// "tool_calls". ToolCallExtractor separates the two while the text streams:
// content before the first <tool_call> goes out as it arrives (minus a tail
// that may be the start of the tag), everything from the tag on is held and
// parsed at the end. Held text that does not parse as calls (a call cut off
// by max_tokens, invalid JSON, no "name") is given back as plain content, so
// nothing the model wrote is ever lost.
#include <string>
#include <string_view>
#include <vector>

namespace neuron::server {

struct ToolCall {
  std::string id;         // "call_" + 24 hex digits
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's function.arguments)
};

class ToolCallExtractor {
 public:
  // Content text as it arrives; returns what can be sent as content now.
  std::string feed(std::string_view text);

  struct Result {
    std::string content;  // held text that is content after all (may be empty)
    std::vector<ToolCall> calls;
    // The engine's finish reason as the client sees it: "tool_calls" when a
    // generation that stopped by itself ended in calls.
    std::string finish_reason(const std::string& engine_reason) const {
      return !calls.empty() && engine_reason == "stop" ? "tool_calls" : engine_reason;
    }
  };
  // At the end of the generation: the rest.
  Result finish();

  // A whole answer at once: all of its content, and its calls.
  static Result split(std::string_view text);

 private:
  std::string held_;
  bool in_calls_ = false;  // a <tool_call> tag has been seen
};

}  // namespace neuron::server
