#include "engine/text_stream.hpp"

#include <algorithm>

namespace neuron::engine {

std::size_t held_prefix_length(std::string_view text, const std::vector<std::string_view>& needles) noexcept {
  std::size_t best = 0;
  for (std::string_view needle : needles) {
    if (needle.empty()) continue;
    // A full match is the caller's business; only a proper prefix is "maybe".
    for (std::size_t k = std::min(text.size(), needle.size() - 1); k > best; --k) {
      if (text.substr(text.size() - k) == needle.substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

TextStream::TextStream(TextStreamOptions options)
    : split_reasoning_(options.split_reasoning),
      in_reasoning_(options.split_reasoning && options.start_in_reasoning) {
  for (auto& s : options.stop) {
    if (!s.empty()) stop_.push_back(std::move(s));
  }
}

TextChunk TextStream::push(std::string_view piece) {
  TextChunk out;
  if (stopped_) return out;
  stop_pending_.append(piece);

  // Earliest match wins; the pending text is short (at most the longest stop
  // string plus one piece), so a plain search per stop string is cheap.
  std::size_t match = std::string::npos;
  for (const auto& s : stop_) match = std::min(match, stop_pending_.find(s));
  if (match != std::string::npos) {
    stopped_ = true;
    std::string visible = stop_pending_.substr(0, match);
    stop_pending_.clear();
    split(visible, /*final=*/true, out);
    return out;
  }

  std::vector<std::string_view> needles(stop_.begin(), stop_.end());
  const std::size_t hold = held_prefix_length(stop_pending_, needles);
  const std::size_t release = stop_pending_.size() - hold;
  std::string visible = stop_pending_.substr(0, release);
  stop_pending_.erase(0, release);
  split(visible, /*final=*/false, out);
  return out;
}

TextChunk TextStream::finish() {
  TextChunk out;
  std::string rest = std::move(stop_pending_);
  stop_pending_.clear();
  split(rest, /*final=*/true, out);
  return out;
}

void TextStream::split(std::string_view text, bool final, TextChunk& out) {
  if (!split_reasoning_) {
    out.text.append(text);
    return;
  }
  split_pending_.append(text);
  for (;;) {
    const std::string_view tag = in_reasoning_ ? kThinkClose : kThinkOpen;
    std::string& sink = in_reasoning_ ? out.reasoning : out.text;
    const std::size_t pos = split_pending_.find(tag);
    if (pos != std::string::npos) {
      sink.append(split_pending_, 0, pos);
      split_pending_.erase(0, pos + tag.size());
      in_reasoning_ = !in_reasoning_;
      continue;
    }
    const std::size_t hold = final ? 0 : held_prefix_length(split_pending_, {tag});
    const std::size_t release = split_pending_.size() - hold;
    sink.append(split_pending_, 0, release);
    split_pending_.erase(0, release);
    return;
  }
}

}  // namespace neuron::engine
