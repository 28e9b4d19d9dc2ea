#include "backend/cuda/cuda_check.hpp"

#include <cublas_v2.h>

#include <string>

#include "util/byte_size.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda {

namespace {
// Error{out_of_memory} for cudaErrorMemoryAllocation, Error{cuda} otherwise; clears the thread's last error so
// the next request on it starts clean.
[[noreturn]] void throw_cuda_status(cudaError_t status, const std::string& message) {
  (void)cudaGetLastError();
  if (status == cudaErrorMemoryAllocation) throw Error(errc::out_of_memory, "CUDA out of memory: " + message);
  throw Error(errc::cuda, message);
}
}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw_cuda_status(status, std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                           cudaGetErrorString(status) + ") at " + file + ":" + std::to_string(line));
}

void throw_allocation_error(cudaError_t status, std::size_t bytes) {
  std::size_t free = 0, total = 0;
  const std::string room = cudaMemGetInfo(&free, &total) == cudaSuccess
                               ? "; the device has " + util::gib(free) + " free of " + util::gib(total)
                               : std::string();
  throw_cuda_status(status, "cudaMalloc of " + std::to_string(bytes) + " bytes (" + util::gib(bytes) + ") failed: " +
                           cudaGetErrorName(status) + room);
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
