#pragma once
// Kernel launches for the forward pass, with programmatic dependent launch
// (PDL, sm_90): a kernel may be scheduled while its predecessor's last blocks
// still run. Every kernel launched this way calls grid_dependency_wait()
// before it reads anything a predecessor wrote (or writes anything a
// predecessor reads); work that only touches immutable data (weights, and a
// pass's step inputs, which are copied in before its first kernel) may come
// before it, which is how a GEMV streams its first weights in while the
// previous kernel drains. Without PDL the wait is a no-op.
//
// The same call first lets this kernel's dependents launch: once every block
// of this grid has reached it, the next kernel's blocks are scheduled into
// the room left on the SMs and issue their weight loads while this kernel
// still streams its own, so a step's ~8 kernels a layer do not each pay a
// fill-and-drain. That is safe for the same reason the wait is: a dependent
// touches nothing a predecessor writes before its own wait, which returns
// only when this grid has completed and its writes are visible (and a grid
// completes only after its own wait on its predecessor, so the order holds
// down the chain).
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.hpp"

namespace neuron::backend::cuda::kernels {

bool programmatic_launch() noexcept;

__device__ __forceinline__ void grid_dependency_wait() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream, const char* name,
            Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = programmatic_launch() ? 1 : 0;
  config.attrs = attribute;
  config.numAttrs = 1;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) throw_cuda_error(status, name, __FILE__, __LINE__);
}

}  // namespace neuron::backend::cuda::kernels
