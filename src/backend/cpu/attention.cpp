#include "backend/cpu/attention.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/activations.hpp"
#include "backend/cpu/attention_decode.hpp"
#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/matmul.hpp"
#include "backend/cpu/simd.hpp"
#include "tensor/dtype.hpp"

namespace neuron::backend::cpu {

KvPool::KvPool(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim, std::int32_t block_size,
               std::int32_t num_blocks, Element element)
    : layers_(layers),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      block_size_(block_size),
      num_blocks_(num_blocks),
      rows_per_head_(static_cast<std::int64_t>(num_blocks) * block_size),
      element_(element) {
  const auto n = static_cast<std::size_t>(layers * kv_heads * rows_per_head_ * head_dim) * element_bytes(element);
  k_ = std::make_unique_for_overwrite<std::byte[]>(n);
  v_ = std::make_unique_for_overwrite<std::byte[]>(n);
}

std::uint64_t KvPool::bytes() const noexcept {
  return 2ull * static_cast<std::uint64_t>(layers_ * kv_heads_ * rows_per_head_ * head_dim_) * element_bytes(element_);
}

void KvPool::store(std::int64_t layer, std::int64_t head, std::int64_t row, const float* k, const float* v) noexcept {
  if (element_ == Element::f32) {
    std::copy(k, k + head_dim_, this->k<float>(layer, head) + row * head_dim_);
    std::copy(v, v + head_dim_, this->v<float>(layer, head) + row * head_dim_);
    return;
  }
  std::uint16_t* kd = this->k<std::uint16_t>(layer, head) + row * head_dim_;
  std::uint16_t* vd = this->v<std::uint16_t>(layer, head) + row * head_dim_;
  for (std::int64_t c = 0; c < head_dim_; ++c) {
    kd[c] = f32_to_bf16(k[c]);
    vd[c] = f32_to_bf16(v[c]);
  }
}

KvPool::Element kv_element() {
  return bf16_float_products(cpu_activations()) ? KvPool::Element::bf16 : KvPool::Element::f32;
}

namespace {
// Queries per job: bounds the score scratch to kQueryBlock x keys floats.
// BLAS packs a job's K and V run once per call, so larger blocks amortize it
// (a 1000-token prefill on a Zen 4 guest: 194 tok/s at 64, 203 at 256).
constexpr std::int64_t kQueryBlock = 256;

__attribute__((target("avx512f"))) float exp_from_max_avx512(float* s, std::int64_t n, float mx) {
  __m512 sum = _mm512_setzero_ps();
  const __m512 m = _mm512_set1_ps(mx);
  for (std::int64_t j = 0; j < n; j += 16) {
    const __mmask16 live = n - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, s + j), m));
    _mm512_mask_storeu_ps(s + j, live, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(live, e));
  }
  return _mm512_reduce_add_ps(sum);
}

// The same 8 lanes at a time (exp8); the tail's lanes masked as the AVX-512 loop's.
__attribute__((target("avx2,fma"))) float exp_from_max_avx2(float* s, std::int64_t n, float mx) {
  __m256 sum = _mm256_setzero_ps();
  const __m256 m = _mm256_set1_ps(mx);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (std::int64_t j = 0; j < n; j += 8) {
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<std::int64_t>(n - j, 8))), lane);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(s + j, live), m));
    _mm256_maskstore_ps(s + j, live, e);
    sum = _mm256_add_ps(sum, _mm256_and_ps(e, _mm256_castsi256_ps(live)));
  }
  return hsum8(sum);
}

// s[j] = exp(s[j] - max s) over n scores; returns their sum.
float exp_from_max(float* s, std::int64_t n) {
  const float mx = *std::max_element(s, s + n);
  const Isa isa = selected_isa();
  if (isa == Isa::avx512 || isa == Isa::avx512_bf16) return exp_from_max_avx512(s, n, mx);
  if (isa == Isa::avx2) return exp_from_max_avx2(s, n, mx);
  float sum = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  return sum;
}

