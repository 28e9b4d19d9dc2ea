// engine::plan_state_slots: a hybrid's recurrent-state slots on a GPU come before its snapshots. The Qwen3.5-27B
// shape on an 80 GB card (160 MB a slot, ~21 GB past the weights) runs 64 sequences at once and keeps what fits
// of the snapshots; the plan before this rule gave it 16 slots and 32 snapshots (bench/cuda/runs/
// vs-llama-27b-2026-12-07: 64 streams ran in four waves).
#include <gtest/gtest.h>

#include "backend/model_runner.hpp"
#include "engine/model_loader.hpp"
#include "util/error.hpp"

namespace neuron::engine {
namespace {

constexpr std::uint64_t kMb = 1'000'000;

TEST(StatePlan, SlotsComeFirstAndSnapshotsTakeAQuarterOfTheRest) {
  const std::uint64_t per_slot = 160 * kMb, room = 21'000 * kMb;
  const StateSlots s = plan_state_slots(per_slot, room, std::nullopt);
  EXPECT_EQ(s.slots, kCudaStateSlots);                        // 10.24 GB <= half the room
  EXPECT_EQ(s.snapshots, (room - 64 * per_slot) / 4 / per_slot);  // 16
  EXPECT_EQ(s.snapshots, 16);
}

TEST(StatePlan, RoomyGetsEverySlotAndTheDefaultSnapshots) {
  const StateSlots s = plan_state_slots(kMb, 1'000'000 * kMb, std::nullopt);
  EXPECT_EQ(s.slots, kCudaStateSlots);
  EXPECT_EQ(s.snapshots, backend::kDefaultSnapshotsPerSlot * kCudaStateSlots);
}

TEST(StatePlan, SlotsHalveUntilTheyFitHalfTheRoom) {
  // 64 slots of 1 MB need 128 MB of room, 32 need 64, 16 need 32.
  EXPECT_EQ(plan_state_slots(kMb, 128 * kMb, std::nullopt).slots, 64);
  EXPECT_EQ(plan_state_slots(kMb, 128 * kMb - 1, std::nullopt).slots, 32);
  EXPECT_EQ(plan_state_slots(kMb, 64 * kMb - 1, std::nullopt).slots, 16);
  // Below that the default still: the load's KV plan then says whether anything fits.
  const StateSlots tiny = plan_state_slots(kMb, 10 * kMb, std::nullopt);
  EXPECT_EQ(tiny.slots, backend::kDefaultStateSlots);
  EXPECT_EQ(tiny.snapshots, 0);  // nothing left past the slots
}

TEST(StatePlan, AskedSnapshotsAreKeptAndANegativeCountRefused) {
  EXPECT_EQ(plan_state_slots(160 * kMb, 21'000 * kMb, 0).snapshots, 0);
  EXPECT_EQ(plan_state_slots(160 * kMb, 21'000 * kMb, 200).snapshots, 200);
  EXPECT_THROW(plan_state_slots(160 * kMb, 21'000 * kMb, -1), Error);
}

}  // namespace
}  // namespace neuron::engine
