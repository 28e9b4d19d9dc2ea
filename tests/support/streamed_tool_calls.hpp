#pragma once
// What a client reassembles from a ToolCallExtractor fed an answer in pieces
// (server/tool_calls.hpp), checking OpenAI's streamed shape on the way: calls
// announced in order with an id and no arguments, fragments only of announced
// calls. Shared by the tool-call format tests.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "server/tool_calls.hpp"

namespace neuron::server::tool_call_test {

struct Streamed {
  std::string streamed;  // content let out by feed() as it went
  std::string content;   // all content, finish() included
  std::vector<ToolCall> calls;
  std::size_t fragments = 0;  // argument deltas after the announcements
  std::string finish_reason;
};

inline Streamed run_pieces(const ToolCallSyntax& syntax, const std::vector<std::string>& pieces,
                           const std::string& engine_reason = "stop") {
  ToolCallExtractor x(syntax);
  Streamed s;
  auto collect = [&](const ToolCallExtractor::Output& o) {
    s.content += o.content;
    for (const ToolCallDelta& d : o.deltas) {
      if (d.first) {
        EXPECT_EQ(d.index, s.calls.size()) << "calls are announced in order";
        EXPECT_TRUE(d.arguments.empty());
        EXPECT_EQ(d.id.rfind("call_", 0), 0u) << d.id;
        s.calls.push_back(ToolCall{d.id, d.name, {}});
      } else {
        ASSERT_LT(d.index, s.calls.size()) << "a fragment of a call never announced";
        s.calls[d.index].arguments += d.arguments;
        ++s.fragments;
      }
    }
  };
  for (const std::string& p : pieces) {
    ToolCallExtractor::Output o = x.feed(p);
    s.streamed += o.content;
    collect(o);
  }
  collect(x.finish());
  s.finish_reason = x.finish_reason(engine_reason);
  return s;
}

// `text` in pieces of `n` bytes (the last may be shorter).
inline std::vector<std::string> cut_every(const std::string& text, std::size_t n) {
  std::vector<std::string> pieces;
  for (std::size_t i = 0; i < text.size(); i += n) pieces.push_back(text.substr(i, n));
  return pieces;
}

}  // namespace neuron::server::tool_call_test
