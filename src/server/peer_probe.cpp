#include "server/peer_probe.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string_view>

namespace neuron::server {
namespace {

struct Endpoint {
  std::string addr;
  int port = -1;
};

// The numeric form httplib reports (getnameinfo NI_NUMERICHOST); IPv4-mapped
// IPv6 addresses are compared as the IPv4 address they carry.
Endpoint endpoint_of(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
    return {buf, ntohs(a.sin_port)};
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    ::inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf);
    return {buf, ntohs(a.sin6_port)};
  }
  return {};
}

std::string unmapped(const std::string& addr) {
  constexpr std::string_view prefix = "::ffff:";
  return addr.rfind(prefix, 0) == 0 && addr.find('.') != std::string::npos ? addr.substr(prefix.size()) : addr;
}

bool same(const Endpoint& e, const std::string& addr, int port) { return e.port == port && unmapped(e.addr) == unmapped(addr); }

int find_socket(const ConnectionAddress& want) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir("/proc/self/fd"), ::closedir);
  if (!dir) return -1;
  const int own = ::dirfd(dir.get());
  while (const dirent* entry = ::readdir(dir.get())) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == own) continue;
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    if (::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    if (same(endpoint_of(local), want.local_addr, want.local_port) && same(endpoint_of(peer), want.remote_addr, want.remote_port))
      return static_cast<int>(fd);
  }
  return -1;
}

}  // namespace

bool PeerProbe::gone() {
  if (!searched_) {
    searched_ = true;
    fd_ = find_socket(address_);
  }
  if (fd_ < 0) return false;
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
  // Readable: either the peer's end of stream or a pipelined next request.
  char byte;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace neuron::server
