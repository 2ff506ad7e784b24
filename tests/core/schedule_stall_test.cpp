// The dependency-only run that explains a deadlock by its stuck ranks, their steps and the
// producers they wait for.
#include "core/schedule_stall.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::string stall(const Schedule& s, const OpOrigins* origins = nullptr) {
  try {
    check_runs_to_completion(s, origins);
  } catch (const InfeasibleError& e) {
    return e.what();
  }
  return "";
}

TEST(ScheduleStall, ARunnableScheduleFinishes) {
  Schedule s = test::ranks_on({0, 1});
  s.groups = {{0_rank, 1_rank}};
  s.programs[0_rank] = {test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-3),
                        test::send_op(1_rank, 0, test::edge_tag(Pass::kF, 0, 1), 8),
                        test::allreduce_op(0, 8)};
  s.programs[1_rank] = {test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 0, 1), 8),
                        test::compute_op(Pass::kF, 1, 0, 1, 2, 1e-3),
                        Collective{.kind = CollectiveKind::kAllReduce,
                                   .group = GroupId{0},
                                   .stage = StageId{1},
                                   .module = ModuleId{0},
                                   .bytes = 8}};
  EXPECT_EQ(stall(s), "");
}

TEST(ScheduleStall, NamesEachStuckRankItsStepAndProducer) {
  Schedule s = test::ranks_on({0, 1});
  // Each rank receives before it sends what the other waits for.
  s.programs[0_rank] = {test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-3),
                        test::recv_op(1_rank, 0, test::edge_tag(Pass::kB, 0, 1), 8),
                        test::send_op(1_rank, 0, test::edge_tag(Pass::kF, 0, 1), 8)};
  s.programs[1_rank] = {test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 0, 1), 8),
                        test::send_op(0_rank, 1, test::edge_tag(Pass::kB, 0, 1), 8)};
  const std::string error = stall(s);
  EXPECT_NE(error.find("schedule deadlocks: 2 rank(s) can never finish"), std::string::npos)
      << error;
  EXPECT_NE(error.find("rank 0 stuck at step 1 (0RECV_B0:L1<-1): waits for its producer, rank 1 "
                       "step 1 (1SEND_B0:L1->0), which rank 1 never reaches (stuck at step 0 "
                       "(1RECV_F0:L1<-0))"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("rank 1 stuck at step 0 (1RECV_F0:L1<-0): waits for its producer, rank 0 "
                       "step 2 (0SEND_F0:L1->1)"),
            std::string::npos)
      << error;
}

TEST(ScheduleStall, AFileScheduleIsNamedByItsOwnStepsAndLines) {
  // The cycle above, as a compute-only file would give it: the computes have the file's
  // steps and lines, the messages none, so they are named by the step they serve (a
  // receive the one after it, a send the one before).
  Schedule s = test::ranks_on({0, 1});
  s.programs[0_rank] = {test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-3),
                        test::recv_op(1_rank, 0, test::edge_tag(Pass::kB, 0, 1), 8),
                        test::compute_op(Pass::kB, 0, 0, 0, 1, 1e-3),
                        test::send_op(1_rank, 0, test::edge_tag(Pass::kF, 0, 1), 8)};
  s.programs[1_rank] = {test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 0, 1), 8),
                        test::compute_op(Pass::kF, 1, 0, 1, 2, 1e-3),
                        test::send_op(0_rank, 1, test::edge_tag(Pass::kB, 0, 1), 8)};
  OpOrigins origins(2);
  origins[0_rank] = {OpOrigin{1, 1, 0, "0F0", ""}, std::nullopt, OpOrigin{1, 7, 2, "0B0", ""},
                     std::nullopt};
  origins[1_rank] = {std::nullopt, OpOrigin{2, 3, 1, "1F0", ""}, std::nullopt};
  const std::string error = stall(s, &origins);
  EXPECT_NE(error.find("rank 0 stuck at Loom's 0RECV_B0:L1<-1 before step 2 (0B0, line 1:7): "
                       "waits for its producer, rank 1 Loom's 1SEND_B0:L1->0 after step 1 (1F0, "
                       "line 2:3), which rank 1 never reaches (stuck at Loom's 1RECV_F0:L1<-0 "
                       "before step 1 (1F0, line 2:3))"),
            std::string::npos)
      << error;
  // Without origins the same stall counts the program's own ops.
  EXPECT_NE(stall(s).find("rank 0 stuck at step 1 (0RECV_B0:L1<-1)"), std::string::npos);
}

