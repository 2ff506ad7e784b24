#include "core/evaluator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>

#include "core/errors.hpp"
#include "core/matching.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::ranks_on;

using test::small_cluster;

}  // namespace

TEST(Evaluator, TransferTakesLatencyPlusBytesOverBandwidth) {
  Schedule s = ranks_on({0, 1});
  s.programs[0_rank] = {test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-3),
                        test::send_op(1_rank, 0, test::edge_tag(Pass::kF, 0, 1), 1e6)};
  s.programs[1_rank] = {test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 0, 1), 1e6),
                        test::compute_op(Pass::kF, 1, 0, 1, 2, 2e-3)};
  const Timeline t = evaluate(s, small_cluster(1, 2));
  const double transfer = 2e-6 + 1e6 / 10e9;
  EXPECT_DOUBLE_EQ(t.timings[1_rank][0].end_s, 1e-3 + transfer);
  EXPECT_DOUBLE_EQ(t.iteration_time_s(), 1e-3 + transfer + 2e-3);
  // Across nodes the route adds the inter-node latency and is limited by the slower link.
  s.ranks[1_rank].gpu = 2;
  const Timeline across = evaluate(s, small_cluster(2, 2));
  EXPECT_DOUBLE_EQ(across.timings[1_rank][0].end_s, 1e-3 + 12e-6 + 1e6 / 5e9);
}

TEST(Evaluator, RingAllReduceClosedForm) {
  const int n = 4;
  Schedule s = ranks_on({0, 1, 2, 3});
  s.groups = {{0_rank, 1_rank, 2_rank, 3_rank}};
  for (auto& program : s.programs) program = {test::allreduce_op(0, 4e6)};
  const Timeline t = evaluate(s, small_cluster(1, 4));
  const double step = 2e-6 + (4e6 / n) / 10e9;
  EXPECT_NEAR(t.iteration_time_s(), 2 * (n - 1) * step, 1e-12);
}

TEST(Evaluator, ALentMatchingIsUsedAsIsAndGivesTheSameTimeline) {
  // loom sim makes the schedule's matching once and lends it to the backend, the partition
  // views and the trace's link tracks (0.4 s and 100 MB each at 16,384 GPUs).
  const auto study = test::example("uniform-1f1b.toml", {"parallel.pp=4", "parallel.dp=2"});
  const Matching lent = match_operations(study->schedule);
  std::optional<Matching> owned;
  EXPECT_EQ(&lent_or_matched(&lent, owned, study->schedule), &lent);
  EXPECT_FALSE(owned.has_value());
  EXPECT_EQ(&lent_or_matched(nullptr, owned, study->schedule), &*owned);
  const Timeline with = evaluate(study->schedule, study->config.cluster, &lent);
  const Timeline without = evaluate(study->schedule, study->config.cluster);
  for (const RankId r : study->schedule.rank_ids()) {
    for (size_t i = 0; i < with.timings[r].size(); ++i) {
      EXPECT_EQ(with.timings[r][i].start_s, without.timings[r][i].start_s);
      EXPECT_EQ(with.timings[r][i].end_s, without.timings[r][i].end_s);
    }
  }
}

TEST(Evaluator, DeadlockIsReportedNotHung) {
  Schedule s = ranks_on({0, 1});
  // Both ranks wait for the other first: a cycle.
  s.programs[0_rank] = {test::recv_op(1_rank, 0, test::edge_tag(Pass::kB, 0, 0), 0),
                        test::send_op(1_rank, 0, test::edge_tag(Pass::kF, 0, 1), 0)};
  s.programs[1_rank] = {test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 0, 1), 0),
                        test::send_op(0_rank, 1, test::edge_tag(Pass::kB, 0, 0), 0)};
  EXPECT_THROW(evaluate(s, small_cluster(1, 2)), InfeasibleError);
  try {
    check_acyclic(s);
    FAIL();
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("RECV"), std::string::npos) << e.what();
  }
}

TEST(Evaluator, AsyncBucketsOverlapTheBackwardAndTheOptimizerStepWaits) {
  // core/schedule.hpp: a bucket starts when both members issued it and their previous
  // bucket ended; the optimizer step starts when the last bucket ended.
  for (const double bytes : {1e6, 40e6}) {  // a ring shorter, then longer than a compute
    const Schedule s = test::overlapped_buckets(2e-3, bytes);
    const Timeline t = evaluate(s, small_cluster(1, 2));
    const double ring = 2 * (2e-6 + (bytes / 2) / 10e9);  // 2 steps of half the buffer
    const double first_end = 2e-3 + ring;
    const double second_start = std::max(4e-3, first_end);
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(std::to_string(bytes) + " bytes, rank " + std::to_string(r));
      EXPECT_DOUBLE_EQ(t.timings[RankId{r}][1].start_s, 2e-3);
      EXPECT_NEAR(t.timings[RankId{r}][1].end_s, first_end, 1e-15);
      EXPECT_DOUBLE_EQ(t.timings[RankId{r}][2].start_s, 2e-3);  // the rank went on at once
      EXPECT_NEAR(t.timings[RankId{r}][3].start_s, second_start, 1e-15);
      EXPECT_NEAR(t.timings[RankId{r}][4].start_s, second_start + ring, 1e-15);
    }
    // Overlap hides the first bucket entirely; the second waits for its own compute.
    EXPECT_NEAR(t.iteration_time_s(), second_start + ring + 1e-4, 1e-15);
  }
}

