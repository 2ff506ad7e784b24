// The oobleck policy in planner mode: S2's templates instantiate every node, a failure is
// answered by reinstantiation with layer copies costed on the link, and the planner's
// message stops it below (f+1) n0.
#include <gtest/gtest.h>

#include <memory>

#include "replay/driver.hpp"
#include "replay/policies.hpp"
#include "replay_test_support.hpp"

namespace loom {
namespace {

/// 8 identical layers of 1 GB each on 4 GB GPUs, one GPU per node: n0 = 2.
std::shared_ptr<const OobleckPlan> small_plan() {
  auto plan = std::make_shared<OobleckPlan>();
  oobleck::PlanningProblem& p = plan->problem;
  for (int l = 0; l < 8; ++l) p.layers.push_back({1e-3, 2e-3, 1e9, 1e9, 0, 1e-3});
  p.gpus_per_node = 1;
  p.gpu_memory_bytes = 4.5e9;
  p.fault_tolerance = 1;
  p.max_nodes = 6;
  p.microbatch_size = 1;
  p.global_batch = 12;
  plan->templates = oobleck::generate_templates(p);
  return plan;
}

PolicySetup planner_setup() {
  PolicySetup s = test::fixed_setup(10, 12);
  s.oobleck = small_plan();
  s.params.reconfiguration_s = 2;
  s.copy_link = {1e9, 1e-5};  // 1 GB/s: a 1 GB layer copy takes about a second
  // Time grows with the deepest pipeline, so different layouts time differently.
  s.timer = std::make_shared<MemoizedTimer>([](const Layout& l) {
    int deepest = 0;
    for (const PipelineLayout& p : l.pipelines) deepest = std::max(deepest, p.nodes);
    return 5.0 + deepest;
  });
  return s;
}

TEST(OobleckPolicy, ReinstantiatesWithLayerCopiesCostedOnTheLink) {
  const AvailabilityTrace trace = test::removal_trace(6, {{25, "node1"}}, 100);
  auto policy = make_policy("oobleck", planner_setup());
  const ReplayResult r = run_replay(trace, *policy, test::options(12));
  ASSERT_GE(r.events.size(), 2u);
  EXPECT_EQ(r.events[0].action, "instantiate");
  EXPECT_EQ(r.events[1].action, "reinstantiate");
  EXPECT_NE(r.events[1].detail.find("layer copies"), std::string::npos) << r.events[1].detail;
  EXPECT_GT(r.events[1].cost_s, 2.0);  // the fixed part plus the copies
  EXPECT_LT(r.events[1].cost_s, 2.0 + 8 * 1.0 + 1);
  EXPECT_EQ(r.samples_committed, r.iterations * 12);
  EXPECT_TRUE(r.stop_reason.empty());
}

TEST(OobleckPolicy, WaitsWithThePlannersMessageBelowFPlusOneN0) {
  // 6 -> 4 nodes is still (f+1) n0 = 4; the third failure leaves 3: no pipelines, wait.
  const AvailabilityTrace trace =
      test::removal_trace(6, {{25, "node1"}, {45, "node2"}, {65, "node3"}}, 100);
  auto policy = make_policy("oobleck", planner_setup());
  const ReplayResult r = run_replay(trace, *policy, test::options(12));
  EXPECT_TRUE(r.stop_reason.empty()) << r.stop_reason;
  bool waited = false;
  for (const ReplayEvent& e : r.events)
    waited |= e.time_s == 65 && e.action == "wait" &&
              e.detail.find(oobleck::too_few_nodes_message(3, 1, 2)) != std::string::npos;
  EXPECT_TRUE(waited);
  EXPECT_DOUBLE_EQ(r.time_in(TimeUse::kIdle), 35);
}

TEST(OobleckPolicy, RestartsOnFreshPipelinesWhenTheClusterRegrows) {
  // 4 nodes (the minimum), node1 fails at 25 s: wait; node7 and node8 join at 30 s, ready
  // at 75 s: the planner instantiates the 5 nodes afresh after the restart (5 s).
  AvailabilityTrace trace = test::removal_trace(4, {{25, "node1"}}, 200);
  trace.events.push_back({30, AvailabilityChange::kAdd, "node7", 0});
  trace.events.push_back({30, AvailabilityChange::kAdd, "node8", 0});
  PolicySetup s = planner_setup();
  s.params.restart_s = 5;
  auto policy = make_policy("oobleck", s);
  const ReplayResult r =
      run_replay(trace, *policy, test::options(12, JoinRule::kNextReconfiguration, 45));
  const ReplayEvent* restart = nullptr;
  for (const ReplayEvent& e : r.events)
    if (e.action == "restart") restart = &e;
  ASSERT_NE(restart, nullptr);
  EXPECT_EQ(restart->time_s, 75);
  EXPECT_EQ(restart->nodes_alive, 5);
  EXPECT_NE(restart->detail.find("pipelines"), std::string::npos) << restart->detail;
  EXPECT_DOUBLE_EQ(r.time_in(TimeUse::kRestart), 5);
  EXPECT_DOUBLE_EQ(r.time_in(TimeUse::kIdle), 50);  // 25..75
}

}  // namespace
}  // namespace loom
