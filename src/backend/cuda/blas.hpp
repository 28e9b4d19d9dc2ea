#pragma once
// cuBLAS for the projections: y[n, rows] = x[n, cols] * w[rows, cols]^T with
// bf16 operands and f32 accumulation, the output in bf16 or f32. The handle
// owns a fixed workspace so that its calls can be captured into CUDA graphs.
#include <cublas_v2.h>

#include <cstdint>

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

 private:
  void gemm(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, void* y, cudaDataType y_type);
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;  // [32 MiB] bytes, cuBLAS scratch
};

}  // namespace neuron::backend::cuda
