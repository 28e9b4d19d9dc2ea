#pragma once
// Tool calls in a model's answer, in the format its chat template teaches
// (chat::ToolCallFormat). Given `tools`, Qwen3 (like other Hermes-style
// templates) writes each call into its content as
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
// Llama 3.x answers with the call itself (llama_json):
//   {"name": "get_weather", "parameters": {"city": "Paris"}}
// and Qwen3-Coder / Qwen3.5 tag an XML-like call (qwen3_coder,
// server/xml_tool_call.hpp), whose parameter values are typed by the tools'
// schemas:
//   <tool_call>
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   </function>
//   </tool_call>
// OpenAI clients expect them as message.tool_calls with finish_reason
// "tool_calls", or, streamed, as incremental deltas: a call's first delta has
// its index, id, type, function.name and arguments "", the next ones
// fragments of function.arguments as the model writes them.
//
// ToolCallExtractor separates content and calls while the text streams, with
// a small incremental scanner of the call object (strings, escapes and
// nesting; values it does not need are skipped):
//  - hermes, qwen3_coder: content before a <tool_call> goes out as it
//    arrives (minus a tail that may be the start of the tag); llama_json: a call can only
//    begin the answer (after blanks) or follow a call and a ';', so an
//    answer whose first other character is not '{' streams as content;
//  - a call is announced once its "name" is read and its arguments value
//    ("arguments"; llama_json also "parameters") has begun (hermes: or the
//    object ended without one: arguments "{}"); until then its text is held,
//    and text that turns out not to be a call (not an object, no name,
//    llama_json: no arguments, cut off, bad syntax) is given back as
//    content, so nothing the model wrote is lost; qwen3_coder: a call is
//    announced once <function=NAME> is read, and text before that which is
//    not the call's syntax is given back the same way; a <function=...>
//    call the model did not wrap in <tool_call> is read too (as vLLM's
//    qwen3_coder parser reads it);
//  - an announced call's arguments stream verbatim (the model's JSON text;
//    arguments written as a JSON string are sent decoded, whole); a call cut
//    off after its announcement stays a call (its finish reason "length");
//    qwen3_coder: each parameter goes out once its </parameter> is read, and
//    a call cut off or broken after its announcement is closed with the
//    parameters it finished, so its arguments are always a JSON object;
//  - blank text between and after calls is dropped; other text after a call
//    is content.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_call_format.hpp"
#include "server/xml_tool_call.hpp"

namespace neuron::server {

struct ToolCall {
  std::string id;         // "call_" + 24 hex digits
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's function.arguments)
};

// One streamed piece of a call (OpenAI's delta.tool_calls[]).
struct ToolCallDelta {
  std::size_t index = 0;  // the call's position in this answer
  bool first = false;     // the announcement: id and name set, arguments ""
  std::string id, name;
  std::string arguments;  // a fragment (empty on the first delta)
};

// How one request's tool calls are read: the model's format (its chat
// template's) and, for qwen3_coder, the types of the request's tools' parameters.
struct ToolCallSyntax {
  chat::ToolCallFormat format = chat::ToolCallFormat::hermes;
  ParameterTypes types;
};

class ToolCallExtractor {
 public:
  // `types`: how qwen3_coder parameter values become JSON (the request's tools).
  explicit ToolCallExtractor(chat::ToolCallFormat format = chat::ToolCallFormat::hermes, ParameterTypes types = {});
  explicit ToolCallExtractor(const ToolCallSyntax& syntax) : ToolCallExtractor(syntax.format, syntax.types) {}

  struct Output {
    std::string content;                // text to send as content now
    std::vector<ToolCallDelta> deltas;  // call pieces to send now, in order
    bool empty() const noexcept { return content.empty() && deltas.empty(); }
  };
  // Content text as it arrives.
  Output feed(std::string_view text);
  // At the end of the generation: what was held.
  Output finish();

  bool has_calls() const noexcept { return calls_ > 0; }
  // The engine's finish reason as the client sees it: "tool_calls" when a
  // generation that stopped by itself made calls.
  std::string finish_reason(const std::string& engine_reason) const {
    return has_calls() && engine_reason == "stop" ? "tool_calls" : engine_reason;
  }

  // A whole answer at once (blocking responses): its content, and its calls
  // with their deltas joined, so both paths give the same calls.
  struct Result {
    std::string content;
    std::vector<ToolCall> calls;
    std::string finish_reason(const std::string& engine_reason) const {
      return !calls.empty() && engine_reason == "stop" ? "tool_calls" : engine_reason;
    }
  };
  static Result split(std::string_view text, chat::ToolCallFormat format = chat::ToolCallFormat::hermes,
                      ParameterTypes types = {});
  static Result split(std::string_view text, const ToolCallSyntax& syntax) { return split(text, syntax.format, syntax.types); }

 private:
  // content: hermes / qwen3_coder text between calls; opening: llama_json
  // blanks before a call (held); call: inside a call; closing: after one
  // (hermes, qwen3_coder: </tool_call>; llama_json: ';' or the end);
  // passthrough: the rest is content.
  enum class Mode { content, opening, call, closing, passthrough };
  enum class Obj { open, key_start, key, after_key, value_start, value, after_value };
  enum class Target { skip, name, arguments_stream, arguments_string };
  // Scans one JSON value a character at a time.
  struct ValueScan {
    enum class Step { more, done, done_before, fail };
    Step feed(char c);
    bool started = false, in_string = false, escape = false;
    char kind = 0;  // '"' string, '{' container, 's' scalar
    int depth = 0;
  };

  void content(std::string_view text, Output& out);
  void call_char(char c, Output& out);
  void xml_char(char c, Output& out);  // one character of a qwen3_coder call
  void step(char c, Output& out);        // one character of the call object
  void object_end(char c, Output& out);  // its closing brace
  // `c` shows the text is not (or no longer) a call: held text back to
  // content, and everything after passes through as content.
  void fail_call(char c, Output& out);
  void announce(Output& out);
  void start_call(std::string raw);  // `raw`: the call's text so far (its tag, or blanks)
  bool is_arguments_key(const std::string& key) const;
  void flush_fragment(Output& out);

  chat::ToolCallFormat format_;
  ParameterTypes types_;  // qwen3_coder
  Mode mode_;
  std::string held_;        // content mode: a tail that may start <tool_call>; opening mode: blanks
  std::string held_blank_;  // blank text after a call (dropped unless other text follows)
  bool after_call_ = false;
  std::size_t calls_ = 0;  // calls announced

  // The call being read.
  std::string raw_;      // its text since the tag, given back if it is not a call
  Obj obj_ = Obj::open;
  bool any_key_ = false;
  std::string key_raw_, value_raw_;
  ValueScan scan_;
  Target target_ = Target::skip;
  std::string name_;
  bool have_name_ = false, args_started_ = false, announced_ = false;
  std::string args_pending_;  // arguments read before the name
  std::string fragment_;      // arguments to send with this feed
  std::size_t close_matched_ = 0;  // closing mode (hermes, qwen3_coder): chars of </tool_call> seen
  XmlCallReader xml_;              // qwen3_coder: the call being read
  bool bare_ = false;              // qwen3_coder: it began at <function= without <tool_call>
};

}  // namespace neuron::server
