#include "server/xml_tool_call.hpp"

#include <algorithm>

#include "chat/tool_call_format.hpp"

#include "util/json_parse.hpp"
#include "util/text.hpp"

namespace neuron::server {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kFunction = "<function=";
constexpr std::string_view kParameter = "<parameter=";
constexpr std::string_view kEndFunction = "</function>";
constexpr std::string_view kEndParameter = "</parameter>";


std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// JSON text of a value, keys in the order written (api_error.hpp's dump() takes nlohmann::json, which
// sorts them); invalid UTF-8 from the model becomes U+FFFD, as there.
std::string dump_ordered(const ordered_json& v) { return v.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

std::string_view trim_space(std::string_view s) {
  const std::size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

ParameterTypes::ParameterTypes(const ordered_json& tools) {
  if (!tools.is_array()) return;
  for (const ordered_json& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const ordered_json& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) continue;
    auto& params = tools_[fn["name"].get<std::string>()];
    if (!fn.contains("parameters") || !fn["parameters"].is_object()) continue;
    const ordered_json& schema = fn["parameters"];
    if (!schema.contains("properties") || !schema["properties"].is_object()) continue;
    for (const auto& [name, prop] : schema["properties"].items()) {
      Kinds k;
      k.text = !chat::qwen3_coder_value_is_json(prop);
      if (!k.text) {
        const ordered_json& type = prop["type"];
        k.boolean = type == "boolean" || (type.is_array() && std::find(type.begin(), type.end(), "boolean") != type.end());
      }
      params[name] = k;
    }
  }
}

std::string ParameterTypes::json_value(const std::string& function, const std::string& param, const std::string& text) const {
  Kinds k;
  if (const auto f = tools_.find(function); f != tools_.end())
    if (const auto p = f->second.find(param); p != f->second.end()) k = p->second;
  if (k.text) return dump_ordered(ordered_json(text));
  if (k.boolean) {
    const std::string word = ascii_lower(trim_space(text));
    if (word == "true" || word == "false") return word;
  }
  try {
    return dump_ordered(parse_json<ordered_json>(text, "a tool call's parameter"));
  } catch (const Error&) {
    return dump_ordered(ordered_json(text));  // not JSON after all: the model's text, as written
  }
}

XmlCallReader::Step XmlCallReader::fail(char c) {
  tag_ += c;
  state_ = State::done;
  return Step::fail;
}

void XmlCallReader::end_parameter(const ParameterTypes& types, std::string& arguments) {
  std::string_view v(value_);
  v.remove_suffix(kEndParameter.size());
  if (v.starts_with('\n')) v.remove_prefix(1);
  if (v.ends_with('\n')) v.remove_suffix(1);
  arguments += any_param_ ? "," : "{";
  any_param_ = true;
  arguments += dump_ordered(ordered_json(param_));
  arguments += ':';
  arguments += types.json_value(name_, param_, std::string(v));
  value_.clear();
  state_ = State::body;
}

XmlCallReader::Step XmlCallReader::feed(char c, const ParameterTypes& types, std::string& arguments) {
  switch (state_) {
    case State::open:
      if (tag_.empty() && util::is_json_space(c)) return Step::more;
      if (c != kFunction[tag_.size()]) return fail(c);
      tag_ += c;
      if (tag_.size() == kFunction.size()) state_ = State::function_name;
      return Step::more;
    case State::function_name:
    case State::parameter_name: {
      const bool function = state_ == State::function_name;
      const std::size_t prefix = function ? kFunction.size() : kParameter.size();
      if (c == '<' || c == '\n') return fail(c);
      if (c != '>') {
        tag_ += c;
        return Step::more;
      }
      if (tag_.size() == prefix) return fail(c);  // no name
      (function ? name_ : param_) = tag_.substr(prefix);
      tag_.clear();
      state_ = function ? State::body : State::value;
      return function ? Step::announce : Step::more;
    }
    case State::body: {
      if (tag_.empty() && util::is_json_space(c)) return Step::more;
      tag_ += c;
      if (tag_ == kParameter) {
        state_ = State::parameter_name;
        return Step::more;
      }
      if (tag_ == kEndFunction) {
        arguments += any_param_ ? "}" : "{}";
        tag_.clear();
        state_ = State::done;
        return Step::done;
      }
      if (kParameter.starts_with(tag_) || kEndFunction.starts_with(tag_)) return Step::more;
      tag_.pop_back();
      return fail(c);
    }
    case State::value:
      value_ += c;
      if (std::string_view(value_).ends_with(kEndParameter)) end_parameter(types, arguments);
      return Step::more;
    case State::done:
      break;
  }
  return fail(c);
}

void XmlCallReader::skip_function_tag() {
  tag_ = kFunction;
  state_ = State::function_name;
}

std::string XmlCallReader::close() { return any_param_ ? "}" : "{}"; }

}  // namespace neuron::server
