#include "backend/cpu/decode_kernel.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <new>
#include <vector>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/cpu/gemv_bf16.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/weight_buffer.hpp"
#include "util/sanitizers.hpp"

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

// Bytes streamed per timing: past the last-level cache (twice it, 32 to 256
// MiB), so both walks read from memory, as a model's weights are. A guest
// often reports a whole socket's L3 (508 MiB on a Zen 5 EPYC guest, whose
// cores see 32 each), hence the cap: 640 MiB there, in 4 KiB pages, took 3 s
// of every load; 256 MiB in huge pages takes ~0.15 s for bf16's four
// candidates (same guest, 2026-12-06), with the same pick.
// Under ASan the kernels are instrumented and timing them measures that, not
// the memory: a small probe still runs (and bounds-checks) the same code, in
// ~0.1 s where 256 MiB took 4 s of every model load of the sanitizer tests.
std::size_t probe_bytes() {
  if constexpr (NEURON_ASAN) return std::size_t{8} << 20;
  return std::clamp<std::size_t>(2 * l3_bytes(), std::size_t{32} << 20, std::size_t{256} << 20);
}

// Seconds of CPU time the calling thread has run: a timing that the
// scheduler's preemptions do not lengthen. On a 2-vCPU guest shared with
// builds (load average 10), wall-clock timings had Q4_K's two walks level
// (5.9 / 6.1 GB/s, interleaved / sequential) where their CPU times give
// 12.9 / 18.7 (Zen 5 forced to AVX2, 2026-12-06), and the pick went to
// the slower walk.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The fastest of `product`'s candidates (a walk with an ISA), each timed
// twice in the thread's CPU time, alternating so all see the same machine;
// a candidate other than the first (interleaved with the selected ISA, what the kernels were first
// tuned for) must beat it by 5%.
DecodeKernel fastest(GgmlType type, std::size_t bytes, const std::vector<DecodeKernel>& candidates,
                     const std::function<void(const DecodeKernel&)>& product) {
  std::vector<double> best(candidates.size(), 1e30);
  for (int round = 0; round < 2; ++round)
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const double t0 = thread_seconds();
      product(candidates[i]);
      best[i] = std::min(best[i], thread_seconds() - t0);
    }
  std::size_t pick = 0;
  for (std::size_t i = 1; i < candidates.size(); ++i)
    if (best[i] * 1.05 < best[0] && best[i] < best[pick]) pick = i;
  const double gb = static_cast<double>(bytes) / 1e9;
  std::string timings;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    timings += fmt::format("{}{} {} {:.1f}", i ? ", " : "", isa_name(candidates[i].isa),
                           row_walk_name(candidates[i].walk), gb / best[i]);
  spdlog::info("cpu: {} decode kernels: {} walking rows {} (one thread over {} MiB, GB/s: {})",
               quant::ggml_type_name(type), isa_name(candidates[pick].isa), row_walk_name(candidates[pick].walk),
               bytes >> 20, timings);
  return candidates[pick];
}

// Both walks of each kernel for W in `type` under `isa`: on an AVX-512 BF16
// CPU (unless NEURON_CPU_ISA forces one) for bf16, Q4_K and Q6_K the f32
// kernels, then the vdpbf16ps ones (x in two bf16 terms; for bf16 weights
// gemv_bf16's avx512_bf16 kernel, for Q4_K and Q6_K the pair kernels).
std::vector<DecodeKernel> candidates(Isa isa, GgmlType type) {
  std::vector<DecodeKernel> out;
  const bool pairs = (isa == Isa::avx512_bf16 || (isa == Isa::avx512 && !isa_forced())) &&
                     isa_supported(Isa::avx512_bf16) &&
                     (type == GgmlType::bf16 || gemm_quant_few_bf16_pairs(Isa::avx512_bf16, type));
  for (Isa k : pairs ? std::vector<Isa>{Isa::avx512, Isa::avx512_bf16} : std::vector<Isa>{isa})
    for (RowWalk walk : {RowWalk::interleaved, RowWalk::sequential}) out.push_back({walk, k});
  return out;
}

