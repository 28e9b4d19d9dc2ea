#pragma once
// Turning one position's logits into the next token.
//
// Order of operations (as Hugging Face's logits processors apply them):
// repetition penalty, presence / frequency penalties, then greedy argmax when
// temperature == 0, else temperature, top_k, top_p, min_p and a draw from the
// renormalised distribution. Draws come from a std::mt19937_64 seeded from
// `seed` (or the OS when absent), so a seeded request is reproducible.
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

namespace neuron::model {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  float top_p = 1.0f;               // (0, 1]: smallest set of tokens whose probability reaches top_p
  int top_k = 0;                    // 0 = all tokens
  float min_p = 0.0f;               // [0, 1]: drop tokens below min_p * (top probability)
  float repetition_penalty = 1.0f;  // > 0; HF: seen tokens' logits divided (positive) or multiplied (negative)
  float presence_penalty = 0.0f;    // [-2, 2]; OpenAI: subtracted once from every generated token
  float frequency_penalty = 0.0f;   // [-2, 2]; OpenAI: subtracted per occurrence among generated tokens
  std::optional<std::uint64_t> seed;

  // Throws Error{invalid_argument} naming the first field out of range.
  void validate() const;
};

// The greedy pick of one logits row: the first maximum (torch.argmax's tie
// rule); NaN never wins, and a row with no number above -inf picks id 0. The
// one definition that every greedy pick follows, on the host and on a device.
std::int32_t greedy_pick(std::span<const float> logits) noexcept;

class Sampler {
 public:
  // Validates `params`.
  explicit Sampler(const SamplingParams& params);

  // Picks a token from `logits` ([vocab]; used as scratch and left modified).
  // `history` is the sequence so far; its first `prompt_len` tokens are the
  // prompt, which counts for repetition_penalty but not for the presence and
  // frequency penalties (those apply to generated tokens, as OpenAI defines
  // them). `allowed` (constrained decoding, grammar/matcher.hpp), when not
  // null, is a bitset over the logits ([(vocab + 63) / 64] words) with at
  // least one bit set: only those tokens may be drawn, and the filters and
  // the renormalisation see only them. Throws Error{invalid_argument} for
  // empty logits, history ids outside the vocabulary, or an empty `allowed`.
  std::int32_t sample(std::span<float> logits, std::span<const std::int32_t> history, std::size_t prompt_len = 0,
                      const std::uint64_t* allowed = nullptr);

  const SamplingParams& params() const noexcept { return params_; }
  // True when sample() is greedy_pick() of the raw logits (temperature 0, no
  // penalty), so the pick may be made where the logits are (on the device).
  bool plain_greedy() const noexcept;

 private:
  void apply_penalties(std::span<float> logits, std::span<const std::int32_t> history, std::size_t prompt_len);
  double uniform();  // [0, 1), 53 random bits: the same draws on every platform

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::int32_t> order_;  // [vocab] candidate ids, reused between calls
  std::vector<double> probs_;        // [candidates] reused between calls
};

}  // namespace neuron::model
