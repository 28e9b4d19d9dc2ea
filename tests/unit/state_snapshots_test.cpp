// StateSnapshots (a hybrid's recurrent-state snapshot slots, keyed by the cached
// block that ends at their boundary) and the Scheduler's use of them, without a
// runner: which copies a step plans, where prefill chunks are cut, and that a
// snapshot goes with its block when the block cache evicts it.
#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

#include "engine/block_manager.hpp"
#include "engine/scheduler.hpp"
#include "engine/sequence.hpp"
#include "engine/state_snapshots.hpp"

namespace neuron::engine {
namespace {

TEST(StateSnapshots, TakeFindDropAndLeastRecentlyUsedReplacement) {
  StateSnapshots s(2);
  EXPECT_EQ(s.capacity(), 2);
  const auto a = s.take(10), b = s.take(11);
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_FALSE(s.take(10)) << "one snapshot per block";
  EXPECT_EQ(s.used(), 2);
  EXPECT_EQ(s.find(10), a);  // 10 is now the most recently used: 11 goes first
  const auto c = s.take(12);
  EXPECT_EQ(c, b);
  EXPECT_FALSE(s.find(11));
  EXPECT_EQ(s.find(10), a);
  s.drop(10);
  s.drop(10);  // twice: nothing
  s.drop(99);  // never had one: nothing
  EXPECT_EQ(s.used(), 1);
  EXPECT_EQ(s.take(13), a);  // the freed slot
  StateSnapshots none(0);
  EXPECT_FALSE(none.take(1));
  EXPECT_FALSE(none.find(1));
}

struct Quiet final : SequenceObserver {
  std::optional<FinishReason> on_token(std::int32_t) override { return std::nullopt; }
  void on_finish(FinishReason) override {}
};

std::vector<std::int32_t> ids(std::int32_t n, std::int32_t from) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

// Runs a plan as the Batcher would (the runner aside) and returns the saves complete() asked for.
std::vector<StateCopy> run(Scheduler& sched, const StepPlan& plan) { return sched.complete(plan); }

TEST(SchedulerSnapshots, ChunksEndAtTheLastFullBlockAndAHitRestoresThere) {
  BlockManager blocks(32, 4, true);
  Scheduler sched(blocks, {.max_num_seqs = 4, .max_batch_tokens = 100, .state_slots = 2, .state_snapshots = 4});
  Quiet q;
  Sequence a(1, SequenceParams{.prompt = ids(10, 100), .max_tokens = 8}, q);
  a.tokens = a.params().prompt;
  sched.add(a);
  StepPlan p = sched.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].num_new, 8) << "the chunk stops at the last full-block boundary (8 of 10)";
  EXPECT_FALSE(p.seqs[0].sample);
  EXPECT_TRUE(p.restores.empty());
  auto saves = run(sched, p);
  ASSERT_EQ(saves.size(), 1u);
  EXPECT_EQ(saves[0].slot, a.state_slot);
  p = sched.schedule();
  EXPECT_EQ(p.seqs.at(0).num_new, 2);
  EXPECT_TRUE(p.seqs[0].sample);
  EXPECT_TRUE(run(sched, p).empty()) << "10 is no block boundary";
  EXPECT_EQ(sched.snapshots().used(), 1);

  // Decoding past the prompt: a snapshot at every boundary, each replacing the sequence's previous one.
  for (std::int32_t t = 0; t < 7; ++t) {
    a.tokens.push_back(500 + t);
    p = sched.schedule();
    ASSERT_EQ(p.seqs.at(0).num_new, 1);
    saves = run(sched, p);
    EXPECT_EQ(saves.size(), a.computed % 4 == 0 ? 1u : 0u) << "at " << a.computed;
    EXPECT_EQ(sched.snapshots().used(), a.computed >= 12 ? 2 : 1) << "at " << a.computed;
  }
  EXPECT_EQ(a.computed, 17);
  sched.remove(a);

  // Its first 14 tokens: 3 cached blocks match, but the snapshot at 12 was replaced, so the hit ends at 8 (the
  // third block goes back) and the chunk runs to 12.
  Sequence c(2, SequenceParams{.prompt = std::vector<std::int32_t>(a.tokens.begin(), a.tokens.begin() + 14)}, q);
  c.tokens = c.params().prompt;
  sched.add(c);
  p = sched.schedule();
  EXPECT_EQ(c.computed, 8);
  EXPECT_EQ(c.blocks.size(), 3u) << "2 reused and 1 fresh for [8, 12)";
  ASSERT_EQ(p.restores.size(), 1u);
  EXPECT_EQ(p.restores[0].slot, c.state_slot);
  EXPECT_EQ(p.seqs.at(0).num_new, 4);
  sched.remove(c);

  // All 17 and more: the hit ends at 16, where the latest snapshot is.
  Sequence b(3, SequenceParams{.prompt = a.tokens, .max_tokens = 4}, q);
  b.tokens = b.params().prompt;
  b.tokens.insert(b.tokens.end(), {900, 901, 902, 903, 904});
  sched.add(b);
  p = sched.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(b.computed, 16);
  EXPECT_EQ(b.cached_prompt_tokens, 16);
  ASSERT_EQ(p.restores.size(), 1u);
  EXPECT_EQ(p.restores[0].slot, b.state_slot);
  EXPECT_EQ(p.seqs[0].num_new, 4) << "from 16 to the last full-block boundary of 22 tokens (20)";
  run(sched, p);
  sched.remove(b);

