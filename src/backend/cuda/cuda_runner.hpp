#pragma once
// Entry points of the CUDA backend, in plain C++ so that callers build with
// g++ alone. Only compiled when NEURON_HAVE_CUDA is defined.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/model_runner.hpp"

namespace neuron::backend::cuda {

// Throws Error{cuda|out_of_memory|invalid_argument}.
std::unique_ptr<ModelRunner> make_cuda_runner(const model::ModelConfig& cfg, const io::Checkpoint* checkpoint,
                                              const model::ShardPlan& plan, const Device& device,
                                              std::shared_ptr<dist::Communicator> comm, const RunnerOptions& options);

int device_count() noexcept;
// The device's total memory in bytes (no context is made); throws Error{invalid_argument} for no such device.
std::uint64_t device_total_memory(int device);  // 0 when no driver or device
// Facts for /discovery (nullopt when the device cannot be queried).
std::optional<CudaDeviceInfo> device_info(int device);
std::string device_count_error();              // why cudaGetDeviceCount failed ("" when it did not)
std::optional<std::string> runtime_version();  // "12.4"
std::optional<std::string> driver_version();
std::optional<CudaMemoryUse> memory_use(int device);  // cudaMemGetInfo on `device` (makes a context if none)
// Device-to-device copy bandwidth in GB/s (1e9 bytes/s), measured now.
double measure_copy_bandwidth_gbs(int device);

}  // namespace neuron::backend::cuda
