#include "backend/cpu/row_walk.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <new>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/cpu/gemv_bf16.hpp"
#include "backend/cpu/isa.hpp"

namespace neuron::backend::cpu {

namespace {

using quant::GgmlType;

constexpr std::int64_t kCols = 1024;  // the 0.6B's hidden width

// The last-level cache a core sees: sysfs's index3 (a Zen 4 guest's sysconf
// reports the whole socket's 320 MiB where a core's CCX has 32), else sysconf.
std::size_t l3_bytes() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::size_t kib = 0;
  if (f >> kib && kib > 0) return kib << 10;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<std::size_t>(l3) : std::size_t{32} << 20;
}

// Bytes streamed per timing: past the last-level cache (twice it, 32 to 640
// MiB), so both walks read from memory, as a model's weights are. About 80
// ms a type at 64 MiB (Zen 4 guest), ~0.5 s at 600 MiB (a 300 MiB-L3 Xeon).
std::size_t probe_bytes() {
  return std::clamp<std::size_t>(2 * l3_bytes(), std::size_t{32} << 20, std::size_t{640} << 20);
}

// The faster of `product`'s two walks, each timed twice, alternating so both
// see the same machine: sequential when it beats interleaved by 5% (else
// interleaved, the walk the kernels were first tuned for).
RowWalk faster(GgmlType type, std::size_t bytes, const std::function<void(RowWalk)>& product) {
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 2; ++round)
    for (RowWalk walk : {RowWalk::interleaved, RowWalk::sequential}) {
      const auto t0 = std::chrono::steady_clock::now();
      product(walk);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double& b = best[walk == RowWalk::sequential];
      b = std::min(b, s);
    }
  const RowWalk walk = best[1] * 1.05 < best[0] ? RowWalk::sequential : RowWalk::interleaved;
  const double gb = static_cast<double>(bytes) / 1e9;
  spdlog::info("cpu: {} decode kernels walk rows {} (one thread over {} MiB: interleaved {:.1f} GB/s, "
               "sequential {:.1f})",
               quant::ggml_type_name(type), row_walk_name(walk), bytes >> 20, gb / best[0], gb / best[1]);
  return walk;
}

RowWalk measure(GgmlType type) {
  const Isa isa = selected_isa();
  const std::size_t bytes = probe_bytes();
  std::vector<float> x(kCols, 0.5f);  // [kCols]
  if (type == GgmlType::bf16) {
    if (isa == Isa::scalar) return RowWalk::interleaved;  // the scalar kernel has one walk
    const auto rows = static_cast<std::int64_t>(bytes / (2 * kCols));
    std::vector<std::uint16_t> w(static_cast<std::size_t>(rows * kCols), 0x3f80);  // [rows, kCols] bf16 1.0
    std::vector<float> y(static_cast<std::size_t>(rows));                          // [rows]
    const GemvOperand operand(isa, x.data(), kCols);
    return faster(type, w.size() * 2, [&](RowWalk walk) {
      gemv_bf16_rows(isa, w.data(), kCols, rows, operand, y.data(), walk);
    });
  }
  if (!gemm_quant_few_supported(isa, type)) return RowWalk::interleaved;
  QuantMatrix m;
  m.type = type;
  m.cols = kCols;
  m.row_bytes = quant::row_bytes(type, kCols);
  m.rows = static_cast<std::int64_t>(bytes / m.row_bytes);
  // Every byte 0x2c: quants of every kind, and each f16 scale 0x2c2c, an ordinary normal number.
  m.data.assign(static_cast<std::size_t>(m.rows) * m.row_bytes, std::byte{0x2c});  // [rows * row_bytes]
  std::vector<float> y(static_cast<std::size_t>(m.rows));                           // [rows]
  return faster(type, m.data.size(), [&](RowWalk walk) {
    gemm_quant_few_rows(isa, walk, x.data(), 1, kCols, m, 0, m.rows, y.data(), m.rows);
  });
}

RowWalk choose(GgmlType type) {
  if (const char* forced = std::getenv("NEURON_CPU_ROWS"); forced && *forced) {
    const std::string_view v(forced);
    if (v == "4") return RowWalk::interleaved;
    if (v == "1") return RowWalk::sequential;
    spdlog::warn("NEURON_CPU_ROWS={} is neither 4 (interleaved) nor 1 (sequential); measuring", v);
  }
  try {
    return measure(type);
  } catch (const std::bad_alloc&) {  // no room for the probe buffer: keep the first-tuned walk
    spdlog::warn("cpu: no memory to measure the {} row walk; walking rows interleaved", quant::ggml_type_name(type));
    return RowWalk::interleaved;
  }
}

}  // namespace

std::string_view row_walk_name(RowWalk walk) noexcept {
  return walk == RowWalk::sequential ? "sequential" : "interleaved";
}

namespace {
// Type T's walk, measured on the first call (a thread-safe static a type).
template <GgmlType T>
RowWalk measured_once() {
  static const RowWalk walk = choose(T);
  return walk;
}
}  // namespace

RowWalk row_walk(GgmlType type) {
  switch (type) {
    case GgmlType::bf16: return measured_once<GgmlType::bf16>();
    case GgmlType::q8_0: return measured_once<GgmlType::q8_0>();
    case GgmlType::q4_k: return measured_once<GgmlType::q4_k>();
    case GgmlType::q6_k: return measured_once<GgmlType::q6_k>();
    default: return RowWalk::interleaved;
  }
}

RowWalk row_walk(GgmlType type, std::int64_t tokens) { return tokens >= 4 ? RowWalk::interleaved : row_walk(type); }

}  // namespace neuron::backend::cpu
