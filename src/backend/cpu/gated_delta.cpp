#include "backend/cpu/gated_delta.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace neuron::backend::cpu {

void causal_conv1d_silu(const float* x, std::int64_t n, std::int64_t channels, std::int64_t ldx, const float* w,
                        std::int64_t kernel, float* state, float* out, std::int64_t ld_out) {
  const std::int64_t keep = kernel - 1;
#pragma omp parallel for schedule(static) if (channels * n * kernel > (1 << 18))  // a decode token: serial (a barrier costs more)
  for (std::int64_t c = 0; c < channels; ++c) {
    const float* wc = w + c * kernel;
    float* sc = state + c * keep;  // [K - 1] oldest first
    for (std::int64_t t = 0; t < n; ++t) {
      const float xt = x[t * ldx + c];
      float acc = 0.0f;
      for (std::int64_t j = 0; j < keep; ++j) acc += wc[j] * sc[j];
      acc += wc[keep] * xt;
      out[t * ld_out + c] = acc / (1.0f + std::exp(-acc));
      for (std::int64_t j = 0; j + 1 < keep; ++j) sc[j] = sc[j + 1];
      if (keep > 0) sc[keep - 1] = xt;
    }
  }
}

void l2_normalize(float* x, std::int64_t dim, float eps) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < dim; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum + eps);
  for (std::int64_t i = 0; i < dim; ++i) x[i] *= inv;
}

void gated_delta_rule(const float* q, const float* k, std::int64_t ld_qk, const float* v, std::int64_t ld_v,
                      const float* g, const float* beta, std::int64_t ld_gb, std::int64_t n, const DeltaRuleShape& shape,
                      float* state, float* out, std::int64_t ld_out) {
  const std::int64_t dk = shape.key_dim, dv = shape.value_dim, group = shape.value_heads / shape.key_heads;
#pragma omp parallel for schedule(static) if (shape.value_heads > 1 && shape.value_heads * n * dk * dv > (1 << 22))
  for (std::int64_t h = 0; h < shape.value_heads; ++h) {
    float* S = state + h * dk * dv;  // [dk, dv]
    const std::int64_t kh = h / group;
    std::vector<float> delta(static_cast<std::size_t>(dv));  // [dv]
    for (std::int64_t t = 0; t < n; ++t) {
      const float* qt = q + t * ld_qk + kh * dk;
      const float* kt = k + t * ld_qk + kh * dk;
      const float* vt = v + t * ld_v + h * dv;
      const float decay = std::exp(g[t * ld_gb + h]), b = beta[t * ld_gb + h];
      // S = exp(g) S, and kv_mem = S^T k of the decayed state.
      for (std::int64_t j = 0; j < dv; ++j) delta[static_cast<std::size_t>(j)] = 0.0f;
      for (std::int64_t i = 0; i < dk; ++i) {
        float* row = S + i * dv;
        const float ki = kt[i];
        for (std::int64_t j = 0; j < dv; ++j) {
          row[j] *= decay;
          delta[static_cast<std::size_t>(j)] += row[j] * ki;
        }
      }
      for (std::int64_t j = 0; j < dv; ++j) delta[static_cast<std::size_t>(j)] = (vt[j] - delta[static_cast<std::size_t>(j)]) * b;
      // S += k delta^T, and out = S^T q of the updated state.
      float* o = out + t * ld_out + h * dv;
      for (std::int64_t j = 0; j < dv; ++j) o[j] = 0.0f;
      for (std::int64_t i = 0; i < dk; ++i) {
        float* row = S + i * dv;
        const float ki = kt[i], qi = qt[i];
        for (std::int64_t j = 0; j < dv; ++j) {
          row[j] += ki * delta[static_cast<std::size_t>(j)];
          o[j] += row[j] * qi;
        }
      }
    }
  }
}

namespace {

// C[m, n] = alpha op(A) op(B) + beta C, row-major, single-threaded BLAS (the heads are the parallelism).
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t kdim, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(kdim), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

// One thread's scratch for a chunk of L <= kDeltaChunk tokens of one value head.
struct ChunkScratch {
  std::vector<float> q, k, kb;  // [L, dk]: queries, keys, keys * beta (then * exp(G)) gathered for the head
  std::vector<float> vb;        // [L, dv]: values * beta
  std::vector<float> u, o;      // [L, dv]: T (v beta), then v_new; the chunk's output
  std::vector<float> w;         // [L, dk]: T (k beta exp(G))
  std::vector<float> t, a;      // [L, L]: the UT system's inverse; q k^T decayed and masked
  std::vector<float> cum;       // [L]: G, the cumulative log decay inside the chunk
  void size(std::int64_t dk, std::int64_t dv) {
    const auto c = static_cast<std::size_t>(kDeltaChunk);
    for (auto* v : {&q, &k, &kb, &w}) v->resize(c * static_cast<std::size_t>(dk));
    for (auto* v : {&vb, &u, &o}) v->resize(c * static_cast<std::size_t>(dv));
    t.resize(c * c);
    a.resize(c * c);
    cum.resize(c);
  }
};

}  // namespace

