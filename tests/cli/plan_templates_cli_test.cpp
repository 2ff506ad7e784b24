// End-to-end tests of `loom plan templates`: both input forms, JSON stage ranges, exit codes
// (2 bad input naming file:line, 3 too few nodes) and byte-identical reruns.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_support.hpp"

namespace loom {
namespace {

using Result = test::CliResult;

/// Per-test file names: ctest runs these tests in parallel processes.
std::string temp(const std::string& suffix) {
  return ::testing::TempDir() + "plan_templates_" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + suffix;
}

Result plan(const std::string& args) {
  return test::run_loom("plan templates " + args, "2>" + temp(".err"));
}

std::string stderr_text() {
  std::ifstream in(temp(".err"));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string profile(int layers, const std::string& bad_line = "") {
  const std::string path = temp("_oobleck_profile.csv");
  std::ofstream out(path);
  out << "layer,forward_s,backward_s,memory_bytes\n";
  for (int l = 0; l < layers; ++l) out << l << ",0.01,0.02,3e9\n";
  out << bad_line;
  return path;
}

TEST(CliPlanTemplates, ProfileJsonListsStagesAsLayerRanges) {
  const Result r = plan("--profile " + profile(24) +
                        " --nodes 8 --gpus-per-node 2 --gpu-memory 40GB --f 1 --json");
  ASSERT_EQ(r.exit_code, 0) << stderr_text();
  const auto j = nlohmann::json::parse(r.output);
  const int n0 = j["n0"];
  EXPECT_EQ(n0, 1);                      // 72 GB over 2 x 40 GB
  ASSERT_EQ(j["templates"].size(), 7u);  // n_0 .. N - f n_0 = 1 .. 7
  for (const auto& t : j["templates"]) {
    int next = 0, gpus = 0;
    for (const auto& s : t["stages"]) {
      EXPECT_EQ(s["layers"][0], next);
      next = s["layers"][1];
      gpus += s["gpus"].get<int>();
    }
    EXPECT_EQ(next, 24);
    EXPECT_EQ(gpus, 2 * t["nodes"].get<int>());
    EXPECT_GT(t["iteration_time_s"].get<double>(), 0);
  }
  EXPECT_EQ(j["instantiation"]["nodes"], 8);
  EXPECT_EQ(plan("--profile " + profile(24) +
                 " --nodes 8 --gpus-per-node 2 --gpu-memory 40GB --f 1 --json")
                .output,
            r.output)
      << "deterministic";
}

TEST(CliPlanTemplates, ConfigFormPrintsTemplatesAndInstantiation) {
  const Result r =
      plan(std::string(LOOM_SOURCE_DIR) + "/configs/examples/uniform-1f1b.toml --nodes 4");
  ASSERT_EQ(r.exit_code, 0) << stderr_text();
  EXPECT_NE(r.output.find("template 0:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("instantiation on 4 nodes"), std::string::npos) << r.output;
}

TEST(CliPlanTemplates, TooFewNodesExitsThree) {
  const Result r = plan("--profile " + profile(24) +
                        " --nodes 8 --gpus-per-node 1 --gpu-memory 40GB --f 1 --available 3");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(stderr_text().find("fewer than (f+1) n_0"), std::string::npos) << stderr_text();
}

TEST(CliPlanTemplates, RefusesMoreNodesThanItPlansNamingTheLimit) {
  // --nodes 100000 used to overflow the stack of the enumeration (a segfault).
  const Result r = plan("--profile " + profile(24) + " --nodes 100000 --gpus-per-node 1");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(stderr_text().find("at most 10000 nodes"), std::string::npos) << stderr_text();
}

TEST(CliPlanTemplates, TwoHundredNodesPlanWithTheTwoSizeFallbackAndProgress) {
  // n_0 = 1 and 24 templates: ~10^12 X, past the exact search's limits.
  const Result r =
      plan("--profile " + profile(24) + " --nodes 200 --gpus-per-node 1 --gpu-memory 80GB --json");
  ASSERT_EQ(r.exit_code, 0) << stderr_text();
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["instantiation"]["nodes"], 200);
  EXPECT_EQ(j["instantiation"]["search"].get<std::string>().rfind("two template sizes (", 0), 0u);
  EXPECT_NE(stderr_text().find("instantiating 200 nodes"), std::string::npos) << stderr_text();
  // Small instances stay exact.
  const Result small =
      plan("--profile " + profile(24) + " --nodes 8 --gpus-per-node 2 --gpu-memory 40GB --json");
  EXPECT_EQ(nlohmann::json::parse(small.output)["instantiation"]["search"], "exact");
}

TEST(CliPlanTemplates, MalformedProfileExitsTwoNamingTheLine) {
  const Result r =
      plan("--profile " + profile(3, "3,0.01,x,1e9\n") + " --nodes 2 --gpus-per-node 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(stderr_text().find("oobleck_profile.csv:5: column 'backward_s'"), std::string::npos)
      << stderr_text();
  EXPECT_EQ(plan("--profile " + profile(3) + " --nodes 2").exit_code, 2) << "no --gpus-per-node";
}

}  // namespace
}  // namespace loom
