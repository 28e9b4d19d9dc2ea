#include "backend/cpu/attention.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/matmul.hpp"

namespace neuron::backend::cpu {

KvCache::KvCache(std::int64_t layers, std::int64_t kv_heads, std::int64_t max_context, std::int64_t head_dim)
    : layers_(layers), kv_heads_(kv_heads), max_context_(max_context), head_dim_(head_dim) {
  const auto n = static_cast<std::size_t>(layers * kv_heads * max_context * head_dim);
  k_ = std::make_unique_for_overwrite<float[]>(n);
  v_ = std::make_unique_for_overwrite<float[]>(n);
}

std::uint64_t KvCache::bytes() const noexcept {
  return 2ull * static_cast<std::uint64_t>(layers_ * kv_heads_ * max_context_ * head_dim_) * sizeof(float);
}

namespace {
// Queries per block: bounds the score scratch to kQueryBlock x context floats.
constexpr std::int64_t kQueryBlock = 64;

// s[j] = exp(s[j] - max s) over n scores; returns their sum.
float exp_from_max(float* s, std::int64_t n) {
  const float mx = *std::max_element(s, s + n);
  float sum = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  return sum;
}
}  // namespace

void attention(const float* q, std::int64_t ldq, std::int64_t n, std::int64_t offset, const KvCache& cache,
               std::int64_t layer, const std::vector<std::int64_t>& kv_of_q, float* out, std::int64_t ld_out) {
  init_blas_threads();
  const std::int64_t hd = cache.head_dim(), heads = static_cast<std::int64_t>(kv_of_q.size());
  const std::int64_t blocks = (n + kQueryBlock - 1) / kQueryBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ChunkPool::shared().run(heads * blocks, [&](std::int64_t job) {
    thread_local std::vector<float> scores;  // [block queries, keys] f32
    const std::int64_t h = job / blocks, b = job % blocks;
    const std::int64_t i0 = b * kQueryBlock, rows = std::min(kQueryBlock, n - i0);
    const std::int64_t keys = offset + i0 + rows;  // the block's last query sees this many positions
    scores.resize(static_cast<std::size_t>(rows * keys));
    const float* kh = cache.k(layer, kv_of_q[h], 0);
    const float* vh = cache.v(layer, kv_of_q[h], 0);
    if (rows == 1) {
      // Decode: matrix-vector products. sgemm would first pack the whole K
      // (and V) of the head into a scratch copy, tripling the cache traffic.
      float* s = scores.data();
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(keys), static_cast<int>(hd), scale, kh,
                  static_cast<int>(hd), q + i0 * ldq + h * hd, 1, 0.0f, s, 1);
      const float sum = exp_from_max(s, keys);
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(keys), static_cast<int>(hd), 1.0f / sum, vh,
                  static_cast<int>(hd), s, 1, 0.0f, out + i0 * ld_out + h * hd, 1);
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(keys),
                static_cast<int>(hd), scale, q + i0 * ldq + h * hd, static_cast<int>(ldq), kh, static_cast<int>(hd), 0.0f,
                scores.data(), static_cast<int>(keys));
    for (std::int64_t r = 0; r < rows; ++r) {
      float* s = scores.data() + r * keys;
      const std::int64_t visible = offset + i0 + r + 1;
      const float inv = 1.0f / exp_from_max(s, visible);
      for (std::int64_t j = 0; j < visible; ++j) s[j] *= inv;
      std::fill(s + visible, s + keys, 0.0f);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(hd),
                static_cast<int>(keys), 1.0f, scores.data(), static_cast<int>(keys), vh, static_cast<int>(hd), 0.0f,
                out + i0 * ld_out + h * hd, static_cast<int>(ld_out));
  });
}

}  // namespace neuron::backend::cpu
