#include "backend/cuda/linear.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/fp8_kernels.hpp"
#include "backend/cuda/quant_kernels.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda {
namespace {

using kernels::bf16_t;

constexpr int kChunkRows = 4096;                         // rows of W dequantized at a time, at most
constexpr std::size_t kChunkElems = std::size_t{16} << 20;  // elements per term, at least (32 MiB of bf16)

// A GEMV's tokens in passes of at most `step`: f(x of the pass, its tokens,
// y of the pass) for tokens [t, t + k) of x [n, cols] and y (row stride ldy).
template <class Y, class F>
void in_passes(const bf16_t* x, int n, int cols, Y* y, std::size_t ldy, int step, F&& f) {
  for (int t = 0; t < n; t += step)
    f(x + static_cast<std::size_t>(t) * cols, std::min(step, n - t), y + static_cast<std::size_t>(t) * ldy);
}

}  // namespace

bool DeviceMatrix::quantized() const noexcept {
  return std::any_of(parts.begin(), parts.end(), [](const Part& p) { return p.type != quant::GgmlType::bf16; });
}

const bf16_t* DeviceMatrix::bf16() const noexcept {
  NEURON_ASSERT(!quantized());
  return reinterpret_cast<const bf16_t*>(data);
}

Linear::Linear(cudaStream_t stream, bool use_gemv, LinearScratch scratch, int max_tokens, int max_cols)
    : stream_(stream), blas_(stream), use_gemv_(use_gemv), max_tokens_(max_tokens), max_cols_(max_cols) {
  const char* outer = std::getenv("NEURON_CUDA_FP8_OUTER_SCALES");
  fp8_outer_scales_ = !(outer && std::string(outer) == "0");
  if (scratch.dequantize || scratch.fp8) out_ = DeviceBuffer(4 * static_cast<std::size_t>(max_tokens) * kChunkRows);
  if (scratch.dequantize) {
    chunk_elems_ = std::max(kChunkElems, static_cast<std::size_t>(64) * static_cast<std::size_t>(max_cols));
    hi_ = DeviceBuffer(2 * chunk_elems_);
    lo_ = DeviceBuffer(2 * chunk_elems_);
  }
  if (scratch.fp8) {
    xq_ = DeviceBuffer(static_cast<std::size_t>(max_tokens) * max_cols);
    x_scale_ = DeviceBuffer(4 * static_cast<std::size_t>(max_tokens));
  }
}

void Linear::operator()(const bf16_t* x, int n, const DeviceMatrix& w, float* y) { run(x, n, w, y); }
void Linear::operator()(const bf16_t* x, int n, const DeviceMatrix& w, bf16_t* y) { run(x, n, w, y); }

template <class Y>
void Linear::run(const bf16_t* x, int n, const DeviceMatrix& w, Y* y) {
  if (n <= 0) return;
  int row0 = 0;  // the part's first row: its column offset in y
  for (const DeviceMatrix::Part& p : w.parts) {
    if (p.type == quant::GgmlType::bf16) {
      const auto* wp = reinterpret_cast<const bf16_t*>(w.part_data(p));
      if (n == 1 && use_gemv_)
        kernels::gemv(wp, x, p.rows, w.cols, y + row0, stream_);
      else if constexpr (std::is_same_v<Y, float>)
        blas_.linear(x, n, wp, p.rows, w.cols, y + row0, w.rows, 0.f);
      else
        blas_.linear(x, n, wp, p.rows, w.cols, y + row0, w.rows);
    } else if (p.type == quant::GgmlType::fp8_e4m3) {
      fp8(x, n, w, p, row0, y);
    } else if (n <= kQuantGemvTokens) {
      in_passes(x, n, w.cols, y + row0, w.rows, kernels::kQuantGemvMaxTokens, [&](const bf16_t* xt, int k, Y* yt) {
        if constexpr (std::is_same_v<Y, float>)
          kernels::quant_gemv(p.type, w.part_data(p), p.rows, w.cols, xt, k, yt, w.rows, false, stream_);
        else
          kernels::quant_gemv(p.type, w.part_data(p), p.rows, w.cols, xt, k, yt, w.rows, stream_);
      });
    } else {
      dequantized(x, n, w, p, row0, y);
    }
    row0 += p.rows;
  }
  NEURON_ASSERT(row0 == w.rows);
}

