// Gloo collectives between ranks running as threads of this process: the same
// code path the TP workers use, minus the processes.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "dist/factory.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace {

using namespace neuron;
using namespace std::chrono_literals;

// Runs body(comm) on `world` ranks concurrently; rethrows the first rank's failure.
void on_ranks(int world, const std::function<void(dist::Communicator&)>& body,
              std::chrono::milliseconds timeout = 5000ms) {
  const std::string id = dist::new_comm_id(dist::CommKind::gloo);
  std::vector<std::future<void>> ranks;
  std::vector<std::shared_ptr<dist::Communicator>> keep(world);
  for (int r = 0; r < world; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r] {
      keep[r] = dist::make_communicator(id, r, world, {.timeout = timeout});
      EXPECT_EQ(keep[r]->rank(), r);
      EXPECT_EQ(keep[r]->size(), world);
      body(*keep[r]);
    }));
  for (auto& f : ranks) f.get();
}

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, AllReduceSumsF32AcrossRanks) {
  const int world = GetParam();
  on_ranks(world, [&](dist::Communicator& c) {
    std::vector<float> v(1000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * (c.rank() + 1);
    c.all_reduce_sum(v.data(), v.size(), DType::f32);
    const float factor = world * (world + 1) / 2.0f;
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_FLOAT_EQ(v[i], static_cast<float>(i) * factor);
  });
}

TEST_P(GlooWorld, AllReduceSumsBf16AcrossRanks) {
  const int world = GetParam();
  on_ranks(world, [&](dist::Communicator& c) {
    std::vector<std::uint16_t> v(37, f32_to_bf16(0.5f * (c.rank() + 1)));
    c.all_reduce_sum(v.data(), v.size(), DType::bf16);
    for (auto x : v) ASSERT_FLOAT_EQ(bf16_to_f32(x), 0.5f * world * (world + 1) / 2.0f);
  });
}

TEST_P(GlooWorld, AllGatherPlacesEachRanksSliceInRankOrder) {
  const int world = GetParam();
  on_ranks(world, [&](dist::Communicator& c) {
    std::vector<float> in = {c.rank() * 10.0f, c.rank() * 10.0f + 1, c.rank() * 10.0f + 2};
    std::vector<float> out(in.size() * world, -1.0f);
    c.all_gather(in.data(), out.data(), in.size(), DType::f32);
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < 3; ++i) ASSERT_EQ(out[r * 3 + i], r * 10.0f + i);
    // In place: the rank's own slice of `out` is its input.
    std::vector<float> inplace(world * 2, 0.0f);
    inplace[c.rank() * 2] = c.rank();
    inplace[c.rank() * 2 + 1] = -c.rank();
    c.all_gather(inplace.data() + c.rank() * 2, inplace.data(), 2, DType::f32);
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(inplace[r * 2], r);
      ASSERT_EQ(inplace[r * 2 + 1], -r);
    }
  });
}

