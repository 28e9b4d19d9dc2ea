#include "server/tool_calls.hpp"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "server/openai_response.hpp"
#include "util/json_parse.hpp"
#include "util/text.hpp"

namespace neuron::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kBareFunction = "<function=";  // qwen3_coder: a call the model did not wrap in <tool_call>
constexpr std::string_view kClose = "</tool_call>";

// Length of the longest suffix of `text` that is a proper prefix of `tag`.
std::size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (std::size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}


// A complete JSON string literal's value; nullopt when it is not one.
std::optional<std::string> decode_string(const std::string& literal) {
  try {
    auto j = parse_json<nlohmann::json>(literal, "tool call string");
    if (j.is_string()) return j.get<std::string>();
  } catch (const Error&) {
  }
  return std::nullopt;
}

}  // namespace

ToolCallExtractor::ToolCallExtractor(chat::ToolCallFormat format, ParameterTypes types)
    : format_(format), types_(std::move(types)), mode_(format == chat::ToolCallFormat::llama_json ? Mode::opening : Mode::content) {}

bool ToolCallExtractor::is_arguments_key(const std::string& key) const {
  return key == "arguments" || (format_ == chat::ToolCallFormat::llama_json && key == "parameters");
}

ToolCallExtractor::ValueScan::Step ToolCallExtractor::ValueScan::feed(char c) {
  if (!started) {
    started = true;
    if (c == '"') {
      kind = '"';
      in_string = true;
      return Step::more;
    }
    if (c == '{' || c == '[') {
      kind = '{';
      depth = 1;
      return Step::more;
    }
    if (c == '-' || std::isalnum(static_cast<unsigned char>(c))) {
      kind = 's';
      return Step::more;
    }
    return Step::fail;
  }
  if (in_string) {
    if (escape) {
      escape = false;
    } else if (c == '\\') {
      escape = true;
    } else if (c == '"') {
      in_string = false;
      if (kind == '"') return Step::done;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      return Step::fail;  // raw control characters are not JSON
    }
    return Step::more;
  }
  if (kind == '{') {
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;  // a counter, never recursion: any nesting the model writes is just text to pass on
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return Step::done;
    }
    return Step::more;
  }
  // A number or a literal (true, false, null): ends at the first other character.
  if (std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.') return Step::more;
  return Step::done_before;
}

ToolCallExtractor::Output ToolCallExtractor::feed(std::string_view text) {
  Output out;
  std::size_t i = 0;
  while (i < text.size()) {
    switch (mode_) {
      case Mode::content: {
        // Look for the tag in what was held plus the new text.
        std::string buf = std::move(held_);
        held_.clear();
        const std::size_t from_held = buf.size();
        buf.append(text.substr(i));
        const bool xml = format_ == chat::ToolCallFormat::qwen3_coder;
        std::size_t at = buf.find(kOpen);
        std::string_view tag = kOpen;
        if (const auto bare = xml ? buf.find(kBareFunction) : std::string::npos; bare < at) {
          at = bare;
          tag = kBareFunction;
        }
        if (at != std::string::npos) {
          content(std::string_view(buf).substr(0, at), out);
          i += at + tag.size() - from_held;
          start_call(std::string(tag));
          if (tag == kBareFunction) {
            bare_ = true;
            xml_.skip_function_tag();
          }
          continue;
        }
        const std::size_t keep = std::max(partial_tag_suffix(buf, kOpen), xml ? partial_tag_suffix(buf, kBareFunction) : 0);
        content(std::string_view(buf).substr(0, buf.size() - keep), out);
        held_ = buf.substr(buf.size() - keep);
        i = text.size();
        break;
      }
      case Mode::opening: {
        // llama_json: blanks are held; '{' may begin a call, anything else makes the rest content.
        const char c = text[i];
        if (util::is_json_space(c)) {
          held_ += c;
          ++i;
          break;
        }
        std::string raw = std::move(held_);
        held_.clear();
        if (c == '{') {
          start_call(std::move(raw));
          break;  // the brace is read as the call's first character
        }
        mode_ = Mode::passthrough;
        content(raw, out);
        break;
      }
      case Mode::call:
      case Mode::closing:
        call_char(text[i++], out);
        break;
      case Mode::passthrough:
        content(text.substr(i), out);
        i = text.size();
        break;
    }
  }
  flush_fragment(out);
  return out;
}