DecodeKernel measure(GgmlType type) {
  const Isa isa = selected_isa();
  const std::size_t bytes = probe_bytes();
  std::vector<float> x(kCols, 0.5f);  // [kCols]
  if (type == GgmlType::bf16) {
    if (isa == Isa::scalar) return {RowWalk::interleaved, isa};  // the scalar kernel has one walk
    const auto rows = static_cast<std::int64_t>(bytes / (2 * kCols));
    // Huge pages (weight_buffer.hpp), as a model's weights have: 4 KiB faults over hundreds of MiB cost seconds.
    WeightVector<std::uint16_t> w(static_cast<std::size_t>(rows * kCols));  // [rows, kCols] bf16 1.0
    std::fill(w.begin(), w.end(), std::uint16_t{0x3f80});
    std::vector<float> y(static_cast<std::size_t>(rows));                          // [rows]
    const GemvOperand f32(Isa::avx512, x.data(), kCols), pairs(Isa::avx512_bf16, x.data(), kCols);
    return fastest(type, w.size() * 2, candidates(isa, type), [&](const DecodeKernel& k) {
      gemv_bf16_rows(k.isa, w.data(), kCols, rows, k.isa == Isa::avx512_bf16 ? pairs : f32, y.data(), k.walk);
    });
  }
  const bool int8 = int8_quant_products(cpu_activations()) && gemm_quant_few_int8(isa, type);
  if (!int8 && !gemm_quant_few_supported(isa, type)) return {RowWalk::interleaved, isa};
  QuantMatrix m;
  m.type = type;
  m.cols = kCols;
  m.row_bytes = quant::row_bytes(type, kCols);
  m.rows = static_cast<std::int64_t>(bytes / m.row_bytes);
  // Every byte 0x2c: quants of every kind, and each f16 scale 0x2c2c, an ordinary normal number.
  m.data.assign(static_cast<std::size_t>(m.rows) * m.row_bytes, std::byte{0x2c});  // [rows * row_bytes]
  std::vector<float> y(static_cast<std::size_t>(m.rows));                           // [rows]
  if (int8) {  // the int8 kernels' walks
    const QuantOperand operand(Activations::int8, type, x.data(), 1, kCols, kCols);
    spdlog::info("cpu: {} decode kernels take int8 activations ({} kernels)", quant::ggml_type_name(type),
                 int8_kernels_name(int8_kernels(isa)));
    return fastest(type, m.data.size(), {{RowWalk::interleaved, isa}, {RowWalk::sequential, isa}},
                   [&](const DecodeKernel& k) {
                     gemm_quant_few_rows(isa, k.walk, operand, m, 0, m.rows, y.data(), m.rows);
                   });
  }
  return fastest(type, m.data.size(), candidates(isa, type), [&](const DecodeKernel& k) {
    gemm_quant_few_rows(k.isa, k.walk, QuantOperand(k.isa, type, x.data(), 1, kCols, kCols), m, 0, m.rows, y.data(),
                        m.rows);
  });
}

DecodeKernel choose(GgmlType type) {
  const Isa isa = selected_isa();
  if (const char* forced = std::getenv("NEURON_CPU_ROWS"); forced && *forced) {
    const std::string_view v(forced);
    if (v == "4") return {RowWalk::interleaved, isa};
    if (v == "1") return {RowWalk::sequential, isa};
    spdlog::warn("NEURON_CPU_ROWS={} is neither 4 (interleaved) nor 1 (sequential); measuring", v);
  }
  try {
    return measure(type);
  } catch (const std::bad_alloc&) {  // no room for the probe buffer: keep the first-tuned kernel
    spdlog::warn("cpu: no memory to measure the {} decode kernels; walking rows interleaved",
                 quant::ggml_type_name(type));
    return {RowWalk::interleaved, isa};
  }
}

}  // namespace

std::string_view row_walk_name(RowWalk walk) noexcept {
  return walk == RowWalk::sequential ? "sequential" : "interleaved";
}

namespace {
// Type T's kernel, measured on the first call (a thread-safe static a type).
template <GgmlType T>
DecodeKernel measured_once() {
  static const DecodeKernel kernel = choose(T);
  return kernel;
}
}  // namespace

DecodeKernel decode_kernel(GgmlType type) {
  switch (type) {
    case GgmlType::bf16: return measured_once<GgmlType::bf16>();
    case GgmlType::q8_0: return measured_once<GgmlType::q8_0>();
    case GgmlType::q4_k: return measured_once<GgmlType::q4_k>();
    case GgmlType::q6_k: return measured_once<GgmlType::q6_k>();
    case GgmlType::q4_0: return measured_once<GgmlType::q4_0>();
    case GgmlType::q5_k: return measured_once<GgmlType::q5_k>();
    default: return {RowWalk::interleaved, selected_isa()};
  }
}

RowWalk row_walk(GgmlType type) { return decode_kernel(type).walk; }

RowWalk row_walk(GgmlType type, std::int64_t tokens) { return tokens >= 4 ? RowWalk::interleaved : row_walk(type); }

}  // namespace neuron::backend::cpu
