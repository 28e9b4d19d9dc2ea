#pragma once
// cuBLAS for the projections: y[n, rows] = x[n, cols] * w[rows, cols]^T with
// bf16 operands and f32 accumulation, the output in bf16 or f32. The handle
// owns a fixed workspace so that its calls can be captured into CUDA graphs.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "backend/cuda/device_buffer.hpp"

namespace neuron::backend::cuda {

class Blas {
 public:
  explicit Blas(cudaStream_t stream);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // w [rows, cols] bf16 row-major (checkpoint layout), x [n, cols] bf16, y [n, rows].
  void linear(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, float* y);
  void linear(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, std::uint16_t* y);
  // The same into y with row stride ldy >= rows: y = x w^T + beta y (beta 0 or 1).
  void linear(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, float* y, int ldy, float beta);
  void linear(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, std::uint16_t* y, int ldy);

  // FP8 (e4m3) tensor-core products (Hopper), through cuBLASLt: wq [rows,
  // cols] and xq [n, cols] e4m3 bytes (16-byte aligned, cols % 16 == 0).
  // Scaled: y [n, rows] (row stride ldy) = sum_c xq[t, c] x_scale[t] * wq[r, c]
  // w_scale[r], both scale vectors on the device; false when this cuBLASLt
  // cannot apply per-row scales (nothing was enqueued). Raw: acc [n, rows] f32
  // = sum_c xq[t, c] wq[r, c], unscaled (fp8_scale_rows finishes it).
  bool fp8_linear_scaled(const std::uint8_t* xq, const float* x_scale, int n, const std::uint8_t* wq,
                         const float* w_scale, int rows, int cols, float* y, int ldy);
  bool fp8_linear_scaled(const std::uint8_t* xq, const float* x_scale, int n, const std::uint8_t* wq,
                         const float* w_scale, int rows, int cols, std::uint16_t* y, int ldy);
  void fp8_linear_raw(const std::uint8_t* xq, int n, const std::uint8_t* wq, int rows, int cols, float* acc);

 private:
  bool fp8_gemm(const std::uint8_t* xq, const float* x_scale, int n, const std::uint8_t* wq, const float* w_scale,
                int rows, int cols, void* y, cudaDataType y_type, int ldy);
  void gemm(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, void* y, cudaDataType y_type,
            int ldy, float beta);
  cublasHandle_t handle_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer workspace_;  // [32 MiB] bytes, cuBLAS and cuBLASLt scratch (one stream: never both at once)
  // cuBLASLt's algorithm per FP8 shape (n, rows, cols, ldy, output type, scaled), or none when it has none.
  using Fp8Key = std::tuple<int, int, int, int, int, bool>;
  struct Fp8Algo {
    bool found = false;
    cublasLtMatmulAlgo_t algo{};
  };
  std::map<Fp8Key, Fp8Algo> fp8_algos_;
};

}  // namespace neuron::backend::cuda
