#pragma once
// A Communicator that forwards to another and adds up the wall time spent in
// its collectives: how the TP leader and workers split a step's time into
// compute and communication (bench/TP.md). For a host communicator (Gloo)
// that is the collective's whole duration, waiting for the slowest rank
// included; for NCCL on a caller's stream it is only the enqueue, since the
// collective runs asynchronously on the device.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "dist/communicator.hpp"

namespace neuron::dist {

class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(std::shared_ptr<Communicator> inner);

  int rank() const noexcept override { return inner_->rank(); }
  int size() const noexcept override { return inner_->size(); }
  MemoryLocation location() const noexcept override { return inner_->location(); }
  std::string backend_name() const override { return inner_->backend_name(); }
  void all_reduce_sum(void* data, std::size_t count, DType dtype, void* stream = nullptr) override;
  void all_gather(const void* in, void* out, std::size_t count, DType dtype, void* stream = nullptr) override;
  void barrier() override;
  void abort() noexcept override { inner_->abort(); }

  // Nanoseconds spent inside collectives since construction, and how many ran.
  std::uint64_t busy_ns() const noexcept { return busy_ns_.load(std::memory_order_relaxed); }
  std::uint64_t calls() const noexcept { return calls_.load(std::memory_order_relaxed); }
  Communicator& inner() noexcept { return *inner_; }

 private:
  struct Scope;
  std::shared_ptr<Communicator> inner_;
  std::atomic<std::uint64_t> busy_ns_{0};
  std::atomic<std::uint64_t> calls_{0};
};

}  // namespace neuron::dist
