#pragma once
// The instruction sets the CPU kernels are written for, chosen at run time
// (the binary is built for baseline x86-64; no -march=native anywhere).
#include <string_view>

namespace neuron::backend::cpu {

enum class Isa {
  scalar,       // portable C++
  avx2,         // AVX2 + FMA + F16C, bf16 widened to f32
  avx512,       // AVX-512F/BW, bf16 widened to f32, masked tails
  avx512_bf16,  // AVX-512 BF16 dot products (vdpbf16ps) on a two-term bf16 split of the f32 operand
};

std::string_view isa_name(Isa isa) noexcept;  // "scalar", "avx2", "avx512", "avx512_bf16"
bool isa_supported(Isa isa) noexcept;          // this CPU can run it
// The kernel the runner uses: NEURON_CPU_ISA=<name> when set and supported
// (benchmarks and tests compare variants), else avx512 > avx2 > scalar.
// avx512_bf16 is never chosen here: its operand split gives ~1e-6 relative
// error per product instead of f32's exact products. The one-token decode
// kernels measure it against avx512 where the CPU has it (decode_kernel.hpp)
// and take it where it is faster.
Isa selected_isa();

// NEURON_CPU_ISA named a supported ISA: selected_isa() is forced, and the
// decode kernels do not measure others.
bool isa_forced();

// Intel AMX with BF16 tiles (Sapphire Rapids and later), and the kernel has
// granted this process the tile state: multi-token bf16 products (prefill)
// run on the tile unit. False on every AMD CPU so far, when NEURON_CPU_AMX=0,
// or when NEURON_CPU_ISA forces a kernel below avx512.
bool amx_bf16_usable();

}  // namespace neuron::backend::cpu
