#include "engine/sequence.hpp"

namespace neuron::engine {

const char* finish_reason_name(FinishReason r) noexcept {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
  }
  return "stop";
}

Sequence::Sequence(std::uint64_t id, SequenceParams params, SequenceObserver& observer)
    : tokens(params.prompt), id_(id), params_(std::move(params)), observer_(observer), sampler_(params_.sampling) {
  tokens.reserve(params_.prompt.size() + static_cast<std::size_t>(params_.max_tokens));
  if (params_.grammar) matcher_ = std::make_unique<grammar::Matcher>(params_.grammar);
}

}  // namespace neuron::engine
