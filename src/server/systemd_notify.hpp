#pragma once
// systemd's service notification protocol (sd_notify(3)), spoken directly: one
// datagram per message to the AF_UNIX socket named by $NOTIFY_SOCKET (a path,
// or '@name' for the abstract namespace). Under `Type=notify` the daemon sends
// READY=1 once its startup models have loaded, WATCHDOG=1 while its engines
// are alive (WatchdogSec=), STATUS= lines and STOPPING=1. Without
// $NOTIFY_SOCKET (not run by systemd) every call is a no-op.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace neuron::server {

class SystemdNotify {
 public:
  // From $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID. Throws
  // Error{invalid_argument} for a malformed NOTIFY_SOCKET or WATCHDOG_USEC.
  static SystemdNotify from_env();
  SystemdNotify() = default;
  SystemdNotify(std::string socket, std::optional<std::chrono::microseconds> watchdog);

  bool active() const { return !socket_.empty(); }
  // Sends `state` ("READY=1", "STATUS=...", newline-separated assignments).
  // Returns false (and logs once) when the datagram cannot be sent; never throws.
  bool notify(std::string_view state) const;
  // WatchdogSec= as systemd passed it (only when WATCHDOG_PID is unset or ours);
  // nullopt: no watchdog. Ping at half of it.
  std::optional<std::chrono::microseconds> watchdog() const { return watchdog_; }

 private:
  std::string socket_;  // as in $NOTIFY_SOCKET
  std::optional<std::chrono::microseconds> watchdog_;
};

}  // namespace neuron::server
