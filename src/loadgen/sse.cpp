#include "loadgen/sse.hpp"

namespace neuron::loadgen {

void SseParser::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the second half of "\r\n"
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      line(line_, out);
      line_.clear();
      continue;
    }
    line_.push_back(c);
  }
}

bool SseParser::has_partial() const noexcept { return !line_.empty() || has_fields_; }

void SseParser::line(std::string_view l, std::vector<SseEvent>& out) {
  if (l.empty()) {  // dispatch
    if (has_data_) out.push_back(std::move(pending_));
    pending_ = {};
    has_data_ = has_fields_ = false;
    return;
  }
  if (l.front() == ':') return;  // comment
  const auto colon = l.find(':');
  const std::string_view name = l.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  has_fields_ = true;
  if (name == "data") {
    if (has_data_) pending_.data.push_back('\n');
    pending_.data.append(value);
    has_data_ = true;
  } else if (name == "event") {
    pending_.event.assign(value);
  }
}

}  // namespace neuron::loadgen
