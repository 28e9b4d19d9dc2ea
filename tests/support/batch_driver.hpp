#pragma once
// Drives several sequences through a ModelRunner together, as a continuous
// batching engine would, and the same sequences one at a time through
// SingleSequence, so tests can hold the batched path to the solo one (and a
// tensor-parallel runner to a single-rank one).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "backend/batch.hpp"
#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "support/argmax.hpp"

namespace neuron::test_support {

struct SeqPlan {
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> chunks;  // prefill chunk sizes summing to prompt.size(); empty: the whole prompt at once
  int start_step = 0;                // the batch step at which the sequence joins
};

// What one sequence saw: logits[0] after its prompt, logits[k] after its k-th
// decode token; tokens[k] = argmax(logits[k]), the token fed next.
struct SeqTrace {
  std::vector<std::int32_t> tokens;
  std::vector<std::vector<float>> logits;  // [decode_steps + 1][vocab] f32
};

// max |got - want| / max |want|: 0 for identical rows.
inline double relative_error(std::span<const float> got, std::span<const float> want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  if (got.size() != want.size()) return INFINITY;
  return scale > 0 ? diff / scale : diff;
}

// How far (relative_error) TP = N's logits may be from one rank's. Every
// process times its own one-token kernels (backend/cpu/decode_kernel.hpp): on
// an AVX-512 BF16 CPU one rank may multiply in f32 and another with x in two
// bf16 terms, each within 1e-5 of the f32 product and not bit-equal to each
// other; through the layers that reached 1.06e-5 (Qwen3 fixture at TP = 2, a
// Zen 4 guest, 2026-12-08; ~7e-6 with the kinds forced apart), where the same
// kernels everywhere stay under 1e-6. A shard or a reduction gone wrong moves
// logits by 1e-2 and more.
inline constexpr double kAcrossProcesses = 1e-4;

// `n` token ids in [0, vocab), the same for the same seed.
inline std::vector<std::int32_t> random_prompt(std::size_t n, std::int64_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids(n);
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab));
  return ids;
}

// Greedy tokens of one sequence: prefill the prompt, then one decode step per new token (`steps` tokens).
inline std::vector<std::int32_t> greedy(backend::ModelRunner& r, const std::vector<std::int32_t>& prompt, int steps) {
  std::vector<float> logits(static_cast<std::size_t>(r.config().vocab_size));  // [vocab] f32
  backend::SingleSequence seq(r);
  seq.forward(prompt, 0, logits);
  std::vector<std::int32_t> out;
  auto pos = static_cast<std::int32_t>(prompt.size());
  for (int i = 0; i < steps; ++i) {
    out.push_back(argmax(logits));
    if (i + 1 < steps) seq.forward(std::span<const std::int32_t>(&out.back(), 1), pos++, logits);
  }
  return out;
}

// The prompt at once, then decode_steps greedy tokens, alone on the runner.
inline SeqTrace run_solo(backend::ModelRunner& runner, const std::vector<std::int32_t>& prompt, int decode_steps) {
  backend::SingleSequence seq(runner);
  const auto vocab = static_cast<std::size_t>(runner.config().vocab_size);
  SeqTrace t;
  std::vector<float> logits(vocab);  // [vocab] f32
  seq.forward(prompt, 0, logits);
  for (int k = 0;; ++k) {
    t.logits.push_back(logits);
    t.tokens.push_back(argmax(logits));
    if (k == decode_steps) break;
    const std::int32_t one[] = {t.tokens.back()};
    seq.forward(one, seq.fed(), logits);
  }
  return t;
}

// Runs every plan on `runner` in shared steps: a sequence joins at its
// start_step, prefills chunk by chunk (logits only from the last chunk), then
// decodes decode_steps greedy tokens, one per step, next to the others'
// prefills and decodes. Blocks are handed out on demand in `block_order`
// (pool ids; shuffle it for scattered tables), so sequences' tables interleave.
inline std::vector<SeqTrace> run_batched(backend::ModelRunner& runner, const std::vector<SeqPlan>& plans,
                                         int decode_steps, const std::vector<std::int32_t>& block_order) {
  const std::int64_t vocab = runner.config().vocab_size;
  const std::int32_t block_size = runner.kv_pool().block_size;
  struct State {
    std::int32_t fed = 0;
    std::size_t chunk = 0;
    std::vector<std::int32_t> blocks;
    bool done = false;
  };
  std::vector<State> state(plans.size());
  std::vector<SeqTrace> traces(plans.size());
  std::size_t next_block = 0;
  backend::Batch batch;
  std::vector<float> logits;  // [batch.logit_rows(), vocab] f32
  for (int step = 0;; ++step) {
    batch.clear();
    std::vector<std::size_t> rows_of;  // which plan each logits row belongs to
    bool pending = false;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      State& s = state[i];
      const SeqPlan& p = plans[i];
      if (s.done) continue;
      pending = true;
      if (step < p.start_step) continue;
      const auto prompt_len = static_cast<std::int32_t>(p.prompt.size());
      std::span<const std::int32_t> tokens;
      std::int32_t one[1];
      bool want = true;
      if (s.fed < prompt_len) {
        const std::int32_t n = p.chunks.empty() ? prompt_len : p.chunks.at(s.chunk++);
        tokens = std::span(p.prompt).subspan(static_cast<std::size_t>(s.fed), static_cast<std::size_t>(n));
        want = s.fed + n == prompt_len;
      } else {
        one[0] = traces[i].tokens.back();
        tokens = one;
      }
      const std::int32_t end = s.fed + static_cast<std::int32_t>(tokens.size());
      while (static_cast<std::int64_t>(s.blocks.size()) * block_size < end) s.blocks.push_back(block_order.at(next_block++));
      batch.add(tokens, s.fed, s.blocks, want ? backend::LogitsWanted::last : backend::LogitsWanted::none);
      s.fed = end;
      if (want) rows_of.push_back(i);
    }
    if (!pending) break;
    if (batch.empty()) continue;
    logits.assign(static_cast<std::size_t>(batch.logit_rows() * vocab), 0.0f);
    runner.step(batch, logits);
    for (std::size_t r = 0; r < rows_of.size(); ++r) {
      SeqTrace& t = traces[rows_of[r]];
      const auto row = std::span<const float>(logits).subspan(r * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
      t.logits.emplace_back(row.begin(), row.end());
      t.tokens.push_back(argmax(row));
      if (static_cast<int>(t.tokens.size()) == decode_steps + 1) state[rows_of[r]].done = true;
    }
  }
  return traces;
}

// Pool ids 0..n-1, in order or shuffled.
inline std::vector<std::int32_t> block_order(std::int32_t n, std::uint32_t shuffle_seed = 0) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  if (shuffle_seed != 0) std::shuffle(ids.begin(), ids.end(), std::mt19937(shuffle_seed));
  return ids;
}

}  // namespace neuron::test_support
