#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "engine/histogram.hpp"

namespace neuron::engine {
namespace {

TEST(EngineHistogram, BucketsAreInclusiveUpperBounds) {
  Histogram h({0.1, 1.0});
  h.observe(0.1);   // le 0.1
  h.observe(0.5);   // le 1
  h.observe(1.0);   // le 1
  h.observe(7.0);   // +Inf
  HistogramSnapshot s = h.snapshot();
  ASSERT_EQ(s.counts.size(), 3u);
  EXPECT_EQ(s.counts[0], 1u);
  EXPECT_EQ(s.counts[1], 2u);
  EXPECT_EQ(s.counts[2], 1u);
  EXPECT_EQ(s.cumulative(0), 1u);
  EXPECT_EQ(s.cumulative(1), 3u);
  EXPECT_EQ(s.cumulative(2), 4u);
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.sum, 8.6);
}

TEST(EngineHistogram, MergeAddsCounts) {
  Histogram a({1.0}), b({1.0});
  a.observe(0.5);
  b.observe(2.0);
  b.observe(0.25);
  HistogramSnapshot total;
  total.merge(a.snapshot());
  total.merge(b.snapshot());
  EXPECT_EQ(total.count, 3u);
  EXPECT_EQ(total.cumulative(0), 2u);
  EXPECT_DOUBLE_EQ(total.sum, 2.75);
}

TEST(EngineHistogram, ConcurrentObservationsAreAllCounted) {
  Histogram h(Histogram::latency_seconds_bounds());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h] {
      for (int i = 0; i < 10000; ++i) h.observe(0.003);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.snapshot().count, 40000u);
  EXPECT_EQ(h.snapshot().cumulative(h.snapshot().upper_bounds.size()), 40000u);
}

}  // namespace
}  // namespace neuron::engine
