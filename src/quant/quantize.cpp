#include "quant/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "quant/dequantize.hpp"
#include "quant/quantize_avx2.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace neuron::quant {

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml-quants.c GROUP_MAX_EPS

inline void put_f16(std::byte* p, float v) noexcept {
  const std::uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// ggml-quants.c nearest_int: round to nearest via the 1.5 * 2^23 trick (exact for |v| <= 2^22).
inline int nearest_int(float fval) noexcept {
  const float val = fval + 12582912.f;
  std::int32_t i;
  std::memcpy(&i, &val, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

void quantize_q8_0(const float* x, std::byte* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQK8_0, y += kQ8_0Bytes) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(y, d);
    for (int j = 0; j < kQK8_0; ++j) {
      // |x * id| <= 127 but when d is subnormal and 1/d overflows to inf (the
      // reference's float-to-int8 store is then undefined): clamp, NaN (0 * inf) to 0.
      const float r = std::roundf(x[j] * id);
      const float q = std::isnan(r) ? 0.0f : std::clamp(r, -127.0f, 127.0f);
      y[2 + j] = static_cast<std::byte>(static_cast<std::int8_t>(q));
    }
  }
}

// ggml-quants.c make_qkx2_quants: an asymmetric n-value quantization with a
// scale and a (non-positive) min, refined by a search over nstep scales.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, std::uint8_t* L, float* the_min,
                       std::uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<std::uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<std::uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ggml-quants.c make_qx_quants with qw == NULL: a symmetric quantization into
// [-nmax, nmax) (stored + nmax), its scale refined over 18 trial scales.
float make_qx_quants(int n, int nmax, const float* x, std::int8_t* L, int rmse_type) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      const int l = nearest_int(iscale * x[i]);
      L[i] = static_cast<std::int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  bool return_early = false;
  if (rmse_type < 0) {
    rmse_type = -rmse_type;
    return_early = true;
  }
  auto weight = [&](float v) {
    return rmse_type == 1 ? v * v : rmse_type == 2 ? 1.0f : rmse_type == 3 ? std::fabs(v) : std::sqrt(std::fabs(v));
  };
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l + nmax);
    const float w = weight(x[i]);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  if (return_early) return suml2 > 0 ? 0.5f * (scale + 1 / iscale) : 1 / iscale;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = weight(x[i]);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<std::int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void quantize_q4_k(const float* x, std::byte* out, std::int64_t nb, bool simd) {
  std::uint8_t L[kQK_K], Laux[32];
  float weights[32], mins[kQK_K / 32], scales[kQK_K / 32];
  for (std::int64_t i = 0; i < nb; ++i, x += kQK_K, out += kQ4_KBytes) {
    std::uint8_t sc_bytes[12] = {};
    float max_scale = 0, max_min = 0;
    if (simd) avx2::q4_k_sub_blocks(x, L, scales, mins);
    for (int j = 0; j < kQK_K / 32; ++j) {
      if (!simd) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20, false);
      }
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < kQK_K / 32; ++j) {
      std::uint8_t ls = static_cast<std::uint8_t>(nearest_int(inv_scale * scales[j]));
      std::uint8_t lm = static_cast<std::uint8_t>(nearest_int(inv_min * mins[j]));
      ls = std::min<std::uint8_t>(63, ls);
      lm = std::min<std::uint8_t>(63, lm);
      if (j < 4) {
        sc_bytes[j] = ls;
        sc_bytes[j + 4] = lm;
      } else {
        sc_bytes[j + 4] = static_cast<std::uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        sc_bytes[j - 4] |= static_cast<std::uint8_t>((ls >> 4) << 6);
        sc_bytes[j - 0] |= static_cast<std::uint8_t>((lm >> 4) << 6);
      }
    }
    const std::uint16_t dh = f32_to_f16(max_scale / 63.f), mh = f32_to_f16(max_min / 63.f);
    std::memcpy(out, &dh, 2);
    std::memcpy(out + 2, &mh, 2);
    std::memcpy(out + 4, sc_bytes, 12);
    std::uint8_t sc, m;
    for (int j = 0; j < kQK_K / 32; ++j) {
      scale_min_k4(j, reinterpret_cast<const std::byte*>(sc_bytes), sc, m);
      const float d = f16_to_f32(dh) * sc;
      if (d == 0.0f) continue;
      const float dm = f16_to_f32(mh) * m;
      for (int ii = 0; ii < 32; ++ii) {
        const int l = nearest_int((x[32 * j + ii] + dm) / d);
        L[32 * j + ii] = static_cast<std::uint8_t>(std::max(0, std::min(15, l)));
      }
    }
    std::byte* q = out + 16;
    for (int j = 0; j < kQK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<std::byte>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void quantize_q6_k(const float* x, std::byte* out, std::int64_t nb, bool simd) {
  std::int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (std::int64_t i = 0; i < nb; ++i, x += kQK_K, out += kQ6_KBytes) {
    float max_scale = 0, max_abs_scale = 0;
    if (simd) avx2::q6_k_sub_blocks(x, L, scales);
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      if (!simd) scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
      const float scale = scales[ib];
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    std::memset(out, 0, kQ6_KBytes);  // ql[128], qh[64], scales[16], d
    if (max_abs_scale < kGroupMaxEps) continue;  // an all-zero block: d = +0
    const float iscale = -128.f / max_scale;
    const std::uint16_t dh = f32_to_f16(1 / iscale);
    std::memcpy(out + 208, &dh, 2);
    std::int8_t sc[kQK_K / 16];
    for (int ib = 0; ib < kQK_K / 16; ++ib) sc[ib] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    std::memcpy(out + 192, sc, 16);
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = f16_to_f32(dh) * sc[j];
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = static_cast<std::int8_t>(l + 32);
      }
    }
    std::byte* ql = out;
    std::byte* qh = out + 128;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const auto u = [&](int k) { return static_cast<std::uint8_t>(L[j + l + k]); };
        ql[l + 0] = static_cast<std::byte>((u(0) & 0xF) | ((u(64) & 0xF) << 4));
        ql[l + 32] = static_cast<std::byte>((u(32) & 0xF) | ((u(96) & 0xF) << 4));
        qh[l] = static_cast<std::byte>((u(0) >> 4) | ((u(32) >> 4) << 2) | ((u(64) >> 4) << 4) | ((u(96) >> 4) << 6));
      }
    }
  }
}

}  // namespace

void quantize_row(GgmlType type, const float* src, std::byte* dst, std::int64_t n, QuantizePath path) {
  const GgmlTypeTraits tr = traits(type);
  NEURON_ASSERT(n >= 0 && n % tr.block_size == 0);
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(src[i]))
      fail(errc::bad_model, "cannot quantize a non-finite value (" + std::to_string(src[i]) + ") to " + std::string(tr.name));
  const std::int64_t nb = n / tr.block_size;
  static const bool has_avx2 = avx2::supported();
  const bool simd = path == QuantizePath::automatic && has_avx2;
  switch (type) {
    case GgmlType::q8_0: return quantize_q8_0(src, dst, nb);
    case GgmlType::q4_k: return quantize_q4_k(src, dst, nb, simd);
    case GgmlType::q6_k: return quantize_q6_k(src, dst, nb, simd);
    default:
      fail(errc::unsupported_arch, "cannot quantize to " + std::string(tr.name) + " (supported: q8_0, q4_k, q6_k)");
  }
}

bool quantizable_at_load(GgmlType type) noexcept {
  return type == GgmlType::q8_0 || type == GgmlType::q4_k || type == GgmlType::q6_k || type == GgmlType::fp8_e4m3;
}

}  // namespace neuron::quant
