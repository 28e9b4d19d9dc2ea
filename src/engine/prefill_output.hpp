#pragma once
// What a prefill-only sequence (an embedding or a score: DESIGN.md section
// 3a) returns instead of generated tokens. Such a sequence runs its prompt
// through the same scheduler and batches as generations (chunked like any
// prompt, counted in admission), samples nothing, and ends ("stop") with its
// result as soon as its last prompt token is computed; its KV blocks go back
// to the pool then.
#include <cstdint>

namespace neuron::engine {

enum class PrefillOutput : std::uint8_t {
  none,         // a generation: tokens are sampled
  hidden_last,  // the last token's final-norm hidden state: [hidden] f32 (last-token pooling)
  hidden_mean,  // the mean over every token of the final-norm hidden state: [hidden] f32 (mean pooling;
                // such a sequence takes nothing from the prefix cache, so every row is computed)
  logits,       // the logits of the request's `output_ids` at the last token: [output_ids] f32 (rerank scores)
};

}  // namespace neuron::engine
