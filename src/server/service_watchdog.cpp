#include "server/service_watchdog.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace neuron::server {

ServiceWatchdog::ServiceWatchdog(const SystemdNotify& notify, const engine::Registry& registry) : notify_(notify), registry_(registry) {
  if (const auto period = notify_.watchdog(); notify_.active() && period) thread_ = std::thread([this, p = *period] { run(p); });
}

ServiceWatchdog::~ServiceWatchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<std::string> ServiceWatchdog::stalled(const engine::Registry& registry, std::chrono::steady_clock::duration limit,
                                                    std::chrono::steady_clock::time_point now) {
  for (const engine::ModelInfo& m : registry.list()) {
    const auto engine = registry.peek(m.model_id);
    if (!engine) continue;  // loading, failed or reloading: its own state machine reports it
    const auto age = now - engine->heartbeat();
    if (age > limit)
      return "model " + m.model_id + ": engine stalled for " +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(age).count()) + " ms";
  }
  return std::nullopt;
}

void ServiceWatchdog::run(std::chrono::microseconds period) {
  const auto half = period / 2;
  // An idle engine beats only every kHeartbeat: a shorter limit would starve systemd of pings while nothing runs.
  const std::chrono::steady_clock::duration limit = std::max<std::chrono::steady_clock::duration>(half, kMinStallLimit);
  spdlog::info("systemd watchdog: pinging every {} ms while the engines run", std::chrono::duration_cast<std::chrono::milliseconds>(half).count());
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    if (const auto problem = stalled(registry_, limit, std::chrono::steady_clock::now()))
      spdlog::error("systemd watchdog not fed: {}", *problem);
    else
      notify_.notify("WATCHDOG=1");
    lock.lock();
    cv_.wait_for(lock, half, [this] { return stop_; });
  }
}

}  // namespace neuron::server
