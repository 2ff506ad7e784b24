// Join and restart rules (replay.join, replay.node_ready; docs/replay.md), hand-computed.
// Every case: Oobleck in node-count mode, n0 = 1 and f = 1 (it needs 2 nodes), 10 s
// iterations of 8 samples, a 2 s reconfiguration, a 5 s restart; joined nodes are usable
// 45 s after they join.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "core/index.hpp"
#include "replay/driver.hpp"
#include "replay/policies.hpp"
#include "replay_test_support.hpp"

namespace loom {
namespace {

double part(const ReplayResult& r, TimeUse use) {
  return r.time_in(use);
}

PolicySetup setup() {
  PolicySetup s = test::fixed_setup(10, 8);
  s.params.reconfiguration_s = 2;
  s.params.restart_s = 5;
  return s;
}

ReplayResult replay(const AvailabilityTrace& trace, JoinRule join) {
  auto policy = make_policy("oobleck", setup());
  return run_replay(trace, *policy, test::options(8, join, 45));
}

void expect_reconciled(const ReplayResult& r) {
  EXPECT_EQ(r.samples_committed, r.iterations * r.global_batch);
  EXPECT_NEAR(std::accumulate(r.time_s.begin(), r.time_s.end(), 0.0), r.duration_s,
              1e-9 * r.duration_s);
}

const ReplayEvent& event_at(const ReplayResult& r, double time_s, const std::string& action) {
  for (const ReplayEvent& e : r.events)
    if (e.time_s == time_s && e.action == action) return e;
  ADD_FAILURE() << "no '" << action << "' event at " << time_s << " s";
  static const ReplayEvent kNone;
  return kNone;
}

TEST(ReplayJoin, ASingleFailureLosesTheIterationInFlight) {
  // 0..40 four iterations; 40..50 is cut at 45 (5 s lost); 45..47 reconfiguration;
  // 47..97 five iterations; 97..100 is running at the window's end (3 s lost).
  const AvailabilityTrace trace = test::removal_trace(4, {{45, "node2"}}, 100);
  const ReplayResult r = replay(trace, JoinRule::kNextReconfiguration);
  EXPECT_EQ(r.iterations, 9);
  EXPECT_EQ(r.samples_committed, 72);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 90);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 8);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kReconfiguration), 2);
  expect_reconciled(r);
}

/// node9 joins at 10 s (usable from 55 s); node2 leaves at 45 s, node3 at 85 s.
AvailabilityTrace join_trace() {
  AvailabilityTrace trace = test::removal_trace(4, {{45, "node2"}, {85, "node3"}}, 120);
  trace.events.insert(trace.events.begin(), {10, AvailabilityChange::kAdd, "node9", 0});
  return trace;
}

TEST(ReplayJoin, AJoinedNodeEntersAtTheFirstReconfigurationAfterItIsReady) {
  // next-reconfiguration: the join at 10 s does not disturb training. At 45 s node9 is not
  // ready yet: the reconfiguration (45..47) is without it. At 85 s it is: it enters with
  // node3's removal.
  //   0..40 4 iterations | 40..45 lost | 45..47 reconf | 47..77 3 iterations | 77..85 lost
  //   85..87 reconf | 87..117 3 iterations | 117..120 lost
  const ReplayResult r = replay(join_trace(), JoinRule::kNextReconfiguration);
  EXPECT_EQ(r.iterations, 10);
  EXPECT_EQ(r.samples_committed, 80);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 100);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 16);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kReconfiguration), 4);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kIdle), 0);
  expect_reconciled(r);
  const ReplayEvent& joined = event_at(r, 10, "wait");
  EXPECT_EQ(joined.event, "add");
  EXPECT_EQ(joined.nodes_alive, 5);
  EXPECT_EQ(event_at(r, 45, "reinstantiate").detail.rfind("node2; ", 0), 0u);
  const ReplayEvent& entered = event_at(r, 85, "reinstantiate");
  EXPECT_EQ(entered.event, "change");
  EXPECT_EQ(entered.detail.rfind("node3 +node9; ", 0), 0u) << entered.detail;
  EXPECT_EQ(entered.nodes_alive, 3);
  // The live-node count steps at the join itself, the rate does not.
  ASSERT_GE(r.throughput.size(), 2u);
  EXPECT_DOUBLE_EQ(r.throughput[1].time_s, 10);
  EXPECT_EQ(r.throughput[1].nodes, 5);
  EXPECT_DOUBLE_EQ(r.throughput[1].samples_per_s, 0.8);
}

