#pragma once
// A projection's weights as the CUDA runner holds them, and the products it
// takes with them (DESIGN.md sections 3b and 7).
//
// A DeviceMatrix [rows, cols] is bf16, or packed GGUF blocks (a GGUF's
// quantized tensors, or quantize-at-load), or FP8 e4m3 rows with per-row
// scales (quantize-at-load, fp8_kernels.hpp), or a mix: a stack (q/k/v, gate/up)
// whose parts differ in type (Q4_K_M keeps some v/down rows in Q6_K) holds one
// part per run of a type, each starting 256-byte aligned.
//
// Linear picks the kernel by the part's type and the token count n:
//   bf16:       n == 1 the hand-written GEMV (kernels::gemv), else cuBLAS;
//   quantized:  n <= kQuantGemvTokens the block-decoding GEMV, 8 tokens per
//               pass over the weights; more tokens (prefill, large batches)
//               dequantize row chunks to two bf16 terms (hi + lo, within
//               2^-17 of each weight) and run cuBLAS on both, summed in f32;
//   fp8:        n <= kFp8GemvTokens the FP8 GEMV (bf16 activations), more
//               tokens quantize the activations per token to e4m3 and run the
//               FP8 tensor cores (cuBLASLt; its per-row scaling when it has
//               it, else a raw product scaled by fp8_scale_rows).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/blas.hpp"
#include "backend/cuda/device_buffer.hpp"
#include "backend/cuda/kernels.hpp"
#include "quant/ggml_type.hpp"

namespace neuron::backend::cuda {

struct DeviceMatrix {
  struct Part {
    quant::GgmlType type = quant::GgmlType::bf16;
    int rows = 0;
    std::size_t offset = 0;  // bytes into data
    std::size_t scales = 0;  // fp8_e4m3 parts: bytes into data of the [rows] f32 row scales
  };
  DeviceBuffer owned;        // the rows when the matrix owns them; empty when they sit in a buffer shared with
                             // other matrices (a MoE layer's experts: CudaRunner's Layer::expert_memory)
  std::byte* data = nullptr;  // the parts' rows, part after part: owned's memory or a slice of a shared buffer
  std::vector<Part> parts;    // in row order; rows sum to `rows`
  int rows = 0, cols = 0;

  // Takes `memory` as the matrix's own and points data at it.
  void own(DeviceBuffer memory) noexcept {
    owned = std::move(memory);
    data = owned.data<std::byte>();
  }
  bool quantized() const noexcept;  // any part in a block format
  // The whole matrix as bf16 [rows, cols]: only when !quantized().
  const kernels::bf16_t* bf16() const noexcept;
  const std::byte* part_data(const Part& p) const noexcept { return data + p.offset; }
  const float* part_scales(const Part& p) const noexcept { return reinterpret_cast<const float*>(data + p.scales); }
};

// Token counts up to which quantized parts use the block-decoding GEMV (in
// passes of kernels::kQuantGemvMaxTokens); beyond it, dequantize + cuBLAS.
inline constexpr int kQuantGemvTokens = 64;
inline constexpr int kFp8GemvTokens = 16;  // FP8 parts: GEMV up to here, tensor cores beyond

// The scratch a Linear needs for the matrices it will see.
struct LinearScratch {
  bool dequantize = false;  // GGUF block parts (prefill dequantizes them)
  bool fp8 = false;         // FP8 parts (prefill quantizes the activations)
};

class Linear {
 public:
  // Reserves `scratch` for products of up to max_tokens rows over matrices of up to max_cols columns.
  Linear(cudaStream_t stream, bool use_gemv, LinearScratch scratch, int max_tokens, int max_cols);

  // y [n, w.rows] = x [n, w.cols] W^T (x bf16, 16-byte aligned; y row stride w.rows).
  void operator()(const kernels::bf16_t* x, int n, const DeviceMatrix& w, float* y);
  void operator()(const kernels::bf16_t* x, int n, const DeviceMatrix& w, kernels::bf16_t* y);

  // act [n, f] bf16 = silu(gate) * up, [gate | up] [n, 2f] = x W^T for a
  // stacked W [2f, w.cols] (the MLP's SwiGLU), rounded as the unfused pair
  // rounds. An all-FP8 W within the GEMV's tokens takes one kernel; anything
  // else the product into gate_up [n, 2f] bf16, then kernels::swiglu.
  void swiglu(const kernels::bf16_t* x, int n, const DeviceMatrix& w, kernels::bf16_t* gate_up, kernels::bf16_t* act);

  std::size_t scratch_bytes() const noexcept {
    return hi_.bytes() + lo_.bytes() + out_.bytes() + xq_.bytes() + x_scale_.bytes();
  }

 private:
  template <class Y>
  void run(const kernels::bf16_t* x, int n, const DeviceMatrix& w, Y* y);
  template <class Y>
  void dequantized(const kernels::bf16_t* x, int n, const DeviceMatrix& w, const DeviceMatrix::Part& p, int row0, Y* y);
  template <class Y>
  void fp8(const kernels::bf16_t* x, int n, const DeviceMatrix& w, const DeviceMatrix::Part& p, int row0, Y* y);

  cudaStream_t stream_;
  Blas blas_;
  bool use_gemv_;
  int max_tokens_ = 0;
  std::size_t chunk_elems_ = 0;  // elements of one dequantized term
  DeviceBuffer hi_, lo_;  // [chunk_elems_] bf16 each: a row chunk's two terms
  DeviceBuffer out_;      // [max_tokens, kChunkRows] f32: a chunk's product on its way to its output
  DeviceBuffer xq_;       // [max_tokens, max_cols] e4m3: the activations of an FP8 product
  DeviceBuffer x_scale_;  // [max_tokens] f32: their per-token scales
  int max_cols_ = 0;
  bool fp8_outer_scales_ = true;  // cuBLASLt applies the FP8 scales itself (NEURON_CUDA_FP8_OUTER_SCALES=0: never)
};

}  // namespace neuron::backend::cuda
