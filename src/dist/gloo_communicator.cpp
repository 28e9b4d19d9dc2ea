#include "dist/gloo_communicator.hpp"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <spdlog/spdlog.h>

#include "util/error.hpp"

namespace neuron::dist {

namespace {

// Sums 16-bit floats through f32, rounding once per pairwise step as NCCL does.
template <float (*to_f32)(std::uint16_t) noexcept, std::uint16_t (*from_f32)(float) noexcept>
void sum_half(void* c_, const void* a_, const void* b_, std::size_t n) {
  auto* c = static_cast<std::uint16_t*>(c_);
  const auto* a = static_cast<const std::uint16_t*>(a_);
  const auto* b = static_cast<const std::uint16_t*>(b_);
  for (std::size_t i = 0; i < n; ++i) c[i] = from_f32(to_f32(a[i]) + to_f32(b[i]));
}

bool same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  return false;
}

// The connected sockets of this process whose local address is one of `locals`.
std::vector<int> sockets_bound_to(const std::vector<sockaddr_storage>& locals) {
  std::vector<int> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return out;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t len = sizeof local, peer_len = sizeof peer;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
    if (::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;  // not connected
    for (const auto& want : locals)
      if (same_endpoint(local, want)) out.push_back(static_cast<int>(fd));
  }
  ::closedir(dir);
  return out;
}

using transport_buffer = gloo::transport::UnboundBuffer;

}  // namespace

