// The SimGrid backend against closed forms and the contention-free evaluator. Each test
// runs in its own process (one SimGrid engine per process).
#include "sim/simgrid_backend.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "sim/simgrid_kernel.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::small_cluster;

using test::ranks_on;

Send send_to(RankId peer, double bytes) {
  return test::send_op(peer, 0, test::edge_tag(Pass::kF, 0, 1), bytes);
}
Recv recv_from(RankId peer, double bytes) {
  return test::recv_op(peer, 1, test::edge_tag(Pass::kF, 0, 1), bytes);
}

/// Every op of `s` starts and ends at the same time on SimGrid as on the evaluator.
void expect_same_timings(const Schedule& s, const Cluster& cluster, double tolerance_s = 1e-12) {
  const Timeline predicted = evaluate(s, cluster);
  const Timeline simulated = run_simgrid(s, cluster);
  for (const RankId r : s.programs.ids()) {
    for (size_t i = 0; i < s.programs[RankId{r}].size(); ++i) {
      EXPECT_NEAR(simulated.timings[RankId{r}][i].start_s, predicted.timings[RankId{r}][i].start_s,
                  tolerance_s)
          << "rank " << r << " " << to_string(s.programs[RankId{r}][i], s);
      EXPECT_NEAR(simulated.timings[RankId{r}][i].end_s, predicted.timings[RankId{r}][i].end_s,
                  tolerance_s)
          << "rank " << r << " " << to_string(s.programs[RankId{r}][i], s);
    }
  }
}

}  // namespace

TEST(SimGridBackend, LoneTransferTakesLatencyPlusBytesOverBandwidth) {
  // Across nodes: gpu-0 up, nic-0 up, nic-1 down, gpu-2 down; the NIC is the bottleneck.
  Schedule s = ranks_on({0, 2});
  s.programs[0_rank] = {test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-3), send_to(1_rank, 1e8)};
  s.programs[1_rank] = {recv_from(0_rank, 1e8), test::compute_op(Pass::kF, 1, 0, 1, 2, 2e-3)};
  const Cluster cluster = small_cluster(2, 2);
  SimGridStats stats;
  const Timeline t = run_simgrid(s, cluster, {}, &stats);
  const double transfer = 2e-6 + 10e-6 + 1e8 / 5e9;
  ASSERT_DOUBLE_EQ(transfer, transfer_time(cluster, 0, 2, 1e8));
  EXPECT_NEAR(t.timings[0_rank][1].start_s, 1e-3, 1e-12);
  EXPECT_NEAR(t.timings[0_rank][1].end_s, 1e-3 + transfer, 1e-12);  // send: posted -> arrived
  EXPECT_NEAR(t.timings[1_rank][0].end_s, 1e-3 + transfer, 1e-12);  // recv: waited for it
  EXPECT_NEAR(t.iteration_time_s(), 1e-3 + transfer + 2e-3, 1e-12);
  EXPECT_EQ(stats.activities, 3u);
}

TEST(SimGridBackend, RingAllReduceClosedForm) {
  // 4 ranks in one node, all arriving at t=0: 2(n-1) steps of (latency + bytes/n / bw).
  Schedule s = ranks_on({0, 1, 2, 3});
  s.groups = {{0_rank, 1_rank, 2_rank, 3_rank}};
  for (auto& program : s.programs) program = {test::allreduce_op(0, 4e6)};
  const Timeline t = run_simgrid(s, small_cluster(1, 4));
  const double step = 2e-6 + (4e6 / 4) / 10e9;
  for (const auto& rank : t.timings) EXPECT_NEAR(rank[0].end_s, 6 * step, 1e-12);
}

TEST(SimGridBackend, SharedNicHalvesBandwidthWhereTheEvaluatorDoesNot) {
  // Two GPUs of node 0 send to node 1 at once: both flows cross nic-0 (up) and share it.
  Schedule s = ranks_on({0, 1, 2, 3});
  s.programs[0_rank] = {send_to(2_rank, 1e9)};
  s.programs[1_rank] = {send_to(3_rank, 1e9)};
  s.programs[2_rank] = {recv_from(0_rank, 1e9)};
  s.programs[3_rank] = {recv_from(1_rank, 1e9)};
  const Cluster cluster = small_cluster(2, 2);
  const double latency = 12e-6;
  EXPECT_NEAR(evaluate(s, cluster).iteration_time_s(), latency + 1e9 / 5e9, 1e-12);
  const Timeline t = run_simgrid(s, cluster);
  EXPECT_NEAR(t.timings[2_rank][0].end_s, latency + 1e9 / 2.5e9, 1e-9);
  EXPECT_NEAR(t.timings[3_rank][0].end_s, latency + 1e9 / 2.5e9, 1e-9);
}

