#pragma once
// Rows of GGUF-encoded elements to f32, bit-equal to llama.cpp's reference
// dequantize_row_* (ggml-quants.c): the same f16 scales, the same float
// operations in the same order, so a weight means exactly what it means in
// llama.cpp. Types: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K.
#include <cstddef>
#include <cstdint>

#include "quant/ggml_type.hpp"

namespace neuron::quant {

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block
// from its 12 packed bytes (ggml's get_scale_min_k4).
inline void scale_min_k4(int j, const std::byte* q, std::uint8_t& d, std::uint8_t& m) noexcept {
  auto u8 = [q](int k) { return static_cast<std::uint8_t>(q[k]); };
  if (j < 4) {
    d = u8(j) & 63;
    m = u8(j + 4) & 63;
  } else {
    d = static_cast<std::uint8_t>((u8(j + 4) & 0xF) | ((u8(j - 4) >> 6) << 4));
    m = static_cast<std::uint8_t>((u8(j + 4) >> 4) | ((u8(j) >> 6) << 4));
  }
}

// src: n elements of `type` (n a multiple of its block size, bytes
// row_bytes(type, n), any alignment), dst: [n] f32. Throws
// Error{unsupported_arch} for a type that is not dequantizable.
void dequantize_row(GgmlType type, const std::byte* src, float* dst, std::int64_t n);

}  // namespace neuron::quant
