#pragma once
// The OpenAI Responses API: POST /v1/responses (blocking and streamed), GET
// and DELETE /v1/responses/{id}. A request becomes the same chat turn that
// /v1/chat/completions generates (OpenAiRequest, kind chat), so it shares the
// template, tool calls, reasoning split, engine, streaming and cancellation
// (turn.hpp); this module owns only the Responses shapes:
//   - parse_responses_request: the body -> the turn to generate. `input` is a
//     string or a list of items (messages with input_text / output_text parts,
//     function_call, function_call_output, reasoning) turned into chat
//     messages; `instructions` becomes the system message; flat function tools
//     ({type, name, description, parameters, strict}) become chat tools.
//   - the response object and its output items (reasoning, message,
//     function_call), from a whole Turn or streamed by ResponsesTurnShaper.
//   - ResponseStore: finished responses kept for GET and previous_response_id
//     (bounded count and bytes, least recently used evicted first).
// Not supported, refused with a 400 naming the field: tool_choice "required"
// or a named function and text.format json_schema / json_object (they need
// constrained decoding), non-function tools, non-text input parts,
// item_reference items, background mode. reasoning.effort is accepted:
// "minimal" (and "none") turn Qwen3's thinking off (enable_thinking false),
// other efforts leave the template's default (thinking on).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai_request.hpp"
#include "server/turn.hpp"

namespace neuron::server {

struct ResponsesRequest {
  // The turn to generate. Its messages are this request's only: the Api puts
  // the instructions and a previous response's conversation in front (conversation()).
  OpenAiRequest chat;
  std::optional<std::string> instructions;
  std::optional<std::string> previous_response_id;
  bool store = true;
  // What the response object echoes back, as the client sent it (or OpenAI's
  // default): instructions, max_output_tokens, metadata, parallel_tool_calls,
  // previous_response_id, reasoning, store, temperature, text, tool_choice,
  // tools, top_p, truncation, user.
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
};

ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body);

// The messages a request's turn is rendered from: the instructions (system),
// then a previous response's conversation (null: none), then this input.
std::vector<ChatMessage> conversation(const ResponsesRequest& req, const std::vector<ChatMessage>* previous);

// The response object around `output`. `status`: completed | incomplete |
// failed | in_progress; `end` null while in progress (usage null); `error`
// null unless failed ({code, message}).
nlohmann::ordered_json response_object(const std::string& id, std::int64_t created_at, const std::string& model,
                                       const nlohmann::ordered_json& echo, const std::string& status,
                                       const nlohmann::ordered_json& output, const TurnEnd* end,
                                       const nlohmann::ordered_json& error = nullptr);
// completed, or incomplete when the turn ran out of tokens ("length"); failed when cancelled.
std::string response_status(const TurnEnd& end);
nlohmann::ordered_json response_usage(const TurnEnd& end);
// The output items of a whole turn: reasoning (when any), the message (always,
// unless the turn is tool calls with blank text around them), function calls.
nlohmann::ordered_json output_items(const Turn& turn);
// The assistant message the turn adds to the conversation (for chaining).
ChatMessage assistant_message(const Turn& turn);

// Streams a turn as Responses events ("event: <type>" lines, each payload
// with type and sequence_number). `on_done` gets the final response object and
// the turn (to store it) when the turn completes or is cut by its token limit.
class ResponsesTurnShaper final : public TurnShaper {
 public:
  using OnDone = std::function<void(const nlohmann::ordered_json& response, const Turn& turn)>;
  // tool_calls: the format the model's calls are parsed in; nullopt: they are not.
  ResponsesTurnShaper(std::string id, std::int64_t created_at, std::string model, nlohmann::ordered_json echo,
                      std::optional<ToolCallSyntax> tool_calls, OnDone on_done);

  std::string open() override;
  std::string delta(std::string_view text, std::string_view reasoning) override;
  std::string close(const TurnEnd& end) override;
  std::string fail(const ApiError& error) override;

 private:
  enum class Open { none, reasoning, message };
  std::string event(const char* type, nlohmann::ordered_json payload);
  std::string open_item(Open kind);
  std::string close_item(const char* status);
  std::string text_delta(std::string text);  // content text, past the tool-call extractor

  std::string id_, model_;
  std::int64_t created_at_;
  nlohmann::ordered_json echo_;
  std::unique_ptr<WholeToolCalls> extractor_;  // null: tool calls are not parsed
  OnDone on_done_;
  std::int64_t sequence_ = 0;
  nlohmann::ordered_json items_ = nlohmann::ordered_json::array();  // finished items
  Open open_ = Open::none;
  std::string item_id_, item_text_;  // the open item's id and text so far
  std::string pending_blank_;        // leading blank text, held until the message opens
  Turn turn_;
};

struct StoredResponse {
  nlohmann::ordered_json response;          // what GET returns
  std::vector<ChatMessage> conversation;    // input (without instructions) + the answer, for previous_response_id
};

// Finished responses by id. Thread-safe. Bounded by count and by bytes (the
// response's JSON plus the conversation's text); the least recently used go
// first; one larger than the byte bound is not kept.
class ResponseStore {
 public:
  ResponseStore(std::size_t max_count, std::size_t max_bytes);
  void put(const std::string& id, StoredResponse response);
  std::optional<StoredResponse> get(const std::string& id);  // counts as a use
  bool erase(const std::string& id);
  std::size_t size() const;
  std::size_t bytes() const;

 private:
  struct Entry {
    std::string id;
    StoredResponse value;
    std::size_t bytes = 0;
  };
  mutable std::mutex mu_;
  const std::size_t max_count_, max_bytes_;
  std::size_t bytes_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
};

}  // namespace neuron::server
