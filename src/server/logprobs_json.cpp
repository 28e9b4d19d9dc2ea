#include "server/logprobs_json.hpp"

#include "tokenizer/utf8.hpp"
#include "util/error.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;

struct TokenText {
  std::string text;
  std::string_view bytes;
};

TokenText token_text(const tokenizer::Tokenizer& tok, std::int32_t id) {
  if (!tok.is_known(id)) return {"token_id:" + std::to_string(id), {}};
  const std::string_view bytes = tok.token_bytes(id);
  return {logprob_token_text(bytes), bytes};
}

json bytes_json(std::string_view bytes) {
  json out = json::array();
  for (char c : bytes) out.push_back(static_cast<unsigned char>(c));
  return out;
}

}  // namespace

std::string logprob_token_text(std::string_view bytes) {
  if (tokenizer::is_valid_utf8(bytes)) return std::string(bytes);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "bytes:";
  for (char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::size_t code_points(std::string_view utf8) noexcept {
  std::size_t n = 0;
  for (char c : utf8) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

json chat_logprobs(const tokenizer::Tokenizer& tok, std::span<const std::int32_t> ids, std::span<const model::TokenLogprobs> logprobs) {
  NEURON_ASSERT(ids.size() == logprobs.size());
  json content = json::array();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const TokenText t = token_text(tok, ids[i]);
    json top = json::array();
    for (const model::TopLogprob& alt : logprobs[i].top) {
      const TokenText a = token_text(tok, alt.token);
      top.push_back({{"token", a.text}, {"logprob", alt.logprob}, {"bytes", bytes_json(a.bytes)}});
    }
    content.push_back({{"token", t.text}, {"logprob", logprobs[i].logprob}, {"bytes", bytes_json(t.bytes)}, {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json CompletionLogprobs::take(std::span<const std::int32_t> ids, std::span<const model::TokenLogprobs> logprobs) {
  NEURON_ASSERT(ids.size() == logprobs.size());
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const TokenText t = token_text(tok_, ids[i]);
    tokens.push_back(t.text);
    token_logprobs.push_back(logprobs[i].logprob);
    json top = json::object();
    for (const model::TopLogprob& alt : logprobs[i].top) top[token_text(tok_, alt.token).text] = alt.logprob;
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(offset_);
    offset_ += code_points(t.bytes);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

}  // namespace neuron::server
