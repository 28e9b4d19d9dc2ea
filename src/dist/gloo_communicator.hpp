#pragma once
// Host-memory collectives over Gloo's TCP transport on 127.0.0.1: the CPU
// backend's communicator, and the host-staged one for CUDA ranks that share
// one GPU (NCCL needs a GPU per rank).
//
// Every collective carries the group's timeout: a peer that died makes the
// call fail as soon as its socket closes, and a peer that stopped answering
// makes it fail after the timeout. Either way the rank gets Error{comm}
// instead of hanging, and the communicator is poisoned (its peers' state is
// unknown). abort(), from any thread, ends a collective in flight at once:
// it shuts down every connection of this rank (Gloo fails the operations
// pending on them, here and on the peers) and wakes the waits on the
// collective's own buffers until it has left; it returns once the collective
// did. That is how the TP leader stops waiting on a group whose worker died
// or whose step deadline passed.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/communicator.hpp"

namespace gloo {
class Context;
namespace transport { class UnboundBuffer; }
}  // namespace gloo

namespace neuron::dist {

class GlooCommunicator final : public Communicator {
 public:
  // Rendezvous through files in `store_dir` under the key prefix `session`.
  // Rank 0 owns `store_dir` and removes it once every rank has connected (or
  // when the rendezvous fails).
  GlooCommunicator(const std::filesystem::path& store_dir, const std::string& session, int rank, int world,
                   std::chrono::milliseconds timeout);
  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return world_; }
  MemoryLocation location() const noexcept override { return MemoryLocation::host; }
  std::string backend_name() const override { return "gloo"; }

  void all_reduce_sum(void* data, std::size_t count, DType dtype, void* stream = nullptr) override;
  void all_gather(const void* in, void* out, std::size_t count, DType dtype, void* stream = nullptr) override;
  void barrier() override;
  void abort() noexcept override;  // see above; blocks until a collective in flight has returned

 private:
  void check_usable(const char* op) const;
  // Runs one Gloo call; a failure poisons the communicator and becomes Error{comm}.
  template <typename F>
  void guarded(const char* op, F&& f);

  int rank_;
  int world_;
  std::chrono::milliseconds timeout_;
  std::filesystem::path owned_store_dir_;  // rank 0 only, during the rendezvous
  std::shared_ptr<gloo::Context> context_;
  void poison(const std::string& why) noexcept;

  // The buffers of the collective in flight (abort() wakes their waits).
  struct InFlight;
  std::mutex flight_mu_;
  std::vector<gloo::transport::UnboundBuffer*> in_flight_;

  std::atomic<bool> poisoned_{false};
  mutable std::mutex reason_mu_;
  std::string poison_reason_;  // the first failure, for later calls' errors
};

}  // namespace neuron::dist
