#include "server/systemd_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "util/error.hpp"

namespace neuron::server {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// A positive decimal without sign or junk; nullopt otherwise.
std::optional<long long> parse_positive(const std::string& text) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const long long v = std::stoll(text);
  return v > 0 ? std::optional<long long>(v) : std::nullopt;
}

}  // namespace

SystemdNotify::SystemdNotify(std::string socket, std::optional<std::chrono::microseconds> watchdog)
    : socket_(std::move(socket)), watchdog_(watchdog) {
  if (!socket_.empty() && socket_[0] != '/' && socket_[0] != '@')
    fail(errc::invalid_argument, "NOTIFY_SOCKET must be an absolute path or start with '@': " + socket_);
  if (socket_.size() >= sizeof(sockaddr_un::sun_path))
    fail(errc::invalid_argument, "NOTIFY_SOCKET is longer than a socket path may be");
}

SystemdNotify SystemdNotify::from_env() {
  std::optional<std::chrono::microseconds> watchdog;
  if (auto usec = env("WATCHDOG_USEC")) {
    const auto v = parse_positive(*usec);
    if (!v) fail(errc::invalid_argument, "WATCHDOG_USEC must be a positive number of microseconds: " + *usec);
    // WATCHDOG_PID names the process meant to ping; another process's value is not ours.
    const auto pid = env("WATCHDOG_PID");
    if (!pid || parse_positive(*pid) == static_cast<long long>(::getpid())) watchdog = std::chrono::microseconds(*v);
  }
  return SystemdNotify(env("NOTIFY_SOCKET").value_or(""), watchdog);
}

bool SystemdNotify::notify(std::string_view state) const {
  if (!active()) return false;
  static std::atomic<bool> warned{false};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_.data(), socket_.size());
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // the abstract namespace
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size());
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  bool ok = fd >= 0 && ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr), len) ==
                           static_cast<ssize_t>(state.size());
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok && !warned.exchange(true)) spdlog::warn("cannot notify systemd at {}: {}", socket_, std::strerror(err));
  return ok;
}

}  // namespace neuron::server