void gated_delta_rule_chunked(const float* q, const float* k, std::int64_t ld_qk, const float* v, std::int64_t ld_v,
                              const float* g, const float* beta, std::int64_t ld_gb, std::int64_t n,
                              const DeltaRuleShape& shape, float* state, float* out, std::int64_t ld_out) {
  const std::int64_t dk = shape.key_dim, dv = shape.value_dim, group = shape.value_heads / shape.key_heads;
#pragma omp parallel for schedule(static) if (shape.value_heads > 1)
  for (std::int64_t h = 0; h < shape.value_heads; ++h) {
    thread_local ChunkScratch sc;
    sc.size(dk, dv);
    float* S = state + h * dk * dv;  // [dk, dv]
    const std::int64_t kh = h / group;
    for (std::int64_t t0 = 0; t0 < n; t0 += kDeltaChunk) {
      const std::int64_t L = std::min(kDeltaChunk, n - t0);
      float* G = sc.cum.data();
      float acc = 0.0f;
      for (std::int64_t i = 0; i < L; ++i) {
        const std::int64_t t = t0 + i;
        acc += g[t * ld_gb + h];
        G[i] = acc;
        const float b = beta[t * ld_gb + h];
        std::copy_n(q + t * ld_qk + kh * dk, dk, sc.q.data() + i * dk);
        std::copy_n(k + t * ld_qk + kh * dk, dk, sc.k.data() + i * dk);
        for (std::int64_t j = 0; j < dk; ++j) sc.kb[static_cast<std::size_t>(i * dk + j)] = sc.k[static_cast<std::size_t>(i * dk + j)] * b;
        for (std::int64_t j = 0; j < dv; ++j) sc.vb[static_cast<std::size_t>(i * dv + j)] = v[t * ld_v + h * dv + j] * b;
      }
      // T = (I + strictly-lower (-(k beta) k^T decayed))^-1 by forward substitution, unit diagonal.
      float* T = sc.t.data();
      gemm(false, true, L, L, dk, 1.0f, sc.kb.data(), dk, sc.k.data(), dk, 0.0f, T, L);
      for (std::int64_t i = 0; i < L; ++i)
        for (std::int64_t j = 0; j < L; ++j) T[i * L + j] = j < i ? -T[i * L + j] * std::exp(G[i] - G[j]) : 0.0f;
      for (std::int64_t i = 1; i < L; ++i) {
        float* row = T + i * L;
        for (std::int64_t j = 0; j < i; ++j) {
          float sum = row[j];
          for (std::int64_t m = j + 1; m < i; ++m) sum += row[m] * T[m * L + j];
          row[j] = sum;
        }
      }
      for (std::int64_t i = 0; i < L; ++i) T[i * L + i] = 1.0f;
      // u = T (v beta); w = T (k beta exp(G)).
      for (std::int64_t i = 0; i < L; ++i) {
        const float e = std::exp(G[i]);
        for (std::int64_t j = 0; j < dk; ++j) sc.kb[static_cast<std::size_t>(i * dk + j)] *= e;
      }
      gemm(false, false, L, dv, L, 1.0f, T, L, sc.vb.data(), dv, 0.0f, sc.u.data(), dv);
      gemm(false, false, L, dk, L, 1.0f, T, L, sc.kb.data(), dk, 0.0f, sc.w.data(), dk);
      // v_new = u - w S (the part of the values the incoming state does not predict).
      gemm(false, false, L, dv, dk, -1.0f, sc.w.data(), dk, S, dv, 1.0f, sc.u.data(), dv);
      // out = (q exp(G)) S + (q k^T decayed, causal) v_new.
      float* A = sc.a.data();
      gemm(false, true, L, L, dk, 1.0f, sc.q.data(), dk, sc.k.data(), dk, 0.0f, A, L);
      for (std::int64_t i = 0; i < L; ++i)
        for (std::int64_t j = 0; j < L; ++j) A[i * L + j] = j <= i ? A[i * L + j] * std::exp(G[i] - G[j]) : 0.0f;
      for (std::int64_t i = 0; i < L; ++i) {
        const float e = std::exp(G[i]);
        for (std::int64_t j = 0; j < dk; ++j) sc.q[static_cast<std::size_t>(i * dk + j)] *= e;
      }
      gemm(false, false, L, dv, dk, 1.0f, sc.q.data(), dk, S, dv, 0.0f, sc.o.data(), dv);
      gemm(false, false, L, dv, L, 1.0f, A, L, sc.u.data(), dv, 1.0f, sc.o.data(), dv);
      for (std::int64_t i = 0; i < L; ++i)
        std::copy_n(sc.o.data() + i * dv, dv, out + (t0 + i) * ld_out + h * dv);
      // S = exp(G_last) S + (k exp(G_last - G))^T v_new.
      const float last = G[L - 1];
      for (std::int64_t i = 0; i < L; ++i) {
        const float e = std::exp(last - G[i]);
        for (std::int64_t j = 0; j < dk; ++j) sc.k[static_cast<std::size_t>(i * dk + j)] *= e;
      }
      gemm(true, false, dk, dv, L, 1.0f, sc.k.data(), dk, sc.u.data(), dv, std::exp(last), S, dv);
    }
  }
}

}  // namespace neuron::backend::cpu
