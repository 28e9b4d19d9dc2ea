#include "backend/cuda/blas.hpp"

namespace neuron::backend::cuda {

Blas::Blas(cudaStream_t stream) : workspace_(std::size_t{32} << 20) {
  NEURON_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    NEURON_CUBLAS_CHECK(cublasSetStream(handle_, stream));
    NEURON_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()));
    NEURON_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

Blas::~Blas() {
  if (handle_) cublasDestroy(handle_);
}

void Blas::linear(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, float* y) {
  gemm(x, n, w, rows, cols, y, CUDA_R_32F);
}
void Blas::linear(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, std::uint16_t* y) {
  gemm(x, n, w, rows, cols, y, CUDA_R_16BF);
}

// Column-major view: w row-major [rows, cols] is a cols x rows matrix with
// ld = cols, so op(A) = A^T is rows x cols; x row-major [n, cols] is cols x n;
// y row-major [n, rows] is rows x n with ld = rows.
void Blas::gemm(const std::uint16_t* x, int n, const std::uint16_t* w, int rows, int cols, void* y,
                cudaDataType y_type) {
  if (n <= 0 || rows <= 0) return;
  const float alpha = 1.f, beta = 0.f;
  NEURON_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &alpha, w, CUDA_R_16BF, cols, x,
                                   CUDA_R_16BF, cols, &beta, y, y_type, rows, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

}  // namespace neuron::backend::cuda
