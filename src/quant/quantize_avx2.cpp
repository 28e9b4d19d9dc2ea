#include "quant/quantize_avx2.hpp"

#include <immintrin.h>

#include <cstdint>

namespace neuron::quant::avx2 {

// AVX2 alone, never FMA: a fused multiply-add rounds once where the reference rounds twice.
#define NEURON_QUANT_AVX2 __attribute__((target("avx2")))

namespace {

NEURON_QUANT_AVX2 inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), v); }
NEURON_QUANT_AVX2 inline __m256 neg8(__m256 v) { return _mm256_xor_ps(_mm256_set1_ps(-0.f), v); }
NEURON_QUANT_AVX2 inline __m256 gt8(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
NEURON_QUANT_AVX2 inline __m256 lt8(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
NEURON_QUANT_AVX2 inline __m256 pick8(__m256 keep, __m256 take, __m256 mask) { return _mm256_blendv_ps(keep, take, mask); }
NEURON_QUANT_AVX2 inline __m256i pick8i(__m256i keep, __m256i take, __m256 mask) {
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(keep), _mm256_castsi256_ps(take), mask));
}

// ggml's nearest_int in every lane: v + 1.5 * 2^23, then the low mantissa bits.
NEURON_QUANT_AVX2 inline __m256i nearest8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
  return _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}

NEURON_QUANT_AVX2 inline __m256i clamp8(__m256i v, int lo, int hi) {
  return _mm256_max_epi32(_mm256_set1_epi32(lo), _mm256_min_epi32(_mm256_set1_epi32(hi), v));
}

// Lane k of v into out[k * stride + i], for the 8 lanes.
NEURON_QUANT_AVX2 inline void scatter_lanes(__m256i v, int i, int stride, std::int32_t (&tmp)[8], auto&& put) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(tmp), v);
  for (int k = 0; k < 8; ++k) put(k * stride + i, tmp[k]);
}

}  // namespace

bool supported() noexcept { return __builtin_cpu_supports("avx2"); }

// make_qkx2_quants(32, 15, x, weights, L, &min, Laux, -1, 0.1, 20, false) of
// 8 sub-blocks, lane j holding sub-block j (quantize.cpp has the scalar form
// this follows operation by operation).
NEURON_QUANT_AVX2 void q4_k_sub_blocks(const float* x, std::uint8_t* L, float* scales, float* mins) noexcept {
  constexpr int n = 32, nmax = 15, nstep = 20;
  constexpr float rmin = -1.f, rdelta = 0.1f;
  const __m256i lanes = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);
  __m256 X[n], W[n];  // [position in the sub-block] lanes: sub-blocks
  __m256 sum_x2 = _mm256_setzero_ps();
  for (int i = 0; i < n; ++i) {
    X[i] = _mm256_i32gather_ps(x + i, lanes, 4);
    sum_x2 = _mm256_add_ps(sum_x2, _mm256_mul_ps(X[i], X[i]));
  }
  const __m256 av_x = _mm256_sqrt_ps(_mm256_div_ps(sum_x2, _mm256_set1_ps(32.f)));
  for (int i = 0; i < n; ++i) W[i] = _mm256_add_ps(av_x, abs8(X[i]));

  __m256 mn = X[0], mx = X[0], sum_w = W[0];
  __m256 sum_x = _mm256_mul_ps(sum_w, X[0]);
  for (int i = 1; i < n; ++i) {
    mn = pick8(mn, X[i], lt8(X[i], mn));
    mx = pick8(mx, X[i], gt8(X[i], mx));
    sum_w = _mm256_add_ps(sum_w, W[i]);
    sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(W[i], X[i]));
  }
  const __m256 zero = _mm256_setzero_ps();
  mn = pick8(mn, zero, gt8(mn, zero));
  const __m256 flat = _mm256_cmp_ps(mx, mn, _CMP_EQ_OQ);  // the reference returns at once: L = 0, scale 0
  const __m256 flat_min = mn;

  __m256 iscale = _mm256_div_ps(_mm256_set1_ps(static_cast<float>(nmax)), _mm256_sub_ps(mx, mn));
  __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.f), iscale);
  __m256 best_error = zero;
  __m256i best[n];
  for (int i = 0; i < n; ++i) {
    best[i] = clamp8(nearest8(_mm256_mul_ps(iscale, _mm256_sub_ps(X[i], mn))), 0, nmax);
    const __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(best[i])), mn), X[i]);
    best_error = _mm256_add_ps(best_error, _mm256_mul_ps(W[i], _mm256_mul_ps(diff, diff)));
  }
  for (int is = 0; is <= nstep; ++is) {
    const float num = rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax);
    iscale = _mm256_div_ps(_mm256_set1_ps(num), _mm256_sub_ps(mx, mn));
    __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
    __m256i aux[n];
    for (int i = 0; i < n; ++i) {
      aux[i] = clamp8(nearest8(_mm256_mul_ps(iscale, _mm256_sub_ps(X[i], mn))), 0, nmax);
      const __m256 l = _mm256_cvtepi32_ps(aux[i]);
      const __m256 wl = _mm256_mul_ps(W[i], l);
      sum_l = _mm256_add_ps(sum_l, wl);
      sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, l));
      sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, X[i]));
    }
    const __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
    __m256 this_scale =
        _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
    __m256 this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
    const __m256 positive = gt8(this_min, zero);
    this_min = pick8(this_min, zero, positive);
    this_scale = pick8(this_scale, _mm256_div_ps(sum_xl, sum_l2), positive);
    __m256 cur_error = zero;
    for (int i = 0; i < n; ++i) {
      const __m256 diff =
          _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(this_scale, _mm256_cvtepi32_ps(aux[i])), this_min), X[i]);
      cur_error = _mm256_add_ps(cur_error, _mm256_mul_ps(W[i], _mm256_mul_ps(diff, diff)));
    }
    const __m256 better = _mm256_and_ps(gt8(D, zero), lt8(cur_error, best_error));
    if (_mm256_movemask_ps(better) == 0) continue;
    for (int i = 0; i < n; ++i) best[i] = pick8i(best[i], aux[i], better);
    best_error = pick8(best_error, cur_error, better);
    scale = pick8(scale, this_scale, better);
    mn = pick8(mn, this_min, better);
  }
  scale = pick8(scale, zero, flat);
  const __m256 the_min = neg8(pick8(mn, flat_min, flat));
  _mm256_storeu_ps(scales, scale);
  _mm256_storeu_ps(mins, the_min);
  const __m256i no_level = _mm256_setzero_si256();
  std::int32_t tmp[8];
  for (int i = 0; i < n; ++i)
    scatter_lanes(pick8i(best[i], no_level, flat), i, n, tmp,
                  [&](int at, std::int32_t v) { L[at] = static_cast<std::uint8_t>(v); });
}

