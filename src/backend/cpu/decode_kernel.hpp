#pragma once
// How the decode kernels (gemv_bf16, gemm_bf16_few, gemm_quant_few) run on
// this CPU: how they walk W's rows and, for the quantized types, which
// dot-product instructions they multiply with. Measured once per process and
// weight type, not assumed per vendor.
//
// A decode product streams W from memory once, and a core reaches the memory
// system's speed only with enough misses in flight and little enough
// arithmetic per byte. On a Sapphire Rapids core that takes four rows read
// side by side (one load of x feeding all four), each software-prefetched
// ahead (bench/CPU.md); on a Zen 4 core the same walk over bf16 rows reaches
// 10 GB/s a core, where one sequential stream left to the hardware
// prefetcher reaches 27, while Q4_K rows, bound by their unpacking there,
// go faster interleaved (bench/CPU.md, 2026-12-04). So the first product of
// a type times (in the thread's CPU time) that type's kernel both ways over a buffer twice the
// last-level cache (at most 256 MiB; 8 under ASan), on the calling thread, and keeps the faster;
// NEURON_CPU_ROWS=4 (interleaved) or 1 (sequential) forces a walk.
//
// The walks give bit-identical products: every row's sum is accumulated in
// the same order either way, so which one a process picks never changes a
// token.
//
// The instructions: on a CPU with AVX-512 BF16 a one-token product can
// multiply W (bf16 weights, or Q4_K / Q6_K quants: small integers, exact in
// bf16) by x's two bf16 terms with vdpbf16ps, 32 products an instruction,
// where the f32 kernels widen or convert each weight to f32 and spend an FMA
// on 16 (gemv_bf16.hpp, gemm_quant_few.hpp; both within 1e-5 of the f32
// product, not bit-equal to each other). Which is faster depends on the core
// (Zen 4 runs 512-bit operations as two halves), so the same first product
// times both kinds with both walks and keeps the fastest;
// NEURON_CPU_ISA=avx512 forces the f32 kernels. With int8 activations
// (NEURON_CPU_ACTIVATIONS=int8, gemm_quant_few.hpp) the types with int8
// kernels time those kernels' two walks instead.
#include <cstdint>
#include <string_view>

#include "backend/cpu/isa.hpp"
#include "quant/ggml_type.hpp"

namespace neuron::backend::cpu {

enum class RowWalk {
  interleaved,  // a few rows side by side (4 with AVX-512, 2 in the AVX2 bf16 and f32 quantized kernels), prefetched ahead
  sequential,   // one row after another: one stream a thread, the hardware prefetcher's
};

std::string_view row_walk_name(RowWalk walk) noexcept;  // "interleaved", "sequential"

// A one-token product's kernel: its walk and the ISA its kernel is picked by.
struct DecodeKernel {
  RowWalk walk = RowWalk::interleaved;
  Isa isa = Isa::scalar;
};

// This process's kernel for one token of W in `type` (bf16, or a type
// gemm_quant_few takes: Q8_0, Q4_K, Q6_K, Q4_0, Q5_K; any other:
// interleaved, selected_isa()). The first
// call for a type measures it; thread-safe.
DecodeKernel decode_kernel(quant::GgmlType type);

// decode_kernel(type).walk.
RowWalk row_walk(quant::GgmlType type);

// The walk for a product of `tokens` tokens: row_walk(type) below a full
// token tile (4); interleaved from there, where every weight feeds four
// tokens' FMAs and the kernels are bound by arithmetic, which the
// interleaved walk's shared loads of x cut (Zen 4, 0.6B batched decode,
// interleaved against sequential tok/s: 4 sequences 43.8 / 37.7 bf16, 72.1
// / 63.5 q4_k; 16 sequences 71.4 / 48.0 bf16; 2 sequences 31.3 / 37.3 bf16,
// the other way).
RowWalk row_walk(quant::GgmlType type, std::int64_t tokens);

}  // namespace neuron::backend::cpu
