#pragma once
// Parses a server-sent event stream of named events ("event: X\ndata: {...}\n\n"
// blocks, as the Messages and Responses APIs send), checking each block's
// shape and that each data's type is its event name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace neuron::test_support {

struct SseEvent {
  std::string name;
  nlohmann::json data;  // unordered: compares by content
};

inline std::vector<SseEvent> parse_sse_events(const std::string& sse) {
  std::vector<SseEvent> out;
  std::size_t pos = 0;
  while (pos < sse.size()) {
    const std::size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    if (end == std::string::npos) break;
    const std::string block = sse.substr(pos, end - pos);
    pos = end + 2;
    const std::size_t nl = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0) << block;
    SseEvent e{block.substr(7, nl - 7), nlohmann::json::parse(block.substr(nl + 7))};
    EXPECT_EQ(e.data.value("type", ""), e.name);
    out.push_back(std::move(e));
  }
  return out;
}

inline std::vector<std::string> event_names(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.name);
  return out;
}

}  // namespace neuron::test_support
