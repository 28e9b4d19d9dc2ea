#pragma once
// An error after which the same request may succeed later without anyone
// acting (a failed model that reloads by itself): the HTTP boundary answers it
// like any Error of its kind and adds Retry-After.
#include <chrono>
#include <string>

#include "util/error.hpp"

namespace neuron {

class RetryLaterError : public Error {
 public:
  RetryLaterError(std::string kind, const std::string& message, std::chrono::seconds retry_after)
      : Error(std::move(kind), message), retry_after_(retry_after) {}
  std::chrono::seconds retry_after() const noexcept { return retry_after_; }

 private:
  std::chrono::seconds retry_after_;
};

}  // namespace neuron
