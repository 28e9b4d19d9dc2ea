#include "backend/cpu/bandwidth.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace neuron::backend::cpu {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRuns = 7;

// Each thread's share of [0, n), so every thread touches (and first-touches) its own pages.
std::pair<std::size_t, std::size_t> share(std::size_t n) {
  const auto t = static_cast<std::size_t>(omp_get_thread_num()), k = static_cast<std::size_t>(omp_get_num_threads());
  return {n * t / k, n * (t + 1) / k};
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

double measure_copy_bandwidth_gbs(std::size_t bytes) {
  auto src = std::make_unique_for_overwrite<std::byte[]>(bytes);
  auto dst = std::make_unique_for_overwrite<std::byte[]>(bytes);
#pragma omp parallel
  {
    const auto [b, e] = share(bytes);
    std::memset(src.get() + b, 0x5a, e - b);
    std::memset(dst.get() + b, 0, e - b);
  }
  std::vector<double> gbs;
  for (int run = 0; run <= kRuns; ++run) {
    const auto t0 = Clock::now();
#pragma omp parallel
    {
      const auto [b, e] = share(bytes);
      std::memcpy(dst.get() + b, src.get() + b, e - b);
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (run > 0) gbs.push_back(2.0 * static_cast<double>(bytes) / s / 1e9);  // run 0 warms up
  }
  return median(gbs);
}

double measure_read_bandwidth_gbs(std::size_t bytes) {
  const std::size_t n = bytes / sizeof(std::uint64_t);
  auto data = std::make_unique_for_overwrite<std::uint64_t[]>(n);
#pragma omp parallel
  {
    const auto [b, e] = share(n);
    for (std::size_t i = b; i < e; ++i) data[i] = i;
  }
  std::vector<double> gbs;
  std::uint64_t sink = 0;
  for (int run = 0; run <= kRuns; ++run) {
    const auto t0 = Clock::now();
#pragma omp parallel reduction(^ : sink)
    {
      const auto [b, e] = share(n);
      // Four independent lanes so the loop is bound by loads, not by one xor chain.
      std::uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      std::size_t i = b;
      for (; i + 4 <= e; i += 4) {
        a0 ^= data[i];
        a1 ^= data[i + 1];
        a2 ^= data[i + 2];
        a3 ^= data[i + 3];
      }
      for (; i < e; ++i) a0 ^= data[i];
      sink ^= a0 ^ a1 ^ a2 ^ a3;
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (run > 0) gbs.push_back(static_cast<double>(n * sizeof(std::uint64_t)) / s / 1e9);
  }
  // The reduction's result must be observable, or the reads could be elided.
  volatile std::uint64_t keep = sink;
  (void)keep;
  return median(gbs);
}

}  // namespace neuron::backend::cpu
