// Weight storage of the CPU runner: large buffers sit in their own 2 MiB
// aligned mapping (huge pages where the kernel allows) and go back to the
// system when freed; small ones behave like any vector.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <numeric>

#include "backend/cpu/weight_buffer.hpp"
#include "util/sanitizers.hpp"

namespace neuron::backend::cpu {
namespace {

std::uint64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

TEST(CpuWeightBuffer, LargeBuffersAreHugePageAlignedAndGivenBack) {
#if NEURON_ASAN
  GTEST_SKIP() << "under ASan weights come from malloc, so that their bounds stay checked";
#endif
  constexpr std::size_t kCount = std::size_t{48} << 20;  // 96 MiB of bf16
  const std::uint64_t before = rss_bytes();
  {
    WeightVector<std::uint16_t> w(kCount);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(w.data()) % weight_memory::kHugePage, 0u);
    std::iota(w.begin(), w.end(), std::uint16_t{0});  // every byte writable, all of it resident now
    EXPECT_EQ(w[kCount - 1], static_cast<std::uint16_t>(kCount - 1));
    EXPECT_GT(rss_bytes(), before + kCount);  // at least half of the 2 * kCount bytes
  }
  EXPECT_LT(rss_bytes(), before + kCount / 4) << "freeing must unmap the buffer at once";
}

TEST(CpuWeightBuffer, SmallBuffersAndCopiesBehaveLikeVectors) {
  WeightVector<std::uint16_t> a(10);
  std::iota(a.begin(), a.end(), std::uint16_t{1});
  WeightVector<std::uint16_t> b = a;
  EXPECT_EQ(b, a);
  WeightVector<std::uint16_t> big(std::size_t{2} << 20);
  big[0] = 7;
  WeightVector<std::uint16_t> moved = std::move(big);
  EXPECT_EQ(moved[0], 7);
  EXPECT_EQ(moved.size(), std::size_t{2} << 20);
}

}  // namespace
}  // namespace neuron::backend::cpu