// make_qx_quants(16, 32, x, L, 1) of 16 sub-blocks, 8 lanes at a time.
NEURON_QUANT_AVX2 void q6_k_sub_blocks(const float* x, std::int8_t* L, float* scales) noexcept {
  constexpr int n = 16, nmax = 32;
  constexpr float group_max_eps = 1e-15f;
  const __m256i lanes = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
  const __m256 zero = _mm256_setzero_ps();
  for (int half = 0; half < 2; ++half) {
    const float* xh = x + 128 * half;
    __m256 X[n];
    __m256 amax = zero, max = zero;
    for (int i = 0; i < n; ++i) {
      X[i] = _mm256_i32gather_ps(xh + i, lanes, 4);
      const __m256 ax = abs8(X[i]);
      const __m256 bigger = gt8(ax, amax);
      amax = pick8(amax, ax, bigger);
      max = pick8(max, X[i], bigger);
    }
    const __m256 flat = lt8(amax, _mm256_set1_ps(group_max_eps));  // the reference returns at once: L = 0, scale 0
    // The sums of one trial scale: levels in aux, sum of w x l and of w l l (w = x^2).
    auto trial = [&](__m256 iscale, __m256i (&aux)[n], __m256& sumlx, __m256& suml2) NEURON_QUANT_AVX2 {
      sumlx = suml2 = zero;
      for (int i = 0; i < n; ++i) {
        aux[i] = clamp8(nearest8(_mm256_mul_ps(iscale, X[i])), -nmax, nmax - 1);
        const __m256 l = _mm256_cvtepi32_ps(aux[i]);
        const __m256 w = _mm256_mul_ps(X[i], X[i]);
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, X[i]), l));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, l), l));
      }
    };
    __m256i best[n];
    __m256 sumlx, suml2;
    trial(_mm256_div_ps(_mm256_set1_ps(static_cast<float>(-nmax)), max), best, sumlx, suml2);
    __m256 scale = pick8(_mm256_div_ps(sumlx, suml2), zero, _mm256_cmp_ps(suml2, zero, _CMP_EQ_OQ));
    __m256 best_sum = _mm256_mul_ps(scale, sumlx);
    for (int is = -9; is <= 9; ++is) {
      if (is == 0) continue;
      const float num = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is));
      __m256i aux[n];
      trial(_mm256_div_ps(_mm256_set1_ps(num), max), aux, sumlx, suml2);
      const __m256 better =
          _mm256_and_ps(gt8(suml2, zero), gt8(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best_sum, suml2)));
      if (_mm256_movemask_ps(better) == 0) continue;
      for (int i = 0; i < n; ++i) best[i] = pick8i(best[i], aux[i], better);
      const __m256 s = _mm256_div_ps(sumlx, suml2);
      scale = pick8(scale, s, better);
      best_sum = pick8(best_sum, _mm256_mul_ps(s, sumlx), better);
    }
    _mm256_storeu_ps(scales + 8 * half, pick8(scale, zero, flat));
    std::int32_t tmp[8];
    for (int i = 0; i < n; ++i) {
      const __m256i stored = pick8i(_mm256_add_epi32(best[i], _mm256_set1_epi32(nmax)), _mm256_setzero_si256(), flat);
      scatter_lanes(stored, i, n, tmp, [&](int at, std::int32_t v) { L[128 * half + at] = static_cast<std::int8_t>(v); });
    }
  }
}

}  // namespace neuron::quant::avx2
