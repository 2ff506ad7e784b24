// Golden outputs (SimGrid's .tesh files are the model): for every config of
// configs/examples and configs/paper and every registered scheduler, the evaluator's
// iteration time, bubble fraction, per-rank busy time and peak memory, and every rank's op
// order, compared with the snapshot in tests/golden/evaluator/<scheduler>/<config>.txt.
// One file per scheduler x config: registering a scheduler adds its own folder, and a
// change to one scheduler shows in its files only. Op order and rejections must match
// exactly, numbers to a relative 1e-9. A deliberate change is refreshed by
// scripts/refresh_golden.sh (LOOM_REFRESH_GOLDEN=1 makes this test write the files).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "config_sweep.hpp"
#include "core/evaluator.hpp"
#include "golden_support.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {
namespace {

const char* const kGoldenDir = "tests/golden/evaluator/";

std::string golden_path(const std::string& scheduler, const std::string& config) {
  return test::source_path(kGoldenDir + scheduler + "/" + config + ".txt");
}

/// The snapshot of one scheduler on one config: its numbers and orders, or its rejection.
std::string snapshot(const std::string& scheduler, const std::string& config) {
  std::string out = "# Golden output of configs/" + config + ".toml, scheduler " + scheduler +
                    ", contention-free evaluator.\n"
                    "# Regenerate with scripts/refresh_golden.sh; tests/core/golden_test.cpp "
                    "compares.\n";
  out += "scheduler " + scheduler + "\n";
  const test::Planned p = test::plan(config, scheduler);
  if (!p.study) return out + "rejected " + p.rejected + "\n";
  const Schedule& s = p.study->schedule;
  return out + test::run_summary(s, compute_metrics(s, evaluate(s, p.study->config.cluster)));
}

class Golden : public ::testing::TestWithParam<std::string> {};

/// One test per config (as before the split), checking every scheduler's file.
TEST_P(Golden, MatchesTheSnapshot) {
  const std::string config = GetParam();
  if (test::skip_slow(config)) GTEST_SKIP() << config << ": slow, set LOOM_SLOW_TESTS=1";
  for (const SchedulerInfo& info : scheduler_registry()) {
    const std::string name = info.name, path = golden_path(name, config);
    if (!std::getenv("LOOM_REFRESH_GOLDEN") && !std::filesystem::exists(path)) {
      ADD_FAILURE() << "scheduler " << name << " has no golden file for configs/" << config
                    << ".toml (" << path << "). A newly registered scheduler adds its own: run "
                    << "scripts/refresh_golden.sh and commit " << kGoldenDir << name << "/.";
      continue;
    }
    test::expect_golden(path, snapshot(name, config),
                        "scheduler " + name + " on configs/" + config + ".toml");
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, Golden, ::testing::ValuesIn(test::shipped_configs()),
                         [](const auto& param) { return test::test_name(param.param); });

/// Every file under tests/golden/evaluator/ is some registered scheduler's on some shipped
/// config: a renamed or removed scheduler or config leaves none behind.
TEST(GoldenFiles, BelongToARegisteredSchedulerAndAShippedConfig) {
  std::set<std::filesystem::path> expected;
  for (const SchedulerInfo& info : scheduler_registry()) {
    for (const std::string& config : test::shipped_configs())
      expected.insert(std::filesystem::path(golden_path(info.name, config)).lexically_normal());
  }
  const std::filesystem::path dir = test::source_path(kGoldenDir);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    EXPECT_TRUE(expected.count(e.path().lexically_normal()) > 0)
        << e.path().string() << " names no registered scheduler and shipped config: "
        << "run scripts/refresh_golden.sh (it rewrites " << kGoldenDir << ") or remove it.";
  }
}

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
