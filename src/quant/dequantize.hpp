#pragma once
// Rows of GGUF-encoded elements to f32, bit-equal to llama.cpp's reference
// dequantize_row_* (ggml-quants.c): the same f16 scales, the same float
// operations in the same order, so a weight means exactly what it means in
// llama.cpp. Types: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K.
#include <cstddef>
#include <cstdint>

#include "quant/ggml_type.hpp"

namespace neuron::quant {

// src: n elements of `type` (n a multiple of its block size, bytes
// row_bytes(type, n), any alignment), dst: [n] f32. Throws
// Error{unsupported_arch} for a type that is not dequantizable.
void dequantize_row(GgmlType type, const std::byte* src, float* dst, std::int64_t n);

}  // namespace neuron::quant
