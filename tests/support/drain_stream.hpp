#pragma once
// Drives a BodyStream on the calling thread as the transport does (start,
// then a pull after every wake), for tests of streaming routes without a
// socket. After `budget` pulls that brought bytes it cancels, like a
// connection whose client went away.
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "server/http_types.hpp"

namespace neuron::test_support {

struct Drained {
  std::string received;
  bool finished = false;
};

inline Drained drain(server::BodyStream& stream, int budget = INT_MAX) {
  struct Wakes {  // shared: the engine may still call the wake after we return
    std::mutex mu;
    std::condition_variable cv;
    bool woken = false;
  };
  auto wakes = std::make_shared<Wakes>();
  stream.start([wakes] {
    std::lock_guard lock(wakes->mu);
    wakes->woken = true;
    wakes->cv.notify_one();
  });
  Drained d;
  for (int pulls = 0;;) {
    std::string out;
    const bool more = stream.pull(out);
    d.received += out;
    if (!more) {
      d.finished = true;
      return d;
    }
    if (!out.empty() && ++pulls >= budget) {
      stream.cancel();
      return d;
    }
    std::unique_lock lock(wakes->mu);
    if (!wakes->cv.wait_for(lock, std::chrono::seconds(60), [&] { return wakes->woken; })) {
      ADD_FAILURE() << "the stream stopped waking";
      stream.cancel();
      return d;
    }
    wakes->woken = false;
  }
}

}  // namespace neuron::test_support
