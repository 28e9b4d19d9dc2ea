#pragma once
// /v1/chat/completions and /v1/completions as a TurnShaper: OpenAI's
// chat.completion.chunk / text_completion chunks ending in "data: [DONE]".
// A chat answer opens with the role chunk. With tool parsing on, content
// passes through a ToolCallExtractor and the calls go out whole in one chunk
// before the finish chunk (finish_reason "tool_calls"). Errors met after the
// stream started are sent as the OpenAI error envelope, then [DONE].
#include <memory>

#include "server/turn.hpp"

namespace neuron::server {

class ChatTurnShaper final : public TurnShaper {
 public:
  ChatTurnShaper(ResponseMeta meta, bool include_usage, bool tool_calls);

  std::string open() override;
  std::string delta(std::string_view text, std::string_view reasoning) override;
  std::string close(const TurnEnd& end) override;
  std::string fail(const ApiError& error) override;

 private:
  ResponseMeta meta_;
  bool include_usage_;
  std::unique_ptr<ToolCallExtractor> extractor_;  // null: tool calls are not parsed
};

}  // namespace neuron::server
