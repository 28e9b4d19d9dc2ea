#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"

namespace neuron::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(std::int32_t id) {
  const std::string_view b = tok_.token_bytes(id);  // throws before any state changes
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_.append(b);
  // Emit everything up to an unfinished character at the very end. Ill-formed
  // runs are final (no later byte can fix them), so they go out as U+FFFD now,
  // exactly where decode() would put them.
  std::string out;
  std::size_t i = 0, run = 0;
  while (i < pending_.size()) {
    const Utf8Step st = next_utf8(pending_, i);
    if (st.kind == Utf8Kind::valid) {
      i += st.length;
    } else if (st.kind == Utf8Kind::invalid) {
      out.append(pending_, run, i - run);
      out.append(kReplacementChar);
      i += st.length;
      run = i;
    } else {
      break;  // truncated: wait for the next token
    }
  }
  out.append(pending_, run, i - run);
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace neuron::tokenizer
