#pragma once
// A compiled PCRE2 pattern for pre-tokenizer splits. tokenizer.json patterns
// are Oniguruma/Rust syntax using \p{L}, \p{N} and lookahead; PCRE2 with
// PCRE2_UTF|PCRE2_UCP reads them with the same meaning. JIT-compiled when the
// platform allows. The compiled code is immutable, so one Regex serves any
// number of threads; each search allocates its own match data.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace neuron::tokenizer {

struct Span {
  std::size_t begin;
  std::size_t end;
};

class Regex {
 public:
  // Throws Error{bad_model} with PCRE2's message and the error offset; `what`
  // names the pattern's place in tokenizer.json.
  Regex(std::string_view pattern, const std::string& what);
  // A pattern matching `literal` exactly (Split's {"String": ...} form).
  static Regex literal(std::string_view literal, const std::string& what);

  // Calls `on_match` for every non-empty, non-overlapping match in `text`,
  // left to right. `text` must be valid UTF-8 (it is not re-checked).
  // Returns false when PCRE2 gave up (match or depth limit on a pathological
  // input); the matches reported up to there stand.
  bool for_each_match(std::string_view text, const std::function<void(Span)>& on_match) const;

  const std::string& pattern() const noexcept { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<const Code> code_;  // shared: copies of a tokenizer share one compiled pattern
};

}  // namespace neuron::tokenizer
