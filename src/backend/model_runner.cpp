#include "backend/model_runner.hpp"

#include "backend/cpu/cpu_runner.hpp"
#include "util/error.hpp"

#ifdef NEURON_HAVE_CUDA
#include "backend/cuda/cuda_runner.hpp"
#endif

namespace neuron::backend {

std::unique_ptr<ModelRunner> make_runner(const model::Qwen3Config& cfg, const io::Checkpoint* checkpoint,
                                         const model::ShardPlan& plan, const Device& device,
                                         std::shared_ptr<dist::Communicator> comm, const RunnerOptions& options) {
  if (!device.is_cuda()) return cpu::make_cpu_runner(cfg, checkpoint, plan, std::move(comm), options);
#ifdef NEURON_HAVE_CUDA
  return cuda::make_cuda_runner(cfg, checkpoint, plan, device, std::move(comm), options);
#else
  fail(errc::invalid_argument, "device " + device.str() + ": this build has no CUDA support");
#endif
}

}  // namespace neuron::backend
