// Golden outputs (SimGrid's .tesh files are the model): for every config of
// configs/examples and configs/paper and every registered scheduler, the evaluator's
// iteration time, bubble fraction, per-rank busy time and peak memory, and every rank's op
// order, compared with the snapshot in tests/golden/. Op order and rejections must match
// exactly, numbers to a relative 1e-9. A deliberate change is refreshed by
// scripts/refresh_golden.sh (LOOM_REFRESH_GOLDEN=1 makes this test write the files).
#include <gtest/gtest.h>

#include "config_sweep.hpp"
#include "core/evaluator.hpp"
#include "golden_support.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {
namespace {

std::string golden_path(const std::string& config) {
  return test::source_path("tests/golden/" + config + ".txt");
}

/// The snapshot of one config: one section per registered scheduler.
std::string snapshot(const std::string& config) {
  std::string out = "# Golden output of configs/" + config +
                    ".toml for every registered scheduler, contention-free evaluator.\n"
                    "# Regenerate with scripts/refresh_golden.sh; tests/core/golden_test.cpp "
                    "compares.\n";
  for (const SchedulerInfo& info : scheduler_registry()) {
    out += "scheduler " + std::string(info.name) + "\n";
    const test::Planned p = test::plan(config, info.name);
    if (!p.study) {
      out += "rejected " + p.rejected + "\n";
      continue;
    }
    const Schedule& s = p.study->schedule;
    out += test::run_summary(s, compute_metrics(s, evaluate(s, p.study->config.cluster)));
  }
  return out;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, MatchesTheSnapshot) {
  const std::string config = GetParam();
  if (test::skip_slow(config)) GTEST_SKIP() << config << ": slow, set LOOM_SLOW_TESTS=1";
  test::expect_golden(golden_path(config), snapshot(config), "configs/" + config + ".toml");
}

INSTANTIATE_TEST_SUITE_P(Configs, Golden, ::testing::ValuesIn(test::shipped_configs()),
                         [](const auto& param) { return test::test_name(param.param); });

TEST(GoldenDiff, NumbersWithinToleranceOthersExact) {
  EXPECT_TRUE(
      test::same_line("iteration_time_s 0.1", "iteration_time_s 0.10000000000000001", 1e-9));
  EXPECT_FALSE(test::same_line("iteration_time_s 0.1", "iteration_time_s 0.1000001", 1e-9));
  EXPECT_FALSE(test::same_line("order 0: 0F0 0F1", "order 0: 0F1 0F0", 1e-9));
  const std::string d =
      test::diff("scheduler 1f1b\nbubble_fraction 0.5\n", "scheduler 1f1b\nbubble_fraction 0.6\n");
  EXPECT_NE(d.find("line 2 (scheduler 1f1b)"), std::string::npos) << d;
  EXPECT_NE(d.find("golden: bubble_fraction 0.5"), std::string::npos) << d;
  EXPECT_EQ(test::diff("a\nb\n", "a\nb\n"), "");
}

}  // namespace
}  // namespace loom
