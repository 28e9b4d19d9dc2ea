// Every family beyond Qwen3 dense against Hugging Face transformers' float32
// reference (tests/data/families/<name>: tiny random checkpoints saved by
// transformers 5.17 from their own classes, with greedy tokens, top-5 logits
// per position and last-position logits; ../shared/fixtures/families/README.md):
// the CPU runner in f32 must give every greedy token and the logits to 1e-4,
// from the checkpoint and from the bf16 GGUF llama.cpp's converter would
// write for it (support/gguf_writer.hpp; bf16 holds the bf16 weights exactly,
// the hybrids' f32 norms and ssm_a undo to the same values).
// The Gated DeltaNet hybrids (qwen3_next-a, qwen3_5-a, qwen3_5_moe-a, whose
// golden.safetensors is not kept here) are also checked, in both formats, for
// what their recurrent state must survive: chunked prefill, batching, snapshots.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "engine/model_loader.hpp"
#include "io/gguf.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/gguf_config.hpp"
#include "model/shard.hpp"
#include "support/gguf_writer.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"
#include "support/argmax.hpp"
#include "support/model_paths.hpp"
#include "support/family_golden.hpp"

namespace neuron {
namespace {

using test_support::family_dir;
using Prompt = test_support::GoldenPrompt;

using test_support::argmax;

// (family fixture, "safetensors" or "gguf")
class FamilyGolden : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    dir_ = family_dir(family());
    if (std::get<1>(GetParam()) == "gguf") {
      tmp_ = std::make_unique<test_support::TempDir>("neuron-family-gguf");
      gguf_ = *tmp_ / "model.gguf";
      test_support::gguf_from_checkpoint(dir_, quant::GgmlType::bf16).write(gguf_);
      configs_ = model::configs_from_gguf(io::GgufFile(gguf_));
    } else {
      configs_ = model::load_model_configs(dir_);
    }
    const auto ckpt = checkpoint();
    const auto& cfg = configs_.model;
    runner_ = backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{}, nullptr,
                                   {.max_context = 1024});
    prompts_ = test_support::load_golden_prompts(dir_);
  }
  // The fixture's weights in this case's format (the GGUF file as llama.cpp's converter would write it).
  io::Checkpoint checkpoint() const { return gguf_.empty() ? io::Checkpoint::open_dir(dir_) : io::Checkpoint::open_files({gguf_}); }
  std::size_t vocab() const { return static_cast<std::size_t>(configs_.model.vocab_size); }
  std::string family() const { return std::get<0>(GetParam()); }

  std::unique_ptr<test_support::TempDir> tmp_;  // holds the GGUF file of a gguf case
  std::filesystem::path gguf_;
  std::string dir_;
  model::ModelConfigs configs_;
  std::unique_ptr<backend::ModelRunner> runner_;
  std::vector<Prompt> prompts_;
};

TEST_P(FamilyGolden, GreedyTokensMatchExactly) {
  ASSERT_EQ(prompts_.size(), 4u);
  for (const auto& g : prompts_) {
    backend::SingleSequence seq(*runner_);
    std::vector<float> logits(vocab());
    seq.forward(g.ids, 0, logits);
    std::vector<std::int32_t> got;
    auto pos = static_cast<std::int32_t>(g.ids.size());
    while (got.size() < g.greedy.size()) {
      got.push_back(argmax(logits));
      const std::array<std::int32_t, 1> step{got.back()};
      seq.forward(step, pos++, logits);
    }
    EXPECT_EQ(got, g.greedy) << family() << " prompt " << g.name;
  }
}

