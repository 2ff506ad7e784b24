// The replay driver's accounting: samples are committed once per finished iteration and
// never lost or counted twice, the time breakdown adds up to the window, Varuna-like loses
// exactly the work since its last checkpoint, a notice lets it checkpoint in time.
#include <gtest/gtest.h>

#include <numeric>

#include "replay/driver.hpp"
#include "replay/policies.hpp"
#include "replay_test_support.hpp"

namespace loom {
namespace {

double part(const ReplayResult& r, TimeUse use) {
  return r.time_in(use);
}

void expect_reconciled(const ReplayResult& r) {
  EXPECT_EQ(r.samples_committed, r.iterations * r.global_batch);
  const double total = std::accumulate(r.time_s.begin(), r.time_s.end(), 0.0);
  EXPECT_NEAR(total, r.duration_s, 1e-6 * r.duration_s);
  for (double t : r.time_s) EXPECT_GE(t, -1e-9);
  // Training time is exactly the committed iterations (every policy here has fixed times).
}

TEST(ReplayDriver, EmptyTraceTrainsAtTheNoFailureRate) {
  const AvailabilityTrace trace = test::removal_trace(4, {}, 100);
  for (const std::string& name : policy_names()) {
    PolicySetup s = test::fixed_setup(10, 8);
    s.params.checkpoint_save_s = 0;  // a free checkpoint: Varuna-like trains undisturbed
    auto policy = make_policy(name, s);
    const ReplayResult r = run_replay(trace, *policy, test::options(8));
    EXPECT_EQ(r.iterations, 10) << name;
    EXPECT_DOUBLE_EQ(r.average_throughput(), 0.8) << name;
    ASSERT_FALSE(r.throughput.empty());
    EXPECT_DOUBLE_EQ(r.throughput.front().samples_per_s, 0.8) << name;
    EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 100) << name;
    expect_reconciled(r);
  }
}

TEST(ReplayDriver, OobleckLosesOnlyTheIterationInFlight) {
  // 4 nodes, 10 s iterations; node2 fails at 25 s: iterations end at 10, 20; the one
  // started at 20 is lost (5 s), 2 s of reconfiguration, then 10 s iterations from 27 s.
  const AvailabilityTrace trace = test::removal_trace(4, {{25, "node2"}}, 57);
  PolicySetup s = test::fixed_setup(10, 8);
  s.params.reconfiguration_s = 2;
  auto policy = make_policy("oobleck", s);
  const ReplayResult r = run_replay(trace, *policy, test::options(8));
  EXPECT_EQ(r.iterations, 5);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 5);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kReconfiguration), 2);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 50);
  expect_reconciled(r);
}

TEST(ReplayDriver, VarunaLosesExactlyTheWorkSinceTheLastCheckpoint) {
  // Iterations of 10 s, a checkpoint (1 s) every 3 iterations, restart 5 s.
  //   0..30 three iterations, 30..31 checkpoint, 31..51 two iterations, 51..55 in flight,
  //   node2 fails at 55: the two iterations since the checkpoint and the 4 s are lost,
  //   55..60 restart, 60..90 three iterations, 90..91 checkpoint.
  const AvailabilityTrace trace = test::removal_trace(4, {{55, "node2"}}, 91);
  PolicySetup s = test::fixed_setup(10, 8);
  s.params.checkpoint_interval = 3;
  s.params.checkpoint_save_s = 1;
  s.params.restart_s = 5;
  auto policy = make_policy("varuna-like", s);
  const ReplayResult r = run_replay(trace, *policy, test::options(8));
  EXPECT_EQ(r.iterations, 6);
  EXPECT_EQ(r.samples_committed, 48);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 24);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 60);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kCheckpoint), 2);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kRestart), 5);
  expect_reconciled(r);
  bool logged = false;
  for (const ReplayEvent& e : r.events)
    logged |= e.action == "restart" &&
              e.detail.find("2 iterations since the last checkpoint lost") != std::string::npos;
  EXPECT_TRUE(logged);
}

