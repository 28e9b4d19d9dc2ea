#include "backend/cpu/chunk_pool.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

namespace neuron::backend::cpu {

namespace {
// Spin this many pauses (~10 us) before sleeping or yielding: decode steps
// come back to back, and a futex wake costs more than a short spin.
constexpr int kSpins = 2000;
}  // namespace

ChunkPool::ChunkPool(int helpers) {
  for (int i = 0; i < helpers; ++i) helpers_.emplace_back([this] { helper_loop(); });
}

ChunkPool::~ChunkPool() {
  {
    std::lock_guard lock(run_mutex_);
    stop_ = true;
    generation_ += 2;  // stays even: helpers wake, see stop_ and leave
    publish();
  }
  for (auto& t : helpers_) t.join();
}

ChunkPool& ChunkPool::shared() {
  static ChunkPool pool(std::max(0, omp_get_max_threads() - 1));
  return pool;
}

std::int64_t ChunkPool::chunk_rows(std::int64_t rows, std::int64_t row_bytes, std::int64_t multiple) const noexcept {
  const std::int64_t bytes =
      std::clamp<std::int64_t>(rows * row_bytes / (8 * threads()), std::int64_t{64} << 10, std::int64_t{1} << 20);
  return std::max(multiple, bytes / std::max<std::int64_t>(row_bytes, 1) / multiple * multiple);
}

void ChunkPool::publish() {
  // Taking the mutex orders the change before any helper's predicate check,
  // so a helper about to sleep either sees it or is woken.
  { std::lock_guard lock(sleep_mutex_); }
  sleep_cv_.notify_all();
}

void ChunkPool::work() {
  for (std::int64_t i; (i = next_.fetch_add(1)) < chunks_;) {
    (*fn_)(i);
    done_.fetch_add(1);
  }
}

void ChunkPool::helper_loop() {
  std::uint64_t seen = generation_.load();
  for (;;) {
    // Checked before waiting too: a helper that starts only after the pool
    // began shutting down has never seen the generation change.
    if (stop_) return;
    std::uint64_t g = generation_.load();
    for (int spin = 0; g == seen && spin < kSpins; ++spin) {
      _mm_pause();
      g = generation_.load();
    }
    if (g == seen) {
      std::unique_lock lock(sleep_mutex_);
      sleep_cv_.wait(lock, [&] { return generation_.load() != seen || stop_; });
      continue;
    }
    seen = g;
    if (stop_) return;
    if (g & 1) continue;  // being set up: wait for it to be published
    inside_.fetch_add(1);
    // The job may have been finished and replaced since `g` was read; only
    // touch it while it is still the published one.
    if (generation_.load() == g) work();
    inside_.fetch_sub(1);
  }
}

void ChunkPool::run(std::int64_t chunks, const std::function<void(std::int64_t)>& fn) {
  std::unique_lock lock(run_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || helpers_.empty() || chunks < 2) {
    for (std::int64_t i = 0; i < chunks; ++i) fn(i);
    return;
  }
  generation_.fetch_add(1);  // odd: set-up
  while (inside_.load() != 0) _mm_pause();  // helpers still leaving the previous job
  fn_ = &fn;
  chunks_ = chunks;
  next_ = 0;
  done_ = 0;
  generation_.fetch_add(1);  // even: published
  publish();
  work();
  for (int spin = 0; done_.load() < chunks; ++spin)
    if (spin < kSpins)
      _mm_pause();
    else
      std::this_thread::yield();  // a helper holding a chunk was descheduled
}

}  // namespace neuron::backend::cpu