TEST_P(FamilyGolden, TopFiveAtEveryRecordedPosition) {
  for (const auto& g : prompts_) {
    backend::SingleSequence seq(*runner_);
    const auto n = static_cast<std::int64_t>(g.ids.size());
    ASSERT_FALSE(g.top5.empty());
    // What precedes the first recorded position without logits, then every position from there in one call.
    const std::int64_t first = g.top5.front().pos;
    if (first > 0) seq.forward(std::span(g.ids).first(static_cast<std::size_t>(first)), 0, {});
    std::vector<float> logits(static_cast<std::size_t>(n - first) * vocab());
    seq.forward(std::span(g.ids).subspan(static_cast<std::size_t>(first)), static_cast<std::int32_t>(first), logits);
    for (const auto& t : g.top5) {
      ASSERT_TRUE(t.pos >= first && t.pos < n);
      std::span<const float> row(logits.data() + static_cast<std::size_t>(t.pos - first) * vocab(), vocab());
      std::vector<std::int32_t> ids(row.size());
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(ids.begin(), ids.begin() + 5, ids.end(), [&](auto a, auto b) { return row[a] > row[b]; });
      ids.resize(5);
      EXPECT_EQ(ids, t.ids) << family() << " " << g.name << " position " << t.pos;
      for (std::size_t k = 0; k < 5; ++k)
        EXPECT_NEAR(row[static_cast<std::size_t>(t.ids[k])], t.logits[k], 1e-4)
            << family() << " " << g.name << " position " << t.pos << " rank " << k;
    }
  }
}

using FamilyLogits = FamilyGolden;  // the families whose golden.safetensors (last-position logits) is kept

TEST_P(FamilyLogits, LastPositionLogitsWithinRelativeTolerance) {
  io::SafetensorsFile ref(dir_ + "/golden.safetensors");
  int checked = 0;
  for (const auto& g : prompts_) {
    const io::TensorView* t = ref.find(g.name + ".last_logits");
    if (!t) continue;  // recorded for chat and fox
    const std::vector<float> expected = t->to_f32();
    ASSERT_EQ(expected.size(), vocab());
    backend::SingleSequence seq(*runner_);
    std::vector<float> logits(vocab());
    seq.forward(g.ids, 0, logits);
    double worst = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
      worst = std::max(worst, std::abs(double(logits[i]) - expected[i]) / std::max(1.0, std::abs(double(expected[i]))));
    EXPECT_LE(worst, 1e-4) << family() << " " << g.name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& info) {
  std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

// Every family from its checkpoint and from its GGUF file.
const auto kWithGguf = ::testing::Combine(::testing::Values("llama-a", "qwen3_moe-a"), ::testing::Values("safetensors", "gguf"));
const auto kHybrids = ::testing::Combine(::testing::Values("qwen3_next-a", "qwen3_5-a", "qwen3_5_moe-a"),
                                         ::testing::Values("safetensors", "gguf"));
INSTANTIATE_TEST_SUITE_P(Families, FamilyGolden, kWithGguf, param_name);
INSTANTIATE_TEST_SUITE_P(Hybrids, FamilyGolden, kHybrids, param_name);
INSTANTIATE_TEST_SUITE_P(Families, FamilyLogits, kWithGguf, param_name);

// Largest |a - b| / max(1, |b|) over two logits rows.
double rel_diff(std::span<const float> a, std::span<const float> b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  return worst;
}

using HybridState = FamilyGolden;

// The long prompt fed in uneven chunks (one token, a chunk boundary's worth, the rest) gives what one step does:
// the conv and delta-rule state carry across steps.
TEST_P(HybridState, ChunkedPrefillEqualsOneStep) {
  ASSERT_GT(runner_->kv_pool().state_slots, 0);
  const Prompt& g = prompts_.at(3);
  ASSERT_EQ(g.name, "long");
  std::vector<float> whole(vocab()), chunked(vocab());
  backend::SingleSequence(*runner_).forward(g.ids, 0, whole);
  backend::SingleSequence seq(*runner_);
  const std::span<const std::int32_t> ids(g.ids);
  std::size_t at = 0;
  for (std::size_t len : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{300}}) {
    seq.forward(ids.subspan(at, len), static_cast<std::int32_t>(at), {});
    at += len;
  }
  seq.forward(ids.subspan(at), static_cast<std::int32_t>(at), chunked);
  EXPECT_LE(rel_diff(chunked, whole), 1e-4);
  EXPECT_EQ(argmax(chunked), argmax(whole));
  EXPECT_EQ(argmax(chunked), g.greedy.front());
  // The state cannot rewind: resuming inside what was fed is refused.
  EXPECT_THROW(seq.forward(ids.first(1), 5, {}), Error);
}

// One step holding several sequences of different lengths, each with its own state slot and blocks: two prompts
// prefilled whole, one decoding after its prompt ran in an earlier step; each equals the sequence run alone.
TEST_P(HybridState, BatchedMixedPrefillAndDecodeEqualsEachAlone) {
  const auto& cfg = configs_.model;
  const auto ckpt = checkpoint();
  auto batched = backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{}, nullptr,
                                      {.max_context = 1024, .kv_blocks = 256, .state_slots = 4});
  ASSERT_EQ(batched->kv_pool().state_slots, 4);
  const std::int32_t bs = batched->kv_pool().block_size;
  auto blocks = [&](std::int32_t first, std::int32_t positions) {
    std::vector<std::int32_t> t(static_cast<std::size_t>((positions + bs - 1) / bs));
    std::iota(t.begin(), t.end(), first);
    return t;
  };
  const Prompt &chat = prompts_.at(0), &fox = prompts_.at(1), &longp = prompts_.at(3);
  const auto fox_n = static_cast<std::int32_t>(fox.ids.size());
  // Earlier step: fox's prompt alone in slot 2 (blocks 100..), so the next step decodes it.
  const auto fox_blocks = blocks(100, fox_n + 1);
  std::vector<float> fox_prompt_logits(vocab());
  backend::Batch first;
  first.add(fox.ids, 0, fox_blocks, backend::LogitsWanted::last, 2);
  batched->step(first, fox_prompt_logits);
  const std::array<std::int32_t, 1> fox_next{fox.greedy.front()};
  ASSERT_EQ(argmax(fox_prompt_logits), fox_next[0]);
  // The mixed step: chat's prompt (slot 3), fox decoding (slot 2), the long prompt (slot 0).
  backend::Batch step;
  step.add(chat.ids, 0, blocks(0, static_cast<std::int32_t>(chat.ids.size())), backend::LogitsWanted::last, 3);
  step.add(fox_next, fox_n, fox_blocks, backend::LogitsWanted::last, 2);
  step.add(longp.ids, 0, blocks(110, static_cast<std::int32_t>(longp.ids.size())), backend::LogitsWanted::last, 0);
  std::vector<float> rows(3 * vocab());
  batched->step(step, rows);

  auto alone = [&](std::span<const std::int32_t> ids) {
    std::vector<float> out(vocab());
    backend::SingleSequence(*runner_).forward(ids, 0, out);
    return out;
  };
  std::vector<std::int32_t> fox_then(fox.ids);
  fox_then.push_back(fox_next[0]);
  const std::array<std::vector<float>, 3> expected{alone(chat.ids), alone(fox_then), alone(longp.ids)};
  const std::array<std::int32_t, 3> next{chat.greedy.front(), fox.greedy.at(1), longp.greedy.front()};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::span<const float> row(rows.data() + i * vocab(), vocab());
    EXPECT_LE(rel_diff(row, expected[i]), 1e-4) << "sequence " << i;
    EXPECT_EQ(argmax(row), next[i]) << "sequence " << i;
  }
  // Two sequences may not share a state slot in one step.
  backend::Batch clash;
  clash.add(chat.ids, 0, blocks(0, 15), backend::LogitsWanted::none, 1);
  clash.add(fox.ids, 0, blocks(100, 4), backend::LogitsWanted::none, 1);
  EXPECT_THROW(batched->step(clash, {}), Error);
  // Every sequence of a hybrid names a slot inside the pool.
  for (std::int32_t bad : {-1, 4}) {
    backend::Batch b;
    b.add(fox.ids, 0, blocks(100, 4), backend::LogitsWanted::none, bad);
    EXPECT_THROW(batched->step(b, {}), Error) << "slot " << bad;
  }
}

