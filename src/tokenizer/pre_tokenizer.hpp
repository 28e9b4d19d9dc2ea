#pragma once
// tokenizer.json's "pre_tokenizer": how normalized text is cut into words
// before BPE. Supported: Split (regex or literal pattern, all five
// behaviours, invert), ByteLevel (add_prefix_space, use_regex with GPT-2's
// built-in pattern) and Sequence of those. ByteLevel's byte-to-character
// mapping itself is not applied here: BPE runs on raw bytes (see bpe.hpp).
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.hpp"

namespace neuron::tokenizer {

// GPT-2's word pattern, used by ByteLevel when use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

class PreTokenizer {
 public:
  PreTokenizer() = default;  // no splitting: a segment is one word
  // Throws Error{bad_model} naming the unsupported type, bad field or bad regex.
  static PreTokenizer from_json(const nlohmann::json& j);

  // Whether a ByteLevel step is present (neuron serves byte-level BPE only).
  bool has_byte_level() const noexcept;

  using WordSink = std::function<void(std::string_view word)>;
  // Calls `on_word` with the words of `text` (valid UTF-8), in order, never
  // empty. Words are produced as the regex finds them, so a long text needs
  // no word list. A word views `text` or a string kept in `arena` (words that
  // got a prefix space).
  void split(std::string_view text, const WordSink& on_word, std::deque<std::string>& arena) const;

 private:
  struct Step {
    enum class Kind { split, byte_level } kind = Kind::split;
    std::vector<Regex> regex;  // zero or one; a vector because Regex has no empty state
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
    bool add_prefix_space = false;
  };
  static void parse_into(const nlohmann::json& j, std::vector<Step>& steps, const std::string& where);
  // Runs steps [step, end) on `piece`.
  void run(std::size_t step, std::string_view piece, const WordSink& on_word, std::deque<std::string>& arena) const;

  std::vector<Step> steps_;
};

}  // namespace neuron::tokenizer
