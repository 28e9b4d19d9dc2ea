#include "backend/cuda/cuda_check.hpp"

#include <cublas_v2.h>

#include <string>

#include "util/error.hpp"

namespace neuron::backend::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // Clear the sticky-free error state so the next request on this thread starts clean.
  (void)cudaGetLastError();
  std::string message = std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ") at " + file + ":" + std::to_string(line);
  if (status == cudaErrorMemoryAllocation) throw Error(errc::out_of_memory, "CUDA out of memory: " + message);
  throw Error(errc::cuda, message);
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  std::string message = std::string(call) + " failed: " + cublasGetStatusName(status) + " (" +
                        cublasGetStatusString(status) + ") at " + file + ":" + std::to_string(line);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw Error(errc::out_of_memory, "cuBLAS out of memory: " + message);
  throw Error(errc::cuda, message);
}

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw_cuda_error(status, kernel, "kernel launch", 0);
}

}  // namespace neuron::backend::cuda
