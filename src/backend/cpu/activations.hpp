#pragma once
// How far the CPU products may round the activations (x) before multiplying
// them with the weights: the one precision choice the user makes for the CPU
// kernels, process-wide (serve --cpu-activations, NEURON_CPU_ACTIVATIONS).
//
//   f32   every product is f32 up to summation order, or within ~1e-6 of
//         |w x| per product where a kernel splits x into bf16 terms (the
//         1e-5 bound issue 14 holds the kernels to). What the tests run
//         (their transformers comparisons need it).
//   auto  the default: products with quantized weights (GGUF blocks) round
//         x as int8 below does, everything else as f32 (bf16 weights, the
//         KV cache). A quantized file's weights are already rounded to 4-8
//         bits; rounding x to int8 adds ~1e-2 of a product to their own
//         error, as llama.cpp does for these types (bench/CPU.md measures
//         the cost and the speed).
//   bf16  products on AVX-512 BF16 dot products (the prefill's
//         gemm_bf16_pairs and gemm_quant_pairs) round x to bf16, as
//         llama.cpp's bf16 product does: one dot product per weight pair
//         instead of two, ~2^-9 of |w x| per product; and the KV cache
//         holds bf16 (attention.hpp's KvPool; llama.cpp keeps f16): half the
//         memory a position, half the bytes a decode step reads. Everything
//         else stays as in f32.
//   int8  bf16 as above, and quantized products whose type has int8 kernels
//         (gemm_quant_few: Q4_K, Q6_K, Q8_0, Q5_K, Q4_0 on any AVX2 CPU)
//         round x to int8 per 256 columns (llama.cpp's Q8_K).
//
// Each of bf16 and int8 keeps what the one before it allows, so a process set
// to int8 rounds a bf16 model's prefill products to bf16 as well.
#include <optional>
#include <string_view>

namespace neuron::backend::cpu {

enum class Activations { f32, bf16, int8, automatic };

std::string_view activations_name(Activations a) noexcept;  // "f32", "bf16", "int8", "auto"
// The level a name gives; nullopt for anything else.
std::optional<Activations> parse_activations(std::string_view name) noexcept;

// The process's choice: NEURON_CPU_ACTIVATIONS read on the first call (auto
// when unset, f32 when unknown, with a warning), unless set_cpu_activations
// came first; thread-safe.
Activations cpu_activations();
// Sets it for the products that start from now on (the serve flag, tests).
void set_cpu_activations(Activations a) noexcept;

// Products with quantized weights may round x to int8 (int8, auto).
bool int8_quant_products(Activations a) noexcept;
// Products with bf16 weights may take x in one bf16 term and the KV cache
// holds bf16 (bf16, int8).
bool bf16_float_products(Activations a) noexcept;

}  // namespace neuron::backend::cpu
