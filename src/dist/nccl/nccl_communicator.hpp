#pragma once
// Device-memory collectives over NCCL: one GPU per rank (ranks sharing a GPU
// use the Gloo communicator with host staging instead). CUDA builds only.
//
// The leader makes the ncclUniqueId (new_unique_id_hex) and sends it, hex,
// in `init`; every rank joins with ncclCommInitRankConfig on its device and
// its own stream. NCCL is used non-blocking so that the join and host-waited
// operations can be bounded: a peer that never arrives makes the rank abort
// the communicator (ncclCommAbort) and throw Error{comm} after the timeout.
// Collectives on a caller's stream are only enqueued here; the caller's
// synchronisation decides when they finish.
#include <chrono>
#include <mutex>
#include <string>

#include "dist/communicator.hpp"

namespace neuron::dist::nccl {

// 128-byte ncclUniqueId as 256 lowercase hex digits. Throws Error{comm}.
std::string new_unique_id_hex();

class NcclCommunicator final : public Communicator {
 public:
  // Throws Error{invalid_argument} (malformed id), Error{cuda}, Error{comm}.
  NcclCommunicator(const std::string& unique_id_hex, int rank, int world, int cuda_device,
                   std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return world_; }
  MemoryLocation location() const noexcept override { return MemoryLocation::device; }
  std::string backend_name() const override { return "nccl"; }

  // `stream` null means this communicator's own stream. Host pointers are
  // staged through a device buffer and waited for (the sanity check uses this).
  void all_reduce_sum(void* data, std::size_t count, DType dtype, void* stream = nullptr) override;
  void all_gather(const void* in, void* out, std::size_t count, DType dtype, void* stream = nullptr) override;
  // A one-element all-reduce, waited for on the host within the timeout.
  void barrier() override;
  void abort() noexcept override;

 private:
  struct Impl;
  void check_usable(const char* op) const;
  // Waits for `stream` while watching the communicator's async error; aborts and throws on timeout.
  void wait(void* stream, const char* op);

  int rank_;
  int world_;
  int device_;
  std::chrono::milliseconds timeout_;
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t owned by this communicator
  mutable std::mutex mu_;
  bool aborted_ = false;
};

}  // namespace neuron::dist::nccl
