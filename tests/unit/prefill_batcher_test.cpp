// Prefill-only sequences in the Batcher (engine/prefill_output.hpp) on the
// CPU runner over qwen3-tiny-a: mean-pooled and last-token sequences batched
// with a generation, chunked, and preempted for lack of KV blocks (a
// preempted mean-pooled sequence starts its sum over; one whose mean leaves
// out its first 100 positions, which end inside a chunk) give what each gives
// alone, end "stop" without sampling, and leave no block held.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "backend/model_runner.hpp"
#include "dist/communicator.hpp"
#include "engine/batcher.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"

namespace neuron::engine {
namespace {

const std::filesystem::path kTiny = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";

struct Ending final : SequenceObserver {
  std::optional<FinishReason> reason;
  int tokens = 0;
  std::optional<FinishReason> on_token(std::int32_t) override {
    ++tokens;
    return std::nullopt;
  }
  void on_finish(FinishReason r) override { reason = r; }
};

std::unique_ptr<backend::ModelRunner> tiny(std::int32_t kv_blocks) {
  const auto cfg = model::load_model_configs(kTiny).model;
  const auto ckpt = io::Checkpoint::open_dir(kTiny);
  return backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{},
                              std::make_shared<dist::LocalCommunicator>(), {.max_context = 1024, .kv_blocks = kv_blocks});
}

std::vector<std::int32_t> prompt(std::int32_t first, std::int32_t n) {
  std::vector<std::int32_t> p;
  for (std::int32_t i = 0; i < n; ++i) p.push_back((first + 7919 * i) % 150000);
  return p;
}

SequenceParams prefill(std::vector<std::int32_t> p, PrefillOutput output, std::int32_t mean_from = 0) {
  return SequenceParams{.prompt = std::move(p), .max_tokens = 1, .output = output, .mean_from = mean_from};
}

// Runs the batcher until every sequence ended.
void run(Batcher& b, std::vector<Sequence*> seqs) {
  for (Sequence* s : seqs) {
    s->tokens = s->params().prompt;
    b.add(*s);
  }
  for (int i = 0; i < 10000 && !b.idle(); ++i) b.step();
  ASSERT_TRUE(b.idle());
}

std::vector<float> alone(PrefillOutput output, const std::vector<std::int32_t>& p, std::int32_t mean_from = 0) {
  auto runner = tiny(128);
  Batcher b(*runner, {.scheduler = {.max_num_seqs = 4, .max_batch_tokens = 1024}});
  Ending end;
  Sequence s(0, prefill(p, output, mean_from), end);
  run(b, {&s});
  EXPECT_EQ(end.reason, FinishReason::stop);
  return s.output;
}

TEST(PrefillBatcher, ChunkedPreemptedAndMixedWithAGenerationEqualAlone) {
  const auto pa = prompt(11, 300), pb = prompt(23, 150);
  const auto want_a = alone(PrefillOutput::hidden_mean, pa), want_b = alone(PrefillOutput::hidden_last, pb);
  const auto want_c = alone(PrefillOutput::hidden_mean, pa, 100);
  float moved = 0;  // leaving positions out moves the mean
  for (std::size_t i = 0; i < want_a.size(); ++i) moved = std::max(moved, std::abs(want_a[i] - want_c[i]));
  EXPECT_GT(moved, 1e-3f);

  // 30 blocks of 16: the generation grows to 25 (200 + 200 positions) while the mean-pooled one needs 19, so the
  // later-admitted prefills are preempted (and start over) until the generation is done.
  auto runner = tiny(30);
  Batcher b(*runner, {.scheduler = {.max_num_seqs = 8, .max_batch_tokens = 64}});
  Ending ea, eb, ec, eg;
  Sequence g(1, SequenceParams{.prompt = prompt(3, 200), .max_tokens = 200, .ignore_eos = true}, eg);
  Sequence a(2, prefill(pa, PrefillOutput::hidden_mean), ea), bseq(3, prefill(pb, PrefillOutput::hidden_last), eb);
  Sequence c(4, prefill(pa, PrefillOutput::hidden_mean, 100), ec);
  run(b, {&g, &a, &bseq, &c});
  EXPECT_GT(a.preemptions, 0) << "the mean-pooled sequence was never preempted: the test does not reach its restart";
  for (auto [seq, end, want] : {std::tuple{&a, &ea, &want_a}, std::tuple{&bseq, &eb, &want_b}, std::tuple{&c, &ec, &want_c}}) {
    EXPECT_EQ(end->reason, FinishReason::stop);
    EXPECT_EQ(end->tokens, 0) << "a prefill-only sequence sampled";
    ASSERT_EQ(seq->output.size(), want->size());
    // 1e-4: a chunk's token count picks the product kernel (on AVX512-BF16 CPUs, f32 FMAs under 16 tokens, else
    // activations as two bf16 terms: ~2^-17 of each), so the same positions in other chunks can differ by
    // ~1e-5; an engine error (a chunk lost, a position off) moves them by 1e-3 and more (`moved` above).
    for (std::size_t i = 0; i < want->size(); ++i) EXPECT_NEAR(seq->output[i], (*want)[i], 1e-4) << "sequence " << seq->id();
  }
  EXPECT_EQ(eg.tokens, 200);
  EXPECT_EQ(b.blocks().used, 0);
}

}  // namespace
}  // namespace neuron::engine
