// sd_notify spoken directly: datagrams reach a socket at a path and in the
// abstract namespace, the environment is parsed strictly, and the startup's
// readiness (Activation::wait_ready) waits for every startup load to end.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "server/activation.hpp"
#include "server/systemd_notify.hpp"
#include "util/error.hpp"

namespace neuron::server {
namespace {

// A bound datagram socket, as systemd listens; removed on destruction.
class Listener {
 public:
  explicit Listener(std::string name) : name_(std::move(name)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name_.data(), name_.size());
    if (name_[0] == '@') addr.sun_path[0] = '\0';
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0) << std::strerror(errno);
  }
  ~Listener() {
    ::close(fd_);
    if (name_[0] == '/') ::unlink(name_.c_str());
  }
  std::optional<std::string> receive(int timeout_ms = 2000) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) != 1) return std::nullopt;
    char buf[512];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    return n < 0 ? std::nullopt : std::optional<std::string>(std::string(buf, static_cast<std::size_t>(n)));
  }

 private:
  std::string name_;
  int fd_ = -1;
};

TEST(SystemdNotify, SendsDatagramsToAPathAndToTheAbstractNamespace) {
  const std::string path = ::testing::TempDir() + "/neuron-notify-" + std::to_string(::getpid()) + ".sock";
  Listener at_path(path);
  EXPECT_TRUE(SystemdNotify(path, std::nullopt).notify("READY=1\nSTATUS=serving"));
  EXPECT_EQ(at_path.receive(), "READY=1\nSTATUS=serving");

  const std::string abstract = "@neuron-notify-test-" + std::to_string(::getpid());
  Listener in_namespace(abstract);
  EXPECT_TRUE(SystemdNotify(abstract, std::nullopt).notify("WATCHDOG=1"));
  EXPECT_EQ(in_namespace.receive(), "WATCHDOG=1");
}

TEST(SystemdNotify, InactiveWithoutASocketAndFalseWhenNobodyListens) {
  SystemdNotify none;
  EXPECT_FALSE(none.active());
  EXPECT_FALSE(none.notify("READY=1"));
  const std::string gone = ::testing::TempDir() + "/neuron-notify-nobody.sock";
  EXPECT_FALSE(SystemdNotify(gone, std::nullopt).notify("READY=1"));  // logged, not thrown
  EXPECT_THROW(SystemdNotify("relative.sock", std::nullopt), Error);
  EXPECT_THROW(SystemdNotify("/" + std::string(200, 'x'), std::nullopt), Error);
}

// Sets (or unsets, for nullptr) environment variables for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(SystemdNotify, ReadsTheEnvironmentStrictly) {
  ScopedEnv socket("NOTIFY_SOCKET", "/run/systemd/notify");
  {
    ScopedEnv usec("WATCHDOG_USEC", "60000000");
    ScopedEnv pid("WATCHDOG_PID", nullptr);
    const SystemdNotify n = SystemdNotify::from_env();
    EXPECT_TRUE(n.active());
    EXPECT_EQ(n.watchdog(), std::chrono::microseconds(60000000));
  }
  {
    ScopedEnv usec("WATCHDOG_USEC", "60000000");
    ScopedEnv pid("WATCHDOG_PID", std::to_string(::getpid() + 1).c_str());  // another process's watchdog
    EXPECT_EQ(SystemdNotify::from_env().watchdog(), std::nullopt);
  }
  {
    ScopedEnv usec("WATCHDOG_USEC", "60000000");
    ScopedEnv pid("WATCHDOG_PID", std::to_string(::getpid()).c_str());
    EXPECT_EQ(SystemdNotify::from_env().watchdog(), std::chrono::microseconds(60000000));
  }
  for (const char* bad : {"abc", "-5", "0", "1.5", "99999999999999999999"}) {
    ScopedEnv usec("WATCHDOG_USEC", bad);
    EXPECT_THROW(SystemdNotify::from_env(), Error) << bad;
  }
  ScopedEnv unset("NOTIFY_SOCKET", nullptr);
  ScopedEnv no_usec("WATCHDOG_USEC", nullptr);
  EXPECT_FALSE(SystemdNotify::from_env().active());
}

engine::ModelInfo ended(const std::string& id, engine::ModelStatus status) {
  engine::ModelInfo info;
  info.model_id = id;
  info.status = status;
  return info;
}

TEST(Activation, IsReadyOnceEveryStartupLoadEndedLoadedOrFailed) {
  Activation a;
  a.expect("a");
  a.expect("b");
  EXPECT_FALSE(a.wait_ready(std::chrono::milliseconds(10)));  // startup still open
  a.close_startup();
  a.load_ended(ended("a", engine::ModelStatus::loaded));
  EXPECT_FALSE(a.wait_ready(std::chrono::milliseconds(10)));  // b still loading
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    a.load_ended(ended("b", engine::ModelStatus::failed));  // a failure does not block readiness
  });
  EXPECT_TRUE(a.wait_ready(std::chrono::seconds(5)));
  later.join();

  Activation none;
  none.close_startup();
  EXPECT_TRUE(none.wait_ready(std::chrono::milliseconds(0)));
}

}  // namespace
}  // namespace neuron::server
