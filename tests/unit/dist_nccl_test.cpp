// The NCCL communicator on real GPUs (CUDA builds with a device; skipped elsewhere).
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <cuda_runtime.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "backend/device.hpp"
#include "dist/factory.hpp"
#include "util/error.hpp"

namespace {

using namespace neuron;
using namespace std::chrono_literals;

TEST(NcclCommunicator, SingleRankSanityCheckAndDeviceAllReduce) {
  if (backend::cuda_device_count() < 1) GTEST_SKIP() << "no CUDA device";
  const std::string id = dist::new_comm_id(dist::CommKind::nccl);
  ASSERT_EQ(id.size(), 5u + 256u);
  auto comm = dist::make_communicator(id, 0, 1, {.timeout = 20000ms, .cuda_device = 0});
  EXPECT_EQ(comm->backend_name(), "nccl");
  EXPECT_EQ(comm->location(), dist::MemoryLocation::device);
  EXPECT_EQ(dist::sanity_check(*comm), 1.0f);  // host pointer: staged
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4 * sizeof(float)), cudaSuccess);
  const float h[4] = {1, 2, 3, 4};
  ASSERT_EQ(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice), cudaSuccess);
  comm->all_reduce_sum(d, 4, DType::f32);
  comm->barrier();
  float back[4] = {};
  ASSERT_EQ(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], h[i]);
  cudaFree(d);
  comm->abort();
  EXPECT_THROW(comm->barrier(), Error);
}

TEST(NcclCommunicator, PeerThatNeverJoinsFailsInitWithinTimeout) {
  if (backend::cuda_device_count() < 1) GTEST_SKIP() << "no CUDA device";
  const std::string id = dist::new_comm_id(dist::CommKind::nccl);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    dist::make_communicator(id, 0, 2, {.timeout = 3000ms, .cuda_device = 0});
    FAIL() << "NCCL init without its peer succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::comm) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);
}

TEST(NcclCommunicator, TwoRanksOnTwoGpusAllReduceAndGather) {
  if (backend::cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  const std::string id = dist::new_comm_id(dist::CommKind::nccl);
  auto rank = [&](int r) {
    auto comm = dist::make_communicator(id, r, 2, {.timeout = 20000ms, .cuda_device = r});
    EXPECT_EQ(dist::sanity_check(*comm), 2.0f);
    std::vector<float> in = {float(r), float(r + 10)}, out(4);
    comm->all_gather(in.data(), out.data(), 2, DType::f32);  // host pointers: staged
    EXPECT_EQ(out, (std::vector<float>{0, 10, 1, 11}));
  };
  auto other = std::async(std::launch::async, rank, 1);
  rank(0);
  other.get();
}

TEST(NcclCommunicator, MalformedIdIsRejected) {
  EXPECT_THROW(dist::make_communicator("nccl:abc", 0, 1), Error);
}

}  // namespace
#endif