  // A prefix whose only snapshot-holding block is past it gets no hit: it starts at 0.
  Sequence d(4, SequenceParams{.prompt = ids(6, 100), .max_tokens = 4}, q);
  d.tokens = d.params().prompt;
  sched.add(d);
  p = sched.schedule();
  EXPECT_EQ(d.computed, 0);
  EXPECT_TRUE(p.restores.empty());
  sched.remove(d);
  EXPECT_EQ(blocks.stats().used, 0);
}

TEST(SchedulerSnapshots, AnEvictedBlockTakesItsSnapshotWithIt) {
  BlockManager blocks(8, 4, true);
  Scheduler sched(blocks, {.max_num_seqs = 4, .max_batch_tokens = 64, .state_slots = 2, .state_snapshots = 4});
  Quiet q;
  Sequence a(1, SequenceParams{.prompt = ids(9, 100), .max_tokens = 1}, q);
  a.tokens = a.params().prompt;
  sched.add(a);
  while (a.computed < a.len()) run(sched, sched.schedule());
  sched.remove(a);
  EXPECT_EQ(sched.snapshots().used(), 1);
  EXPECT_EQ(blocks.stats().evictable, 2);

  // Another prompt needs every block: a's cached ones are evicted, and their snapshot is dropped.
  Sequence z(2, SequenceParams{.prompt = ids(30, 1000), .max_tokens = 1}, q);
  z.tokens = z.params().prompt;
  sched.add(z);
  while (z.computed < z.len()) run(sched, sched.schedule());
  sched.remove(z);
  EXPECT_EQ(sched.snapshots().used(), 1) << "only z's own (at 28)";
  Sequence again(3, SequenceParams{.prompt = ids(9, 100), .max_tokens = 1}, q);
  again.tokens = again.params().prompt;
  sched.add(again);
  const StepPlan p = sched.schedule();
  EXPECT_EQ(again.computed, 0);
  EXPECT_TRUE(p.restores.empty());
  sched.remove(again);
}

// A prompt whose KV blocks are cached but whose snapshot was replaced is recomputed into private duplicate
// blocks; the snapshot it takes on the way belongs to the cached block, so the next repeat resumes there.
TEST(SchedulerSnapshots, ARecomputedPrefixSnapshotsOntoTheCachedBlock) {
  BlockManager blocks(32, 4, true);
  Scheduler sched(blocks, {.max_num_seqs = 4, .max_batch_tokens = 64, .state_slots = 2, .state_snapshots = 1});
  Quiet q;
  auto once = [&](std::uint64_t id, std::vector<std::int32_t> prompt) {
    Sequence s(id, SequenceParams{.prompt = std::move(prompt), .max_tokens = 1}, q);
    s.tokens = s.params().prompt;
    sched.add(s);
    std::int32_t restores = 0, saves = 0;
    while (s.computed < s.len()) {
      const StepPlan p = sched.schedule();
      restores += static_cast<std::int32_t>(p.restores.size());
      saves += static_cast<std::int32_t>(run(sched, p).size());
    }
    const std::int32_t from = s.cached_prompt_tokens;
    sched.remove(s);
    return std::tuple{from, restores, saves};
  };
  EXPECT_EQ(once(1, ids(10, 100)), std::tuple(0, 0, 1));  // a snapshot at 8
  EXPECT_EQ(once(2, ids(10, 500)), std::tuple(0, 0, 1));  // replaces it (capacity 1)
  EXPECT_EQ(once(3, ids(10, 100)), std::tuple(0, 0, 1)) << "recomputed: its snapshot at 8 is taken anyway";
  EXPECT_EQ(once(4, ids(10, 100)), std::tuple(8, 1, 0)) << "resumes from it";
  EXPECT_EQ(blocks.stats().used, 0);
}

TEST(SchedulerSnapshots, WithoutSnapshotsAHybridTakesNoPrefix) {
  BlockManager blocks(16, 4, true);
  Scheduler sched(blocks, {.max_num_seqs = 4, .max_batch_tokens = 64, .state_slots = 2, .state_snapshots = 0});
  Quiet q;
  Sequence a(1, SequenceParams{.prompt = ids(10, 100), .max_tokens = 1}, q);
  a.tokens = a.params().prompt;
  sched.add(a);
  StepPlan p = sched.schedule();
  EXPECT_EQ(p.seqs.at(0).num_new, 10) << "no cut without snapshots";
  EXPECT_TRUE(run(sched, p).empty());
  sched.remove(a);
  Sequence b(2, SequenceParams{.prompt = ids(10, 100), .max_tokens = 1}, q);
  b.tokens = b.params().prompt;
  sched.add(b);
  p = sched.schedule();
  EXPECT_EQ(b.computed, 0) << "cached KV blocks alone cannot resume a recurrent state";
  EXPECT_TRUE(p.restores.empty());
  sched.remove(b);
}

}  // namespace
}  // namespace neuron::engine
