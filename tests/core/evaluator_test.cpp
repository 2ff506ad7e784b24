#include "core/evaluator.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::ranks_on;

using test::small_cluster;

}  // namespace

TEST(Evaluator, TransferTakesLatencyPlusBytesOverBandwidth) {
  Schedule s = ranks_on({0, 1});
  s.programs[0] = {Compute{Pass::kF, 0, 0, 0, 0, 1, 1e-3}, Send{1, 0, 0, {Pass::kF, 0, 1}, 1e6}};
  s.programs[1] = {Recv{0, 1, 0, {Pass::kF, 0, 1}, 1e6}, Compute{Pass::kF, 1, 0, 0, 1, 2, 2e-3}};
  const Timeline t = evaluate(s, small_cluster(1, 2));
  const double transfer = 2e-6 + 1e6 / 10e9;
  EXPECT_DOUBLE_EQ(t.timings[1][0].end_s, 1e-3 + transfer);
  EXPECT_DOUBLE_EQ(t.iteration_time_s(), 1e-3 + transfer + 2e-3);
  // Across nodes the route adds the inter-node latency and is limited by the slower link.
  s.ranks[1].gpu = 2;
  const Timeline across = evaluate(s, small_cluster(2, 2));
  EXPECT_DOUBLE_EQ(across.timings[1][0].end_s, 1e-3 + 12e-6 + 1e6 / 5e9);
}

TEST(Evaluator, RingAllReduceClosedForm) {
  const int n = 4;
  Schedule s = ranks_on({0, 1, 2, 3});
  s.groups = {{0, 1, 2, 3}};
  for (auto& program : s.programs) program = {Collective{CollectiveKind::kAllReduce, 0, 0, 0, 4e6}};
  const Timeline t = evaluate(s, small_cluster(1, 4));
  const double step = 2e-6 + (4e6 / n) / 10e9;
  EXPECT_NEAR(t.iteration_time_s(), 2 * (n - 1) * step, 1e-12);
}

TEST(Evaluator, DeadlockIsReportedNotHung) {
  Schedule s = ranks_on({0, 1});
  // Both ranks wait for the other first: a cycle.
  s.programs[0] = {Recv{1, 0, 0, {Pass::kB, 0, 0}, 0}, Send{1, 0, 0, {Pass::kF, 0, 1}, 0}};
  s.programs[1] = {Recv{0, 1, 0, {Pass::kF, 0, 1}, 0}, Send{0, 1, 0, {Pass::kB, 0, 0}, 0}};
  EXPECT_THROW(evaluate(s, small_cluster(1, 2)), InfeasibleError);
  try {
    check_acyclic(s);
    FAIL();
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("RECV"), std::string::npos) << e.what();
  }
}

TEST(Evaluator, UnmatchedReceiveNamesTheOperation) {
  Schedule s = ranks_on({0, 1});
  s.programs[1] = {Recv{0, 1, 0, {Pass::kF, 0, 1}, 0}};
  try {
    evaluate(s, small_cluster(1, 2));
    FAIL();
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 op #0 (1RECV_F0:L1<-0)"), std::string::npos)
        << e.what();
  }
}

TEST(Evaluator, CollectiveWaitsForTheLastMemberAndTheSlowestHop) {
  // Members arrive at 0, 1, 2, 3 ms; the ring spans two nodes, so its slowest hop is the
  // NIC: it ends 2(n-1) x (12 us + 1 MB / 5 GB/s) after the last arrival, for everyone.
  Schedule s = ranks_on({0, 1, 2, 3});
  s.groups = {{0, 1, 2, 3}};
  for (int r = 0; r < 4; ++r) {
    s.programs[static_cast<size_t>(r)] = {Compute{Pass::kW, 0, 0, 0, 0, 1, 1e-3 * r},
                                          Collective{CollectiveKind::kAllReduce, 0, 0, 0, 4e6}};
  }
  const Timeline t = evaluate(s, small_cluster(2, 2));
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(t.timings[static_cast<size_t>(r)][1].start_s, 1e-3 * r, 1e-12);
    EXPECT_NEAR(t.timings[static_cast<size_t>(r)][1].end_s, 3e-3 + 6 * (12e-6 + 1e6 / 5e9), 1e-12);
  }
}

TEST(Evaluator, OpsAfterACollectiveRunOnEveryMember) {
  // Regression: the last member to arrive used to skip the op after the collective.
  Schedule s = ranks_on({0, 1});
  s.groups = {{0, 1}};
  s.programs = {
      {Collective{CollectiveKind::kAllReduce, 0, 0, 0, 2e6}, Send{1, 0, 0, {Pass::kF, 0, 1}, 1e6}},
      {Collective{CollectiveKind::kAllReduce, 0, 0, 0, 2e6}, Recv{0, 1, 0, {Pass::kF, 0, 1}, 1e6},
       Compute{Pass::kF, 1, 0, 0, 1, 2, 1e-3}}};
  const Timeline t = evaluate(s, test::small_cluster(1, 2));
  const double ring = 2 * (2e-6 + 1e6 / 10e9);
  EXPECT_NEAR(t.timings[1][1].end_s, ring + 2e-6 + 1e6 / 10e9, 1e-12);
  EXPECT_NEAR(t.timings[1][2].start_s, t.timings[1][1].end_s, 1e-12);
  EXPECT_NEAR(t.iteration_time_s(), ring + 2e-6 + 1e6 / 10e9 + 1e-3, 1e-12);
}

}  // namespace loom
