#pragma once
// The systemd watchdog (WatchdogSec=), fed by the engines: a thread sends
// WATCHDOG=1 every half period while every loaded model's engine thread went
// round its loop within the last half period, or within kMinStallLimit when
// that is longer (an idle engine goes round only every Engine::kHeartbeat). An engine stuck in a step stops the pings, is logged
// by name, and systemd restarts the daemon when the period runs out. Nothing
// runs when systemd asked for no watchdog.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/registry.hpp"
#include "server/systemd_notify.hpp"

namespace neuron::server {

class ServiceWatchdog {
 public:
  ServiceWatchdog(const SystemdNotify& notify, const engine::Registry& registry);
  ~ServiceWatchdog();  // stops the thread
  ServiceWatchdog(const ServiceWatchdog&) = delete;
  ServiceWatchdog& operator=(const ServiceWatchdog&) = delete;

  // The first loaded model whose engine has not beaten within `limit` of
  // `now`, as "model M: engine stalled for N ms"; nullopt when all are alive.
  static std::optional<std::string> stalled(const engine::Registry& registry, std::chrono::steady_clock::duration limit,
                                            std::chrono::steady_clock::time_point now);

  // The shortest stall that stops the pings: three idle beats.
  static constexpr std::chrono::steady_clock::duration kMinStallLimit = 3 * engine::Engine::kHeartbeat;

 private:
  void run(std::chrono::microseconds period);

  const SystemdNotify& notify_;
  const engine::Registry& registry_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace neuron::server
