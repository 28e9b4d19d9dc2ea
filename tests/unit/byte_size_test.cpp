// util::gib: the one formatter of byte counts in messages (load plans, device allocations).
#include <gtest/gtest.h>

#include "util/byte_size.hpp"

namespace neuron {
namespace {

TEST(ByteSize, GibHasTwoDecimals) {
  EXPECT_EQ(util::gib(0), "0.00 GiB");
  EXPECT_EQ(util::gib(3ull << 29), "1.50 GiB");
  EXPECT_EQ(util::gib(24200151040ull), "22.54 GiB");  // the 35B-A3B KV pool of bench/cuda, 2026-12-07
  EXPECT_EQ(util::gib(1ull << 50), "1048576.00 GiB");
}

}  // namespace
}  // namespace neuron
