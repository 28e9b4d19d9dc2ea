#pragma once
// One sequence over a whole runner, for the tools that drive a model without
// the engine (`neuron generate`, `neuron bench`, golden and equivalence
// tests): its block table is the pool's blocks in order, so it may resume
// from any prefix it has fed, as the old single-sequence forward did. It must
// be the runner's only user while it lives (the engine is not).
#include <cstdint>
#include <span>
#include <vector>

#include "backend/model_runner.hpp"

namespace neuron::backend {

class SingleSequence {
 public:
  explicit SingleSequence(ModelRunner& runner);

  // Runs `tokens` at positions [offset, offset + n); positions before
  // `offset` must have been fed by earlier calls (later ones are
  // overwritten). A model with recurrent state (hybrids: state slot 0) takes
  // offset fed() or 0 only: its state cannot rewind. Logits for the last position ([vocab]) or every position
  // ([n, vocab]) by logits.size(); an empty span skips the LM head. Throws
  // Error{invalid_argument} for an offset past what was fed or a logits span
  // of another size, Error{context_length_exceeded} past capacity(), and
  // whatever the runner throws (then positions from `offset` on are unfed).
  void forward(std::span<const std::int32_t> tokens, std::int32_t offset, std::span<float> logits);

  // Positions this sequence can hold: min(max_context, blocks * block_size).
  std::int32_t capacity() const noexcept { return capacity_; }
  std::int32_t fed() const noexcept { return fed_; }
  ModelRunner& runner() noexcept { return runner_; }

 private:
  ModelRunner& runner_;
  std::int32_t capacity_ = 0;
  std::int32_t fed_ = 0;
  std::vector<std::int32_t> blocks_;  // [num_blocks] 0, 1, 2, ...
  Batch batch_;
};

}  // namespace neuron::backend