ToolCallExtractor::Output ToolCallExtractor::finish() {
  Output out;
  switch (mode_) {
    case Mode::content:
    case Mode::opening:
      content(held_, out);
      held_.clear();
      break;
    case Mode::call:
      if (!announced_) content(raw_, out);  // never became a call: the model's text, as written
      else if (format_ == chat::ToolCallFormat::qwen3_coder) fragment_ += xml_.close();
      flush_fragment(out);  // else a call cut off: it stays one
      break;
    case Mode::closing:
    case Mode::passthrough:
      break;
  }
  mode_ = Mode::passthrough;
  return out;
}

// Content, except that blank text right after a call is held (and dropped
// unless other text follows).
void ToolCallExtractor::content(std::string_view text, Output& out) {
  if (text.empty()) return;
  if (!after_call_) {
    out.content.append(text);
    return;
  }
  held_blank_.append(text);
  if (util::is_blank(held_blank_)) return;
  out.content += held_blank_;
  held_blank_.clear();
  after_call_ = false;
}

void ToolCallExtractor::start_call(std::string raw) {
  mode_ = Mode::call;
  held_blank_.clear();
  raw_ = std::move(raw);
  obj_ = Obj::open;
  any_key_ = false;
  key_raw_.clear();
  value_raw_.clear();
  name_.clear();
  have_name_ = args_started_ = announced_ = false;
  args_pending_.clear();
  fragment_.clear();
  close_matched_ = 0;
  xml_ = XmlCallReader();
  bare_ = false;
}

void ToolCallExtractor::announce(Output& out) {
  if (announced_) return;
  announced_ = true;
  out.deltas.push_back(ToolCallDelta{calls_, true, new_random_id("call_"), name_, ""});
  ++calls_;
  fragment_ += args_pending_;
  args_pending_.clear();
}

void ToolCallExtractor::flush_fragment(Output& out) {
  if (fragment_.empty() || !announced_) return;
  out.deltas.push_back(ToolCallDelta{calls_ - 1, false, {}, {}, std::move(fragment_)});
  fragment_.clear();
}

void ToolCallExtractor::fail_call(char c, Output& out) {
  if (announced_) {
    flush_fragment(out);
    mode_ = Mode::passthrough;
    after_call_ = true;  // what follows is content (blank text dropped)
    content(std::string(1, c), out);
    return;
  }
  mode_ = Mode::passthrough;
  content(raw_, out);  // raw_ ends with c
}

void ToolCallExtractor::call_char(char c, Output& out) {
  if (mode_ == Mode::closing) {
    if (close_matched_ == 0 && util::is_json_space(c)) return;
    if (format_ == chat::ToolCallFormat::llama_json && c == ';') {
      mode_ = Mode::opening;  // another call may follow
      after_call_ = true;     // if none does, blank text is dropped and other text is content
      return;
    }
    if (format_ != chat::ToolCallFormat::llama_json && c == kClose[close_matched_]) {
      if (++close_matched_ == kClose.size()) {
        mode_ = Mode::content;
        after_call_ = true;
      }
      return;
    }
    mode_ = Mode::passthrough;
    after_call_ = true;
    content(std::string(kClose.substr(0, close_matched_)) + c, out);
    return;
  }
  if (!announced_) raw_ += c;
  if (format_ == chat::ToolCallFormat::qwen3_coder) return xml_char(c, out);
  step(c, out);
}

void ToolCallExtractor::xml_char(char c, Output& out) {
  switch (xml_.feed(c, types_, announced_ ? fragment_ : args_pending_)) {
    case XmlCallReader::Step::more:
      return;
    case XmlCallReader::Step::announce:
      name_ = xml_.name();
      return announce(out);
    case XmlCallReader::Step::done:
      flush_fragment(out);
      if (bare_) {  // no </tool_call> to wait for
        mode_ = Mode::content;
        after_call_ = true;
        return;
      }
      mode_ = Mode::closing;
      close_matched_ = 0;
      return;
    case XmlCallReader::Step::fail:
      if (!announced_) {
        mode_ = Mode::passthrough;
        return content(raw_, out);  // raw_ ends with c
      }
      // A broken call after its announcement: it ends with what it finished, and the rest is content.
      fragment_ += xml_.close();
      flush_fragment(out);
      mode_ = Mode::passthrough;
      after_call_ = true;
      return content(xml_.unread(), out);
  }
}

