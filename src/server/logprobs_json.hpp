#pragma once
// The `logprobs` objects of OpenAI answers, from the engine's per-token
// logprobs (model/logprobs.hpp: the raw log-softmax of the model's logits).
//
// A token's text: its bytes when they are valid UTF-8, else (a piece of a
// character split over tokens) "bytes:" and \xNN escapes, as OpenAI writes
// them ("bytes:\xe4\xbd"); `bytes` always holds the raw bytes, so joining
// them rebuilds the text exactly. An id the tokenizer does not know (an
// embedding's padding rows) is "token_id:N" with empty bytes.
//
// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob,
// bytes}]}], "refusal": null}. Completions: {tokens, token_logprobs,
// top_logprobs: [{token: logprob}], text_offset}, where text_offset is the
// offset in code points of each token in the choice's text (after the echoed
// prompt, when echo is on).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/logprobs.hpp"
#include "tokenizer/tokenizer.hpp"

namespace neuron::server {

std::string logprob_token_text(std::string_view bytes);

// Chat: the `logprobs` of a choice or chunk for these tokens (ids and
// logprobs of equal length).
nlohmann::json chat_logprobs(const tokenizer::Tokenizer& tok, std::span<const std::int32_t> ids,
                             std::span<const model::TokenLogprobs> logprobs);

// Completions: successive parts of one choice's logprobs, text_offset running on.
class CompletionLogprobs {
 public:
  // `start`: code points before the first token (the echoed prompt).
  explicit CompletionLogprobs(const tokenizer::Tokenizer& tok, std::size_t start = 0) : tok_(tok), offset_(start) {}
  nlohmann::json take(std::span<const std::int32_t> ids, std::span<const model::TokenLogprobs> logprobs);

 private:
  const tokenizer::Tokenizer& tok_;
  std::size_t offset_;
};

// Code points in UTF-8 text (bytes that are not continuation bytes).
std::size_t code_points(std::string_view utf8) noexcept;

}  // namespace neuron::server
