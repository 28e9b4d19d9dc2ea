#pragma once
// Making the communicator of one tensor-parallel group from a `comm_id`.
//
// The leader calls new_comm_id() once per group and sends the string to every
// worker in `init`; every rank (leader included) then calls make_communicator
// with it, and the call returns once all `world` ranks have met. Spellings:
//   "gloo:file:<dir>:<session>"  a Gloo TCP group on 127.0.0.1 whose ranks
//                                exchange addresses through files in <dir>
//                                under the key prefix <session>
//   "nccl:<256 hex digits>"      an NCCL group (ncclUniqueId, hex); CUDA builds only
#include <chrono>
#include <memory>
#include <string>

#include "dist/communicator.hpp"

namespace neuron::dist {

enum class CommKind { gloo, nccl };

struct CommOptions {
  // Bounds the rendezvous and every collective: a dead or stopped peer makes
  // the call throw Error{comm} after this long instead of hanging the rank.
  std::chrono::milliseconds timeout{30000};
  int cuda_device = 0;  // NCCL only: the device this rank runs on
};

// A fresh rendezvous for one group. For Gloo this creates a private directory
// (mode 0700) that the rank-0 communicator removes once the group has connected.
// Throws Error{io} (Gloo) or Error{comm|cuda} (NCCL, or NCCL not built in).
std::string new_comm_id(CommKind kind);

// The backend a comm_id names; throws Error{invalid_argument} for anything else.
CommKind comm_kind_of(const std::string& comm_id);

// Joins the group; blocks until all ranks have joined or options.timeout passes.
// Throws Error{invalid_argument} (malformed id, rank outside [0, world)), Error{comm}.
std::shared_ptr<Communicator> make_communicator(const std::string& comm_id, int rank, int world,
                                                const CommOptions& options = {});

}  // namespace neuron::dist
