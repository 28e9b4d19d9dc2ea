#include "backend/cpu/row_walk.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/cpu/gemv_bf16.hpp"
#include "backend/cpu/isa.hpp"

namespace neuron::backend::cpu {

namespace {

// The last-level cache a core sees: sysfs's index3 (a Zen 4 guest's sysconf
// reports the whole socket's 320 MiB where a core's CCX has 32), else sysconf.
std::size_t l3_bytes() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::size_t kib = 0;
  if (f >> kib && kib > 0) return kib << 10;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<std::size_t>(l3) : std::size_t{32} << 20;
}

// Bytes streamed per timing: past the last-level cache (twice it, 32 to 128
// MiB), so both walks read from memory. About 80 ms at 64 MiB.
std::size_t probe_bytes() {
  return std::clamp<std::size_t>(2 * l3_bytes(), std::size_t{32} << 20, std::size_t{128} << 20);
}

// The fastest of two passes of each walk over W [rows, 1024] bf16 (the
// 0.6B's hidden width), alternating the walks so both see the same machine;
// the faster walk, when it beats the other by 5% (else interleaved, the walk
// the kernels were first tuned for).
RowWalk measure() {
  const Isa isa = selected_isa();
  if (isa == Isa::scalar) return RowWalk::interleaved;  // the scalar kernel has one walk
  constexpr std::int64_t kCols = 1024;
  const auto rows = static_cast<std::int64_t>(probe_bytes() / (2 * kCols));
  std::vector<std::uint16_t> w(static_cast<std::size_t>(rows * kCols));  // [rows, kCols] bf16
  std::fill(w.begin(), w.end(), std::uint16_t{0x3f80});  // 1.0: the pages exist before the timing
  std::vector<float> x(kCols, 0.5f), y(static_cast<std::size_t>(rows));  // [kCols], [rows]
  const GemvOperand operand(isa, x.data(), kCols);
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 2; ++round)
    for (RowWalk walk : {RowWalk::interleaved, RowWalk::sequential}) {
      const auto t0 = std::chrono::steady_clock::now();
      gemv_bf16_rows(isa, w.data(), kCols, rows, operand, y.data(), walk);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double& b = best[walk == RowWalk::sequential];
      b = std::min(b, s);
    }
  const RowWalk walk = best[1] * 1.05 < best[0] ? RowWalk::sequential : RowWalk::interleaved;
  const double gb = static_cast<double>(w.size()) * 2 / 1e9;
  spdlog::info("cpu: decode kernels walk rows {} (one thread over {} MiB: interleaved {:.1f} GB/s, sequential {:.1f})",
               row_walk_name(walk), w.size() * 2 >> 20, gb / best[0], gb / best[1]);
  return walk;
}

RowWalk choose() {
  if (const char* forced = std::getenv("NEURON_CPU_ROWS"); forced && *forced) {
    const std::string_view v(forced);
    if (v == "4") return RowWalk::interleaved;
    if (v == "1") return RowWalk::sequential;
    spdlog::warn("NEURON_CPU_ROWS={} is neither 4 (interleaved) nor 1 (sequential); measuring", v);
  }
  return measure();
}

}  // namespace

std::string_view row_walk_name(RowWalk walk) noexcept {
  return walk == RowWalk::sequential ? "sequential" : "interleaved";
}

RowWalk row_walk() {
  static const RowWalk walk = choose();
  return walk;
}

RowWalk row_walk(std::int64_t tokens) { return tokens >= 4 ? RowWalk::interleaved : row_walk(); }

}  // namespace neuron::backend::cpu
