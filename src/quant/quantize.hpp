#pragma once
// f32 rows to GGUF blocks, ports of llama.cpp's reference quantizers
// (ggml-quants.c quantize_row_q8_0_ref, quantize_row_q4_K_ref,
// quantize_row_q6_K_ref): the blocks neuron makes when it quantizes a
// safetensors model at load are the ones llama.cpp's reference would make.
#include <cstddef>
#include <cstdint>

#include "quant/ggml_type.hpp"

namespace neuron::quant {

// The types a float checkpoint's projections can be quantized to at load:
// q8_0, q4_k, q6_k (every backend, through quantize_row) and fp8_e4m3 (CUDA,
// quantized on the device).
bool quantizable_at_load(GgmlType type) noexcept;

// How quantize_row runs the k-quants' scale searches: eight sub-blocks at a
// time on AVX2 where the CPU has it (automatic), or one at a time as the
// reference does (scalar). The bytes are the same either way.
enum class QuantizePath { automatic, scalar };

// src: [n] f32 (n a multiple of the type's block size), dst: row_bytes(type, n)
// bytes. Types: q8_0, q4_k, q6_k. Throws Error{bad_model} when src holds an
// infinity or a NaN (no block can hold one; the reference would be undefined),
// Error{unsupported_arch} for another type.
void quantize_row(GgmlType type, const float* src, std::byte* dst, std::int64_t n,
                  QuantizePath path = QuantizePath::automatic);

}  // namespace neuron::quant
