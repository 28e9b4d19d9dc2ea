#pragma once
// A fork-join for the decode step's many short parallel loops that never
// waits for a thread that has not started.
//
// An OpenMP region ends at a barrier every thread must reach, so when the
// machine is busy and one thread is descheduled, each of a token's ~150
// GEMVs waits a scheduler time slice for it (decode ran 4x slower than on
// one thread under load). Here the caller and helper threads claim chunks
// from a shared counter; the caller only waits for chunks already claimed,
// so a helper that is late simply finds no work left.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace neuron::backend::cpu {

class ChunkPool {
 public:
  explicit ChunkPool(int helpers);  // threads besides the caller's
  ~ChunkPool();
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  // Runs fn(0) .. fn(chunks - 1), each exactly once, on the caller and the
  // helpers; returns when all are done. fn must not throw. A second caller
  // while a run is in progress runs its chunks inline instead of waiting.
  void run(std::int64_t chunks, const std::function<void(std::int64_t)>& fn);

  int threads() const noexcept { return static_cast<int>(helpers_.size()) + 1; }

  // Rows a chunk of a weight matrix (rows of row_bytes) should take, a
  // multiple of `multiple`: about an eighth of a thread's share, between 64
  // KiB and 1 MiB. Long runs of rows keep the hardware prefetchers streaming
  // (64 KiB chunks left two threads at 1.4-1.7x one on the quantized GEMVs,
  // bench/QUANT.md), and eight a thread keep the last chunks balanced.
  std::int64_t chunk_rows(std::int64_t rows, std::int64_t row_bytes, std::int64_t multiple) const noexcept;

  // The process-wide pool: OpenMP's thread count (OMP_NUM_THREADS) minus the caller.
  static ChunkPool& shared();

 private:
  void helper_loop();
  void work();
  void publish();  // wakes sleeping helpers after generation_ changed


  std::vector<std::thread> helpers_;
  std::mutex run_mutex_;                        // one run at a time
  std::atomic<std::uint64_t> generation_{0};    // odd while a job is being set up, even once published
  std::atomic<int> inside_{0};                  // helpers currently looking at the job
  std::atomic<bool> stop_{false};
  std::mutex sleep_mutex_;  // helpers idle past the spin sleep on sleep_cv_
  std::condition_variable sleep_cv_;
  // The current job, written only while generation_ is odd and inside_ is 0.
  const std::function<void(std::int64_t)>* fn_ = nullptr;
  std::int64_t chunks_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::atomic<std::int64_t> done_{0};
};

}  // namespace neuron::backend::cpu
