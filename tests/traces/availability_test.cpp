// The alive-count view of a trace: steps, alive sets and time-weighted statistics.
#include "traces/availability.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"

namespace loom {
namespace {

// Two nodes from the start; a leaves at 10 s, c joins at 10 s as well, b leaves at 30 s;
// the trace ends at 40 s. Alive: 2 on [0, 30), 1 on [30, 40).
AvailabilityTrace small_trace() {
  AvailabilityTrace t;
  t.source = "hand-made";
  t.initial = {"a", "b"};
  t.events = {{10, AvailabilityChange::kRemove, "a", 0},
              {10, AvailabilityChange::kAdd, "c", 0},
              {30, AvailabilityChange::kRemove, "b", 0}};
  t.duration_s = 40;
  return t;
}

TEST(Availability, SimultaneousEventsAreOneStep) {
  const std::vector<AliveStep> steps = alive_steps(small_trace());
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].alive, 2);
  EXPECT_EQ(steps[1].time_s, 10);
  EXPECT_EQ(steps[1].alive, 2);  // one left and one joined at the same instant
  EXPECT_EQ(steps[2].alive, 1);
}

TEST(Availability, AliveSetsInArrivalOrder) {
  const AvailabilityTrace t = small_trace();
  EXPECT_EQ(alive_at(t, 0), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(alive_at(t, 10), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(alive_at(t, 35), (std::vector<std::string>{"c"}));
}

TEST(Availability, TimeWeightedStatistics) {
  const AliveStats s = alive_stats(small_trace());
  EXPECT_EQ(s.min_alive, 1);
  EXPECT_EQ(s.max_alive, 2);
  EXPECT_DOUBLE_EQ(s.mean_alive, (2.0 * 30 + 1.0 * 10) / 40);
  EXPECT_EQ(s.adds, 1);
  EXPECT_EQ(s.removes, 2);
  EXPECT_EQ(s.distinct_nodes, 3);
}

TEST(Availability, CheckNamesTheEvent) {
  AvailabilityTrace t = small_trace();
  t.events[2].node = "a";  // already gone
  try {
    check_availability_trace(t);
    FAIL() << "accepted a removal of a node that is not alive";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("hand-made: event 3 (a)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom
