#pragma once
// A model's tokenizer, loaded from its Hugging Face tokenizer.json and
// reproducing `tokenizers` exactly for byte-level BPE models (Qwen, GPT-2,
// Llama 3 families).
//
// encode(text):
//   1. invalid UTF-8 is repaired first: each ill-formed byte sequence becomes
//      U+FFFD (Python's errors="replace"), so any bytes encode, and
//      decode(encode(bytes)) == NFC(repaired bytes);
//   2. added tokens (<|im_start|>, ...) written in the text are matched as
//      tokens, as transformers does by default;
//   3. the rest is normalized (NFC for Qwen), cut into words by the
//      pre-tokenizer regex, and each word is BPE-merged over its UTF-8 bytes.
//   The post-processor is not applied (no BOS/EOS insertion), i.e. the result
//   is transformers' encode(text, add_special_tokens=False): chat templates
//   write their markers in the text. encode_with_special_tokens applies it.
// decode(ids): the tokens' bytes concatenated, ill-formed UTF-8 shown as U+FFFD
//   (the ByteLevel decoder's from_utf8_lossy).
//
// Copies share one immutable model; every const method is safe to call from
// many threads at once.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace neuron::tokenizer {

class Tokenizer {
 public:
  // Throws Error{not_found} when the file is missing, Error{bad_model} naming
  // what is wrong when it is not a tokenizer neuron can run.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  static Tokenizer from_json(std::string_view json_text);  // throws Error{bad_model}

  // Never throws on any input bytes (only std::bad_alloc).
  std::vector<std::int32_t> encode(std::string_view text) const;
  // transformers' encode(text) (add_special_tokens=True): encode(text) framed
  // by the post-processor's special tokens (Llama 3 puts <|begin_of_text|>
  // first; Qwen adds nothing). What a raw prompt (/v1/completions) becomes.
  std::vector<std::int32_t> encode_with_special_tokens(std::string_view text) const;
  // Unknown ids -> Error{invalid_argument} naming the id.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;

  // Tokens in tokenizer.json's spelling (byte-level for the BPE vocab, e.g.
  // "Ġworld"; verbatim for added tokens). Added tokens take precedence.
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(std::int32_t id) const;  // unknown id -> Error{invalid_argument}
  // Distinct ids, BPE vocab plus added tokens (Qwen3: 151669).
  std::size_t vocab_size() const;
  bool is_special(std::int32_t id) const;  // false for unknown ids
  bool is_known(std::int32_t id) const noexcept;
  // The raw bytes `id` stands for (possibly part of a UTF-8 character).
  // Unknown id -> Error{invalid_argument}.
  std::string_view token_bytes(std::int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable after load; shared by copies
};

// Turns a token stream into text for server-sent events: each push returns
// only characters that are complete, holding back the bytes of a character
// split across tokens. Concatenating every push() and the final finish()
// gives exactly decode(all ids, skip_special_tokens).
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tok, bool skip_special_tokens);
  // Text that became complete with this token ("" if none). Unknown id ->
  // Error{invalid_argument}, with the decoder state unchanged.
  std::string push(std::int32_t id);
  // Whatever remains (an unfinished character becomes U+FFFD, as in decode);
  // the decoder is then empty and can be reused.
  std::string finish();

 private:
  Tokenizer tok_;        // a cheap copy: keeps the model alive as long as the stream
  bool skip_special_;
  std::string pending_;  // at most 3 bytes: a well-formed but unfinished character
};

}  // namespace neuron::tokenizer
