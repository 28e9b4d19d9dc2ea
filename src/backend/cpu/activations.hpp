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
//         the cost and the speed). A model whose projections are quantized
//         (a quantized GGUF, or quantize-at-load: quantized_weights) takes
//         int8 below under auto (model_activations): a bf16 KV cache, half
//         the bytes a decode step reads at long context, moves its logits by
//         about what the int8 rounding does (KvElement.Bf16CacheFollowsThe-
//         F32One: 1.8% against 1.3% of their range), as llama.cpp's f16
//         cache does. A model that only encodes (an embedder
//         or a reranker: RunnerOptions::encode_only) takes int8 below under
//         auto (model_activations): its bf16 products round x to bf16, as
//         llama.cpp's and sentence-transformers' bf16 runs do, at half the
//         dot products (bench/embed/README.md: the speed, and the cosine to
//         the f32 level on the test fixtures).
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
#include <filesystem>
#include <optional>
#include <string_view>

namespace neuron::io {
class Checkpoint;
}

namespace neuron::backend::cpu {

enum class Activations { f32, bf16, int8, automatic };

std::string_view activations_name(Activations a) noexcept;  // "f32", "bf16", "int8", "auto"
// The level a name gives; nullopt for anything else.
std::optional<Activations> parse_activations(std::string_view name) noexcept;

// The process's choice: NEURON_CPU_ACTIVATIONS read on the first call (auto
// when unset, f32 when unknown, with a warning), unless set_cpu_activations
// came first; thread-safe. Inside an ActivationsScope, that scope's level.
Activations cpu_activations();
// Sets it for the products that start from now on (the serve flag, tests).
void set_cpu_activations(Activations a) noexcept;

// The level a model's products take: `process` (cpu_activations()), except
// that auto is int8 for a model that only encodes (embeddings, rerank
// scores) and for one whose weights are quantized (quantized_weights). An
// explicit level (f32, bf16, int8) is kept for every model.
Activations model_activations(Activations process, bool encode_only, bool quantized_weights) noexcept;

// Whether a load's projections are quantized blocks: quantize-at-load, or a
// GGUF file holding quantized tensors (safetensors hold float ones). The
// planner asks with the model's path (a GGUF header is read), the runner
// with its open checkpoint; both answer alike.
bool quantized_weights(const std::filesystem::path& model, bool quantize_at_load);
bool quantized_weights(const io::Checkpoint* checkpoint, bool quantize_at_load);

// While one lives, cpu_activations() on the thread that made it answers `a`
// instead of the process's level: a runner holds one over its own work (its
// steps, its KV pool's element at load) so that its products take its
// model's level. The kernels read the level on the calling thread, before
// they hand chunks to ChunkPool. Scopes nest; each restores the one before.
class ActivationsScope {
 public:
  explicit ActivationsScope(Activations a) noexcept;
  ~ActivationsScope();
  ActivationsScope(const ActivationsScope&) = delete;
  ActivationsScope& operator=(const ActivationsScope&) = delete;

 private:
  int previous_;  // the thread's level before (an Activations), or -1 for none
};

// Products with quantized weights may round x to int8 (int8, auto).
bool int8_quant_products(Activations a) noexcept;
// Products with bf16 weights may take x in one bf16 term and the KV cache
// holds bf16 (bf16, int8).
bool bf16_float_products(Activations a) noexcept;

}  // namespace neuron::backend::cpu