TEST(ReplayDriver, NoticeLetsVarunaCheckpointBeforeThePreemption) {
  // Same run with 10 s of notice: the warning comes at 45 s; the iteration 41..51 still
  // ends before the removal, then a checkpoint 51..52, idle until 55, nothing lost.
  const AvailabilityTrace trace = test::removal_trace(4, {{55, "node2"}}, 91, 10);
  PolicySetup s = test::fixed_setup(10, 8);
  s.params.checkpoint_interval = 3;
  s.params.checkpoint_save_s = 1;
  s.params.restart_s = 5;
  auto policy = make_policy("varuna-like", s);
  const ReplayResult r = run_replay(trace, *policy, test::options(8));
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 0);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kIdle), 3);
  EXPECT_EQ(r.iterations, 5 + 3);  // 5 before the removal, 60..90 after
  expect_reconciled(r);
}

TEST(ReplayDriver, AShortGraceCutsTheCheckpointOff) {
  // 2 s of notice but a 5 s save: the checkpoint cannot finish and the rollback happens.
  const AvailabilityTrace trace = test::removal_trace(4, {{55, "node2"}}, 91, 2);
  PolicySetup s = test::fixed_setup(10, 8);
  s.params.checkpoint_interval = 3;
  s.params.checkpoint_save_s = 5;
  s.params.restart_s = 5;
  auto policy = make_policy("varuna-like", s);
  const ReplayResult r = run_replay(trace, *policy, test::options(8));
  EXPECT_GT(part(r, TimeUse::kLostWork), 0);
  expect_reconciled(r);
}

TEST(ReplayDriver, OobleckWaitsBelowFPlusOneN0WithTheDocumentedMessage) {
  // 4 nodes, n0 = 2, f = 1: node2 fails at 25 s, the iteration 20..30 is lost (5 s), and
  // with 3 nodes Oobleck keeps its progress and waits for nodes: idle 25..100.
  const AvailabilityTrace trace = test::removal_trace(4, {{25, "node2"}}, 100);
  PolicySetup s = test::fixed_setup(10, 8, 2);
  auto policy = make_policy("oobleck", s);
  const ReplayResult r = run_replay(trace, *policy, test::options(8));
  EXPECT_TRUE(r.stop_reason.empty()) << r.stop_reason;
  EXPECT_EQ(r.iterations, 2);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 5);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kIdle), 75);
  EXPECT_EQ(r.events.at(1).action, "wait");
  EXPECT_NE(r.events.at(1).detail.find("oobleck: " + oobleck::too_few_nodes_message(3, 1, 2)),
            std::string::npos)
      << r.events.at(1).detail;
  expect_reconciled(r);
}

/// Bamboo-like's timer in these tests: 10 s per iteration, 15 s while a pipeline runs a
/// failed-over stage (the `bamboo` schedule sets both in real runs); it records what the
/// policy asked for.
struct BambooTimer {
  std::shared_ptr<std::vector<Layout>> seen = std::make_shared<std::vector<Layout>>();
  double operator()(const Layout& layout) const {
    seen->push_back(layout);
    for (const PipelineLayout& p : layout.pipelines)
      if (!p.failed_over.empty()) return 15;
    return 10;
  }
};

PolicySetup bamboo_setup(int depth, const BambooTimer& timer) {
  PolicySetup s = test::fixed_setup(10, 8, depth);
  s.timer = std::make_shared<MemoizedTimer>(timer);
  s.params.bamboo_failover_s = 2;
  s.params.bamboo_reconfigure_s = 3;
  s.params.restart_s = 5;
  return s;
}

