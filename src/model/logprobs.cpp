#include "model/logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "util/error.hpp"

namespace neuron::model {

TokenLogprobs token_logprobs(std::span<const float> logits, std::int32_t token, int top_n) {
  const std::size_t vocab = logits.size();
  if (vocab == 0) fail(errc::invalid_argument, "cannot take logprobs of empty logits");
  if (token < 0 || static_cast<std::size_t>(token) >= vocab)
    fail(errc::invalid_argument, "token " + std::to_string(token) + " is outside the vocabulary of " + std::to_string(vocab));
  if (top_n < 0 || top_n > kMaxTopLogprobs)
    fail(errc::invalid_argument, "top_logprobs must be between 0 and " + std::to_string(kMaxTopLogprobs));

  float max_logit = -INFINITY;
  for (float l : logits) max_logit = std::max(max_logit, l);
  if (!std::isfinite(max_logit)) fail(errc::invalid_argument, "logits have no finite maximum");
  // Float exponentials (a third of the double ones' cost), summed per block in
  // float and across blocks in double: relative error ~1e-6 at any vocabulary size.
  constexpr std::size_t kBlock = 1024;
  double sum = 0.0;
  for (std::size_t begin = 0; begin < vocab; begin += kBlock) {
    const std::size_t end = std::min(vocab, begin + kBlock);
    float block = 0.0f;
    for (std::size_t i = begin; i < end; ++i) block += std::exp(logits[i] - max_logit);
    sum += block;
  }
  const double log_norm = static_cast<double>(max_logit) + std::log(sum);
  auto logprob = [&](std::size_t id) { return static_cast<float>(static_cast<double>(logits[id]) - log_norm); };

  TokenLogprobs out;
  out.logprob = logprob(static_cast<std::size_t>(token));
  const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(top_n), vocab);
  if (n == 0) return out;
  // The n best ids so far, best first; an id enters only when it beats the
  // worst kept one, so the common case is one comparison per logit.
  std::vector<std::int32_t> best;
  best.reserve(n + 1);
  auto better = [&](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  for (std::size_t id = 0; id < vocab; ++id) {
    const auto i = static_cast<std::int32_t>(id);
    if (best.size() == n && !better(i, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
    if (best.size() > n) best.pop_back();
  }
  out.top.reserve(n);
  for (std::int32_t id : best) out.top.push_back({id, logprob(static_cast<std::size_t>(id))});
  return out;
}

}  // namespace neuron::model
