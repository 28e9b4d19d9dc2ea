#pragma once
// ASCII text tests shared by the parsers (tool calls, request bodies): JSON's
// whitespace (space, tab, CR, LF), nothing locale-dependent.
#include <string_view>

namespace neuron::util {

constexpr bool is_json_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Empty or only JSON whitespace.
constexpr bool is_blank(std::string_view s) noexcept {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace neuron::util
