// `neuron serve` under systemd's notification protocol, with a socket in the
// test's place: READY=1 only once the startup model has loaded, WATCHDOG=1
// every half WATCHDOG_USEC while its engine runs (also while it generates),
// STOPPING=1 on SIGTERM; the watchdog's stall check names a stalled engine.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "engine/registry.hpp"
#include "server/service_watchdog.hpp"
#include "server_daemon.hpp"

namespace neuron::server {
namespace {

using testing_support::Daemon;
using testing_support::tiny_model_dir;

std::optional<std::string> receive(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return std::nullopt;
  char buf[512];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  return n < 0 ? std::nullopt : std::optional<std::string>(std::string(buf, static_cast<std::size_t>(n)));
}

TEST(ServerSystemd, ReadyAfterTheStartupModelThenWatchdogThenStopping) {
  const std::string path = ::testing::TempDir() + "/neuron-sd-" + std::to_string(::getpid()) + ".sock";
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  {
    Daemon d({"--model", tiny_model_dir()}, /*wait_loaded=*/false, {"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=400000"});
    std::optional<std::string> msg;
    // Pings may come first (the watchdog starts with the server); READY=1 comes once the model loaded.
    do msg = receive(fd, 60000);
    while (msg && *msg == "WATCHDOG=1");
    ASSERT_TRUE(msg);
    EXPECT_EQ(msg->rfind("READY=1\nSTATUS=serving on port ", 0), 0u) << *msg;
    auto health = d.client().Get("/health");
    ASSERT_TRUE(health);
    const auto h = nlohmann::json::parse(health->body);
    EXPECT_EQ(h["activation"]["state"], "ready");
    EXPECT_EQ(h["models"][0]["state"], "loaded");
    // A generation runs meanwhile: the engine still beats between its steps.
    auto gen = d.post("/v1/completions", {{"model", tiny_model_dir()}, {"prompt", "hi"}, {"max_tokens", 64}});
    ASSERT_TRUE(gen);
    EXPECT_EQ(gen->status, 200);
    int pings = 0;
    // The generation has ended: the engine is idle and beats only every second, yet the pings go on
    // every 200 ms for 400 ms WATCHDOG_USEC (about 10 in 2 s; a CI run saw 2 in 2 s when an idle
    // engine's beat had to be younger than the half period).
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2000);
    while (std::chrono::steady_clock::now() < until)
      if (auto m = receive(fd, 100); m && *m == "WATCHDOG=1") ++pings;
    EXPECT_GE(pings, 5) << "every 200 ms for 400 ms WATCHDOG_USEC, idle engine or not";
    EXPECT_EQ(d.stop(), 0);
    bool stopping = false;
    while (auto m = receive(fd, 200)) stopping = stopping || *m == "STOPPING=1";
    EXPECT_TRUE(stopping);
  }
  ::close(fd);
  ::unlink(path.c_str());
}

TEST(ServerSystemd, TheStallCheckNamesAnEngineThatStoppedBeating) {
  engine::RegistryOptions ro;
  ro.model_roots = {std::string(NEURON_REPO_ROOT) + "/models"};
  engine::Registry registry(ro);
  engine::ModelSpec spec;
  spec.model_id = tiny_model_dir();
  registry.load(spec, true);
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(ServiceWatchdog::stalled(registry, std::chrono::seconds(3), now), std::nullopt);
  // Seen from 10 s later without a beat in between: an idle engine beats every second.
  const auto stall = ServiceWatchdog::stalled(registry, std::chrono::seconds(3), now + std::chrono::seconds(10));
  ASSERT_TRUE(stall);
  EXPECT_NE(stall->find("engine stalled for"), std::string::npos) << *stall;
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(ServiceWatchdog::stalled(registry, std::chrono::seconds(2), std::chrono::steady_clock::now()), std::nullopt)
      << "the idle engine keeps beating";
}

}  // namespace
}  // namespace neuron::server
