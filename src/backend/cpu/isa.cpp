#include "backend/cpu/isa.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string_view>

#include <spdlog/spdlog.h>

namespace neuron::backend::cpu {

std::string_view isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
  }
  return "scalar";
}

namespace {
// F16C (CPUID.1:ECX bit 29) is read from CPUID directly: clang's
// __builtin_cpu_supports does not know the name "f16c".
bool has_f16c() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

// What the CPU answers, asked once: CPUID in a virtual machine exits to the
// hypervisor (microseconds), and the kernels ask on every product (1.7% of
// a bf16 Qwen3-0.6B decode on a Zen 5 guest when each call asked).
bool probe(Isa isa) noexcept {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
    case Isa::avx512_bf16: return probe(Isa::avx512) && __builtin_cpu_supports("avx512bf16");
  }
  return false;
}
}  // namespace

bool isa_supported(Isa isa) noexcept {
  static const bool supported[] = {probe(Isa::scalar), probe(Isa::avx2), probe(Isa::avx512), probe(Isa::avx512_bf16)};
  return supported[static_cast<int>(isa)];
}

namespace {
constexpr Isa kAll[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16};

// The ISA NEURON_CPU_ISA names, when it names one this CPU supports.
std::optional<Isa> forced_isa() {
  if (const char* forced = std::getenv("NEURON_CPU_ISA"); forced && *forced) {
    bool known = false;
    for (Isa isa : kAll) {
      if (isa_name(isa) != forced) continue;
      known = true;
      if (isa_supported(isa)) return isa;
      spdlog::warn("NEURON_CPU_ISA={} is not supported by this CPU; choosing automatically", forced);
    }
    if (!known) spdlog::warn("NEURON_CPU_ISA={} is unknown (scalar, avx2, avx512, avx512_bf16); choosing automatically", forced);
  }
  return std::nullopt;
}

Isa choose() {
  if (const std::optional<Isa> forced = forced_isa()) return *forced;
  for (Isa isa : {Isa::avx512, Isa::avx2})
    if (isa_supported(isa)) return isa;
  return Isa::scalar;
}
}  // namespace

Isa selected_isa() {
  static const Isa isa = choose();
  return isa;
}

bool isa_forced() {
  static const bool forced = forced_isa().has_value();
  return forced;
}

namespace {
bool amx_bf16_probe() {
  if (const char* env = std::getenv("NEURON_CPU_AMX"); env && std::string_view(env) == "0") return false;
  if (selected_isa() != Isa::avx512 && selected_isa() != Isa::avx512_bf16) return false;
  if (!isa_supported(Isa::avx512_bf16)) return false;  // packs the activations (every AMX CPU has it)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // CPUID.(7,0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 || (edx & (1u << 22)) == 0 || (edx & (1u << 24)) == 0)
    return false;
  // Linux hands out the 8 KiB tile state only on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) != 0) {
    spdlog::info("cpu: AMX present but the kernel refused the tile state; prefill stays on AVX-512");
    return false;
  }
  return true;
}
}  // namespace

bool amx_bf16_usable() {
  static const bool usable = amx_bf16_probe();
  return usable;
}

}  // namespace neuron::backend::cpu
