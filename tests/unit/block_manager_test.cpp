// BlockManager: allocation, reference counts, prefix matching by content and
// chain, LRU eviction of cached blocks, and no leaks.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "engine/block_manager.hpp"

namespace neuron::engine {
namespace {

std::vector<std::int32_t> iota(std::int32_t n, std::int32_t from = 100) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(BlockManager, GrowIsAllOrNothingAndReleaseGivesEverythingBack) {
  BlockManager bm(8, 4, true);
  std::vector<std::int32_t> a, b;
  ASSERT_TRUE(bm.grow(a, 20));  // 5 blocks
  EXPECT_EQ(a.size(), 5u);
  EXPECT_FALSE(bm.grow(b, 16));  // 4 more do not fit in the 3 left
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(bm.available(), 3);
  ASSERT_TRUE(bm.grow(b, 12));
  EXPECT_EQ(bm.stats().used, 8);
  bm.release(a);
  bm.release(b);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(bm.stats().used, 0);
  EXPECT_EQ(bm.available(), 8);
}

TEST(BlockManager, FullBlocksAreSharedByPrefixAndChain) {
  BlockManager bm(16, 4, true);
  const auto tokens = iota(10);
  std::vector<std::int32_t> a;
  ASSERT_TRUE(bm.grow(a, 10));
  EXPECT_EQ(bm.register_full(a, tokens, 10, 0), 2);  // two full blocks of 4
  EXPECT_EQ(bm.stats().cached, 2);

  // Same first 8 tokens: both blocks, shared (refs 2).
  auto m = bm.match_prefix(tokens, 9);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], a[0]);
  EXPECT_EQ(m[1], a[1]);
  EXPECT_EQ(bm.stats().used, 3);  // a's three blocks; the shared two count once
  // max_tokens caps the match: 7 tokens cover one full block only.
  auto capped = bm.match_prefix(tokens, 7);
  EXPECT_EQ(capped.size(), 1u);
  bm.release(capped);

  // The second block's tokens after a different first block: no match past the first.
  auto other = tokens;
  other[1] = 999;
  auto none = bm.match_prefix(other, 9);
  EXPECT_TRUE(none.empty());
  // Identical second block content but a different prefix must not match either.
  std::vector<std::int32_t> shifted = {1, 2, 3, 4, tokens[4], tokens[5], tokens[6], tokens[7]};
  EXPECT_TRUE(bm.match_prefix(shifted, 8).empty());

  bm.release(a);
  bm.release(m);
  EXPECT_EQ(bm.stats().used, 0);
  EXPECT_EQ(bm.stats().evictable, 2);  // cached, held by nobody, still matchable
  auto later = bm.match_prefix(tokens, 10);
  EXPECT_EQ(later.size(), 2u);
  bm.release(later);
}

TEST(BlockManager, CachedBlocksAreEvictedLeastRecentlyUsedFirstAndOnlyWhenNeeded) {
  BlockManager bm(4, 2, true);
  const auto x = iota(4, 10), y = iota(4, 50);
  std::vector<std::int32_t> a, b;
  ASSERT_TRUE(bm.grow(a, 4));
  bm.register_full(a, x, 4, 0);
  bm.release(a);
  ASSERT_TRUE(bm.grow(b, 4));  // takes the two never-cached blocks first
  bm.register_full(b, y, 4, 0);
  bm.release(b);
  EXPECT_EQ(bm.stats().evictable, 4);
  // Touch x: y becomes the least recently used.
  auto hit = bm.match_prefix(x, 4);
  ASSERT_EQ(hit.size(), 2u);
  bm.release(hit);
  std::vector<std::int32_t> c;
  ASSERT_TRUE(bm.grow(c, 2));  // one block: evicts y's tail first (released last-first)
  EXPECT_EQ(bm.match_prefix(y, 4).size(), 1u);  // y's head survives
  auto xs = bm.match_prefix(x, 4);
  EXPECT_EQ(xs.size(), 2u);
  bm.release(xs);
  bm.release(c);
}

TEST(BlockManager, DuplicateContentStaysPrivateAndLeaksNothing) {
  BlockManager bm(8, 2, true);
  const auto t = iota(4);
  std::vector<std::int32_t> a, b;
  ASSERT_TRUE(bm.grow(a, 4));
  ASSERT_TRUE(bm.grow(b, 4));  // computed separately (e.g. both prefilled in one step)
  bm.register_full(a, t, 4, 0);
  EXPECT_EQ(bm.register_full(b, t, 4, 0), 2);
  EXPECT_EQ(bm.stats().cached, 2);  // b's copies are not registered twice
  bm.release(a);
  bm.release(b);
  EXPECT_EQ(bm.stats().used, 0);
  EXPECT_EQ(bm.available(), 8);
}

// A sequence that recomputed a cached prefix into private blocks, registering them over two chunks (the first
// ending on a duplicate), still chains its later blocks from the prefix's keys: they match.
TEST(BlockManager, BlocksAfterAPrivateDuplicateChainAcrossCalls) {
  BlockManager bm(16, 2, true);
  const auto t = iota(8);
  std::vector<std::int32_t> a, b;
  ASSERT_TRUE(bm.grow(a, 4));
  bm.register_full(a, t, 4, 0);  // blocks [0, 4) cached by a
  ASSERT_TRUE(bm.grow(b, 8));
  std::int32_t registered = bm.register_full(b, t, 4, 0);  // b's first two duplicate a's: private
  EXPECT_EQ(registered, 2);
  registered = bm.register_full(b, t, 8, registered);  // [4, 8): new content, chained from the duplicate's key
  EXPECT_EQ(registered, 4);
  EXPECT_EQ(bm.stats().cached, 4);
  bm.release(a);
  bm.release(b);
  std::vector<std::int32_t> c = bm.match_prefix(t, 8);
  EXPECT_EQ(c.size(), 4u);
  // Each of c's blocks is the cached one for its prefix; b's duplicates (held again by d) point at a's.
  for (std::int32_t id : c) EXPECT_EQ(bm.cached_block(id), id);
  std::vector<std::int32_t> d;
  ASSERT_TRUE(bm.grow(d, 2));
  EXPECT_EQ(bm.cached_block(d[0]), -1) << "a fresh block has no prefix yet";
  bm.register_full(d, t, 2, 0);
  EXPECT_EQ(bm.cached_block(d[0]), c[0]) << "a private duplicate stands for the cached block it copies";
  bm.release(d);
  bm.release(c);
  EXPECT_EQ(bm.stats().used, 0);
}

TEST(BlockManager, WithoutPrefixCachingNothingMatches) {
  BlockManager bm(8, 2, false);
  const auto t = iota(4);
  std::vector<std::int32_t> a;
  ASSERT_TRUE(bm.grow(a, 4));
  EXPECT_EQ(bm.register_full(a, t, 4, 0), 0);
  bm.release(a);
  EXPECT_TRUE(bm.match_prefix(t, 4).empty());
  EXPECT_EQ(bm.stats().cached, 0);
}

}  // namespace
}  // namespace neuron::engine
