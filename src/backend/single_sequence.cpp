#include "backend/single_sequence.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "util/error.hpp"

namespace neuron::backend {

SingleSequence::SingleSequence(ModelRunner& runner) : runner_(runner) {
  const KvPoolShape pool = runner.kv_pool();
  NEURON_ASSERT(pool.block_size > 0 && pool.num_blocks > 0);
  const std::int64_t positions = static_cast<std::int64_t>(pool.block_size) * pool.num_blocks;
  capacity_ = static_cast<std::int32_t>(std::min<std::int64_t>(runner.max_context(), positions));
  blocks_.resize(static_cast<std::size_t>((capacity_ + pool.block_size - 1) / pool.block_size));
  std::iota(blocks_.begin(), blocks_.end(), 0);
}

void SingleSequence::forward(std::span<const std::int32_t> tokens, std::int32_t offset, std::span<float> logits) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t vocab = runner_.config().vocab_size;
  if (n == 0) fail(errc::invalid_argument, "forward needs at least one token");
  if (offset < 0 || offset > fed_)
    fail(errc::invalid_argument, "offset " + std::to_string(offset) + " is outside the fed positions [0, " +
                                     std::to_string(fed_) + "]");
  if (offset + n > capacity_)
    fail(errc::context_length_exceeded, "positions up to " + std::to_string(offset + n) + " exceed the context of " +
                                            std::to_string(capacity_) + " tokens");
  LogitsWanted want = LogitsWanted::none;
  if (logits.size() == static_cast<std::size_t>(vocab)) want = LogitsWanted::last;
  if (n > 1 && logits.size() == static_cast<std::size_t>(n * vocab)) want = LogitsWanted::all;
  if (!logits.empty() && want == LogitsWanted::none)
    fail(errc::invalid_argument, "logits buffer holds " + std::to_string(logits.size()) + " floats; expected 0, " +
                                     std::to_string(vocab) + " or " + std::to_string(n * vocab));
  // A hybrid's recurrent state (slot 0) holds exactly the fed positions: it continues from fed() or restarts at 0.
  const bool stateful = runner_.kv_pool().state_slots > 0;
  if (stateful && offset != 0 && offset != fed_)
    fail(errc::invalid_argument, "offset " + std::to_string(offset) + ": a model with recurrent state (linear attention) "
                                     "continues from the fed positions (" + std::to_string(fed_) + ") or restarts at 0");
  const std::int32_t block_size = runner_.kv_pool().block_size;
  const auto used = static_cast<std::size_t>((offset + n + block_size - 1) / block_size);
  batch_.clear();
  batch_.add(tokens, offset, std::span<const std::int32_t>(blocks_).first(used), want, stateful ? 0 : -1);
  fed_ = offset;  // from here on the slots are rewritten; if the step throws they are undefined
  runner_.step(batch_, logits);
  fed_ = static_cast<std::int32_t>(offset + n);
}

}  // namespace neuron::backend
