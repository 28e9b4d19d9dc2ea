#include "model/sampler.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <string>

#include "util/error.hpp"

namespace neuron::model {

namespace {
void require(bool ok, const char* field, const std::string& rule, float value) {
  if (!ok) fail(errc::invalid_argument, std::string(field) + " must be " + rule + " (got " + std::to_string(value) + ")");
}
}  // namespace

void SamplingParams::validate() const {
  require(std::isfinite(temperature) && temperature >= 0.0f, "temperature", "a finite number >= 0", temperature);
  require(std::isfinite(top_p) && top_p > 0.0f && top_p <= 1.0f, "top_p", "in (0, 1]", top_p);
  require(top_k >= 0, "top_k", ">= 0", static_cast<float>(top_k));
  require(std::isfinite(min_p) && min_p >= 0.0f && min_p <= 1.0f, "min_p", "in [0, 1]", min_p);
  require(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f, "repetition_penalty", "a finite number > 0",
          repetition_penalty);
  require(std::isfinite(presence_penalty) && presence_penalty >= -2.0f && presence_penalty <= 2.0f, "presence_penalty",
          "in [-2, 2]", presence_penalty);
  require(std::isfinite(frequency_penalty) && frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
          "frequency_penalty", "in [-2, 2]", frequency_penalty);
}

std::int32_t greedy_pick(std::span<const float> logits) noexcept {
  std::size_t best = 0;
  float best_value = -INFINITY;
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > best_value) {
      best = i;
      best_value = logits[i];
    }
  return static_cast<std::int32_t>(best);
}

bool Sampler::plain_greedy() const noexcept {
  return params_.temperature == 0.0f && params_.repetition_penalty == 1.0f && params_.presence_penalty == 0.0f &&
         params_.frequency_penalty == 0.0f;
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  params_.validate();
  rng_.seed(params_.seed ? *params_.seed : std::random_device{}());
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Sampler::apply_penalties(std::span<float> logits, std::span<const std::int32_t> history, std::size_t prompt_len) {
  const bool repetition = params_.repetition_penalty != 1.0f;
  const bool additive = params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  if ((!repetition && !additive) || history.empty()) return;
  prompt_len = std::min(prompt_len, history.size());

  if (repetition) {
    std::vector<std::int32_t> seen(history.begin(), history.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (std::int32_t id : seen) {
      float& l = logits[static_cast<std::size_t>(id)];
      l = l > 0.0f ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }
  if (additive) {
    std::vector<std::int32_t> generated(history.begin() + static_cast<std::ptrdiff_t>(prompt_len), history.end());
    std::sort(generated.begin(), generated.end());
    for (std::size_t i = 0; i < generated.size();) {
      std::size_t j = i;
      while (j < generated.size() && generated[j] == generated[i]) ++j;
      logits[static_cast<std::size_t>(generated[i])] -=
          params_.presence_penalty + params_.frequency_penalty * static_cast<float>(j - i);
      i = j;
    }
  }
}

std::int32_t Sampler::sample(std::span<float> logits, std::span<const std::int32_t> history, std::size_t prompt_len,
                             const std::uint64_t* allowed) {
  const std::size_t vocab = logits.size();
  if (vocab == 0) fail(errc::invalid_argument, "cannot sample from empty logits");
  for (std::int32_t id : history)
    if (id < 0 || static_cast<std::size_t>(id) >= vocab)
      fail(errc::invalid_argument, "token id " + std::to_string(id) + " in the history is outside the vocabulary of " +
                                       std::to_string(vocab));
  apply_penalties(logits, history, prompt_len);

  // Candidates: every token, or only the allowed ones (listed, so an
  // excluded token costs nothing past the scan of its bit).
  std::size_t n = vocab;
  bool listed = false;
  if (allowed) {
    const std::size_t words = (vocab + 63) / 64;
    order_.clear();
    for (std::size_t w = 0; w < words; ++w)
      for (std::uint64_t bits = allowed[w]; bits; bits &= bits - 1) {
        const std::size_t id = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        if (id < vocab) order_.push_back(static_cast<std::int32_t>(id));
      }
    if (order_.empty()) fail(errc::invalid_argument, "no token is allowed");
    n = order_.size();
    listed = true;
  }
  const std::size_t candidates = n;

  if (params_.temperature == 0.0f) {
    if (!listed) return greedy_pick(logits);
    // The first maximum among the allowed ids (listed in ascending order).
    std::int32_t best = order_[0];
    for (std::size_t i = 1; i < n; ++i)
      if (logits[static_cast<std::size_t>(order_[i])] > logits[static_cast<std::size_t>(best)]) best = order_[i];
    return best;
  }

  // Candidates, sorted by descending logit only as far as a filter needs.
  if (!listed) {
    order_.resize(vocab);
    std::iota(order_.begin(), order_.end(), 0);
  }
  auto by_logit = [&](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < n) {
    n = static_cast<std::size_t>(params_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n),
                      order_.begin() + static_cast<std::ptrdiff_t>(candidates), by_logit);
  }

  float max_logit = -INFINITY;
  for (std::size_t i = 0; i < n; ++i) max_logit = std::max(max_logit, logits[static_cast<std::size_t>(order_[i])]);
  if (!std::isfinite(max_logit)) fail(errc::invalid_argument, "logits have no finite maximum");

  // Unnormalised softmax with temperature; the top candidate has weight 1.
  const double inv_t = 1.0 / params_.temperature;
  auto weight = [&](std::int32_t id) {
    return std::exp((static_cast<double>(logits[static_cast<std::size_t>(id)]) - max_logit) * inv_t);
  };
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) total += weight(order_[i]);

  if (params_.top_p < 1.0f) {
    // Keep the shortest prefix (by descending probability) whose mass reaches
    // top_p, always at least one token. Sorting the whole vocabulary costs
    // ~10 ms a token; the nucleus is usually a few dozen tokens, so sort a
    // growing head until its mass reaches the target.
    const double target = static_cast<double>(params_.top_p) * total;
    const bool sorted = n < candidates;  // top_k sorted its candidates already
    for (std::size_t head = sorted ? n : std::min<std::size_t>(n, 64);; head = std::min(n, head * 8)) {
      if (!sorted)
        std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(head),
                          order_.begin() + static_cast<std::ptrdiff_t>(n), by_logit);
      double cum = 0.0;
      std::size_t keep = 0;
      while (keep < head && cum < target) cum += weight(order_[keep++]);
      if (cum >= target || head == n) {
        n = keep;
        total = cum;
        break;
      }
    }
  }
  probs_.resize(n);
  for (std::size_t i = 0; i < n; ++i) probs_[i] = weight(order_[i]);
  if (params_.min_p > 0.0f) {
    // Relative to the most likely token, whose unnormalised weight is 1.
    total = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (probs_[i] < params_.min_p) probs_[i] = 0.0;
      total += probs_[i];
    }
  }

  const double target = uniform() * total;
  double cum = 0.0;
  std::size_t last_kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (probs_[i] == 0.0) continue;
    last_kept = i;
    cum += probs_[i];
    if (target < cum) return order_[i];
  }
  return order_[last_kept];  // rounding left the draw a hair past the end
}

}  // namespace neuron::model