TEST(SimGridBackend, MessagesBetweenAPairMatchInProgramOrder) {
  // A large message then a small one: the small one arrives first on the wire, but the
  // receiver's first Recv is matched with the first Send (as NCCL does).
  Schedule s = ranks_on({0, 1});
  s.microbatches = 2;
  s.samples = {{{SampleId{0}}, {SampleId{1}}}};
  s.programs[0_rank] = {test::send_op(1_rank, 0, test::edge_tag(Pass::kF, 0, 1), 1e9),
                        test::send_op(1_rank, 0, test::edge_tag(Pass::kF, 1, 1), 1e3)};
  s.programs[1_rank] = {test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 0, 1), 1e9),
                        test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 1, 1), 1e3)};
  const Timeline t = run_simgrid(s, small_cluster(1, 2));
  EXPECT_GT(t.timings[1_rank][0].end_s, 0.05);                        // the big one
  EXPECT_LT(t.timings[0_rank][1].end_s, t.timings[0_rank][0].end_s);  // small one arrived first
  EXPECT_NEAR(t.timings[1_rank][1].end_s, t.timings[1_rank][0].end_s,
              1e-12);  // but is taken second
}

TEST(SimGridBackend, DeadlockIsAnInfeasibleErrorNamingTheBlockedOps) {
  Schedule s = ranks_on({0, 1});
  s.programs[0_rank] = {test::recv_op(1_rank, 0, test::edge_tag(Pass::kB, 0, 0), 0),
                        test::send_op(1_rank, 0, test::edge_tag(Pass::kF, 0, 1), 0)};
  s.programs[1_rank] = {test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 0, 1), 0),
                        test::send_op(0_rank, 1, test::edge_tag(Pass::kB, 0, 0), 0)};
  try {
    run_simgrid(s, small_cluster(1, 2));
    FAIL() << "expected a deadlock";
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0 blocked at op #0"), std::string::npos) << e.what();
  }
}

TEST(SimGridBackend, OneSimulationPerProcess) {
  Schedule s = ranks_on({0});
  s.programs[0_rank] = {test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-3)};
  EXPECT_NEAR(run_simgrid(s, small_cluster(1, 1)).iteration_time_s(), 1e-3, 1e-12);
  EXPECT_THROW(run_simgrid(s, small_cluster(1, 1)), std::logic_error);
}

TEST(SimGridBackend, AgreesWithEvaluatorOpByOpWhenLinksAreFree) {
  // GPipe across two nodes with real messages: a stage's forward sends and backward sends
  // never overlap in time, so no link is shared and the two backends must agree.
  const auto study = test::example(
      "uniform-1f1b.toml", {"schedule.name=gpipe", "cluster.nodes=2", "cluster.gpus_per_node=2",
                            "cost.table.llm.output_bytes=16MiB"});
  const Timeline predicted = evaluate(study->schedule, study->config.cluster);
  const Timeline simulated = run_simgrid(study->schedule, study->config.cluster);
  ASSERT_GT(predicted.iteration_time_s(), 33e-3);  // communication is on the critical path
  EXPECT_NEAR(simulated.iteration_time_s(), predicted.iteration_time_s(),
              1e-3 * predicted.iteration_time_s());
  for (const RankId r : predicted.timings.ids()) {
    for (size_t i = 0; i < predicted.timings[RankId{r}].size(); ++i) {
      EXPECT_NEAR(simulated.timings[RankId{r}][i].start_s, predicted.timings[RankId{r}][i].start_s,
                  1e-9)
          << "rank " << r << " op "
          << to_string(study->schedule.programs[RankId{r}][i], study->schedule);
      EXPECT_NEAR(simulated.timings[RankId{r}][i].end_s, predicted.timings[RankId{r}][i].end_s,
                  1e-9)
          << "rank " << r << " op "
          << to_string(study->schedule.programs[RankId{r}][i], study->schedule);
    }
  }
}

TEST(SimGridBackend, SharedLinksOnlySlowDown) {
  // 1F1B, 4 stages x 2 replicas on 2 nodes of 4 GPUs. A 1 GiB message takes 3.6 ms, longer
  // than a backward (2 ms), so in the steady state a stage's activation (to s+1) and
  // gradient (to s-1) leave its GPU link together and share it; the contention-free
  // prediction is a lower bound that SimGrid exceeds.
  const auto study = test::example("uniform-1f1b.toml",
                                   {"parallel.pp=4", "parallel.dp=2", "cluster.nodes=2",
                                    "cluster.gpus_per_node=4", "cost.table.llm.output_bytes=1GiB"});
  const double predicted = evaluate(study->schedule, study->config.cluster).iteration_time_s();
  const double simulated = run_simgrid(study->schedule, study->config.cluster).iteration_time_s();
  EXPECT_GT(simulated, predicted * 1.01);
}

