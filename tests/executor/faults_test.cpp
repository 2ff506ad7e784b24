// Faults end the run with an error naming the rank and the operation, never a hang
// (issue 6, "Faults"); reruns give the same timeline structure.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/errors.hpp"
#include "executor/host_backend.hpp"
#include "executor/transport.hpp"
#include "test_support.hpp"

namespace loom::exec {
namespace {

std::unique_ptr<Study> host_study() {
  return prepare_study(test::source_path("configs/exec/vlm-host.toml"), {});
}

TEST(Faults, KilledRankEndsTheRunNamingRankAndOperation) {
  const auto study = host_study();
  const ExecProblem p{&study->schedule, &study->config.model, &study->problem.samples, 1};
  ExecOptions o;
  o.timeout_s = 30;  // the abort, not the timeout, must end the others' waits
  o.fault = FaultInjection{1_rank, 3};
  const auto start = std::chrono::steady_clock::now();
  try {
    make_host_executor()->run(p, o);
    FAIL() << "the run should have failed";
  } catch (const ExecError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 1 op 3 ("), std::string::npos) << what;
    EXPECT_NE(what.find("injected fault"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20);
}

TEST(Faults, UnmatchedCommunicationIsRejectedBeforeRunning) {
  const auto study = host_study();
  Schedule s = study->schedule;
  std::erase_if(s.programs[0_rank], [](const Op& op) { return std::holds_alternative<Send>(op); });
  const ExecProblem p{&s, &study->config.model, &study->problem.samples, 1};
  EXPECT_THROW(make_host_executor()->run(p, {}), InfeasibleError);
}

TEST(Faults, AShardedScheduleIsRefusedNamingTheOperationAndTheWayOut) {
  // parallel.fsdp (lowering/pass_fsdp.cpp): the executors keep parameters whole.
  const auto study = prepare_study(test::source_path("configs/exec/vlm-host.toml"),
                                   {"parallel.fsdp=true", "parallel.pp=1", "parallel.dp=2"});
  const ExecProblem p{&study->schedule, &study->config.model, &study->problem.samples, 1};
  try {
    make_host_executor()->run(p, {});
    FAIL() << "the run should have been refused";
  } catch (const InfeasibleError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0 op #"), std::string::npos) << what;
    EXPECT_NE(what.find("parallel.fsdp"), std::string::npos) << what;
    EXPECT_NE(what.find("loom sim"), std::string::npos) << what;
  }
}

TEST(Faults, HungTransferTimesOutNamingTheReceive) {
  // Two ranks that each wait for the other's message first: matched, but no data ever
  // moves. Both waits must end at the deadline with an error naming a rank and its op.
  const auto study = host_study();
  Schedule s = test::ranks_on({0, 1});
  const MessageTag to1{Pass::kF, MicrobatchId{0}, 1, 0}, to0{Pass::kB, MicrobatchId{0}, 1, 0};
  s.programs[0_rank] = {
      Recv{.peer = 1_rank, .stage = StageId{0}, .module = ModuleId{0}, .tag = to0, .bytes = 4},
      Send{.peer = 1_rank, .stage = StageId{0}, .module = ModuleId{0}, .tag = to1, .bytes = 4}};
  s.programs[1_rank] = {
      Recv{.peer = 0_rank, .stage = StageId{1}, .module = ModuleId{0}, .tag = to1, .bytes = 4},
      Send{.peer = 0_rank, .stage = StageId{1}, .module = ModuleId{0}, .tag = to0, .bytes = 4}};
  const ExecProblem p{&s, &study->config.model, &study->problem.samples, 1};
  ExecOptions o;
  o.timeout_s = 0.3;
  try {
    make_host_executor()->run(p, o);
    FAIL() << "the run should have timed out";
  } catch (const ExecError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("op 0 ("), std::string::npos) << what;
    EXPECT_NE(what.find("RECV"), std::string::npos) << what;
    EXPECT_NE(what.find("timed out after 0.3 s"), std::string::npos) << what;
  }
}

TEST(Faults, APeerStillComputingIsNotDeclaredDead) {
  // Rank 1 "computes" for several deadlines before it sends; rank 0 waits all along.
  // The deadline only ends a wait when every running rank is waiting (issue 18: a long
  // layer on a large config used to end the run as "peer dead or stuck").
  Transport transport(0.1, 2);
  const MessageTag tag{Pass::kF, MicrobatchId{0}, 1, 0};
  std::thread slow([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    transport.send(1_rank, 0_rank, Message{tag, {}});
    transport.finished();
  });
  EXPECT_NO_THROW(transport.recv(1_rank, 0_rank, tag));
  transport.finished();
  slow.join();
}

TEST(Faults, ARankThatFinishedCannotKeepAWaiterAlive) {
  // Rank 1 ends its program without the send rank 0 waits for: once the deadline passes
  // with nobody computing, the wait ends.
  Transport transport(0.2, 2);
  transport.finished();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(transport.recv(1_rank, 0_rank,
                              MessageTag{.pass = Pass::kF,
                                         .microbatch = MicrobatchId{0},
                                         .boundary_layer = 1,
                                         .producer_layer = 0}),
               ExecError);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5);
}

TEST(Faults, RerunsGiveTheSameTimelineStructure) {
  const auto study = host_study();
  const ExecProblem p{&study->schedule, &study->config.model, &study->problem.samples, 1};
  const ExecResult a = make_host_executor()->run(p, {});
  const ExecResult b = make_host_executor()->run(p, {});
  ASSERT_EQ(a.timeline.timings.size(), b.timeline.timings.size());
  for (const RankId r : a.timeline.timings.ids()) {
    EXPECT_EQ(a.timeline.timings[RankId{r}].size(), study->schedule.programs[RankId{r}].size());
    EXPECT_EQ(a.timeline.timings[RankId{r}].size(), b.timeline.timings[RankId{r}].size());
    for (const OpTiming& t : a.timeline.timings[RankId{r}]) EXPECT_LE(t.start_s, t.end_s);
  }
  EXPECT_EQ(a.gradients, b.gradients);  // bitwise: same inputs and seed
}

}  // namespace
}  // namespace loom::exec
