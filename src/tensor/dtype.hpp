#pragma once
// Element types of checkpoints and buffers, and the scalar conversions between them.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace neuron {

enum class DType : std::uint8_t { f32, bf16, f16 };

constexpr std::size_t dtype_size(DType t) noexcept { return t == DType::f32 ? 4 : 2; }
std::string_view dtype_name(DType t) noexcept;          // "F32", "BF16", "F16" (safetensors spelling)
bool parse_dtype(std::string_view name, DType& out) noexcept;

// bf16 is the top half of an f32; round-to-nearest-even on the way down.
inline float bf16_to_f32(std::uint16_t v) noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16); }
inline std::uint16_t f32_to_bf16(float f) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
float f16_to_f32(std::uint16_t h) noexcept;
std::uint16_t f32_to_f16(float f) noexcept;

}  // namespace neuron
