#pragma once
// tokenizer.json's "added_tokens": control tokens such as <|im_start|> that
// are matched verbatim in the text before any normalization or BPE, as
// Hugging Face's AddedVocabulary does.
//
// Matching is leftmost-longest over all added tokens. Flags:
//   normalized  - matched in the normalized text (after NFC) instead of the raw text
//   single_word - only when neither neighbour is a word character (\w); a
//                 rejected match is skipped as plain text, as in Hugging Face
//   lstrip      - the match swallows whitespace on its left
//   rstrip      - the match swallows whitespace on its right
//   special     - dropped by decode(skip_special_tokens=true)
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace neuron::tokenizer {

class Bpe;
class Normalizer;

struct AddedToken {
  std::int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A run of the input: either an added token (id >= 0) or plain text (id == -1).
struct Segment {
  std::string_view text;
  std::int32_t id = -1;
};

// Finds one set of added tokens in text.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the text that stands for token `tokens[i]`.
  AddedTokenMatcher(std::vector<std::string> patterns, std::vector<AddedToken> tokens);

  bool empty() const noexcept { return patterns_.empty(); }
  // Appends the segments of `text` (valid UTF-8) in order; empty plain runs are omitted.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  std::vector<std::string> patterns_;
  std::vector<AddedToken> tokens_;                   // parallel to patterns_
  std::array<std::vector<std::uint32_t>, 256> by_first_byte_;  // pattern indices, longest first
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `j` is the "added_tokens" array (or null). Ids are assigned the way
  // Hugging Face does on load, whatever "id" says: a token already in the
  // model's vocab keeps its vocab id, the others are numbered after the
  // vocab in order; a repeated content is ignored. (For real files the two
  // agree.) Normalized tokens are matched in their normalized spelling, so
  // the normalizer is needed here. Throws Error{bad_model} naming the entry.
  static AddedVocabulary from_json(const nlohmann::json& j, const Normalizer& normalizer, const Bpe& model);

  const std::vector<AddedToken>& tokens() const noexcept { return tokens_; }
  const AddedTokenMatcher& raw_matcher() const noexcept { return raw_; }                // normalized=false tokens
  const AddedTokenMatcher& normalized_matcher() const noexcept { return normalized_; }  // normalized=true tokens

 private:
  std::vector<AddedToken> tokens_;
  AddedTokenMatcher raw_;
  AddedTokenMatcher normalized_;
};

}  // namespace neuron::tokenizer