void ToolCallExtractor::step(char c, Output& out) {
  switch (obj_) {
    case Obj::open:
      if (util::is_json_space(c)) return;
      if (c != '{') return fail_call(c, out);
      obj_ = Obj::key_start;
      return;
    case Obj::key_start:
      if (util::is_json_space(c)) return;
      if (c == '}' && !any_key_) return object_end(c, out);
      if (c != '"') return fail_call(c, out);
      any_key_ = true;
      scan_ = ValueScan{};
      scan_.feed(c);
      key_raw_ = c;
      obj_ = Obj::key;
      return;
    case Obj::key: {
      const ValueScan::Step s = scan_.feed(c);
      if (s == ValueScan::Step::fail) return fail_call(c, out);
      key_raw_ += c;
      if (s == ValueScan::Step::done) obj_ = Obj::after_key;
      return;
    }
    case Obj::after_key:
      if (util::is_json_space(c)) return;
      if (c != ':') return fail_call(c, out);
      obj_ = Obj::value_start;
      return;
    case Obj::value_start: {
      if (util::is_json_space(c)) return;
      const std::optional<std::string> key = decode_string(key_raw_);
      if (!key) return fail_call(c, out);
      target_ = Target::skip;
      if (*key == "name" && !have_name_) {
        if (c != '"') return fail_call(c, out);
        target_ = Target::name;
      } else if (is_arguments_key(*key) && !args_started_) {
        target_ = c == '"' ? Target::arguments_string : Target::arguments_stream;
        args_started_ = true;
        if (have_name_) announce(out);  // the arguments begin: the call is one
      }
      scan_ = ValueScan{};
      value_raw_.clear();
      obj_ = Obj::value;
      return step(c, out);
    }
    case Obj::value: {
      const ValueScan::Step s = scan_.feed(c);
      if (s == ValueScan::Step::fail) return fail_call(c, out);
      if (s != ValueScan::Step::done_before) {
        if (target_ == Target::arguments_stream) (announced_ ? fragment_ : args_pending_) += c;
        else if (target_ != Target::skip) value_raw_ += c;
        if (s == ValueScan::Step::more) return;
      }
      obj_ = Obj::after_value;
      if (target_ == Target::name) {
        std::optional<std::string> name = decode_string(value_raw_);
        if (!name || name->empty()) return fail_call(c, out);
        name_ = std::move(*name);
        have_name_ = true;
        if (args_started_) announce(out);
      } else if (target_ == Target::arguments_string) {
        std::optional<std::string> args = decode_string(value_raw_);
        if (!args) return fail_call(c, out);
        (announced_ ? fragment_ : args_pending_) += *args;
      } else if (target_ == Target::arguments_stream && have_name_) {
        announce(out);
      }
      if (s == ValueScan::Step::done_before) return step(c, out);  // c belongs to what follows the value
      return;
    }
    case Obj::after_value:
      if (util::is_json_space(c)) return;
      if (c == ',') {
        obj_ = Obj::key_start;
        return;
      }
      if (c == '}') return object_end(c, out);
      return fail_call(c, out);
  }
}

void ToolCallExtractor::object_end(char c, Output& out) {
  if (!have_name_) return fail_call(c, out);
  // A llama_json answer is a call only with its arguments: {"name": "Bob"} may well be an answer.
  if (!args_started_ && format_ == chat::ToolCallFormat::llama_json) return fail_call(c, out);
  if (!args_started_) {
    args_started_ = true;
    args_pending_ = "{}";
  }
  announce(out);
  flush_fragment(out);
  mode_ = Mode::closing;
  close_matched_ = 0;
}

ToolCallExtractor::Result ToolCallExtractor::split(std::string_view text, chat::ToolCallFormat format, ParameterTypes types) {
  ToolCallExtractor x(format, std::move(types));
  Output a = x.feed(text);
  Output b = x.finish();
  Result r;
  r.content = a.content + b.content;
  for (const Output* o : {&a, &b})
    for (const ToolCallDelta& d : o->deltas) {
      if (d.first) r.calls.push_back(ToolCall{d.id, d.name, {}});
      r.calls[d.index].arguments += d.arguments;
    }
  return r;
}

}  // namespace neuron::server
