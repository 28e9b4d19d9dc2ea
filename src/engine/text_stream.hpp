#pragma once
// Turns the detokenizer's stream of complete UTF-8 pieces into what a client
// may see, one token at a time:
//
//  1. Stop strings are matched on the whole generated text, across token
//     boundaries. Text that could still become the start of a stop string is
//     held back until the next piece decides it; a matched stop string and
//     everything after it is never emitted.
//  2. With reasoning splitting on (Qwen3 chat), text between <think> and
//     </think> goes to `reasoning`, the rest to `text`; the tags themselves
//     are dropped, and a tag split over several tokens is held back the same
//     way. Content after </think> is passed on verbatim (its leading newlines
//     included), as the reference servers do.
//
// Stop strings see the raw text (tags included), so a stop string can end a
// request inside its reasoning. Pieces are assumed to be complete UTF-8, as
// tokenizer::StreamDecoder yields them; everything emitted then is too,
// because a valid UTF-8 stop string or tag can only match at a character
// boundary.
#include <string>
#include <string_view>
#include <vector>

namespace neuron::engine {

struct TextStreamOptions {
  std::vector<std::string> stop{};  // non-empty strings; empty ones are ignored
  bool split_reasoning = false;
  bool start_in_reasoning = false;  // the prompt already opened <think>
};

struct TextChunk {
  std::string text;       // visible content
  std::string reasoning;  // <think> body (split_reasoning only)
  bool empty() const noexcept { return text.empty() && reasoning.empty(); }
};

class TextStream {
 public:
  static constexpr std::string_view kThinkOpen = "<think>";
  static constexpr std::string_view kThinkClose = "</think>";

  explicit TextStream(TextStreamOptions options);

  // Feeds the next decoded piece; returns what became safe to emit. Once a
  // stop string has matched, stopped() is true and later pieces are ignored.
  TextChunk push(std::string_view piece);
  // End of generation (EOS, length, cancel): releases whatever was held back.
  TextChunk finish();

  bool stopped() const noexcept { return stopped_; }
  bool in_reasoning() const noexcept { return in_reasoning_; }

 private:
  // Stage 2: routes stop-filtered text to text/reasoning around the tags.
  void split(std::string_view text, bool final, TextChunk& out);

  std::vector<std::string> stop_;
  bool split_reasoning_;
  bool in_reasoning_;
  bool stopped_ = false;
  std::string stop_pending_;   // raw text that may be the start of a stop string
  std::string split_pending_;  // filtered text that may be the start of a tag
};

// Length of the longest suffix of `text` that is a proper prefix of one of
// `needles` (what must be held back because the next piece may complete it).
std::size_t held_prefix_length(std::string_view text, const std::vector<std::string_view>& needles) noexcept;

}  // namespace neuron::engine
