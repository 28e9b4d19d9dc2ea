#include "backend/cpu/gemm_bf16_few.hpp"


#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/simd.hpp"
#include "backend/cpu/chunk_pool.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

// Tokens multiplied with one block of rows per pass (the accumulators are rows x tokens registers).
constexpr int kTokenTile = 4;
// Elements ahead of the loads to prefetch each row (1 KiB), as in gemv_bf16.
constexpr std::int64_t kPrefetch = 512;

// Columns per block of the prepared operand: 32 bf16 fill a 512-bit register,
// 16 a 256-bit one. Scalar reads x as it is.
std::int64_t block_width(Isa isa) {
  switch (isa) {
    case Isa::scalar: return 1;
    case Isa::avx2: return 16;
    case Isa::avx512:
    case Isa::avx512_bf16: return 32;
  }
  return 1;
}

// The tokens in the layout the SIMD kernels read: [n, in rounded up to the
// block width] f32, each block's even columns first, then its odd ones, zeros
// past `in`. A 32-bit lane of loaded bf16 weights holds columns 2i (low half)
// and 2i + 1 (high half): a shift left by 16 makes the first an f32, masking
// the low half off makes the second one, and they meet x's evens and odds.
struct Operand {
  std::vector<float> data;  // [n, ld] f32
  std::int64_t ld = 0;

  void prepare(Isa isa, const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx) {
    const std::int64_t b = block_width(isa);
    ld = (in + b - 1) / b * b;
    data.assign(static_cast<std::size_t>(n * ld), 0.0f);
    for (std::int64_t t = 0; t < n; ++t) {
      const float* src = x + t * ldx;
      float* dst = data.data() + t * ld;
      if (b == 1) {
        std::copy(src, src + in, dst);
        continue;
      }
      for (std::int64_t c = 0; c < in; ++c) {
        const std::int64_t block = c / b * b, k = c - block;
        dst[block + (k % 2) * (b / 2) + k / 2] = src[c];
      }
    }
  }
};

// ---- scalar -----------------------------------------------------------------

void rows_scalar(const Operand& x, std::int64_t n, std::int64_t in, const std::uint16_t* w, std::int64_t ldw,
                 std::int64_t rows, float* y, std::int64_t ldy) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint16_t* wr = w + r * ldw;
    for (std::int64_t t = 0; t < n; ++t) {
      const float* xt = x.data.data() + t * x.ld;
      float acc = 0.0f;
      for (std::int64_t c = 0; c < in; ++c) acc += bf16_to_f32(wr[c]) * xt[c];
      y[t * ldy + r] = acc;
    }
  }
}

// ---- AVX2 (16 registers: 2 rows x 4 tokens of accumulators) -------------------

#define NEURON_AVX2 __attribute__((target("avx2,fma")))

// acc[r][t] += the 16 columns of rows src[r] times token t's block at x + t * ldx.
template <int R, int T>
NEURON_AVX2 inline void columns_avx2(__m256 (&acc)[R][T], const std::uint16_t* const (&src)[R], const float* x,
                                     std::int64_t ldx) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m256 we[R], wo[R];
  for (int r = 0; r < R; ++r) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src[r]));
    we[r] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    wo[r] = _mm256_castsi256_ps(_mm256_and_si256(v, high));
  }
  for (int t = 0; t < T; ++t) {
    const __m256 xe = _mm256_loadu_ps(x + t * ldx), xo = _mm256_loadu_ps(x + t * ldx + 8);
    for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wo[r], xo, _mm256_fmadd_ps(we[r], xe, acc[r][t]));
  }
}

template <int R, int T>
NEURON_AVX2 void block_avx2(const std::uint16_t* w, std::int64_t ldw, std::int64_t in, const float* x,
                            std::int64_t ldx, float* y, std::int64_t ldy) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const std::int64_t body = in & ~std::int64_t{15};
  const std::uint16_t* src[R];
  for (std::int64_t c = 0; c < body; c += 16) {
    for (int r = 0; r < R; ++r) src[r] = w + r * ldw + c;
    columns_avx2<R, T>(acc, src, x + c, ldx);
  }
  if (body < in) {  // the last columns, zero-padded to a block
    alignas(32) std::uint16_t tail[R][16] = {};
    for (int r = 0; r < R; ++r) {
      std::memcpy(tail[r], w + r * ldw + body, static_cast<std::size_t>(in - body) * 2);
      src[r] = tail[r];
    }
    columns_avx2<R, T>(acc, src, x + body, ldx);
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * ldy + r] = hsum8(acc[r][t]);
}

// ---- AVX-512 (32 registers: 4 rows x 4 tokens of accumulators) ---------------

#define NEURON_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// acc[r][t] += the 32 columns (those in m) of rows w + r * ldw times token t's block at x + t * ldx.
template <int R, int T>
NEURON_AVX512 inline void columns_avx512(__m512 (&acc)[R][T], const std::uint16_t* w, std::int64_t ldw, __mmask32 m,
                                         const float* x, std::int64_t ldx) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 we[R], wo[R];
  for (int r = 0; r < R; ++r) {
    const __m512i v = _mm512_maskz_loadu_epi16(m, w + r * ldw);
    we[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    wo[r] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
  }
  for (int t = 0; t < T; ++t) {
    const __m512 xe = _mm512_loadu_ps(x + t * ldx), xo = _mm512_loadu_ps(x + t * ldx + 16);
    for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wo[r], xo, _mm512_fmadd_ps(we[r], xe, acc[r][t]));
  }
}

template <int R, int T>
NEURON_AVX512 void block_avx512(const std::uint16_t* w, std::int64_t ldw, std::int64_t in, const float* x,
                                std::int64_t ldx, float* y, std::int64_t ldy) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const std::int64_t body = in & ~std::int64_t{31};
  for (std::int64_t c = 0; c < body; c += 32) {
    // One cache line of each row a step: the hardware prefetcher alone does
    // not keep four row streams per thread fed (see gemv_bf16). A lone row
    // (the sequential walk, decode_kernel.hpp) is the hardware prefetcher's.
    if constexpr (R > 1)
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(w + r * ldw + c + kPrefetch), _MM_HINT_T0);
    columns_avx512<R, T>(acc, w + c, ldw, ~__mmask32{0}, x + c, ldx);
  }
  if (body < in)
    columns_avx512<R, T>(acc, w + body, ldw, static_cast<__mmask32>((std::uint64_t{1} << (in - body)) - 1u), x + body,
                         ldx);
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// ---- dispatch ------------------------------------------------------------------

using BlockFn = void (*)(const std::uint16_t*, std::int64_t, std::int64_t, const float*, std::int64_t, float*,
                         std::int64_t);

template <template <int, int> class K, int Rows>
struct Table {
  // fn[r - 1][t - 1]: a block of r rows and t tokens.
  std::array<std::array<BlockFn, kTokenTile>, Rows> fn{};
  constexpr Table() { fill(std::make_integer_sequence<int, Rows * kTokenTile>{}); }
  template <int... I>
  constexpr void fill(std::integer_sequence<int, I...>) {
    ((fn[I / kTokenTile][I % kTokenTile] = &K<I / kTokenTile + 1, I % kTokenTile + 1>::run), ...);
  }
};

template <int R, int T>
struct Avx2 {
  static void run(const std::uint16_t* w, std::int64_t ldw, std::int64_t in, const float* x, std::int64_t ldx,
                  float* y, std::int64_t ldy) {
    block_avx2<R, T>(w, ldw, in, x, ldx, y, ldy);
  }
};
template <int R, int T>
struct Avx512 {
  static void run(const std::uint16_t* w, std::int64_t ldw, std::int64_t in, const float* x, std::int64_t ldx,
                  float* y, std::int64_t ldy) {
    block_avx512<R, T>(w, ldw, in, x, ldx, y, ldy);
  }
};

constexpr Table<Avx2, 2> kAvx2{};
constexpr Table<Avx512, 4> kAvx512{};

// Rows [0, rows) of W against every token of the prepared operand, `walk`ing them.
void rows_simd(Isa isa, RowWalk walk, const Operand& x, std::int64_t n, std::int64_t in, const std::uint16_t* w,
               std::int64_t ldw, std::int64_t rows, float* y, std::int64_t ldy) {
  if (isa == Isa::scalar) return rows_scalar(x, n, in, w, ldw, rows, y, ldy);
  const bool wide = isa != Isa::avx2;
  const std::int64_t group = walk == RowWalk::sequential ? 1 : wide ? 4 : 2;
  for (std::int64_t r = 0; r < rows; r += group) {
    const std::int64_t rr = std::min(group, rows - r);
    for (std::int64_t t = 0; t < n; t += kTokenTile) {
      const std::int64_t tt = std::min<std::int64_t>(kTokenTile, n - t);
      const BlockFn f = wide ? kAvx512.fn[rr - 1][tt - 1] : kAvx2.fn[rr - 1][tt - 1];
      f(w + r * ldw, ldw, in, x.data.data() + t * x.ld, x.ld, y + t * ldy + r, ldy);
    }
  }
}

}  // namespace

void gemm_bf16_few_rows(Isa isa, RowWalk walk, const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx,
                        const std::uint16_t* w, std::int64_t ldw, std::int64_t rows, float* y, std::int64_t ldy) {
  NEURON_ASSERT(isa_supported(isa));
  Operand op;
  op.prepare(isa, x, n, in, ldx);
  rows_simd(isa, walk, op, n, in, w, ldw, rows, y, ldy);
}

void gemm_bf16_few(const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, const std::uint16_t* w,
                   std::int64_t out, float* y, std::int64_t ldy) {
  if (n <= 0 || out <= 0) return;
  const Isa isa = selected_isa();
  const RowWalk walk = row_walk(quant::GgmlType::bf16, n);
  thread_local Operand mine;  // the calling thread's, reused between calls
  Operand& op = mine;         // a reference, so the pool's threads read this one, not their own
  op.prepare(isa, x, n, in, ldx);
  const std::int64_t chunk_rows = ChunkPool::shared().chunk_rows(out, 2 * in, 4);
  const std::int64_t chunks = (out + chunk_rows - 1) / chunk_rows;
  if (chunks == 1) return rows_simd(isa, walk, op, n, in, w, in, out, y, ldy);
  ChunkPool::shared().run(chunks, [&](std::int64_t c) {
    const std::int64_t begin = c * chunk_rows, rows = std::min(chunk_rows, out - begin);
    rows_simd(isa, walk, op, n, in, w + begin * in, in, rows, y + begin, ldy);
  });
}

}  // namespace neuron::backend::cpu