// A snapshot of a slot at a block boundary, restored into another slot, continues exactly as the original slot
// does (the copy is the whole conv and delta-rule state), even after the original slot started over; the
// continuation equals the uncut prompt's logits.
TEST_P(HybridState, ASnapshotRestoredIntoAnotherSlotContinuesExactly) {
  const auto& cfg = configs_.model;
  const auto ckpt = checkpoint();
  auto r = backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{}, nullptr,
                                {.max_context = 1024, .kv_blocks = 256, .state_slots = 2, .state_snapshots = 1});
  ASSERT_EQ(r->kv_pool().state_snapshots, 1);
  EXPECT_EQ(r->memory().kv_cache_bytes - r->kv_pool().bytes_per_block * 256, 3 * r->kv_pool().bytes_per_state_slot);
  const std::int32_t bs = r->kv_pool().block_size;
  const Prompt& g = prompts_.at(3);
  const auto n = static_cast<std::int32_t>(g.ids.size());
  const std::int32_t cut = 20 * bs;
  std::vector<std::int32_t> table(static_cast<std::size_t>((n + bs - 1) / bs));
  std::iota(table.begin(), table.end(), 0);
  const std::span<const std::int32_t> ids(g.ids);
  auto run = [&](std::span<const std::int32_t> tokens, std::int32_t position, std::int32_t slot,
                 std::span<float> logits) {
    backend::Batch b;
    const auto blocks = std::span<const std::int32_t>(table).first(
        static_cast<std::size_t>((position + static_cast<std::int32_t>(tokens.size()) + bs - 1) / bs));
    b.add(tokens, position, blocks, logits.empty() ? backend::LogitsWanted::none : backend::LogitsWanted::last, slot);
    r->step(b, logits);
  };
  run(ids.first(static_cast<std::size_t>(cut)), 0, 0, {});
  r->save_state(0, 0);
  std::vector<float> in_place(vocab()), restored(vocab()), again(vocab()), whole(vocab());
  run(ids.subspan(static_cast<std::size_t>(cut)), cut, 0, in_place);
  r->restore_state(0, 1);
  run(ids.subspan(static_cast<std::size_t>(cut)), cut, 1, restored);
  EXPECT_EQ(rel_diff(restored, in_place), 0.0);
  {  // slot 0 starts another sequence (in blocks of its own): the snapshot is its own copy
    backend::Batch other;
    const std::array<std::int32_t, 2> other_blocks{200, 201};
    other.add(ids.subspan(7, 5), 0, other_blocks, backend::LogitsWanted::none, 0);
    r->step(other, {});
  }
  r->restore_state(0, 1);
  run(ids.subspan(static_cast<std::size_t>(cut)), cut, 1, again);
  EXPECT_EQ(rel_diff(again, in_place), 0.0);
  backend::SingleSequence(*runner_).forward(g.ids, 0, whole);
  EXPECT_LE(rel_diff(restored, whole), 1e-5);
  EXPECT_EQ(argmax(restored), g.greedy.front());
  // Indices outside the pools are refused before anything is copied.
  for (auto [slot, snap] : {std::pair{-1, 0}, std::pair{2, 0}, std::pair{0, -1}, std::pair{0, 1}}) {
    EXPECT_THROW(r->save_state(slot, snap), Error) << slot << " " << snap;
    EXPECT_THROW(r->restore_state(snap, slot), Error) << slot << " " << snap;
  }
}

