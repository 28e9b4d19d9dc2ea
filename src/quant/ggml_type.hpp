#pragma once
// ggml's tensor element types as GGUF files number them, and the block layout
// of each: `block_size` elements are stored in `type_size` bytes, so a row of
// n elements (n a multiple of block_size) takes n / block_size * type_size
// bytes. Only the types neuron can read are listed; any other number in a file
// is refused by name.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace neuron::quant {

enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  bf16 = 30,
  // neuron's own, not a GGUF type (a file naming this id is refused): FP8
  // e4m3 weights with one f32 scale per row, made at load on CUDA devices
  // of compute capability 9.0 (backend/cuda/fp8_kernels.hpp).
  fp8_e4m3 = 0x10000,
};

struct GgmlTypeTraits {
  std::string_view name;    // llama.cpp's spelling: "Q4_K", "F32"
  std::int64_t block_size;  // elements per block (1 for plain floats)
  std::size_t type_size;    // bytes per block
  bool dequantizable;       // dequantize_row() handles it
};

// The traits of a type id from a file, or nullopt when neuron does not know it
// (or it is not a GGUF type: fp8_e4m3).
std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t id) noexcept;
GgmlTypeTraits traits(GgmlType t) noexcept;  // a listed type
std::string_view ggml_type_name(GgmlType t) noexcept;
// Parses "q8_0", "Q4_K", ... (case-insensitive). nullopt for other names.
std::optional<GgmlType> parse_ggml_type(std::string_view name) noexcept;

// Bytes of one row of `n` elements; n must be a multiple of the block size.
inline std::size_t row_bytes(GgmlType t, std::int64_t n) noexcept {
  const GgmlTypeTraits tr = traits(t);
  return static_cast<std::size_t>(n / tr.block_size) * tr.type_size;
}

// Block geometry of the types neuron (de)quantizes (ggml-common.h).
inline constexpr std::int64_t kQK8_0 = 32;   // q8_0: f16 d, int8 qs[32]                          = 34 bytes
inline constexpr std::int64_t kQK4_0 = 32;   // q4_0: f16 d, u8 qs[16]                            = 18 bytes
inline constexpr std::int64_t kQK_K = 256;   // k-quants' super-block
inline constexpr std::size_t kQ8_0Bytes = 34;
inline constexpr std::size_t kQ4_0Bytes = 18;
inline constexpr std::size_t kQ4_KBytes = 144;  // f16 d, f16 dmin, u8 scales[12], u8 qs[128]
inline constexpr std::size_t kQ5_KBytes = 176;  // f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
inline constexpr std::size_t kQ6_KBytes = 210;  // u8 ql[128], u8 qh[64], i8 scales[16], f16 d

}  // namespace neuron::quant
