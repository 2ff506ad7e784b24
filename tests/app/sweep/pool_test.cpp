// The worker pool: every job answered exactly once whatever the width, a job that crashes
// its worker is reported with how it died while the others still run (on a new worker),
// and fresh-process mode gives each job its own process.
#include "app/sweep/pool.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

namespace loom::sweep {
namespace {

struct Outcome {
  bool ok;
  std::string message;
};

std::map<size_t, Outcome> run(size_t count, int jobs, bool fresh, const JobFn& job) {
  std::map<size_t, Outcome> out;
  const bool complete =
      run_pool(count, jobs, fresh, job, [&](size_t j, bool ok, const std::string& m) {
        EXPECT_TRUE(out.emplace(j, Outcome{ok, m}).second) << "job " << j << " answered twice";
      });
  EXPECT_TRUE(complete);
  return out;
}

TEST(SweepPool, EveryJobIsAnsweredOnceForAnyWidth) {
  for (int jobs : {1, 2, 7}) {
    const auto out = run(20, jobs, false, [](size_t j) { return "job " + std::to_string(j); });
    ASSERT_EQ(out.size(), 20u) << jobs;
    for (const auto& [j, o] : out) {
      EXPECT_TRUE(o.ok);
      EXPECT_EQ(o.message, "job " + std::to_string(j));
    }
  }
}

TEST(SweepPool, ACrashingJobIsReportedAndTheOthersStillRun) {
  const auto out = run(12, 2, false, [](size_t j) -> std::string {
    if (j == 3) std::abort();
    return std::to_string(j);
  });
  ASSERT_EQ(out.size(), 12u);
  EXPECT_FALSE(out.at(3).ok);
  EXPECT_NE(out.at(3).message.find("signal 6"), std::string::npos) << out.at(3).message;
  for (const auto& [j, o] : out) {
    if (j != 3) {
      EXPECT_TRUE(o.ok) << j << ": " << o.message;
    }
  }
}

TEST(SweepPool, FreshProcessModeRunsEachJobInItsOwnProcess) {
  for (bool fresh : {true, false}) {
    const auto out = run(6, 2, fresh, [](size_t) { return std::to_string(getpid()); });
    std::map<std::string, int> pids;
    for (const auto& [j, o] : out) ++pids[o.message];
    if (fresh) {
      EXPECT_EQ(pids.size(), 6u);
    } else {
      EXPECT_LE(pids.size(), 2u) << "workers are reused";
    }
  }
}

}  // namespace
}  // namespace loom::sweep
