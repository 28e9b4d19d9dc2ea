// Temporary entry point while the CUDA runner lands (replaced in the next commit).
#include "backend/cuda/cuda_runner.hpp"

#include "util/error.hpp"

namespace neuron::backend::cuda {

std::unique_ptr<ModelRunner> make_cuda_runner(const model::Qwen3Config&, const io::Checkpoint*,
                                              const model::ShardPlan&, const Device& device,
                                              std::shared_ptr<dist::Communicator>, const RunnerOptions&) {
  throw Error(errc::unsupported_arch, "the CUDA runner for " + device.str() + " is not built yet");
}

}  // namespace neuron::backend::cuda