TEST_P(GlooWorld, SanityCheckObservesWorldSize) {
  const int world = GetParam();
  on_ranks(world, [&](dist::Communicator& c) {
    c.barrier();
    EXPECT_EQ(dist::sanity_check(c), static_cast<float>(world));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooWorld, ::testing::Values(1, 2, 3, 4));

TEST(GlooCommunicator, RendezvousDirectoryIsRemovedWithRankZero) {
  const std::string id = dist::new_comm_id(dist::CommKind::gloo);
  const std::string dir = id.substr(std::string("gloo:file:").size(), id.rfind(':') - std::string("gloo:file:").size());
  ASSERT_TRUE(std::filesystem::is_directory(dir));
  {
    auto other = std::async(std::launch::async, [&] { return dist::make_communicator(id, 1, 2, {.timeout = 5000ms}); });
    auto c0 = dist::make_communicator(id, 0, 2, {.timeout = 5000ms});
    auto c1 = other.get();
    c0.reset();
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(GlooCommunicator, PeerThatNeverJoinsFailsRendezvousWithinTimeout) {
  const std::string id = dist::new_comm_id(dist::CommKind::gloo);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    dist::make_communicator(id, 0, 2, {.timeout = 500ms});
    FAIL() << "rendezvous without a peer succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::comm);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  const std::string prefix = "gloo:file:";
  EXPECT_FALSE(std::filesystem::exists(id.substr(prefix.size(), id.rfind(':') - prefix.size())))
      << "a failed rendezvous left its directory behind";
}

TEST(GlooCommunicator, SilentPeerFailsCollectiveWithinTimeoutAndPoisons) {
  const std::string id = dist::new_comm_id(dist::CommKind::gloo);
  std::promise<void> release;
  auto peer = std::async(std::launch::async, [&] {
    auto c = dist::make_communicator(id, 1, 2, {.timeout = 500ms});
    release.get_future().wait();  // joins the group, then never takes part in a collective
  });
  auto c0 = dist::make_communicator(id, 0, 2, {.timeout = 500ms});
  const auto t0 = std::chrono::steady_clock::now();
  float x = 1.0f;
  try {
    c0->all_reduce_sum(&x, 1, DType::f32);
    FAIL() << "all_reduce without the peer succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::comm);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  // Later calls fail at once: the peers' state is unknown.
  EXPECT_THROW(c0->barrier(), Error);
  release.set_value();
  peer.get();
}

TEST(GlooCommunicator, AbortPoisonsLaterCalls) {
  on_ranks(2, [&](dist::Communicator& c) {
    c.barrier();
    c.abort();
    float x = 1.0f;
    try {
      c.all_reduce_sum(&x, 1, DType::f32);
      FAIL() << "all_reduce after abort succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::comm);
    }
  });
}

// The TP leader's way out of a collective whose peer died: abort() from another
// thread ends it at once, long before the collective's own timeout, and the
// peer's pending operation with this rank fails too.
TEST(GlooCommunicator, AbortFromAnotherThreadEndsACollectiveInFlight) {
  const std::string id = dist::new_comm_id(dist::CommKind::gloo);
  constexpr auto kTimeout = 20000ms;
  std::vector<std::shared_ptr<dist::Communicator>> comms(3);
  {
    std::vector<std::future<void>> joins;
    for (int r = 0; r < 3; ++r)
      joins.push_back(std::async(std::launch::async, [&, r] { comms[r] = dist::make_communicator(id, r, 3, {.timeout = kTimeout}); }));
    for (auto& j : joins) j.get();
  }
  // Ranks 0 and 1 enter an all-reduce that rank 2 never joins.
  auto in_collective = [&](int r) {
    return std::async(std::launch::async, [&, r] {
      const auto t0 = std::chrono::steady_clock::now();
      float x = 1.0f;
      try {
        comms[r]->all_reduce_sum(&x, 1, DType::f32);
        ADD_FAILURE() << "rank " << r << ": all_reduce without rank 2 succeeded";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), errc::comm) << e.what();
      }
      return std::chrono::steady_clock::now() - t0;
    });
  };
  auto rank0 = in_collective(0);
  auto rank1 = in_collective(1);
  std::this_thread::sleep_for(300ms);
  comms[0]->abort();
  EXPECT_LT(rank0.get(), 2s) << "rank 0 waited for its collective's timeout instead";
  // Rank 1 is waiting on rank 0 or rank 2; only what it waits on rank 0 for fails at once.
  comms[2]->abort();
  EXPECT_LT(rank1.get(), 3s);
}

TEST(CommFactory, RejectsMalformedIdsAndRanks) {
  EXPECT_THROW(dist::make_communicator("tcp://x", 0, 2), Error);
  EXPECT_THROW(dist::make_communicator("gloo:file:nosession", 0, 2), Error);
  EXPECT_THROW(dist::make_communicator("gloo:file:/tmp/x:s", 2, 2), Error);
  try {
    dist::make_communicator("gloo:file:/nonexistent-neuron-dir:s", 0, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::comm);
  }
  EXPECT_EQ(dist::comm_kind_of("nccl:00"), dist::CommKind::nccl);
}

}  // namespace
