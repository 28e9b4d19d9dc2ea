#include "engine/request.hpp"

namespace neuron::engine {

void Channel::push(Event e) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::optional<Event> Channel::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return !events_.empty(); })) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void Channel::cancel() noexcept {
  std::lock_guard lock(mu_);
  cancelled_ = true;
}

bool Channel::cancelled() const noexcept {
  std::lock_guard lock(mu_);
  return cancelled_;
}

}  // namespace neuron::engine
