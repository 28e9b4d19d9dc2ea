#pragma once
// One tool call in the Qwen3-Coder / Qwen3.5 syntax (chat::ToolCallFormat::
// qwen3_coder), read a character at a time after its <tool_call> tag:
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   <parameter=days>
//   3
//   </parameter>
//   </function>
// Blank text may come before <function=, between parameters and before
// </function>. A value is the raw text up to </parameter>, less one newline
// after the opening tag and one before the closing tag (what the template
// writes around it), so it may span lines and hold any characters. Names end
// at '>' and hold no '<', '>' or newline.
//
// The arguments are built as a compact JSON object as the parameters end
// ({"city":"Paris","days":3}): each value's JSON is decided by the tool's
// parameters schema (ParameterTypes), the same decision vLLM's qwen3_coder
// parser makes, because the model writes every value as text.
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace neuron::server {

// How each tool's parameter values become JSON, from the tools' schemas.
// A value is kept as a JSON string unless the parameter's schema declares
// only types other than "string" (chat::qwen3_coder_value_is_json; a tool or
// parameter not in the schemas is a string); then (integer, number, boolean,
// object, array, null) it is parsed as JSON, and kept as a string when it
// does not parse.
// A boolean parameter also reads True / False (any case): the template
// itself renders a past call's boolean with Python's str().
class ParameterTypes {
 public:
  ParameterTypes() = default;
  // `tools`: OpenAI chat tools, [{"type": "function", "function": {"name",
  // "parameters": {"properties": {...}}}}]; entries of another shape are
  // skipped (the request parser refuses them first).
  explicit ParameterTypes(const nlohmann::ordered_json& tools);

  // The JSON text of parameter `param` of `function` written as `text`.
  std::string json_value(const std::string& function, const std::string& param, const std::string& text) const;

 private:
  struct Kinds {
    bool text = true;      // kept as a string
    bool boolean = false;  // "boolean" is among the declared types
  };
  std::map<std::string, std::map<std::string, Kinds>> tools_;  // function -> parameter -> how its value is read
};

class XmlCallReader {
 public:
  enum class Step {
    more,      // keep feeding
    announce,  // the function's name is read (name()): the call is one
    done,      // </function> closed it
    fail,      // the text is not (or no longer) a call; unread() is what the reader held
  };

  // One character; argument text that is ready is appended to `arguments`
  // (the first parameter "{...", each next one ",...", the end "}"), its
  // values read by `types`.
  Step feed(char c, const ParameterTypes& types, std::string& arguments);
  // The caller has read "<function=" itself (a call not wrapped in <tool_call>): the name comes next.
  void skip_function_tag();
  const std::string& name() const noexcept { return name_; }
  // After fail: the text of the tag being matched when it failed, the failing character included.
  const std::string& unread() const noexcept { return tag_; }
  // The text that closes the arguments of a call cut off (or given up)
  // after its announcement: parameters not finished are left out, so the
  // arguments are always a JSON object.
  std::string close();

 private:
  enum class State { open, function_name, body, parameter_name, value, done };
  Step fail(char c);
  void end_parameter(const ParameterTypes& types, std::string& arguments);

  State state_ = State::open;
  std::string tag_;    // the tag being matched (open, body), or a name being read
  std::string name_;   // the function's
  std::string param_;  // the parameter being read
  std::string value_;  // its text so far
  bool any_param_ = false;
};

}  // namespace neuron::server