TEST(ReplayDriver, BambooFailsOverThenRestartsOnAnAdjacentFailure) {
  // One ring of 4 nodes (node k holds stage k+1's copy). node2 fails at 15 s: the
  // iteration 10..20 is lost (5 s), failover 15..17, node1 runs stage 1 too: 17..32 (15 s);
  // 3 live nodes cannot re-form a 4-deep pipeline, so the failover stays: 32..47 is in
  // flight when node3 (adjacent: stages 1 and 2 both gone) fails at 45 s (13 s lost);
  // restart 45..50 on nodes 1 and 4, too few for a pipeline: idle to 100 s.
  const AvailabilityTrace trace = test::removal_trace(4, {{15, "node2"}, {45, "node3"}}, 100);
  const BambooTimer timer;
  auto policy = make_policy("bamboo-like", bamboo_setup(4, timer));
  const ReplayResult r = run_replay(trace, *policy, test::options(8));
  ASSERT_GE(r.events.size(), 3u);
  EXPECT_EQ(r.events[1].action, "failover");
  EXPECT_EQ(r.events[2].action, "restart");
  EXPECT_NE(r.events[2].detail.find("adjacent failure at node3"), std::string::npos);
  EXPECT_EQ(r.samples_committed, 16);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 25);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 18);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kReconfiguration), 2);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kRestart), 5);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kIdle), 50);
  // The failover reached the timer as stage 1 run by its ring predecessor.
  bool failed_over = false;
  for (const Layout& l : *timer.seen)
    failed_over |= l.scheduler == "bamboo" && l.pipelines.size() == 1 &&
                   l.pipelines[0].nodes == 3 && l.pipelines[0].failed_over == std::vector<int>{1};
  EXPECT_TRUE(failed_over);
  expect_reconciled(r);
}

TEST(ReplayDriver, BambooFailsOverThenReformsItsPipelinesWithoutRestart) {
  // Pipelines {1,2,3} and {4,5,6}; node1 (stage 0) fails at 15 s: 5 s lost, failover
  // 15..17, one 15 s iteration 17..32 with node3 running stage 0. Then 1 failed-over node
  // is over 5 % of the 5 active ones (2 x 1 / 5): the pipelines re-form over the live
  // nodes (3 s): {2,3,4} and spares 5, 6; 10 s iterations from 35 s to 95 s; 95..100 is
  // in flight at the end. node5 leaves at 60 s as a spare: nothing happens.
  const AvailabilityTrace trace = test::removal_trace(6, {{15, "node1"}, {60, "node5"}}, 100);
  const BambooTimer timer;
  auto policy = make_policy("bamboo-like", bamboo_setup(3, timer));
  const ReplayResult r = run_replay(trace, *policy, test::options(8));
  for (const ReplayEvent& e : r.events) EXPECT_NE(e.action, "restart") << e.detail;
  EXPECT_EQ(r.samples_committed, 64);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kTraining), 85);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 10);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kReconfiguration), 5);
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kRestart), 0);
  expect_reconciled(r);
}

TEST(ReplayDriver, JoinsWaitForTheIterationAndAreUsed) {
  // 25 s failure, 25..27 reconfiguration, iterations to 47, join, 47..49, iterations to 99.
  AvailabilityTrace trace = test::removal_trace(4, {{25, "node2"}}, 99);
  trace.events.push_back({42, AvailabilityChange::kAdd, "node9", 0});
  PolicySetup s = test::fixed_setup(10, 8);
  auto policy = make_policy("oobleck", s);
  const ReplayResult r = run_replay(trace, *policy, test::options(8));
  // The join at 42 s waits for the iteration 37..47 to finish: nothing is lost for it.
  EXPECT_DOUBLE_EQ(part(r, TimeUse::kLostWork), 5);
  bool joined = false;
  for (const ReplayEvent& e : r.events)
    joined |= e.event == "add" && e.time_s == 47 && e.nodes_alive == 4;
  EXPECT_TRUE(joined);
  expect_reconciled(r);
}

}  // namespace
}  // namespace loom
