#include "tp/child_watcher.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "util/error.hpp"

namespace neuron::tp {

namespace {

UniqueFd make_eventfd() {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) fail(errc::io, std::string("eventfd failed: ") + std::strerror(errno));
  return UniqueFd(fd);
}

void signal_eventfd(int fd) noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

}  // namespace

ChildWatcher::ChildWatcher(std::vector<Child> children, std::function<void()> on_trouble)
    : children_(std::move(children)),
      on_trouble_(std::move(on_trouble)),
      wake_(make_eventfd()),
      exited_event_(make_eventfd()),
      thread_([this] { loop(); }) {}

ChildWatcher::~ChildWatcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake();
  thread_.join();
}

void ChildWatcher::wake() noexcept { signal_eventfd(wake_.get()); }

void ChildWatcher::arm(Clock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    deadline_ = deadline;
    deadline_passed_ = false;
  }
  wake();
}

void ChildWatcher::disarm() {
  {
    std::lock_guard lock(mu_);
    deadline_.reset();
  }
  wake();
}

bool ChildWatcher::deadline_passed() const {
  std::lock_guard lock(mu_);
  return deadline_passed_;
}

std::optional<std::size_t> ChildWatcher::first_exited() const {
  std::lock_guard lock(mu_);
  return first_exited_;
}

void ChildWatcher::loop() {
  std::vector<bool> gone(children_.size(), false);
  std::vector<pollfd> fds;
  std::vector<std::size_t> index;  // fds[k + 1] watches children_[index[k]]
  for (;;) {
    int wait_ms = -1;
    bool deadline_now = false;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      if (deadline_) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - Clock::now());
        if (left.count() <= 0) {
          deadline_.reset();
          deadline_passed_ = true;
          deadline_now = true;
        } else {
          wait_ms = static_cast<int>(std::min<long long>(left.count(), 1 << 30));
        }
      }
    }
    if (deadline_now) {
      on_trouble_();
      continue;
    }

    fds.assign(1, pollfd{wake_.get(), POLLIN, 0});
    index.clear();
    for (std::size_t i = 0; i < children_.size(); ++i) {
      if (gone[i]) continue;
      const Child& c = children_[i];
      // A pidfd polls readable on exit; a pipe's read end reports POLLHUP even with no events asked.
      fds.push_back(c.pidfd >= 0 ? pollfd{c.pidfd, POLLIN, 0} : pollfd{c.stdout_fd, 0, 0});
      index.push_back(i);
    }
    const int n = ::poll(fds.data(), fds.size(), wait_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("tp: the worker watcher's poll failed ({}); it stops watching", std::strerror(errno));
      return;
    }
    if (fds[0].revents & POLLIN) {
      std::uint64_t drained = 0;
      [[maybe_unused]] const ssize_t r = ::read(wake_.get(), &drained, sizeof drained);
    }
    bool exited = false;
    for (std::size_t k = 1; k < fds.size(); ++k) {
      if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) == 0) continue;
      const std::size_t i = index[k - 1];
      gone[i] = true;
      exited = true;
      std::lock_guard lock(mu_);
      if (!first_exited_) first_exited_ = i;
    }
    if (exited) {
      signal_eventfd(exited_event_.get());
      on_trouble_();
    }
  }
}

}  // namespace neuron::tp
