#include "dist/timed_communicator.hpp"

#include "util/error.hpp"

namespace neuron::dist {

struct TimedCommunicator::Scope {
  TimedCommunicator& owner;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~Scope() {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    owner.busy_ns_.fetch_add(static_cast<std::uint64_t>(ns.count()), std::memory_order_relaxed);
    owner.calls_.fetch_add(1, std::memory_order_relaxed);
  }
};

TimedCommunicator::TimedCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {
  NEURON_ASSERT(inner_ != nullptr);
}

void TimedCommunicator::all_reduce_sum(void* data, std::size_t count, DType dtype, void* stream) {
  Scope s{*this};
  inner_->all_reduce_sum(data, count, dtype, stream);
}

void TimedCommunicator::all_gather(const void* in, void* out, std::size_t count, DType dtype, void* stream) {
  Scope s{*this};
  inner_->all_gather(in, out, count, dtype, stream);
}

void TimedCommunicator::barrier() {
  Scope s{*this};
  inner_->barrier();
}

}  // namespace neuron::dist