TEST(ReplayJoin, ImmediateJoinsReconfigureAtTheFirstBoundaryAfterTheReadyDelay) {
  // immediate: node9 is ready at 55 s and enters when the iteration 47..57 ends.
  //   0..40 4 iterations | 40..45 lost | 45..47 reconf | 47..57 1 iteration | 57..59 reconf
  //   59..79 2 iterations | 79..85 lost | 85..87 reconf | 87..117 3 iterations | 117..120
  const ReplayResult r = replay(join_trace(), JoinRule::kImmediate);
  EXPECT_EQ(r.iterations, 10);
  EXPECT_EQ(r.samples_committed, 80);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 100);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 14);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kReconfiguration), 6);
  expect_reconciled(r);
  EXPECT_EQ(event_at(r, 57, "reinstantiate").event, "add");
}

TEST(ReplayJoin, ANodeThatLeavesBeforeEnteringDoesNotInterrupt) {
  // node9 joins at 10 s and leaves at 30 s, never used: six undisturbed iterations.
  AvailabilityTrace trace = test::removal_trace(4, {}, 60);
  trace.events = {{10, AvailabilityChange::kAdd, "node9", 0},
                  {30, AvailabilityChange::kRemove, "node9", 0}};
  for (JoinRule join : {JoinRule::kNextReconfiguration, JoinRule::kImmediate}) {
    const ReplayResult r = replay(trace, join);
    EXPECT_EQ(r.iterations, 6);
    EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 60);
    EXPECT_EQ(event_at(r, 30, "drop").event, "remove");
    EXPECT_EQ(event_at(r, 30, "drop").nodes_alive, 4);
    expect_reconciled(r);
  }
}

TEST(ReplayJoin, DropToZeroThenRegrowthRestartsFromTheStoredProgress) {
  // 2 nodes (the minimum). node1 leaves at 25 s: 20..25 lost, wait. node2 leaves at 40 s:
  // none left. node3 and node4 join at 100 s and 110 s (ready at 145 s and 155 s): node3
  // alone is too few, with node4 the job restarts at 155 s (5 s) and trains 160..200.
  AvailabilityTrace trace = test::removal_trace(2, {{25, "node1"}, {40, "node2"}}, 200);
  trace.events.push_back({100, AvailabilityChange::kAdd, "node3", 0});
  trace.events.push_back({110, AvailabilityChange::kAdd, "node4", 0});
  for (JoinRule join : {JoinRule::kNextReconfiguration, JoinRule::kImmediate}) {
    const ReplayResult r = replay(trace, join);
    EXPECT_EQ(r.iterations, 6);  // 2 before, 4 after
    EXPECT_EQ(r.samples_committed, 48);
    EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 60);
    EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 5);
    EXPECT_DOUBLE_EQ(part(r, TimeUse::kRestart), 5);
    EXPECT_DOUBLE_EQ(part(r, TimeUse::kIdle), 130);  // 25..155
    EXPECT_TRUE(r.stop_reason.empty());
    expect_reconciled(r);
    EXPECT_EQ(event_at(r, 25, "wait").event, "remove");
    EXPECT_EQ(event_at(r, 145, "wait").event, "add");  // one node: still too few
    const ReplayEvent& restart = event_at(r, 155, "restart");
    EXPECT_EQ(restart.nodes_alive, 2);
    EXPECT_DOUBLE_EQ(restart.cost_s, 5);
  }
}

TEST(ReplayJoin, ATraceThatStartsEmptyTrainsOnceTheFirstPlanFits) {
  // No node at 0; node1 and node2 join at 10 s, usable from 55 s: the first plan is free,
  // 55..95 four iterations, 95..100 running at the end.
  AvailabilityTrace trace = test::removal_trace(0, {}, 100);
  trace.events = {{10, AvailabilityChange::kAdd, "node1", 0},
                  {10, AvailabilityChange::kAdd, "node2", 0}};
  const ReplayResult r = replay(trace, JoinRule::kNextReconfiguration);
  EXPECT_EQ(r.iterations, 4);
  EXPECT_EQ(r.samples_committed, 32);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kIdle), 55);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 5);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kRestart), 0);
  EXPECT_EQ(event_at(r, 55, "instantiate").event, "add");
  expect_reconciled(r);
}

TEST(ReplayJoin, BambooFormsPipelinesOnceTheJoinDelayHasPassed) {
  // Bamboo-like gets its join delay from the driver (the CLI sets node_ready to
  // replay.bamboo_join_delay). No node at 0; node1 and node2 join at 10 s, usable from
  // 55 s: a rendezvous (30 s) forms one 2-node pipeline, 85..125 four 10 s iterations.
  AvailabilityTrace trace = test::removal_trace(0, {}, 125);
  trace.events = {{10, AvailabilityChange::kAdd, "node1", 0},
                  {10, AvailabilityChange::kAdd, "node2", 0}};
  PolicySetup s = test::fixed_setup(10, 8, 2);
  s.params.bamboo_reconfigure_s = 30;
  auto policy = make_policy("bamboo-like", s);
  const ReplayResult r = run_replay(trace, *policy, test::options(8, JoinRule::kImmediate, 45));
  EXPECT_EQ(r.iterations, 4);
  EXPECT_EQ(r.samples_committed, 32);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kIdle), 55);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kReconfiguration), 30);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 40);
  EXPECT_EQ(event_at(r, 55, "rendezvous").event, "add");
  expect_reconciled(r);
}