TEST(Evaluator, AsyncBucketsIssuedInDifferentOrdersAreADeadlock) {
  Schedule s = ranks_on({0, 1});
  s.groups = {{0_rank, 1_rank}, {0_rank, 1_rank}};
  const Collective a{.group = GroupId{0}, .bytes = 1e6, .async = true};
  const Collective b{.group = GroupId{1}, .bytes = 1e6, .async = true};
  s.programs[0_rank] = {a, b};
  s.programs[1_rank] = {b, a};
  try {
    evaluate(s, small_cluster(1, 2));
    FAIL();
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("different orders"), std::string::npos) << e.what();
  }
}

TEST(Evaluator, PrefetchedGatherHidesBehindTheComputeBeforeIt) {
  // core/schedule.hpp: a compute with async_pending = k waits for the rank's async
  // collectives but the k issued last. Two members: one ring step of half the buffer.
  for (const double bytes : {1e6, 60e6}) {  // a gather shorter, then longer than a compute
    const Schedule s = test::prefetched_gathers(2e-3, bytes);
    const Timeline t = evaluate(s, small_cluster(1, 2));
    const double gather = 2e-6 + (bytes / 2) / 10e9;
    const double second_start = std::max(gather + 2e-3, 2 * gather);
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(std::to_string(bytes) + " bytes, rank " + std::to_string(r));
      const auto& rank = t.timings[RankId{r}];
      EXPECT_NEAR(rank[1].end_s, 2 * gather, 1e-15);  // one stream: in order
      EXPECT_NEAR(rank[2].start_s, gather, 1e-15);    // its own layer's only
      EXPECT_NEAR(rank[3].start_s, second_start, 1e-15);
      EXPECT_NEAR(rank[4].start_s, second_start + 2e-3, 1e-15);         // waits for nothing
      EXPECT_NEAR(rank[5].end_s, second_start + 4e-3 + gather, 1e-15);  // reduce-scatter
    }
    EXPECT_NEAR(t.iteration_time_s(), second_start + 4e-3 + gather, 1e-15);
  }
}

TEST(Evaluator, AGatherMeetingAReduceScatterIsRejectedNamingBoth) {
  // core/matching.cpp: the k-th collectives of a group's members must be the same ring.
  Schedule s = test::prefetched_gathers(2e-3, 1e6);
  std::get<Collective>(s.programs[1_rank][1]).kind = CollectiveKind::kReduceScatter;
  try {
    evaluate(s, small_cluster(1, 2));
    FAIL();
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 op #1 (REDUCESCATTER_s0[g0]): collective 1 of "
                                         "group g0 is an async reducescatter here but an async "
                                         "allgather on rank 0 op #1"),
              std::string::npos)
        << e.what();
  }
}

TEST(Evaluator, UnmatchedReceiveNamesTheOperation) {
  Schedule s = ranks_on({0, 1});
  s.programs[1_rank] = {test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 0, 1), 0)};
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
  s.groups = {{0_rank, 1_rank, 2_rank, 3_rank}};
  for (int r = 0; r < 4; ++r) {
    s.programs[RankId{r}] = {test::compute_op(Pass::kW, 0, 0, 0, 1, 1e-3 * r),
                             test::allreduce_op(0, 4e6)};
  }
  const Timeline t = evaluate(s, small_cluster(2, 2));
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(t.timings[RankId{r}][1].start_s, 1e-3 * r, 1e-12);
    EXPECT_NEAR(t.timings[RankId{r}][1].end_s, 3e-3 + 6 * (12e-6 + 1e6 / 5e9), 1e-12);
  }
}

TEST(Evaluator, OpsAfterACollectiveRunOnEveryMember) {
  // Regression: the last member to arrive used to skip the op after the collective.
  Schedule s = ranks_on({0, 1});
  s.groups = {{0_rank, 1_rank}};
  s.programs = {
      {test::allreduce_op(0, 2e6), test::send_op(1_rank, 0, test::edge_tag(Pass::kF, 0, 1), 1e6)},
      {test::allreduce_op(0, 2e6), test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 0, 1), 1e6),
       test::compute_op(Pass::kF, 1, 0, 1, 2, 1e-3)}};
  const Timeline t = evaluate(s, test::small_cluster(1, 2));
  const double ring = 2 * (2e-6 + 1e6 / 10e9);
  EXPECT_NEAR(t.timings[1_rank][1].end_s, ring + 2e-6 + 1e6 / 10e9, 1e-12);
  EXPECT_NEAR(t.timings[1_rank][2].start_s, t.timings[1_rank][1].end_s, 1e-12);
  EXPECT_NEAR(t.iteration_time_s(), ring + 2e-6 + 1e6 / 10e9 + 1e-3, 1e-12);
}

}  // namespace loom