TEST(SimGridBackend, RingAcrossNodesStartsWithTheLastMemberAndMatchesTheEvaluator) {
  // Ring 0->1->2->3->0 over 2 nodes: two intra-node hops and two NIC hops, members
  // arriving at different times. No link is shared, so the backends agree; the ring is
  // bounded by its slowest hop (NIC): 6 x (12 us + 1 MB / 5 GB/s) after the last arrival.
  Schedule s = ranks_on({0, 1, 2, 3});
  s.groups = {{0_rank, 1_rank, 2_rank, 3_rank}};
  for (int r = 0; r < 4; ++r) {
    s.programs[RankId{r}] = {test::compute_op(Pass::kW, 0, 0, 0, 1, 1e-3 * r),
                             test::allreduce_op(0, 4e6)};
  }
  const Cluster cluster = small_cluster(2, 2);
  const Timeline predicted = evaluate(s, cluster);
  const Timeline simulated = run_simgrid(s, cluster);
  const double expected_end = 3e-3 + 12e-6 + 6 * 1e6 / 5e9 + 5 * 12e-6;
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(predicted.timings[RankId{r}][1].end_s, expected_end, 1e-12);
    EXPECT_NEAR(simulated.timings[RankId{r}][1].end_s, expected_end, 1e-12);
    EXPECT_NEAR(simulated.timings[RankId{r}][1].start_s, 1e-3 * r, 1e-12);
  }
}

TEST(SimGridBackend, EmptyMessagesStillPayTheRouteLatency) {
  // The receiver is already waiting: SimGrid would hand over an empty message at once.
  Schedule s = ranks_on({0, 2});
  s.programs[0_rank] = {test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-6), send_to(1_rank, 0)};
  s.programs[1_rank] = {recv_from(0_rank, 0)};
  const Cluster cluster = small_cluster(2, 2);
  const Timeline predicted = evaluate(s, cluster);
  const Timeline simulated = run_simgrid(s, cluster);
  EXPECT_NEAR(predicted.timings[1_rank][0].end_s, 1e-6 + 12e-6, 1e-12);
  EXPECT_NEAR(simulated.timings[1_rank][0].end_s, predicted.timings[1_rank][0].end_s, 1e-9);
  EXPECT_NEAR(simulated.timings[0_rank][1].end_s, predicted.timings[0_rank][1].end_s,
              1e-9);  // arrival
}

TEST(SimGridBackend, OpsAfterACollectiveAgreeWithTheEvaluator) {
  Schedule s = ranks_on({0, 1});
  s.groups = {{0_rank, 1_rank}};
  s.programs[0_rank] = {test::allreduce_op(0, 2e6), send_to(1_rank, 1e6)};
  s.programs[1_rank] = {test::allreduce_op(0, 2e6), recv_from(0_rank, 1e6),
                        test::compute_op(Pass::kF, 1, 0, 1, 2, 1e-3)};
  expect_same_timings(s, small_cluster(1, 2));
}

TEST(SimGridBackend, AsyncBucketsAgreeWithTheEvaluator) {
  // Each rank's comm stream actor runs its buckets in order (core/schedule.hpp).
  const Schedule s = test::overlapped_buckets(2e-3, 40e6);
  expect_same_timings(s, small_cluster(1, 2));
}

// SimGrid runs once per process: one gather size per test.
TEST(SimGridBackend, PrefetchedGathersShorterThanAComputeAgreeWithTheEvaluator) {
  expect_same_timings(test::prefetched_gathers(2e-3, 1e6), small_cluster(1, 2));
}

TEST(SimGridBackend, PrefetchedGathersLongerThanAComputeAgreeWithTheEvaluator) {
  expect_same_timings(test::prefetched_gathers(2e-3, 60e6), small_cluster(1, 2));
}

TEST(SimGridBackend, FsdpOnOneRingAgreesWithTheEvaluatorOpByOp) {
  // The Cornstarch paper's FSDP baseline (lowering/pass_fsdp.cpp): 24 GPUs, one ring, no
  // other traffic, so the contention-free evaluator and SimGrid agree op by op (to SimGrid's
  // arithmetic over about 15,000 ops: 1 ns).
  const auto study = prepare_study(
      test::source_path("configs/paper/cornstarch-sss.toml"),
      {"parallel.fsdp=true", "parallel.tp=1", "parallel.pp=1", "parallel.dp=24",
       "schedule.name=gpipe", "schedule.microbatches=1", "schedule.microbatch_size=2"});
  expect_same_timings(study->schedule, study->config.cluster, 1e-9);
}

namespace {
/// parallel.cp = 2 on one stage of Narayanan's 39.1B GPT, exchanging by `cp_comm`: each
/// layer's K/V exchange between the two CP ranks' TP groups (two nodes), nothing else on
/// the links.
std::unique_ptr<Study> context_parallel_study(const std::string& cp_comm) {
  return prepare_study(test::source_path("validation/megatron-narayanan-2021/n1-39.1b.toml"),
                       {"parallel.cp=2", "parallel.cp_comm=\"" + cp_comm + "\"", "parallel.pp=1",
                        "parallel.dp=1", "schedule.stage_layers=[]", "schedule.microbatches=2",
                        "model.modules.gpt.layers=4", "cluster.nodes=2"});
}
}  // namespace

TEST(SimGridBackend, ContextParallelRingAgreesWithTheEvaluatorOpByOp) {
  const auto study = context_parallel_study("p2p");
  expect_same_timings(study->schedule, study->config.cluster, 1e-9);
}

TEST(SimGridBackend, ContextParallelAllGatherAgreesWithTheEvaluatorOpByOp) {
  const auto study = context_parallel_study("all-gather");
  expect_same_timings(study->schedule, study->config.cluster, 1e-9);
}

TEST(SimGridBackend, ContextParallelUlyssesAgreesWithTheEvaluatorOpByOp) {
  const auto study = context_parallel_study("a2a");
  expect_same_timings(study->schedule, study->config.cluster, 1e-9);
}

namespace {
/// tests/data/moe-small.toml without pipeline traffic: one stage, `dp` replicas, every MoE
/// layer's dispatch and combine over `ep` ranks, nothing else on the links meanwhile.
std::unique_ptr<Study> expert_parallel_study(int dp, int ep) {
  return test::fixture("moe-small.toml", {"parallel.pp=1", "parallel.dp=" + std::to_string(dp),
                                          "parallel.ep=" + std::to_string(ep)});
}
}  // namespace

TEST(SimGridBackend, AllToAllsInsideANodeAgreeWithTheEvaluatorOpByOp) {
  const auto study = expert_parallel_study(4, 4);
  expect_same_timings(study->schedule, study->config.cluster, 1e-9);
}

TEST(SimGridBackend, AllToAllsAcrossNodesAgreeWithTheEvaluatorOpByOp) {
  // Eight ranks on two nodes: each GPU's four inter-node flows share its rail.
  const auto study = expert_parallel_study(8, 8);
  expect_same_timings(study->schedule, study->config.cluster, 1e-9);
}

TEST(SimGridBackend, EveryCommLeavesSimGridsDetachedListAsItStarts) {
  // Pipeline messages, ring and all-to-all flows, started before the run and from timers
  // and completions: none is left for CommImpl::finish to scan for (sim/simgrid_kernel.hpp).
  if (!sim::kKnowsDetachedList) GTEST_SKIP() << "the workaround is written for SimGrid 3.32";
  const auto study = test::fixture("moe-small.toml");
  SimGridStats stats;
  run_simgrid(study->schedule, study->config.cluster, {}, &stats);
  EXPECT_GT(stats.activities, study->schedule.ranks.size());
  EXPECT_EQ(stats.comms_left_detached, 0u);
}

TEST(SimGridBackend, TwoRanksOnOneGpuAreRejected) {
  Schedule s = ranks_on({1, 1});
  s.programs[0_rank] = {send_to(1_rank, 1e3)};
  s.programs[1_rank] = {recv_from(0_rank, 1e3)};
  try {
    run_simgrid(s, small_cluster(1, 2));
    FAIL() << "expected a placement error";
  } catch (const InfeasibleError& e) {
    EXPECT_NE(std::string(e.what()).find("shares GPU 1 with rank 0"), std::string::npos)
        << e.what();
  }
}

TEST(SimGridBackend, TwoEncoderEdgesMatchPerChannel) {
  // Two producers feed the LLM's first layer; their messages between one pair of stages
  // travel in separate mailboxes and still agree with the evaluator (links are free here).
  const auto study =
      test::fixture("two-encoders.toml", {"parallel.pp=5", "cluster.gpus_per_node=8"});
  const double predicted = evaluate(study->schedule, study->config.cluster).iteration_time_s();
  const double simulated = run_simgrid(study->schedule, study->config.cluster).iteration_time_s();
  EXPECT_NEAR(simulated, predicted, 1e-3 * predicted);
}

}  // namespace loom
