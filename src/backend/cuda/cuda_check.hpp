#pragma once
// Checked CUDA and cuBLAS calls. Every runtime call in the backend goes
// through NEURON_CUDA_CHECK / NEURON_CUBLAS_CHECK so a failure becomes a
// neuron::Error naming the call, never a silently wrong result.
// Out-of-memory is its own kind (errc::out_of_memory) so that a load or a
// request fails cleanly and the daemon keeps serving its other models.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace neuron::backend::cuda {

// Throws Error{out_of_memory} for cudaErrorMemoryAllocation, Error{cuda} otherwise.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
// A failed cudaMalloc of `bytes`: throw_cuda_error's kinds, the message naming the size and the device's free
// memory at the time (an out-of-memory load says how far it was from fitting).
[[noreturn]] void throw_allocation_error(cudaError_t status, std::size_t bytes);

// Checks the launch just made on this thread (cudaGetLastError).
void check_launch(const char* kernel);

}  // namespace neuron::backend::cuda

#define NEURON_CUDA_CHECK(call)                                                                  \
  do {                                                                                           \
    const cudaError_t neuron_status_ = (call);                                                   \
    if (neuron_status_ != cudaSuccess)                                                           \
      ::neuron::backend::cuda::throw_cuda_error(neuron_status_, #call, __FILE__, __LINE__);      \
  } while (0)

#define NEURON_CUBLAS_CHECK(call)                                                                \
  do {                                                                                           \
    const cublasStatus_t neuron_status_ = (call);                                                \
    if (neuron_status_ != CUBLAS_STATUS_SUCCESS)                                                 \
      ::neuron::backend::cuda::throw_cublas_error(neuron_status_, #call, __FILE__, __LINE__);    \
  } while (0)