TEST(ReplayJoin, ConcurrentRemovalsReconfigureOnceOrStallAsTheArtifactDoes) {
  // 4 nodes; node2 and node3 leave together at 25 s; node9 joins at 30 s (usable from
  // 75 s); window 120 s. One reconfiguration (default): 20..25 lost, 25..27 reconfigure,
  // 27..117 nine iterations, 117..120 lost. Stall (the artifact's duplicate rendezvous):
  // the same reconfiguration, then no pipeline until node9 is usable: idle 27..75,
  // reconfigure 75..77, 77..117 four iterations, 117..120 lost.
  AvailabilityTrace trace = test::removal_trace(4, {{25, "node2"}, {25, "node3"}}, 120);
  trace.events.push_back({30, AvailabilityChange::kAdd, "node9", 0});
  for (const bool stall : {false, true}) {
    PolicySetup s = setup();
    if (stall) s.params.concurrent_removals = "stall";
    auto policy = make_policy("oobleck", s);
    const ReplayResult r =
        run_replay(trace, *policy, test::options(8, JoinRule::kNextReconfiguration, 45));
    SCOPED_TRACE(stall ? "stall" : "one reconfiguration");
    EXPECT_EQ(r.samples_committed, stall ? 48 : 88);
    EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), stall ? 60 : 110);
    EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 8);
    EXPECT_DOUBLE_EQ(part(r, TimeUse::kReconfiguration), stall ? 4 : 2);
    EXPECT_DOUBLE_EQ(part(r, TimeUse::kIdle), stall ? 48 : 0);
    expect_reconciled(r);
  }
}

/// A seeded random trace: 0-6 nodes at 0, then joins of new nodes and removals of live
/// ones at whole seconds, some at the same instant, over `duration_s`.
AvailabilityTrace random_trace(unsigned seed, double duration_s) {
  std::mt19937 rng(seed);
  AvailabilityTrace t = test::removal_trace(static_cast<int>(rng() % 7), {}, duration_s);
  std::vector<std::string> alive = t.initial;
  int next = isize(alive) + 1;
  double time = 0;
  while (true) {
    time += static_cast<double>(rng() % 120);
    if (time >= duration_s) break;
    if (!alive.empty() && rng() % 2 == 0) {
      const size_t k = rng() % alive.size();
      t.events.push_back({time, AvailabilityChange::kRemove, alive[k], 0});
      alive.erase(alive.begin() + static_cast<long>(k));
    } else {
      alive.push_back("node" + std::to_string(next++));
      t.events.push_back({time, AvailabilityChange::kAdd, alive.back(), 0});
    }
  }
  return t;
}

TEST(ReplayJoin, NoSampleIsLostOrCountedTwiceOnRandomTraces) {
  // Every policy, both rules: samples = iterations x batch, the parts add up to the
  // window, and with fixed 10 s iterations the training time is exactly 10 s per
  // committed iteration (what Varuna-like rolled back moved to lost work).
  for (unsigned seed = 1; seed <= 40; ++seed) {
    const AvailabilityTrace trace = random_trace(seed, 2000);
    for (const std::string& name : policy_names()) {
      for (JoinRule join : {JoinRule::kNextReconfiguration, JoinRule::kImmediate}) {
        PolicySetup s = setup();
        s.params.checkpoint_interval = 3;
        s.params.checkpoint_save_s = 1;
        auto policy = make_policy(name, s);
        const ReplayResult r = run_replay(trace, *policy, test::options(8, join, 45));
        SCOPED_TRACE(name + " seed " + std::to_string(seed));
        expect_reconciled(r);
        for (double t : r.time_s) EXPECT_GE(t, -1e-9);
        EXPECT_NEAR(part(r, TimeUse::kTraining), 10.0 * static_cast<double>(r.iterations), 1e-6);
        for (size_t i = 1; i < r.throughput.size(); ++i)
          EXPECT_LE(r.throughput[i - 1].time_s, r.throughput[i].time_s);
        for (size_t i = 1; i < r.events.size(); ++i)
          EXPECT_LE(r.events[i - 1].time_s, r.events[i].time_s);
      }
    }
  }
}

}  // namespace
}  // namespace loom