void Linear::swiglu(const bf16_t* x, int n, const DeviceMatrix& w, bf16_t* gate_up, bf16_t* act) {
  if (n <= 0) return;
  NEURON_ASSERT(w.rows % 2 == 0);
  const int f = w.rows / 2;
  if (w.parts.size() == 1 && w.parts[0].type == quant::GgmlType::fp8_e4m3 && n <= kFp8GemvTokens) {
    const DeviceMatrix::Part& p = w.parts[0];
    const auto* q = reinterpret_cast<const std::uint8_t*>(w.part_data(p));
    in_passes(x, n, w.cols, act, f, kernels::kFp8GemvMaxTokens, [&](const bf16_t* xt, int k, bf16_t* at) {
      kernels::fp8_gemv_swiglu(q, w.part_scales(p), f, w.cols, xt, k, at, f, stream_);
    });
    return;
  }
  run(x, n, w, gate_up);
  kernels::swiglu(gate_up, n, f, act, stream_);
}

template <class Y>
void Linear::dequantized(const bf16_t* x, int n, const DeviceMatrix& w, const DeviceMatrix::Part& p, int row0, Y* y) {
  NEURON_ASSERT(hi_ && n <= max_tokens_);
  const int chunk = std::min<int>(kChunkRows, static_cast<int>(chunk_elems_ / static_cast<std::size_t>(w.cols)));
  const std::size_t row_bytes = quant::row_bytes(p.type, w.cols);
  bf16_t* hi = hi_.data<bf16_t>();
  bf16_t* lo = lo_.data<bf16_t>();
  for (int r = 0; r < p.rows; r += chunk) {
    const int k = std::min(chunk, p.rows - r);
    kernels::dequantize_bf16_split(p.type, w.part_data(p) + static_cast<std::size_t>(r) * row_bytes, k, w.cols, hi,
                                   lo, stream_);
    if constexpr (std::is_same_v<Y, float>) {
      float* yr = y + row0 + r;
      blas_.linear(x, n, hi, k, w.cols, yr, w.rows, 0.f);
      blas_.linear(x, n, lo, k, w.cols, yr, w.rows, 1.f);
    } else {
      float* out = out_.data<float>();  // [n, k] f32
      blas_.linear(x, n, hi, k, w.cols, out, k, 0.f);
      blas_.linear(x, n, lo, k, w.cols, out, k, 1.f);
      kernels::store_rows_bf16(out, n, k, y + row0 + r, w.rows, stream_);
    }
  }
}

template <class Y>
void Linear::fp8(const bf16_t* x, int n, const DeviceMatrix& w, const DeviceMatrix::Part& p, int row0, Y* y) {
  const auto* q = reinterpret_cast<const std::uint8_t*>(w.part_data(p));
  const float* w_scale = w.part_scales(p);
  if (n <= kFp8GemvTokens) {
    in_passes(x, n, w.cols, y + row0, w.rows, kernels::kFp8GemvMaxTokens, [&](const bf16_t* xt, int k, Y* yt) {
      if constexpr (std::is_same_v<Y, float>)
        kernels::fp8_gemv(q, w_scale, p.rows, w.cols, xt, k, yt, w.rows, false, stream_);
      else
        kernels::fp8_gemv(q, w_scale, p.rows, w.cols, xt, k, yt, w.rows, stream_);
    });
    return;
  }
  NEURON_ASSERT(xq_ && n <= max_tokens_ && w.cols <= max_cols_);
  auto* xq = xq_.data<std::uint8_t>();
  float* x_scale = x_scale_.data<float>();
  kernels::fp8_quantize_rows(x, n, w.cols, 0, w.cols, xq, x_scale, stream_);
  if (fp8_outer_scales_ && blas_.fp8_linear_scaled(xq, x_scale, n, q, w_scale, p.rows, w.cols, y + row0, w.rows))
    return;
  fp8_outer_scales_ = false;  // this cuBLASLt cannot: scale plain products from now on
  float* out = out_.data<float>();  // [n, chunk] f32
  for (int r = 0; r < p.rows; r += kChunkRows) {
    const int k = std::min(kChunkRows, p.rows - r);
    blas_.fp8_linear_raw(xq, n, q + static_cast<std::size_t>(r) * w.cols, k, w.cols, out);
    kernels::fp8_scale_rows(out, n, k, w_scale + r, x_scale, y + row0 + r, w.rows, stream_);
  }
}

}  // namespace neuron::backend::cuda