// Calls fn(row, key, count) for each run of consecutive block ids in `table`
// that covers positions [0, keys): positions [key, key + count) are the rows
// [row, row + count) of a (layer, head) matrix of the pool. A table of
// consecutive ids is one run, so a sequence whose blocks happen to be
// contiguous costs one BLAS call, as a contiguous cache would.
template <class Fn>
void for_each_run(std::span<const std::int32_t> table, std::int64_t block_size, std::int64_t keys, Fn&& fn) {
  std::size_t b = 0;
  for (std::int64_t key = 0; key < keys;) {
    std::size_t e = b + 1;
    while (static_cast<std::int64_t>(e) * block_size < keys && table[e] == table[e - 1] + 1) ++e;
    const std::int64_t count = std::min(static_cast<std::int64_t>(e) * block_size, keys) - key;
    fn(static_cast<std::int64_t>(table[b]) * block_size, key, count);
    key += count;
    b = e;
  }
}

// Query heads per KV head when head h reads KV head h / group for every h
// (the usual grouped-query layout), else 1.
std::int64_t consecutive_group(const std::vector<std::int64_t>& kv_of_q) {
  const auto heads = static_cast<std::int64_t>(kv_of_q.size());
  const std::int64_t kv_heads = heads == 0 ? 0 : kv_of_q.back() + 1;
  if (kv_heads <= 0 || heads % kv_heads != 0) return 1;
  const std::int64_t group = heads / kv_heads;
  for (std::int64_t h = 0; h < heads; ++h)
    if (kv_of_q[static_cast<std::size_t>(h)] != h / group) return 1;
  return group;
}

}  // namespace

