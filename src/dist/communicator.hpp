#pragma once
// Collectives between the ranks of one tensor-parallel model.
//
// Host vs device: a Gloo communicator moves host memory; an NCCL communicator
// moves device memory on the stream it was given. `location()` says which,
// so a CUDA backend on a host communicator (ranks sharing one GPU) stages
// through host buffers, and one on NCCL passes device pointers straight in.
// World size 1 is a communicator too (LocalCommunicator), so the single-rank
// model is the N = 1 case of the sharded code.
#include <cstddef>
#include <memory>
#include <string>

#include "tensor/dtype.hpp"

namespace neuron::dist {

enum class MemoryLocation { host, device };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  virtual MemoryLocation location() const noexcept = 0;
  virtual std::string backend_name() const = 0;  // "local", "gloo", "nccl"

  // In place: data[i] = sum over ranks of data[i]. `stream` is a cudaStream_t
  // for device communicators, ignored by host ones. Throws Error{comm}.
  virtual void all_reduce_sum(void* data, std::size_t count, DType dtype, void* stream = nullptr) = 0;
  // out[r * count + i] = in_of_rank_r[i]; out holds size() * count elements.
  virtual void all_gather(const void* in, void* out, std::size_t count, DType dtype, void* stream = nullptr) = 0;
  virtual void barrier() = 0;
  // Unblocks and poisons the communicator after a peer failed; later calls throw. Never
  // throws; may be called from any thread while a collective runs on another, which
  // then returns with Error{comm} (how the TP leader stops waiting on a dead group).
  virtual void abort() noexcept = 0;
};

// All-reduces 1.0 on every rank and returns what was observed (size() when healthy).
float sanity_check(Communicator& comm);

class LocalCommunicator final : public Communicator {
 public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 1; }
  MemoryLocation location() const noexcept override { return MemoryLocation::host; }
  std::string backend_name() const override { return "local"; }
  void all_reduce_sum(void*, std::size_t, DType, void*) override {}
  void all_gather(const void* in, void* out, std::size_t count, DType dtype, void* stream) override;
  void barrier() override {}
  void abort() noexcept override {}
};

}  // namespace neuron::dist