TEST(ScheduleStall, ManyStuckRanksAreCountedPastTheFirstEight) {
  // A ring of 10 ranks, each receiving from the next before sending to the previous.
  std::vector<int> gpus(10);
  for (int g = 0; g < 10; ++g) gpus[static_cast<size_t>(g)] = g;
  Schedule s = test::ranks_on(gpus);
  for (int r = 0; r < 10; ++r) {
    s.programs[RankId{r}] = {
        test::recv_op(RankId{(r + 1) % 10}, 0, test::edge_tag(Pass::kF, 0, 1), 8),
        test::send_op(RankId{(r + 9) % 10}, 0, test::edge_tag(Pass::kF, 0, 1), 8)};
  }
  const std::string error = stall(s);
  EXPECT_NE(error.find("schedule deadlocks: 10 rank(s) can never finish"), std::string::npos)
      << error;
  EXPECT_NE(error.find("rank 7 stuck at step 0"), std::string::npos) << error;
  EXPECT_EQ(error.find("rank 8 stuck"), std::string::npos) << error;
  EXPECT_NE(error.find("... and 2 more stuck rank(s) (the first 8 shown)"), std::string::npos)
      << error;
}

TEST(ScheduleStall, NamesTheCollectiveMembersThatNeverArrive) {
  Schedule s = test::ranks_on({0, 1, 2});
  s.groups = {{0_rank, 1_rank}};
  // Rank 1 waits for a message rank 2 never sends, so rank 0 waits at the all-reduce.
  s.programs[0_rank] = {test::allreduce_op(0, 8)};
  s.programs[1_rank] = {test::recv_op(2_rank, 1, test::edge_tag(Pass::kF, 0, 1), 8),
                        Collective{.kind = CollectiveKind::kAllReduce,
                                   .group = GroupId{0},
                                   .stage = StageId{1},
                                   .module = ModuleId{0},
                                   .bytes = 8}};
  s.programs[2_rank] = {test::recv_op(1_rank, 2, test::edge_tag(Pass::kB, 0, 2), 8),
                        test::send_op(1_rank, 2, test::edge_tag(Pass::kF, 0, 1), 8)};
  s.programs[1_rank].push_back(test::send_op(2_rank, 1, test::edge_tag(Pass::kB, 0, 2), 8));
  const std::string error = stall(s);
  EXPECT_NE(error.find("rank 0 stuck at step 0 (ALLREDUCE_s0[g0]): waits for the other members "
                       "of its collective: rank 1 never reaches step 1 (ALLREDUCE_s1[g0]) (stuck "
                       "at step 0 (1RECV_F0:L1<-2))"),
            std::string::npos)
      << error;
}

/// Ranks 0 and 1: rank 0 issues an async all-gather, then runs `first` and sends to rank 1,
/// which receives, issues its side of the gather and computes.
Schedule gather_before_send(Compute first) {
  Schedule s = test::ranks_on({0, 1});
  s.groups = {{0_rank, 1_rank}};
  const Collective gather{.kind = CollectiveKind::kAllGather, .bytes = 8, .async = true};
  s.programs[0_rank] = {gather, first, test::send_op(1_rank, 0, test::edge_tag(Pass::kF, 0, 1), 8)};
  s.programs[1_rank] = {test::recv_op(0_rank, 1, test::edge_tag(Pass::kF, 0, 1), 8), gather,
                        test::compute_op(Pass::kF, 1, 0, 1, 2, 1e-3)};
  return s;
}

TEST(ScheduleStall, AnAsyncCollectiveDoesNotHoldItsRank) {
  // core/schedule.hpp: the rank goes on at once; the gather runs once rank 1 issues it.
  EXPECT_EQ(stall(gather_before_send(test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-3))), "");
}

TEST(ScheduleStall, AComputeWaitingForAGatherItsPeerIssuesLaterIsADeadlock) {
  Compute first = test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-3);
  first.async_pending = 0;  // waits for the gather, which rank 1 issues after the send
  const std::string error = stall(gather_before_send(first));
  EXPECT_NE(error.find("rank 0 stuck at step 1 (0F0): waits for its async step 0 "
                       "(ALLGATHER_s0[g0]), which never runs: rank 1 never issues step 1 "
                       "(ALLGATHER_s0[g0]) (stuck at step 0 (1RECV_F0:L1<-0))"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace loom
