#pragma once
// Whether the client of an exchange is still connected, asked while a
// non-streaming response is being generated (a streaming one finds out when
// a write fails). cpp-httplib does not hand handlers their socket, so the
// probe finds it once by the connection's 4-tuple among the process's
// sockets; the connection thread is blocked in the handler meanwhile, so the
// descriptor cannot be closed or reused under the probe.
#include <string>

namespace neuron::server {

struct ConnectionAddress {
  std::string local_addr;
  int local_port = -1;
  std::string remote_addr;
  int remote_port = -1;
};

class PeerProbe {
 public:
  explicit PeerProbe(ConnectionAddress address) : address_(std::move(address)) {}

  // True once the peer has closed or reset the connection. False while it is
  // open, and when the socket cannot be identified (never a false alarm).
  bool gone();

 private:
  ConnectionAddress address_;
  int fd_ = -1;         // found lazily, on the first call
  bool searched_ = false;
};

}  // namespace neuron::server
