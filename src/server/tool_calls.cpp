#include "server/tool_calls.hpp"

#include <nlohmann/json.hpp>

#include "server/openai_response.hpp"
#include "util/json_parse.hpp"

namespace neuron::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

// Length of the longest suffix of `text` that is a proper prefix of kOpen.
std::size_t partial_tag_suffix(std::string_view text) {
  for (std::size_t n = std::min(text.size(), kOpen.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == kOpen.substr(0, n)) return n;
  return 0;
}

bool is_blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

}  // namespace

std::string ToolCallExtractor::feed(std::string_view text) {
  held_.append(text);
  if (in_calls_) return {};
  if (auto at = held_.find(kOpen); at != std::string::npos) {
    std::string out = held_.substr(0, at);
    held_.erase(0, at);
    in_calls_ = true;
    return out;
  }
  const std::size_t keep = partial_tag_suffix(held_);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ToolCallExtractor::Result ToolCallExtractor::finish() {
  Result r;
  std::string held = std::move(held_);
  held_.clear();
  if (!in_calls_) {
    r.content = std::move(held);
    return r;
  }
  // Blocks of <tool_call> JSON </tool_call>, separated by blank text only.
  std::string_view rest = held;
  std::vector<ToolCall> calls;
  bool ok = true;
  while (ok && !is_blank(rest)) {
    const std::size_t open = rest.find(kOpen);
    if (open == std::string_view::npos || !is_blank(rest.substr(0, open))) ok = false;
    if (!ok) break;
    rest.remove_prefix(open + kOpen.size());
    const std::size_t close = rest.find(kClose);
    if (close == std::string_view::npos) {
      ok = false;
      break;
    }
    nlohmann::ordered_json call;
    try {
      call = parse_json<nlohmann::ordered_json>(rest.substr(0, close), "tool call");
    } catch (const Error&) {  // not JSON, or nested past the limit: the text stays content
      ok = false;
      break;
    }
    rest.remove_prefix(close + kClose.size());
    const auto name = call.is_object() ? call.find("name") : call.end();
    if (!call.is_object() || name == call.end() || !name->is_string() || name->get<std::string>().empty()) {
      ok = false;
      break;
    }
    ToolCall tc;
    tc.id = new_random_id("call_");
    tc.name = name->get<std::string>();
    const auto args = call.find("arguments");
    if (args == call.end() || args->is_null()) tc.arguments = "{}";
    else if (args->is_string()) tc.arguments = args->get<std::string>();  // already JSON text
    else tc.arguments = args->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    calls.push_back(std::move(tc));
  }
  if (!ok || calls.empty()) {
    r.content = std::move(held);
    return r;
  }
  r.calls = std::move(calls);
  return r;
}

ToolCallExtractor::Result ToolCallExtractor::split(std::string_view text) {
  ToolCallExtractor x;
  std::string before = x.feed(text);
  Result r = x.finish();
  r.content.insert(0, before);
  return r;
}

}  // namespace neuron::server
