#include "engine/request.hpp"

namespace neuron::engine {

void Channel::push(Event e) {
  std::function<void()> listener;
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) listener();
}

std::optional<Event> Channel::try_next() {
  std::lock_guard lock(mu_);
  if (events_.empty()) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void Channel::set_listener(std::function<void()> on_event) {
  bool waiting = false;
  {
    std::lock_guard lock(mu_);
    listener_ = on_event;
    waiting = !events_.empty();
  }
  if (waiting && on_event) on_event();
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