INSTANTIATE_TEST_SUITE_P(Hybrids, HybridState, kHybrids, param_name);

// The load plan counts the snapshots in the model's memory; a model without linear attention has neither state
// slots nor snapshots, and its runner refuses both copies.
TEST(HybridSnapshots, CountedInTheLoadPlanAndRefusedWithoutLinearAttention) {
  const auto cfg = model::load_model_configs(family_dir("qwen3_5-a")).model;
  engine::LoadOptions options;
  options.model_dir = family_dir("qwen3_5-a");
  const auto base = engine::plan_load(options, cfg);
  EXPECT_EQ(base.runner.state_snapshots, backend::kDefaultSnapshotsPerSlot * backend::kDefaultStateSlots);
  options.state_snapshots = 0;
  const auto none = engine::plan_load(options, cfg);
  EXPECT_EQ(none.runner.state_snapshots, 0);
  EXPECT_EQ(base.rank_bytes.at(0) - none.rank_bytes.at(0),
            backend::state_bytes_per_slot(cfg, model::ShardPlan::make(cfg, 0, 1)) * static_cast<std::uint64_t>(*base.runner.state_snapshots));
  options.state_snapshots = -1;
  EXPECT_THROW(engine::plan_load(options, cfg), Error);

  const auto dense = model::load_model_configs(family_dir("llama-a")).model;
  auto r = backend::make_runner(dense, nullptr, model::ShardPlan::make(dense, 0, 1), backend::Device{}, nullptr,
                                {.max_context = 64});
  EXPECT_EQ(r->kv_pool().state_slots, 0);
  EXPECT_EQ(r->kv_pool().state_snapshots, 0);
  EXPECT_THROW(r->save_state(0, 0), Error);
  EXPECT_THROW(r->restore_state(0, 0), Error);
}

}  // namespace
}  // namespace neuron
