#include "quant/dequantize.hpp"

#include <cstring>
#include <string>

#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace neuron::quant {

namespace {

// Blocks come straight from a mapped file at any offset: every field is read with memcpy.
inline std::uint16_t u16_at(const std::byte* p) noexcept {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float f16_at(const std::byte* p) noexcept { return f16_to_f32(u16_at(p)); }
inline std::uint8_t u8_at(const std::byte* p) noexcept { return static_cast<std::uint8_t>(*p); }

void dequantize_q8_0(const std::byte* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQ8_0Bytes, y += kQK8_0) {
    const float d = f16_at(x);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(u8_at(x + 2 + j))) * d;
  }
}

void dequantize_q4_0(const std::byte* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQ4_0Bytes, y += kQK4_0) {
    const float d = f16_at(x);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const std::uint8_t q = u8_at(x + 2 + j);
      y[j] = static_cast<float>((q & 0x0F) - 8) * d;
      y[j + kQK4_0 / 2] = static_cast<float>((q >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_k(const std::byte* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQ4_KBytes) {
    const float d = f16_at(x), min = f16_at(x + 2);
    const std::byte* scales = x + 4;
    const std::byte* q = x + 16;
    std::uint8_t sc, m;
    for (int j = 0, is = 0; j < kQK_K; j += 64, q += 32, is += 2) {
      scale_min_k4(is, scales, sc, m);
      const float d1 = d * sc, m1 = min * m;
      scale_min_k4(is + 1, scales, sc, m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(u8_at(q + l) & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(u8_at(q + l) >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const std::byte* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQ5_KBytes) {
    const float d = f16_at(x), min = f16_at(x + 2);
    const std::byte* scales = x + 4;
    const std::byte* qh = x + 16;
    const std::byte* ql = x + 48;
    std::uint8_t sc, m;
    unsigned u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < kQK_K; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
      scale_min_k4(is, scales, sc, m);
      const float d1 = d * sc, m1 = min * m;
      scale_min_k4(is + 1, scales, sc, m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * static_cast<float>((u8_at(ql + l) & 0xF) + (u8_at(qh + l) & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d2 * static_cast<float>((u8_at(ql + l) >> 4) + (u8_at(qh + l) & u2 ? 16 : 0)) - m2;
    }
  }
}

void dequantize_q6_k(const std::byte* x, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQ6_KBytes) {
    const std::byte* ql = x;
    const std::byte* qh = x + 128;
    const std::byte* sc = x + 192;
    const float d = f16_at(x + 208);
    for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const std::uint8_t h = u8_at(qh + l);
        const int q1 = static_cast<std::int8_t>((u8_at(ql + l) & 0xF) | (((h >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<std::int8_t>((u8_at(ql + l + 32) & 0xF) | (((h >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<std::int8_t>((u8_at(ql + l) >> 4) | (((h >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<std::int8_t>((u8_at(ql + l + 32) >> 4) | (((h >> 6) & 3) << 4)) - 32;
        auto s = [&](int k) { return static_cast<float>(static_cast<std::int8_t>(u8_at(sc + k))); };
        y[l + 0] = d * s(is + 0) * static_cast<float>(q1);
        y[l + 32] = d * s(is + 2) * static_cast<float>(q2);
        y[l + 64] = d * s(is + 4) * static_cast<float>(q3);
        y[l + 96] = d * s(is + 6) * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace

void dequantize_row(GgmlType type, const std::byte* src, float* dst, std::int64_t n) {
  const GgmlTypeTraits tr = traits(type);
  NEURON_ASSERT(n >= 0 && n % tr.block_size == 0);
  const std::int64_t nb = n / tr.block_size;
  switch (type) {
    case GgmlType::f32:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
      return;
    case GgmlType::f16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(u16_at(src + 2 * i));
      return;
    case GgmlType::bf16:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(u16_at(src + 2 * i));
      return;
    case GgmlType::q8_0: return dequantize_q8_0(src, dst, nb);
    case GgmlType::q4_0: return dequantize_q4_0(src, dst, nb);
    case GgmlType::q4_k: return dequantize_q4_k(src, dst, nb);
    case GgmlType::q5_k: return dequantize_q5_k(src, dst, nb);
    case GgmlType::q6_k: return dequantize_q6_k(src, dst, nb);
    default:
      fail(errc::unsupported_arch, "cannot dequantize ggml type " + std::string(tr.name) +
                                       " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)");
  }
}

}  // namespace neuron::quant
