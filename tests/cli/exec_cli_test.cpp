// End-to-end tests of `loom exec`, `loom profile` and `loom compare`: the files match
// `loom sim`'s, the gradient check passes, a killed rank ends the run with exit 1 naming
// the rank and operation (nothing written), and profile -> calibrated -> sim is one loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_support.hpp"
#include "executor/backend.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;

using Result = test::CliResult;

Result loom(const std::string& args) {
  return test::run_loom(args);
}

std::string host_config() {
  return test::source_path("configs/exec/vlm-host.toml");
}

using test::slurp;

/// timeline.csv without the times: rank,kind,module,stage,microbatch per line.
std::string structure(const fs::path& csv) {
  std::istringstream in(slurp(csv));
  std::string out, line;
  while (std::getline(in, line)) {
    size_t cut = 0;
    for (int field = 0; field < 5; ++field) cut = line.find(',', cut) + 1;
    out += line.substr(0, cut) + "\n";
  }
  return out;
}

TEST(ExecCli, WritesSimsFilesAndPassesTheGradientCheck) {
  test::TempDir dir;
  const Result e = loom("exec " + host_config() + " -q --no-plot --out " + dir.path("meas"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("gradient check   passed"), std::string::npos) << e.output;
  const auto metrics = nlohmann::json::parse(slurp(dir.path("meas") + "/metrics.json"));
  EXPECT_TRUE(metrics["gradient_check"]["passed"].get<bool>());
  EXPECT_GT(metrics["iteration_time_s"].get<double>(), 0);
  EXPECT_EQ(metrics["per_rank"].size(), 2u);
  const Result s = loom("sim " + host_config() + " -q --no-plot --out " + dir.path("pred"));
  ASSERT_EQ(s.exit_code, 0) << s.output;
  for (const char* f : {"timeline.json", "timeline.csv", "memory.csv", "schedule.txt"})
    EXPECT_TRUE(fs::exists(dir.path("meas") + "/" + f)) << f;
  // Same operations in the same order as the prediction: only the times differ.
  EXPECT_EQ(structure(dir.path("meas") + "/timeline.csv"),
            structure(dir.path("pred") + "/timeline.csv"));
  EXPECT_EQ(slurp(dir.path("meas") + "/schedule.txt"), slurp(dir.path("pred") + "/schedule.txt"));
  // A rerun executes the same operations in the same order (times differ).
  const Result again =
      loom("exec " + host_config() + " -q --no-plot --no-check --out " + dir.path("again"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(structure(dir.path("again") + "/timeline.csv"),
            structure(dir.path("meas") + "/timeline.csv"));
  const Result c = loom("compare " + dir.path("pred") + " " + dir.path("meas") + " --no-plot");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("iteration time: predicted"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("F vision"), std::string::npos) << c.output;
  // --json: the same figures for scripts.
  const Result cj = loom("compare " + dir.path("pred") + " " + dir.path("meas") + " --json --ops");
  ASSERT_EQ(cj.exit_code, 0) << cj.output;
  const auto j = nlohmann::json::parse(cj.output);
  EXPECT_EQ(j["iteration_time_s"]["predicted"].get<double>(),
            nlohmann::json::parse(slurp(dir.path("pred") + "/metrics.json"))["iteration_time_s"]
                .get<double>());
  EXPECT_GT(j["compute_ops"].get<int>(), 0);
  EXPECT_EQ(j["per_op"].size(), j["compute_ops"].get<size_t>());
  bool vision_forward = false;
  for (const auto& g : j["by_kind"]) vision_forward |= g["kind"] == "F" && g["module"] == "vision";
  EXPECT_TRUE(vision_forward) << cj.output;
}

TEST(ExecCli, AMixtureOfExpertsRunsWithItsAllToAllsAndPassesTheGradientCheck) {
  // configs/exec/moe-host.toml: ep 2, the token copies moved by real all-to-alls; the
  // measured timeline has the prediction's operations, all-to-alls included.
  test::TempDir dir;
  const std::string config = test::source_path("configs/exec/moe-host.toml");
  const Result e = loom("exec " + config + " -q --no-plot --out " + dir.path("meas"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto metrics = nlohmann::json::parse(slurp(dir.path("meas") + "/metrics.json"));
  EXPECT_TRUE(metrics["gradient_check"]["passed"].get<bool>());
  const Result s = loom("sim " + config + " -q --no-plot --out " + dir.path("pred"));
  ASSERT_EQ(s.exit_code, 0) << s.output;
  const std::string measured = structure(dir.path("meas") + "/timeline.csv");
  EXPECT_EQ(measured, structure(dir.path("pred") + "/timeline.csv"));
  EXPECT_NE(measured.find(",alltoall,"), std::string::npos);
}

TEST(CompareCli, RunsOfDifferentStagePartitionsAreRejected) {
  // Same scheduler, ranks and microbatches, so timeline.csv rows match one by one; only the
  // stage boundary differs (explicit stage_layers), which schedule.txt shows.
  test::TempDir dir;
  auto sim = [&](const std::string& out, const std::string& stage_layers) {
    const Result r = loom("sim " + host_config() + " -q --no-plot --backend evaluator" +
                          " --set parallel.pp=2 --set 'schedule.stage_layers=" + stage_layers +
                          "'" + " --out " + dir.path(out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  };
  sim("a", "[3,4]");
  sim("b", "[4,3]");
  const Result c = loom("compare " + dir.path("a") + " " + dir.path("b") + " --no-plot");
  EXPECT_EQ(c.exit_code, 2) << c.output;
  EXPECT_NE(c.output.find("schedule.txt:2: differs"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("different schedules"), std::string::npos) << c.output;
}

TEST(ExecCli, KilledRankExitsOneNamingRankAndOperation) {
  test::TempDir dir;
  const Result r = loom("exec " + host_config() +
                        " -q --no-plot --timeout 20 --inject-fault 1 3 --out " + dir.path("out"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 op 3 ("), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.path("out")));  // nothing half-written
  const Result bad =
      loom("exec " + host_config() + " -q --inject-fault 9 0 --out " + dir.path("x"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--inject-fault 9 0"), std::string::npos) << bad.output;
}

TEST(ExecCli, RendezvousIsForMultiProcessBackendsOnly) {
  test::TempDir dir;
  const Result r = loom("exec " + host_config() + " -q --no-plot --rendezvous " + dir.path("rdv") +
                        " --out " + dir.path("out"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--rendezvous"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--backend cuda"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.path("out")));
  EXPECT_FALSE(fs::exists(dir.path("rdv")));
}

TEST(ExecCli, CudaWithoutTheCudaBackendIsAClearUsageError) {
  const auto names = exec::executor_names();
  if (std::find(names.begin(), names.end(), "cuda") != names.end())
    GTEST_SKIP() << "this build has the CUDA backend";
  const Result r = loom("exec " + host_config() + " -q --backend cuda --out /nonexistent/x");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("built without CUDA"), std::string::npos) << r.output;
}

TEST(ExecCli, ProfileFeedsTheCalibratedCostModel) {
  test::TempDir dir;
  const std::string csv = dir.path("profile.csv");
  const Result p = loom("profile " + host_config() + " -q --repeats 1 --tp 1,2 --out " + csv);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const std::string text = slurp(csv);
  EXPECT_EQ(text.rfind("layer,phase,tokens,tp,seconds\n", 0), 0u);
  EXPECT_NE(text.find("llm,W,"), std::string::npos);
  EXPECT_NE(text.find(",2,"), std::string::npos);  // the TP 2 shard rows
  const Result s =
      loom("sim " + host_config() + " -q --no-plot --backend evaluator --set " +
           "cost.model=calibrated --set cost.profile=" + csv + " --out " + dir.path("pred"));
  EXPECT_EQ(s.exit_code, 0) << s.output;
}

}  // namespace
}  // namespace loom