void attention(const float* q, std::int64_t ldq, const Batch& batch, const KvPool& pool, std::int64_t layer,
               const std::vector<std::int64_t>& kv_of_q, float* out, std::int64_t ld_out) {
  init_blas_threads();
  const std::int64_t hd = pool.head_dim(), bs = pool.block_size(), heads = static_cast<std::int64_t>(kv_of_q.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // A decoding sequence's query heads that share a KV head form one job:
  // their K and V rows are read once for all of them (one product of the
  // group's queries, where one head a job read them once a head).
  const std::int64_t group = consecutive_group(kv_of_q);
  const auto grouped = [&](const SequenceStep& seq) { return seq.num_tokens == 1 && group > 1; };
  // Jobs are (sequence, head, query block), or (sequence, KV head) for a
  // grouped decode; jobs_before[s] counts those of the sequences before s.
  std::vector<std::int64_t> jobs_before(batch.seqs.size() + 1, 0);  // [S + 1]
  for (std::size_t s = 0; s < batch.seqs.size(); ++s)
    jobs_before[s + 1] = jobs_before[s] + (grouped(batch.seqs[s]) ? heads / group
                                                                   : heads * ((batch.seqs[s].num_tokens + kQueryBlock - 1) / kQueryBlock));
  ChunkPool::shared().run(jobs_before.back(), [&](std::int64_t job) {
    thread_local std::vector<float> scores;  // [block queries, keys] f32
    const auto si = static_cast<std::size_t>(std::upper_bound(jobs_before.begin(), jobs_before.end(), job) -
                                             jobs_before.begin() - 1);
    const SequenceStep& seq = batch.seqs[si];
    const std::span<const std::int32_t> table(batch.block_ids.data() + seq.block_begin,
                                              static_cast<std::size_t>(seq.num_blocks));
    const std::int64_t local = job - jobs_before[si];
    // The job's queries: `rows` of them at qh (row stride q_ld), their outputs
    // at oh (out_ld); query r sees positions [0, first_visible + r + 1), or all
    // `keys` when every row is the same token's (a grouped decode).
    const float* qh;
    float* oh;
    std::int64_t rows, keys, q_ld, out_ld, h;
    bool same_token;
    if (grouped(seq)) {
      h = local * group;
      rows = group, keys = seq.position + 1, q_ld = hd, out_ld = hd, same_token = true;
      qh = q + seq.token_begin * ldq + h * hd;
      oh = out + seq.token_begin * ld_out + h * hd;
    } else {
      const std::int64_t blocks = (seq.num_tokens + kQueryBlock - 1) / kQueryBlock;
      h = local / blocks;
      const std::int64_t i0 = (local % blocks) * kQueryBlock;
      rows = std::min<std::int64_t>(kQueryBlock, seq.num_tokens - i0);
      keys = seq.position + i0 + rows;  // the block's last query sees this many positions
      q_ld = ldq, out_ld = ld_out, same_token = false;
      qh = q + (seq.token_begin + i0) * ldq + h * hd;
      oh = out + (seq.token_begin + i0) * ld_out + h * hd;
    }
    const std::int64_t kvh = kv_of_q[static_cast<std::size_t>(h)];
    scores.resize(static_cast<std::size_t>(rows * keys));
    float* s = scores.data();
    const bool bf16 = pool.element() == KvPool::Element::bf16;
    if ((same_token || rows == 1) && decode_fits(hd)) {
      // Decode (one token's heads that share this KV head): K and V read once, in place.
      for_each_run(table, bs, keys, [&](std::int64_t row, std::int64_t key, std::int64_t count) {
        if (bf16)
          decode_scores(qh, rows, hd, pool.k<std::uint16_t>(layer, kvh) + row * hd, count, scale, s + key, keys);
        else
          decode_scores(qh, rows, hd, pool.k<float>(layer, kvh) + row * hd, count, scale, s + key, keys);
      });
      for (std::int64_t r = 0; r < rows; ++r) {
        float* sr = s + r * keys;
        const float inv = 1.0f / exp_from_max(sr, keys);
        for (std::int64_t j = 0; j < keys; ++j) sr[j] *= inv;
      }
      bool accumulate = false;
      for_each_run(table, bs, keys, [&](std::int64_t row, std::int64_t key, std::int64_t count) {
        if (bf16)
          decode_weighted_sum(s + key, keys, rows, pool.v<std::uint16_t>(layer, kvh) + row * hd, count, hd, oh, out_ld,
                              accumulate);
        else
          decode_weighted_sum(s + key, keys, rows, pool.v<float>(layer, kvh) + row * hd, count, hd, oh, out_ld,
                              accumulate);
        accumulate = true;
      });
      return;
    }
    // Rows [row, row + count) of K (V) as f32 for BLAS: in place in an f32
    // pool, widened into this thread's scratch in a bf16 one.
    thread_local std::vector<float> k_scratch, v_scratch;  // [count, hd] f32 each
    const auto rows_f32 = [&](bool values, std::int64_t row, std::int64_t count) -> const float* {
      if (!bf16) return (values ? pool.v<float>(layer, kvh) : pool.k<float>(layer, kvh)) + row * hd;
      std::vector<float>& scratch = values ? v_scratch : k_scratch;
      scratch.resize(static_cast<std::size_t>(count * hd));
      widen_bf16((values ? pool.v<std::uint16_t>(layer, kvh) : pool.k<std::uint16_t>(layer, kvh)) + row * hd,
                 scratch.data(), count * hd);
      return scratch.data();
    };
    if (rows == 1) {
      // Decode of one head: matrix-vector products. sgemm would first pack the
      // whole K (and V) of the run into a scratch copy, tripling the cache traffic.
      for_each_run(table, bs, keys, [&](std::int64_t row, std::int64_t key, std::int64_t count) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(count), static_cast<int>(hd), scale, rows_f32(false, row, count),
                    static_cast<int>(hd), qh, 1, 0.0f, s + key, 1);
      });
      const float inv = 1.0f / exp_from_max(s, keys);
      float beta = 0.0f;
      for_each_run(table, bs, keys, [&](std::int64_t row, std::int64_t key, std::int64_t count) {
        cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(count), static_cast<int>(hd), inv, rows_f32(true, row, count),
                    static_cast<int>(hd), s + key, 1, beta, oh, 1);
        beta = 1.0f;
      });
      return;
    }
    for_each_run(table, bs, keys, [&](std::int64_t row, std::int64_t key, std::int64_t count) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(count),
                  static_cast<int>(hd), scale, qh, static_cast<int>(q_ld), rows_f32(false, row, count), static_cast<int>(hd), 0.0f,
                  s + key, static_cast<int>(keys));
    });
    for (std::int64_t r = 0; r < rows; ++r) {
      float* sr = s + r * keys;
      const std::int64_t visible = same_token ? keys : keys - rows + r + 1;  // causal: positions [0, its own]
      const float inv = 1.0f / exp_from_max(sr, visible);
      for (std::int64_t j = 0; j < visible; ++j) sr[j] *= inv;
      std::fill(sr + visible, sr + keys, 0.0f);
    }
    float beta = 0.0f;
    for_each_run(table, bs, keys, [&](std::int64_t row, std::int64_t key, std::int64_t count) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(hd),
                  static_cast<int>(count), 1.0f, s + key, static_cast<int>(keys), rows_f32(true, row, count), static_cast<int>(hd),
                  beta, oh, static_cast<int>(out_ld));
      beta = 1.0f;
    });
  });
}

}  // namespace neuron::backend::cpu