// Registers the buffers of the collective in flight, so abort() can wake its
// waits; unregistering takes the same lock abort() holds while it pokes them.
struct GlooCommunicator::InFlight {
  GlooCommunicator& owner;
  InFlight(GlooCommunicator& o, std::initializer_list<gloo::transport::UnboundBuffer*> buffers) : owner(o) {
    std::lock_guard lock(owner.flight_mu_);
    owner.in_flight_.assign(buffers.begin(), buffers.end());
  }
  ~InFlight() {
    std::lock_guard lock(owner.flight_mu_);
    owner.in_flight_.clear();
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
};

GlooCommunicator::GlooCommunicator(const std::filesystem::path& store_dir, const std::string& session, int rank,
                                   int world, std::chrono::milliseconds timeout)
    : rank_(rank), world_(world), timeout_(timeout) {
  if (world < 1 || rank < 0 || rank >= world)
    fail(errc::invalid_argument,
         "gloo communicator: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
  if (rank == 0) owned_store_dir_ = store_dir;
  std::error_code ec;
  if (!std::filesystem::is_directory(store_dir, ec))
    fail(errc::comm, "gloo rendezvous directory " + store_dir.string() + " does not exist");
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(store_dir.string());
    gloo::rendezvous::PrefixStore store(session, file_store);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
    // Once every rank is connected the store is no longer read: rank 0
    // removes the directory now, so a leader that is later killed (SIGKILL,
    // a crash) leaves nothing behind in the temporary directory.
    if (world > 1) {
      gloo::BarrierOptions opts(context);
      opts.setTimeout(timeout);
      gloo::barrier(opts);
    }
    context_ = std::move(context);
  } catch (const std::exception& e) {
    // No destructor runs for a constructor that throws: rank 0 removes its directory here.
    if (!owned_store_dir_.empty()) std::filesystem::remove_all(owned_store_dir_, ec);
    fail(errc::comm, "gloo rendezvous of rank " + std::to_string(rank) + " of " + std::to_string(world) +
                         " failed (a peer did not join within " + std::to_string(timeout.count()) +
                         " ms?): " + e.what());
  }
  if (!owned_store_dir_.empty()) {
    std::filesystem::remove_all(owned_store_dir_, ec);
    owned_store_dir_.clear();
  }
  spdlog::debug("gloo: rank {} of {} connected", rank, world);
}

GlooCommunicator::~GlooCommunicator() { context_.reset(); }

void GlooCommunicator::poison(const std::string& why) noexcept {
  {
    std::lock_guard lock(reason_mu_);
    if (poison_reason_.empty()) poison_reason_ = why;
  }
  poisoned_.store(true);
}

void GlooCommunicator::check_usable(const char* op) const {
  if (!poisoned_.load()) return;
  std::lock_guard lock(reason_mu_);
  fail(errc::comm, std::string("gloo ") + op + " on rank " + std::to_string(rank_) +
                       ": the communicator is unusable after an earlier failure (" + poison_reason_ + ")");
}

template <typename F>
void GlooCommunicator::guarded(const char* op, F&& f) {
  check_usable(op);
  try {
    f();
    // abort() wakes the collective's waits without an error; whatever it returned is garbage.
    if (poisoned_.load()) throw std::runtime_error("aborted while in flight");
  } catch (const std::exception& e) {
    std::string why = std::string("gloo ") + op + " on rank " + std::to_string(rank_) + " of " +
                      std::to_string(world_) + " failed (peer died or missed the " +
                      std::to_string(timeout_.count()) + " ms timeout): " + e.what();
    poison(why);
    fail(errc::comm, why);
  }
}

void GlooCommunicator::all_reduce_sum(void* data, std::size_t count, DType dtype, void*) {
  if (count == 0 || world_ == 1) return check_usable("all_reduce");
  guarded("all_reduce", [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setTimeout(timeout_);
    auto out = context_->createUnboundBuffer(data, count * dtype_size(dtype));
    transport_buffer* const out_raw = out.get();
    switch (dtype) {
      case DType::f32:
        opts.setOutput<float>(std::move(out));
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
        break;
      case DType::bf16:
        opts.setOutput<std::uint16_t>(std::move(out));
        opts.setReduceFunction(&sum_half<bf16_to_f32, f32_to_bf16>);
        break;
      case DType::f16:
        opts.setOutput<std::uint16_t>(std::move(out));
        opts.setReduceFunction(&sum_half<f16_to_f32, f32_to_f16>);
        break;
    }
    const InFlight flight(*this, {out_raw});  // after opts: unregistered before the buffer dies
    gloo::allreduce(opts);
  });
}

void GlooCommunicator::all_gather(const void* in, void* out, std::size_t count, DType dtype, void*) {
  const std::size_t bytes = count * dtype_size(dtype);
  if (world_ == 1 || bytes == 0) {
    check_usable("all_gather");
    if (in != out && bytes != 0) std::memmove(out, in, bytes);
    return;
  }
  guarded("all_gather", [&] {
    gloo::AllgatherOptions opts(context_);
    opts.setTimeout(timeout_);
    auto* out_bytes = static_cast<std::uint8_t*>(out);
    // Gloo reads but never writes the input; it gathers in place when in == our slot of out.
    std::vector<std::uint8_t> staged;
    const std::uint8_t* src = static_cast<const std::uint8_t*>(in);
    if (src >= out_bytes && src < out_bytes + bytes * world_) {
      staged.assign(src, src + bytes);
      src = staged.data();
    }
    auto in_buf = context_->createUnboundBuffer(const_cast<std::uint8_t*>(src), bytes);
    auto out_buf = context_->createUnboundBuffer(out_bytes, bytes * static_cast<std::size_t>(world_));
    const InFlight flight(*this, {in_buf.get(), out_buf.get()});  // after opts: unregistered before the buffers die
    opts.setInput<std::uint8_t>(std::move(in_buf));
    opts.setOutput<std::uint8_t>(std::move(out_buf));
    gloo::allgather(opts);
  });
}

void GlooCommunicator::barrier() {
  if (world_ == 1) return check_usable("barrier");
  guarded("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

void GlooCommunicator::abort() noexcept {
  poison("aborted by this rank after a peer failed");
  // Gloo has no call that cancels a collective from another thread (the one
  // that would, Pair::signalExceptionExternal, is protected and its header is
  // not installed). Shutting down this rank's TCP connections does the same
  // through Gloo's own error path: its event loop reads EOF on each pair and
  // fails every operation pending on it, so this rank's collective in flight
  // throws at once, and so do the peers' operations with this rank. The
  // sockets are found by their local address (each connected pair's
  // address()); shutdown() leaves the descriptors to Gloo, which closes them.
  try {
    std::vector<sockaddr_storage> locals;
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      const auto& pair = context_->getPair(r);
      if (!pair) continue;
      if (const auto* a = dynamic_cast<const gloo::transport::tcp::Address*>(&pair->address()))
        locals.push_back(a->getSockaddr());
    }
    for (int fd : sockets_bound_to(locals)) ::shutdown(fd, SHUT_RDWR);
  } catch (const std::exception& e) {
    spdlog::warn("gloo: rank {} could not shut its connections down: {}", rank_, e.what());
  }
  // A send Gloo had queued for a socket that failed is never signalled (the
  // pair only fails the operations it still lists), so the collective's wait
  // for it would last the whole timeout. Waking the waits on the collective's
  // own buffers covers that; each wake ends one wait, so keep waking until the
  // collective has left (its next operation on a closed pair throws).
  const auto give_up = std::chrono::steady_clock::now() + timeout_;  // by then Gloo's own timeout ended it
  for (;;) {
    {
      std::lock_guard lock(flight_mu_);
      if (in_flight_.empty()) break;
      for (auto* buffer : in_flight_) {
        buffer->abortWaitSend();
        buffer->abortWaitRecv();
      }
    }
    if (std::chrono::steady_clock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace neuron::dist
