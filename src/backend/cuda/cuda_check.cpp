#include "backend/cuda/cuda_check.hpp"

#include <cublas_v2.h>

#include <cstdio>
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

void throw_allocation_error(cudaError_t status, std::size_t bytes) {
  (void)cudaGetLastError();
  auto gib = [](std::size_t b) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(b) / double(1ull << 30));
    return std::string(text);
  };
  std::size_t free = 0, total = 0;
  const std::string room = cudaMemGetInfo(&free, &total) == cudaSuccess
                               ? "; the device has " + gib(free) + " free of " + gib(total)
                               : std::string();
  const std::string message = "cudaMalloc of " + std::to_string(bytes) + " bytes (" + gib(bytes) + ") failed: " +
                              cudaGetErrorName(status) + room;
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
