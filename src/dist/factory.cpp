#include "dist/factory.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string_view>
#include <vector>

#include "dist/gloo_communicator.hpp"
#include "util/error.hpp"

#ifdef NEURON_HAVE_CUDA
#include "dist/nccl/nccl_communicator.hpp"
#endif

namespace neuron::dist {

namespace {

constexpr std::string_view kGlooFilePrefix = "gloo:file:";
constexpr std::string_view kNcclPrefix = "nccl:";

std::string random_hex(std::size_t bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::random_device rd;
  std::string out;
  for (std::size_t i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xffu;
    out += digits[v >> 4];
    out += digits[v & 0xfu];
  }
  return out;
}

std::string new_gloo_id() {
  const char* tmp = std::getenv("TMPDIR");
  std::filesystem::path base = (tmp && *tmp) ? tmp : "/tmp";
  std::string templ = (base / "neuron-gloo-XXXXXX").string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    fail(errc::io, "cannot create a gloo rendezvous directory under " + base.string() + ": " + std::strerror(errno));
  // The session prefix keeps a re-used directory's stale keys from meeting a new group.
  return std::string(kGlooFilePrefix) + buf.data() + ":" + random_hex(8);
}

}  // namespace

CommKind comm_kind_of(const std::string& comm_id) {
  if (comm_id.starts_with(kGlooFilePrefix)) return CommKind::gloo;
  if (comm_id.starts_with(kNcclPrefix)) return CommKind::nccl;
  fail(errc::invalid_argument, "comm_id \"" + comm_id.substr(0, 64) + "\" names no known backend (gloo:file:..., nccl:...)");
}

std::string new_comm_id(CommKind kind) {
  if (kind == CommKind::gloo) return new_gloo_id();
#ifdef NEURON_HAVE_CUDA
  return std::string(kNcclPrefix) + nccl::new_unique_id_hex();
#else
  fail(errc::comm, "this neuron build has no NCCL (built without CUDA)");
#endif
}

std::shared_ptr<Communicator> make_communicator(const std::string& comm_id, int rank, int world,
                                                const CommOptions& options) {
  if (world < 1 || rank < 0 || rank >= world)
    fail(errc::invalid_argument, "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
  if (comm_kind_of(comm_id) == CommKind::gloo) {
    const std::string rest = comm_id.substr(kGlooFilePrefix.size());
    const auto colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size())
      fail(errc::invalid_argument, "comm_id \"" + comm_id + "\" is not gloo:file:<dir>:<session>");
    return std::make_shared<GlooCommunicator>(rest.substr(0, colon), rest.substr(colon + 1), rank, world,
                                              options.timeout);
  }
#ifdef NEURON_HAVE_CUDA
  return std::make_shared<nccl::NcclCommunicator>(comm_id.substr(kNcclPrefix.size()), rank, world,
                                                  options.cuda_device, options.timeout);
#else
  fail(errc::comm, "comm_id names NCCL but this neuron build has no CUDA");
#endif
}

}  // namespace neuron::dist
